"""Peak resident memory of one train step at V=32768, D=256, T=8192: full logits against the chunked loss.

  python benchmarks/memory.py              # all three processes, then the step times; prints JSON
  python benchmarks/memory.py baseline|full|chunked   # one configuration (what measure() runs per process)

Each configuration runs in a fresh process, so its peak (the kernel's VmHWM) is its own: `baseline` builds the
parameters and optimizer state and stops; `full` and `chunked` also compile and run the real train step.
The two step times are then measured in turns in one process, so the machine's noise hits them alike.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import workload  # noqa: E402

VOCAB_SIZE, D_MODEL, NUM_TOKENS = 32768, 256, 8192
CHUNK_SIZE = 256  # tokens per chunk: (V, C) float32 logits are 32 MiB, the full (T, V) ones 1 GiB
CONFIGS = {"baseline": 0, "full": 0, "chunked": CHUNK_SIZE}
STEPS_PER_PROCESS = 2


def peak_mib() -> float:
  """This process's peak resident set size so far, in MiB (Linux VmHWM)."""
  for line in pathlib.Path("/proc/self/status").read_text().splitlines():
    if line.startswith("VmHWM:"):
      return int(line.split()[1]) / 1024
  raise RuntimeError("no VmHWM in /proc/self/status")


def run_one(name: str) -> dict:
  """In this process: build the state, and unless `baseline`, run the step; → {'peak_mib': ...}."""
  config = workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, CONFIGS[name])
  if name == "baseline":
    workload.train_state(config)
  else:
    step = workload.Stepper(config)
    for _ in range(STEPS_PER_PROCESS):
      step()
  return {"peak_mib": peak_mib()}


def measure(rounds: int = 3) -> dict:
  """The `memory` section of run.py: peaks from one process each, step times interleaved in this one."""
  peaks = {}
  for name in CONFIGS:
    output = subprocess.run(
        [sys.executable, __file__, name], check=True, capture_output=True, text=True
    ).stdout
    peaks[name] = json.loads(output.strip().splitlines()[-1])["peak_mib"]
  steppers = {
      name: workload.Stepper(workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, CONFIGS[name]))
      for name in ("full", "chunked")
  }
  seconds = workload.interleaved_medians(steppers, rounds)
  result = {
      "V": VOCAB_SIZE, "D": D_MODEL, "T": NUM_TOKENS, "chunk_size": CHUNK_SIZE, "rounds": rounds,
      "baseline_mib": peaks["baseline"],
      "full_peak_mib": peaks["full"],
      "chunked_peak_mib": peaks["chunked"],
      "full_step_ms": seconds["full"] * 1e3,
      "chunked_step_ms": seconds["chunked"] * 1e3,
  }
  result["chunked_over_full_extra"] = (result["chunked_peak_mib"] - result["baseline_mib"]) / (
      result["full_peak_mib"] - result["baseline_mib"]
  )
  result["chunked_over_full_time"] = result["chunked_step_ms"] / result["full_step_ms"]
  return result


if __name__ == "__main__":
  if len(sys.argv) > 1:
    print(json.dumps(run_one(sys.argv[1])))
  else:
    print(json.dumps(measure(), indent=2))
