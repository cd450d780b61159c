"""The first call's memory, phase by phase: lowering, compiling, the compiler's heap handed back, then the steps.

  python benchmarks/probes/compile_peak.py [--processes=5]
  XLA_FLAGS=--xla_cpu_parallel_codegen_split_count=1 python benchmarks/probes/compile_peak.py   # an option's effect
  MALLOC_ARENA_MAX=1 python benchmarks/probes/compile_peak.py                                  # glibc's malloc's

At benchmarks/step_memory.py's shape (V=32768, D=256, T=8192, C=256), each in a fresh process: the state built as a
user of the step API builds it, its resident memory taken as the baseline, then the train step lowered, compiled,
`compilation.release_freed` called and 3 steps run, as the step's first call does them one after the other. Prints each
phase's resident memory (VmRSS) and the peak so far (VmHWM) above the baseline, in MiB, one line per process: the
compile's peak moves from process to process, so one process says little.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from absl import app, flags  # noqa: E402

from benchmarks import step_memory, workload  # noqa: E402

STEPS = 3
flags.DEFINE_integer("processes", 5, "fresh processes to measure, one after the other", lower_bound=1)
flags.DEFINE_bool("one", False, "measure in this process and print its JSON (what each fresh process runs)")
FLAGS = flags.FLAGS


def one_process() -> dict:
  """In this process: {phase: [rss, peak] above the baseline}, plus XLA's temporaries of the step (MiB)."""
  import jax  # noqa: PLC0415

  from tied_embed.fast import compilation  # noqa: PLC0415
  from tied_embed.train import run_step  # noqa: PLC0415

  config = workload.bench_config(step_memory.VOCAB_SIZES[1], step_memory.D_MODEL, step_memory.NUM_TOKENS,
                                 step_memory.CHUNK_SIZE)
  graphdef, state, ids, next_ids = step_memory.user_state(config)
  workload.reset_peak()
  baseline = workload.resident_mib()
  phases = {}

  def note(phase):
    phases[phase] = [round(value - baseline, 1) for value in (workload.resident_mib(), workload.peak_mib())]

  step = run_step.make_run_step(graphdef, step_memory.CHUNK_SIZE, train_config=config.train)
  lowered = step.lower(state, ids, next_ids)
  note("lowered")
  compiled = lowered.compile()
  note("compiled")
  temp_mib = compiled.memory_analysis().temp_size_in_bytes / 2**20
  del lowered, compiled
  compilation.release_freed()
  note("heap handed back")
  for index in range(STEPS):  # jit's cache serves the compiled program; the first call makes the gradient buffer
    state, metrics = step(state, ids, next_ids)
    jax.block_until_ready(metrics)
    note(f"step {index}")
  return {"phases": phases, "xla_temp_mib": round(temp_mib, 1)}


def main(argv) -> None:
  del argv
  if FLAGS.one:
    print(json.dumps(one_process()))
    return
  settings = {name: value for name, value in os.environ.items()
              if name == "XLA_FLAGS" or name.startswith("MALLOC_") or name == "GLIBC_TUNABLES"}
  print(f"V={step_memory.VOCAB_SIZES[1]} D={step_memory.D_MODEL} T={step_memory.NUM_TOKENS} "
        f"C={step_memory.CHUNK_SIZE}; {settings or 'no XLA_FLAGS or malloc settings'}; MiB above the state at rest, "
        "resident / peak so far")
  for _ in range(FLAGS.processes):
    output = subprocess.run([sys.executable, __file__, "--one"], check=True, capture_output=True, text=True).stdout
    result = json.loads(output.strip().splitlines()[-1])
    cells = "  ".join(f"{phase} {rss:.0f}/{peak:.0f}" for phase, (rss, peak) in result["phases"].items())
    print(f"  {cells}  (XLA temporaries {result['xla_temp_mib']:.1f})")


if __name__ == "__main__":
  app.run(main)
