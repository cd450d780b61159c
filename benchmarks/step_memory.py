"""The train step's peak memory above its own baseline, in both uses, beside PyTorch's chunked step, across V.

  python benchmarks/step_memory.py                     # every use at every V, one process each; prints JSON
  python benchmarks/step_memory.py first_call 32768    # one process: first_call | ahead | torch_chunked

At D=256, T=8192 (uniform ids), C=256 and V = 8192, 32768, 65536, each use runs in a fresh process that builds its
state, takes its baseline (the resident memory once the state exists, the kernel's peak counter started afresh
from it), runs STEPS steps and reports its peak (VmHWM) minus that baseline:

- `first_call`: as a user of the step API writes it: the state built (`nnx.split` of a `RunState`), then
  `run_step.make_run_step(...)` called on it, so the step is jitted on its first call, compile included.
- `ahead`: as the trainer runs it: the step compiled from the abstract state before the state exists
  (`workload.Stepper`), then the state, then the steps. The compile's own peak is reported beside it
  (`compile_peak_mib`, absolute: below `baseline_mib` when the compile, before the state existed, peaked lower).
- `torch_chunked`: PyTorch's `F.linear_cross_entropy` step (benchmarks/torch_step.py, AdamW state allocated up
  front), the peer the issue names.

What the step must hold grows with V: its (V, D) gradient and the chunk's (V, C) logits, (D + C)·4 bytes per row,
4 MiB per 2048 rows here. `v_term_mib` is that much; `rest_mib` = peak above baseline − v_term_mib is what should
stay flat in V (a (T, V) buffer would add T·4 bytes per row, 64 MiB per 2048 rows).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import torch_step, workload  # noqa: E402

D_MODEL, NUM_TOKENS, CHUNK_SIZE = 256, 8192, 256
VOCAB_SIZES = (8192, 32768, 65536)
USES = ("first_call", "ahead", "torch_chunked")
STEPS = 3  # the first compiles (first_call) and makes the gradient buffer; the second writes into it


def _steps(run) -> None:
  for _ in range(STEPS):
    run()


def _baseline() -> float:
  """The process's resident memory now, with the peak started afresh from it: what the state holds at rest, without
  the transients of building it (which a compile ahead, or JAX's own init, may have pushed well above it)."""
  workload.reset_peak()
  return workload.peak_mib()


def user_state(config) -> tuple:
  """(graphdef, state, ids, next_ids) as a user of the step API builds them: `nnx.split` of a `RunState` and a
  uniform batch of the config's size, ready."""
  import jax  # noqa: PLC0415

  graphdef, state = workload.train_state(config)
  ids, next_ids = jax.block_until_ready(workload.random_batch(int(config.model.vocab_size),
                                                              int(config.train.batch_size)))
  return graphdef, state, ids, next_ids


def run_one(use: str, vocab_size: int) -> dict:
  """In this process: one use at V=`vocab_size` → {'baseline_mib', 'peak_mib', 'extra_mib', ...}."""
  config = workload.bench_config(vocab_size, D_MODEL, NUM_TOKENS, CHUNK_SIZE)
  result = {}
  if use == "torch_chunked":
    step = torch_step.make_torch_step(config, workload.cpu_threads(), "chunked")
    if step is None:
      print("use='torch_chunked' needs PyTorch, which is not installed: pip install -r requirements-bench.txt "
            "(`make bench` does)", file=sys.stderr)
      sys.exit(2)
    result["baseline_mib"] = _baseline()
    _steps(step)
  elif use == "ahead":
    stepper = workload.Stepper(config)
    result["compile_peak_mib"], result["baseline_mib"] = stepper.compile_peak_mib, _baseline()
    _steps(stepper)
  elif use == "first_call":
    import jax  # noqa: PLC0415

    from tied_embed.train import run_step  # noqa: PLC0415

    graphdef, state, ids, next_ids = user_state(config)
    result["baseline_mib"] = _baseline()
    step = run_step.make_run_step(graphdef, CHUNK_SIZE, train_config=config.train)

    def run():
      nonlocal state
      state, metrics = step(state, ids, next_ids)
      jax.block_until_ready(metrics)

    _steps(run)
  else:
    raise ValueError(f"use {use!r} is not one of {USES}")
  result["peak_mib"] = workload.peak_mib()
  result["extra_mib"] = result["peak_mib"] - result["baseline_mib"]
  return result


def v_term_mib(vocab_size: int) -> float:
  """The step's V-proportional memory by hand: the (V, D) float32 gradient and the (V, C) float32 chunk logits."""
  return vocab_size * (D_MODEL + CHUNK_SIZE) * 4 / 2**20


def _measure_one(use: str, vocab_size: int) -> dict:
  output = subprocess.run([sys.executable, __file__, use, str(vocab_size)], check=True, capture_output=True,
                          text=True).stdout
  return json.loads(output.strip().splitlines()[-1])


def measure(vocab_sizes=VOCAB_SIZES) -> dict:
  """The `step_memory` section of run.py: {'V=<v>': {use: result}} plus the sizes."""
  has_torch = torch_step.make_torch_matmul(1, 1, 1) is not None
  uses = [use for use in USES if has_torch or not use.startswith("torch")]
  result = {"D": D_MODEL, "T": NUM_TOKENS, "chunk_size": CHUNK_SIZE, "steps": STEPS, "load_average": [],
            "by_vocab": {}}
  for vocab_size in vocab_sizes:
    row = {use: _measure_one(use, vocab_size) for use in uses}
    row["v_term_mib"] = v_term_mib(vocab_size)
    for use in uses:
      row[use]["rest_mib"] = row[use]["extra_mib"] - row["v_term_mib"]
    result["by_vocab"][str(vocab_size)] = row
    result["load_average"].append(os.getloadavg()[0])  # a shared machine: what else was running
  return result


if __name__ == "__main__":
  if len(sys.argv) > 1:
    use, size = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    if use not in USES or not size.isdigit() or int(size) < 1:
      print(f"use={use!r} vocab_size={size!r}: expected one of {', '.join(USES)} and a positive integer",
            file=sys.stderr)
      sys.exit(2)
    print(json.dumps(run_one(use, int(size))))
  else:
    print(json.dumps(measure(), indent=2))
