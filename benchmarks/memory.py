"""Peak resident memory of one train step at V=32768, D=256, T=8192: full logits, the chunked loss, PyTorch's.

  python benchmarks/memory.py              # one process per configuration, then the step times; prints JSON
  python benchmarks/memory.py baseline|full|chunked|chunked_bf16|torch_baseline|torch_chunked   # one of them

Each configuration runs in a fresh process, so its peak (the kernel's VmHWM) is its own: `baseline` builds the
parameters and optimizer state and stops; `full`, `chunked` and `chunked_bf16` (model.dtype bfloat16) also
compile the real train step the way the trainer does (compile first, then hand the compiler's freed memory back to
the OS: tied_embed/fast/compilation.py), start the peak afresh and run it: the step's peak. The compile's own peak is
reported beside it, as is XLA's count of the step's temporary buffers. `torch_baseline` and `torch_chunked` do the
same for PyTorch with its chunked `F.linear_cross_entropy` (nothing to compile), so each framework's step is
measured against its own baseline (the runtimes' own footprints differ). The step times, JAX's and every PyTorch
variant's, are then measured in turns in one process, so the machine's noise hits them alike.
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
CONFIGS = {"baseline": 0, "full": 0, "chunked": CHUNK_SIZE, "chunked_bf16": CHUNK_SIZE, "torch_baseline": 0,
           "torch_chunked": 0}
STEPS_PER_PROCESS = 2
MEMORY_TORCH_STEPS = tuple(throughput.TORCH_F32_STEPS)  # the float32 ones: the bf16 steps are timed at V=8192


def run_one(name: str) -> dict:
  """In this process: build the state, and unless a baseline, run the step; → {'peak_mib': ...} and for JAX's
  steps 'compile_peak_mib' and 'xla_temp_mib'."""
  config = workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, CONFIGS[name])
  if name == "baseline":
    workload.train_state(config)
    return {"peak_mib": workload.peak_mib()}
  if name == "torch_baseline":
    torch_step.TorchState(config, workload.cpu_threads())
    return {"peak_mib": workload.peak_mib()}
  if name == "torch_chunked":
    step = torch_step.make_torch_step(config, workload.cpu_threads(), "chunked")
    for _ in range(STEPS_PER_PROCESS):
      step()
    return {"peak_mib": workload.peak_mib()}
  if name == "chunked_bf16":
    config = workload.with_dtype(config, "bfloat16")
  stepper = workload.Stepper(config)
  workload.reset_peak()
  for _ in range(STEPS_PER_PROCESS):
    stepper()
  result = {"peak_mib": workload.peak_mib(), "compile_peak_mib": stepper.compile_peak_mib}
  result["xla_temp_mib"] = stepper.temp_bytes() / 2**20
  return result


def _measure_one(name: str) -> dict:
  output = subprocess.run([sys.executable, __file__, name], check=True, capture_output=True, text=True).stdout
  return json.loads(output.strip().splitlines()[-1])


def measure(rounds: int = 3) -> dict:
  """The `memory` section of run.py: peaks from one process each, step times interleaved in this one."""
  has_torch = torch_step.make_torch_matmul(1, 1, 1) is not None
  names = [name for name in CONFIGS if has_torch or not name.startswith("torch")]
  runs = {name: _measure_one(name) for name in names}
  full = workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, 0)
  chunked = workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, CHUNK_SIZE)
  zipf = workload.zipf_batch(VOCAB_SIZE, NUM_TOKENS)
  steppers = {
      "full_step": workload.Stepper(full),
      "chunked_step": workload.Stepper(chunked),
      "chunked_zipf_step": workload.Stepper(chunked, batch=zipf),
      **throughput.torch_steps(full, workload.cpu_threads(), MEMORY_TORCH_STEPS),
  }
  times = workload.interleaved_times(steppers, rounds)
  seconds = {name: statistics.median(values) for name, values in times.items()}
  result = {"V": VOCAB_SIZE, "D": D_MODEL, "T": NUM_TOKENS, "chunk_size": CHUNK_SIZE, "rounds": rounds,
            "distinct_fraction": workload.distinct_fraction(steppers["chunked_step"].batch[0]),
            "zipf_distinct_fraction": workload.distinct_fraction(zipf[0])}
  for name in CONFIGS:
    peak = runs.get(name, {}).get("peak_mib")
    result[f"{name}_mib" if name.endswith("baseline") else f"{name}_peak_mib"] = peak
  for name in ("full", "chunked", "chunked_bf16"):
    result[f"{name}_extra_mib"] = result[f"{name}_peak_mib"] - result["baseline_mib"]
    result[f"{name}_compile_extra_mib"] = runs[name]["compile_peak_mib"] - result["baseline_mib"]
    result[f"{name}_xla_temp_mib"] = runs[name]["xla_temp_mib"]
  for name in ("full_step", "chunked_step", "chunked_zipf_step", *MEMORY_TORCH_STEPS):
    result[f"{name}_ms"] = seconds[name] * 1e3 if name in seconds else None
  result["chunked_over_full_extra"] = result["chunked_extra_mib"] / result["full_extra_mib"]
  result["chunked_over_full_time"] = result["chunked_step_ms"] / result["full_step_ms"]
  result["torch_chunked_extra_mib"] = (
      result["torch_chunked_peak_mib"] - result["torch_baseline_mib"] if has_torch else None
  )
  result["fastest_ms"] = {name: min(values) * 1e3 for name, values in times.items()}
  result.update(throughput.speedups(result))
  return result


if __name__ == "__main__":
  if len(sys.argv) > 1:
    print(json.dumps(run_one(sys.argv[1])))
  else:
    print(json.dumps(measure(), indent=2))
