"""Throughput of the real train step beside PyTorch and one matmul, at V=8192, D=256, T=4096 and GPT-2's shape.

Run: `python benchmarks/throughput.py [train_step|gpt2]` (prints the numbers; `gpt2` is V=50257, D=768, T=1024).
`measure(section)` returns them for benchmarks/run.py.
The step is `tied_embed.train.run_step.make_run_step` (what the trainer runs) on configs/default.py at this size:
gradient provenance (two path gradients, per-row totals), clipping and AdamW, with full logits and with the chunked
loss, which forms each distinct id's logits once. It runs on uniform ids (the most distinct ids a batch can have: the
issue's workload) and on a text-like Zipf batch (`workload.zipf_batch`), and with `model.dtype` bfloat16 (bf16 matmul
operands, float32 accumulation). Against it: the plain step (no provenance, every token's logits: the same work as
PyTorch's steps), PyTorch eager, under `torch.compile` and with its own chunked `linear_cross_entropy`
(benchmarks/torch_step.py), and one matmul of each.
All are timed in turns in one process,
each timed call right after an untimed one of its own (`CALLS_PER_TURN`), as steps follow each other in training.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks import workload  # noqa: E402
from benchmarks.torch_step import make_torch_matmul, make_torch_step  # noqa: E402
from tied_embed.fast.kernels import gemm as mkl  # noqa: E402

SHAPES = {"train_step": (8192, 256, 4096), "gpt2": (50257, 768, 1024)}  # section → (V, D, T)
VOCAB_SIZE, D_MODEL, NUM_TOKENS = SHAPES["train_step"]
CHUNK_SIZE = 256  # tokens per chunk for the chunked-loss variant (see benchmarks/README.md for the sweep)
# Each turn times the second of two back-to-back calls. The first call after the 0.2 s settle between turns is
# slower, by more for some steps than others (benchmarks/README.md, "Timing a step after an idle pause"): at V=8192
# the bf16 step takes 82 ms after a pause and 55-64 ms right after a step, PyTorch's bf16 `torch.compile` step
# 103-106 and 95-97 ms. A training loop runs its steps back to back.
CALLS_PER_TURN = 2
# PyTorch's steps: float32, and the same under bfloat16 autocast (benchmarks/torch_step.py).
TORCH_F32_STEPS = {"torch_step": "eager", "torch_compile_step": "compile", "torch_chunked_step": "chunked"}
TORCH_BF16_STEPS = {f"{name}_bf16": f"{variant}_bf16" for name, variant in TORCH_F32_STEPS.items()}
TORCH_STEPS = {**TORCH_F32_STEPS, **TORCH_BF16_STEPS}


def matmul_fn(num_tokens: int, d_model: int, vocab_size: int, dtype=jnp.float32):
  """One jitted (T, D)×(D, V) matmul, the unit of the roofline: returns a callable that runs it.

  On the routine the chunked step runs its dots on: tied_embed/fast/kernels/gemm.py where it runs for `dtype`
  (oneMKL's sgemm, or its bfloat16 GEMM on AMX), else XLA's dot (float32 results either way).
  """
  keys = jax.random.split(jax.random.key(0))
  x = jax.random.normal(keys[0], (num_tokens, d_model)).astype(dtype)
  table = jax.random.normal(keys[1], (vocab_size, d_model)).astype(dtype)
  if mkl.available(dtype):
    matmul = jax.jit(lambda a, b: mkl.gemm(a, b, trans_b=True, dtype=dtype))
  else:
    matmul = jax.jit(lambda a, b: jnp.matmul(a, b.T, preferred_element_type=jnp.float32))
  return lambda: jax.block_until_ready(matmul(x, table))


def kernel_name(dtype: str) -> str:
  """What the chunked step's `dtype` dots run on here, in words (tied_embed/fast/kernels, or why XLA's dot)."""
  reason = mkl.unavailable_reason(dtype)
  return mkl.ROUTES[mkl.route(dtype)][0] if reason is None else f"XLA's dot ({reason})"


def torch_steps(config, threads: int, names=TORCH_STEPS) -> dict:
  """{name: callable} for each of `names` (keys of TORCH_STEPS); empty without PyTorch."""
  steps = {name: make_torch_step(config, threads, TORCH_STEPS[name]) for name in names}
  return {name: step for name, step in steps.items() if step is not None}


def fastest_torch(result: dict, names=TORCH_F32_STEPS) -> tuple[str | None, float | None]:
  """(name, ms) of the fastest of PyTorch's `names` steps in a result with `<name>_ms` keys; Nones without."""
  times = {name: result.get(f"{name}_ms") for name in names}
  times = {name: ms for name, ms in times.items() if ms is not None}
  if not times:
    return None, None
  name = min(times, key=times.get)
  return name, times[name]


