"""Peak resident memory of one train step at V=32768, D=256, T=8192: full logits, the chunked loss, PyTorch's.

  python benchmarks/memory.py              # one process per configuration, then the step times; prints JSON
  python benchmarks/memory.py baseline|full|chunked|torch_baseline|torch_chunked   # one configuration

Each configuration runs in a fresh process, so its peak (the kernel's VmHWM) is its own: `baseline` builds the
parameters and optimizer state and stops; `full` and `chunked` also compile and run the real train step
(`chunked_ynn`: compiled with `workload.YNN_DOT_FUSION`).
`torch_baseline` and `torch_chunked` do the same for PyTorch with its chunked `F.linear_cross_entropy`, so each
framework's step is measured against its own baseline (the runtimes' own footprints differ). The step times,
JAX's and every PyTorch variant's, are then measured in turns in one process, so the machine's noise hits them
alike.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import throughput, torch_step, workload  # noqa: E402

VOCAB_SIZE, D_MODEL, NUM_TOKENS = 32768, 256, 8192
CHUNK_SIZE = 256  # tokens per chunk: (V, C) float32 logits are 32 MiB, the full (T, V) ones 1 GiB
CONFIGS = {"baseline": 0, "full": 0, "chunked": CHUNK_SIZE, "chunked_ynn": CHUNK_SIZE, "torch_baseline": 0,
           "torch_chunked": 0}
STEPS_PER_PROCESS = 2


def peak_mib() -> float:
  """This process's peak resident set size so far, in MiB (Linux VmHWM)."""
  for line in pathlib.Path("/proc/self/status").read_text().splitlines():
    if line.startswith("VmHWM:"):
      return int(line.split()[1]) / 1024
  raise RuntimeError("no VmHWM in /proc/self/status")


def run_one(name: str) -> dict:
  """In this process: build the state, and unless a baseline, run the step; → {'peak_mib': ...}."""
  config = workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, CONFIGS[name])
  if name == "baseline":
    workload.train_state(config)
  elif name == "torch_baseline":
    torch_step.TorchState(config, workload.cpu_threads())
  else:
    options = workload.YNN_DOT_FUSION if name == "chunked_ynn" else None
    step = (torch_step.make_torch_step(config, workload.cpu_threads(), "chunked") if name == "torch_chunked"
            else workload.Stepper(config, compiler_options=options))
    for _ in range(STEPS_PER_PROCESS):
      step()
  return {"peak_mib": peak_mib()}


def _peak(name: str) -> float:
  output = subprocess.run([sys.executable, __file__, name], check=True, capture_output=True, text=True).stdout
  return json.loads(output.strip().splitlines()[-1])["peak_mib"]


def measure(rounds: int = 3) -> dict:
  """The `memory` section of run.py: peaks from one process each, step times interleaved in this one."""
  has_torch = torch_step.make_torch_matmul(1, 1, 1) is not None
  names = [name for name in CONFIGS if has_torch or not name.startswith("torch")]
  peaks = {name: _peak(name) for name in names}
  full = workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, 0)
  steppers = {
      "full_step": workload.Stepper(full),
      "chunked_step": workload.Stepper(workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, CHUNK_SIZE)),
      "chunked_ynn_step": workload.Stepper(
          workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, CHUNK_SIZE), compiler_options=workload.YNN_DOT_FUSION
      ),
      **throughput.torch_steps(full, workload.cpu_threads()),
  }
  times = workload.interleaved_times(steppers, rounds)
  seconds = {name: statistics.median(values) for name, values in times.items()}
  result = {"V": VOCAB_SIZE, "D": D_MODEL, "T": NUM_TOKENS, "chunk_size": CHUNK_SIZE, "rounds": rounds}
  for name in CONFIGS:
    result[f"{name}_mib" if name.endswith("baseline") else f"{name}_peak_mib"] = peaks.get(name)
  for name in ("full_step", "chunked_step", "chunked_ynn_step", *throughput.TORCH_STEPS):
    result[f"{name}_ms"] = seconds[name] * 1e3 if name in seconds else None
  extra = {name: result[f"{name}_peak_mib"] - result["baseline_mib"] for name in ("full", "chunked", "chunked_ynn")}
  result["full_extra_mib"], result["chunked_extra_mib"] = extra["full"], extra["chunked"]
  result["chunked_ynn_extra_mib"] = extra["chunked_ynn"]
  result["chunked_over_full_extra"] = extra["chunked"] / extra["full"]
  result["chunked_over_full_time"] = result["chunked_step_ms"] / result["full_step_ms"]
  result["torch_chunked_extra_mib"] = (
      result["torch_chunked_peak_mib"] - result["torch_baseline_mib"] if has_torch else None
  )
  name, ms = throughput.fastest_torch(result)
  result["fastest_torch"] = name
  result["chunked_speedup_vs_fastest_torch"] = ms / result["chunked_step_ms"] if ms else None
  result["chunked_ynn_speedup_vs_fastest_torch"] = ms / result["chunked_ynn_step_ms"] if ms else None
  result["fastest_ms"] = {name: min(values) * 1e3 for name, values in times.items()}
  best_torch = min((result["fastest_ms"][name] for name in throughput.TORCH_STEPS if name in times), default=None)
  result["chunked_speedup_vs_fastest_torch_by_fastest_call"] = (
      best_torch / result["fastest_ms"]["chunked_step"] if best_torch else None
  )
  return result


if __name__ == "__main__":
  if len(sys.argv) > 1:
    print(json.dumps(run_one(sys.argv[1])))
  else:
    print(json.dumps(measure(), indent=2))
