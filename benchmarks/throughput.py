"""Throughput of the real train step at V=8192, D=256, 4096 tokens per step, beside PyTorch and one matmul.

Run: `python benchmarks/throughput.py` (prints the numbers). `measure()` returns them for benchmarks/run.py.
The step is `tied_embed.train_step.make_train_step` on configs/default.py at this size: gradient provenance
(two path gradients, per-row totals), clipping and AdamW. All variants are timed in turns in one process.
"""

from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from benchmarks import workload  # noqa: E402
from benchmarks.torch_step import make_torch_matmul, make_torch_step  # noqa: E402

VOCAB_SIZE, D_MODEL, NUM_TOKENS = 8192, 256, 4096
CHUNK_SIZE = 256  # tokens per chunk for the chunked-loss variant (see benchmarks/README.md for the sweep)


def matmul_fn(num_tokens: int, d_model: int, vocab_size: int):
  """One jitted (T, D)×(D, V) float32 matmul, the unit of the roofline: returns a callable that runs it."""
  keys = jax.random.split(jax.random.key(0))
  x = jax.random.normal(keys[0], (num_tokens, d_model))
  table = jax.random.normal(keys[1], (vocab_size, d_model))
  matmul = jax.jit(lambda a, b: a @ b.T)
  return lambda: jax.block_until_ready(matmul(x, table))


def measure(rounds: int = 7) -> dict:
  """Medians over `rounds` interleaved calls: JSON-ready dict (the `train_step` section of run.py)."""
  threads = workload.cpu_threads()
  default = workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, chunk_size=0)
  chunked = workload.bench_config(VOCAB_SIZE, D_MODEL, NUM_TOKENS, chunk_size=CHUNK_SIZE)
  fns = {
      "step": workload.Stepper(default),
      "chunked_step": workload.Stepper(chunked),
      "plain_step": workload.Stepper(default, plain=True),
      "matmul": matmul_fn(NUM_TOKENS, D_MODEL, VOCAB_SIZE),
  }
  torch_step = make_torch_step(default, threads)
  if torch_step is not None:
    fns["torch_step"] = torch_step
    fns["torch_matmul"] = make_torch_matmul(NUM_TOKENS, D_MODEL, VOCAB_SIZE)
  seconds = workload.interleaved_medians(fns, rounds)
  result = {
      "V": VOCAB_SIZE, "D": D_MODEL, "T": NUM_TOKENS, "threads": threads, "chunk_size": CHUNK_SIZE, "rounds": rounds,
      "tokens_per_s": NUM_TOKENS / seconds["step"],
      "torch_tokens_per_s": NUM_TOKENS / seconds["torch_step"] if torch_step else None,
      "matmul_ms": seconds["matmul"] * 1e3,
      "step_ms": seconds["step"] * 1e3,
      "roofline_fraction": 3 * seconds["matmul"] / seconds["step"],
      "chunked_step_ms": seconds["chunked_step"] * 1e3,
      "chunked_tokens_per_s": NUM_TOKENS / seconds["chunked_step"],
      "plain_step_ms": seconds["plain_step"] * 1e3,
      "torch_step_ms": seconds["torch_step"] * 1e3 if torch_step else None,
      "torch_matmul_ms": seconds["torch_matmul"] * 1e3 if torch_step else None,
  }
  result["speedup_vs_torch"] = result["tokens_per_s"] / result["torch_tokens_per_s"] if torch_step else None
  return result


if __name__ == "__main__":
  print(json.dumps(measure(), indent=2))
