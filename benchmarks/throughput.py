"""Throughput of the real train step at V=8192, D=256, 4096 tokens per step, beside PyTorch and one matmul.

Run: `python benchmarks/throughput.py` (prints the numbers). `measure()` returns them for benchmarks/run.py.
The step is `tied_embed.core.step.make_train_step` on configs/default.py at this size: gradient provenance
(two path gradients, per-row totals), clipping and AdamW, with full logits and with the chunked loss, which forms
each distinct id's logits once. It runs on uniform ids (the most distinct ids a batch can have: the issue's
workload) and on a text-like Zipf batch (`workload.zipf_batch`), and with `model.dtype` bfloat16 (bf16 matmul
operands, float32 accumulation). Against it: the plain step (no provenance, every
token's logits: the same work as PyTorch's steps), PyTorch eager, under `torch.compile` and with its own chunked
`linear_cross_entropy` (benchmarks/torch_step.py), and one matmul of each. All are timed in turns in one process.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from benchmarks import workload  # noqa: E402
from benchmarks.torch_step import make_torch_matmul, make_torch_step  # noqa: E402

VOCAB_SIZE, D_MODEL, NUM_TOKENS = 8192, 256, 4096
CHUNK_SIZE = 256  # tokens per chunk for the chunked-loss variant (see benchmarks/README.md for the sweep)
TORCH_STEPS = {"torch_step": "eager", "torch_compile_step": "compile", "torch_chunked_step": "chunked"}


def matmul_fn(num_tokens: int, d_model: int, vocab_size: int):
  """One jitted (T, D)×(D, V) float32 matmul, the unit of the roofline: returns a callable that runs it."""
  keys = jax.random.split(jax.random.key(0))
  x = jax.random.normal(keys[0], (num_tokens, d_model))
  table = jax.random.normal(keys[1], (vocab_size, d_model))
  matmul = jax.jit(lambda a, b: a @ b.T)
  return lambda: jax.block_until_ready(matmul(x, table))


def torch_steps(config, threads: int) -> dict:
  """{name: callable} for every PyTorch variant of TORCH_STEPS; empty without PyTorch."""
  steps = {name: make_torch_step(config, threads, variant) for name, variant in TORCH_STEPS.items()}
  return {name: step for name, step in steps.items() if step is not None}


def fastest_torch(result: dict) -> tuple[str | None, float | None]:
  """(name, ms) of the fastest PyTorch step in a result with `<name>_ms` keys for TORCH_STEPS; Nones without."""
  times = {name: result.get(f"{name}_ms") for name in TORCH_STEPS}
  times = {name: ms for name, ms in times.items() if ms is not None}
  if not times:
    return None, None
  name = min(times, key=times.get)
  return name, times[name]


def measure(rounds: int = 7) -> dict:
  """Medians over `rounds` interleaved calls: JSON-ready dict (the `train_step` section of run.py)."""
  threads = workload.cpu_threads()
  default = workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, chunk_size=0)
  chunked = workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, chunk_size=CHUNK_SIZE)
  uniform = workload.random_batch(VOCAB_SIZE, NUM_TOKENS)
  zipf = workload.zipf_batch(VOCAB_SIZE, NUM_TOKENS)
  fns = {
      "step": workload.Stepper(default),
      "chunked_step": workload.Stepper(chunked, batch=uniform),
      "chunked_zipf_step": workload.Stepper(chunked, batch=zipf),
      "chunked_bf16_step": workload.Stepper(workload.with_dtype(chunked, "bfloat16"), batch=uniform),
      "plain_step": workload.Stepper(default, plain=True),
      "plain_chunked_step": workload.Stepper(chunked, plain=True),
      "matmul": matmul_fn(NUM_TOKENS, D_MODEL, VOCAB_SIZE),
  }
  torch = torch_steps(default, threads)
  fns.update(torch)
  if torch:
    fns["torch_matmul"] = make_torch_matmul(NUM_TOKENS, D_MODEL, VOCAB_SIZE)
  times = workload.interleaved_times(fns, rounds)
  seconds = {name: statistics.median(values) for name, values in times.items()}
  result = {"V": VOCAB_SIZE, "D": D_MODEL, "T": NUM_TOKENS, "threads": threads, "chunk_size": CHUNK_SIZE,
            "rounds": rounds, "distinct_fraction": workload.distinct_fraction(uniform[0]),
            "zipf_exponent": workload.ZIPF_EXPONENT, "zipf_distinct_fraction": workload.distinct_fraction(zipf[0])}
  for name in (*JAX_STEPS, "matmul", "torch_matmul", *TORCH_STEPS):
    result[f"{name}_ms"] = seconds[name] * 1e3 if name in seconds else None
  # The fastest call of each: on a machine others load, the least disturbed one; PyTorch's OpenMP threads
  # suffer more from a loaded machine than XLA's, so its medians move more.
  result["fastest_ms"] = {name: min(values) * 1e3 for name, values in times.items()}
  result["tokens_per_s"] = NUM_TOKENS / seconds["step"]
  result["chunked_tokens_per_s"] = NUM_TOKENS / seconds["chunked_step"]
  result["roofline_fraction"] = 3 * seconds["matmul"] / seconds["step"]
  result["torch_tokens_per_s"] = NUM_TOKENS / seconds["torch_step"] if torch else None
  result["speedup_vs_torch"] = result["torch_step_ms"] / result["step_ms"] if torch else None
  result.update(speedups(result))
  result["bf16_over_f32_time"] = result["chunked_bf16_step_ms"] / result["chunked_step_ms"]
  return result


JAX_STEPS = ("step", "chunked_step", "chunked_zipf_step", "chunked_bf16_step", "plain_step", "plain_chunked_step")
# The JAX rows compared with the fastest PyTorch step: `<name>_speedup_vs_fastest_torch` = PyTorch ms / JAX ms.
COMPARED = {"chunked": "chunked_step", "chunked_zipf": "chunked_zipf_step", "full": "step",
            "plain_chunked": "plain_chunked_step"}


def speedups(result: dict) -> dict:
  """The fastest PyTorch step and each COMPARED JAX row's speedup over it, by medians and by fastest calls."""
  name, ms = fastest_torch(result)
  out = {"fastest_torch": name}
  fastest = result["fastest_ms"]
  best_torch = min((fastest[torch] for torch in TORCH_STEPS if torch in fastest), default=None)
  for label, jax_name in COMPARED.items():
    if f"{jax_name}_ms" not in result:
      continue
    out[f"{label}_speedup_vs_fastest_torch"] = ms / result[f"{jax_name}_ms"] if ms else None
    out[f"{label}_speedup_vs_fastest_torch_by_fastest_call"] = best_torch / fastest[jax_name] if best_torch else None
  return out


if __name__ == "__main__":
  print(json.dumps(measure(), indent=2))