def measure(section: str = "train_step", rounds: int = 7) -> dict:
  """Medians over `rounds` interleaved calls at SHAPES[section]: JSON-ready dict (that section of run.py)."""
  vocab_size, d_model, num_tokens = SHAPES[section]
  threads = workload.cpu_threads()
  default = workload.bench_config(vocab_size, d_model, num_tokens, chunk_size=0)
  chunked = workload.bench_config(vocab_size, d_model, num_tokens, chunk_size=CHUNK_SIZE)
  uniform = workload.random_batch(vocab_size, num_tokens)
  zipf = workload.zipf_batch(vocab_size, num_tokens)
  fns = {
      "step": workload.Stepper(default),
      "chunked_step": workload.Stepper(chunked, batch=uniform),
      "chunked_zipf_step": workload.Stepper(chunked, batch=zipf),
      "chunked_bf16_step": workload.Stepper(workload.with_dtype(chunked, "bfloat16"), batch=uniform),
      "chunked_bf16_zipf_step": workload.Stepper(workload.with_dtype(chunked, "bfloat16"), batch=zipf),
      "plain_step": workload.Stepper(default, plain=True),
      "plain_chunked_step": workload.Stepper(chunked, plain=True),
      "matmul": matmul_fn(num_tokens, d_model, vocab_size),
      "bf16_matmul": matmul_fn(num_tokens, d_model, vocab_size, jnp.bfloat16),
  }
  torch = torch_steps(default, threads)
  fns.update(torch)
  if torch:
    fns["torch_matmul"] = make_torch_matmul(num_tokens, d_model, vocab_size)
    fns["torch_bf16_matmul"] = make_torch_matmul(num_tokens, d_model, vocab_size, "bfloat16")
  times = workload.interleaved_times(fns, rounds, calls_per_turn=CALLS_PER_TURN)
  seconds = {name: statistics.median(values) for name, values in times.items()}
  result = {"V": vocab_size, "D": d_model, "T": num_tokens, "threads": threads, "chunk_size": CHUNK_SIZE,
            "rounds": rounds, "calls_per_turn": CALLS_PER_TURN,
            "f32_kernel": kernel_name("float32"), "bf16_kernel": kernel_name("bfloat16"),
            "distinct_fraction": workload.distinct_fraction(uniform[0]),
            "zipf_exponent": workload.ZIPF_EXPONENT, "zipf_distinct_fraction": workload.distinct_fraction(zipf[0])}
  for name in (*JAX_STEPS, *MATMULS, *TORCH_STEPS):
    result[f"{name}_ms"] = seconds[name] * 1e3 if name in seconds else None
  # The fastest call of each: on a machine others load, the least disturbed one; PyTorch's OpenMP threads
  # suffer more from a loaded machine than XLA's, so its medians move more.
  result["fastest_ms"] = {name: min(values) * 1e3 for name, values in times.items()}
  result["tokens_per_s"] = num_tokens / seconds["step"]
  result["chunked_tokens_per_s"] = num_tokens / seconds["chunked_step"]
  result["roofline_fraction"] = 3 * seconds["matmul"] / seconds["step"]
  result["torch_tokens_per_s"] = num_tokens / seconds["torch_step"] if torch else None
  result["speedup_vs_torch"] = result["torch_step_ms"] / result["step_ms"] if torch else None
  result.update(speedups(result))
  result["bf16_over_f32_time"] = result["chunked_bf16_step_ms"] / result["chunked_step_ms"]
  return result


JAX_STEPS = ("step", "chunked_step", "chunked_zipf_step", "chunked_bf16_step", "chunked_bf16_zipf_step",
             "plain_step", "plain_chunked_step")
MATMULS = ("matmul", "bf16_matmul", "torch_matmul", "torch_bf16_matmul")
# The JAX rows compared with the fastest float32 PyTorch step: `<name>_speedup_vs_fastest_torch` = PyTorch / JAX ms.
COMPARED = {"chunked": "chunked_step", "chunked_zipf": "chunked_zipf_step", "full": "step",
            "plain_chunked": "plain_chunked_step"}
# ... and the bfloat16 rows with the fastest bfloat16-autocast PyTorch step.
COMPARED_BF16 = {"chunked_bf16": "chunked_bf16_step", "chunked_bf16_zipf": "chunked_bf16_zipf_step"}


def speedups(result: dict) -> dict:
  """The fastest PyTorch steps (float32, bf16) and each compared JAX row's speedup, by medians and fastest calls."""
  out = {}
  fastest = result["fastest_ms"]
  for suffix, torch_names, compared in (("", TORCH_F32_STEPS, COMPARED), ("_bf16", TORCH_BF16_STEPS, COMPARED_BF16)):
    name, ms = fastest_torch(result, torch_names)
    out[f"fastest_torch{suffix}"] = name
    best_torch = min((fastest[torch] for torch in torch_names if torch in fastest), default=None)
    for label, jax_name in compared.items():
      if result.get(f"{jax_name}_ms") is None:
        continue
      out[f"{label}_speedup_vs_fastest_torch{suffix}"] = ms / result[f"{jax_name}_ms"] if ms else None
      out[f"{label}_speedup_vs_fastest_torch{suffix}_by_fastest_call"] = (
          best_torch / fastest[jax_name] if best_torch else None
      )
  return out


if __name__ == "__main__":
  print(json.dumps(measure(sys.argv[1] if len(sys.argv) > 1 else "train_step"), indent=2))
