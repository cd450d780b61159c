"""Per-call cost of `tied_io_embed`: warm, cold, against the bare compiled computation and the contract run eagerly.

Run: `.venv/bin/python benchmarks/entrypoint.py` (prints a table); `measure()` returns the numbers for run.py.
All timings in one process, side by side, as medians of repeated calls.
"""

from __future__ import annotations

import math
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tied_embed import tied_io_embed
from tied_embed.entrypoint import _flat_logits, _fresh_state, _graphdef

SHAPES = ((1000, 64, 128), (50000, 768, 16))  # (V, D, T)
COLD_SHAPES = ((1000, 64, 100), (1000, 64, 77), (512, 32, 64), (2048, 48, 128), (300, 96, 5))


class LiteralTiedTable(nnx.Module):
  """The seed's procedure, run eagerly: one normal draw / sqrt(D), then `table[ids] @ table.T`."""

  def __init__(self, vocab_size: int, d_model: int, rngs: nnx.Rngs):
    key = rngs.params()
    self.embedding = nnx.Param(jax.random.normal(key, (vocab_size, d_model), dtype=jnp.float32) / math.sqrt(d_model))

  def __call__(self, ids: jax.Array) -> jax.Array:
    table = self.embedding[...]
    return table[ids] @ table.T


def literal_seed_code(seed: float, token_ids: np.ndarray, vocab_size: float, d_model: float) -> jax.Array:
  """docs/entrypoint.md's NNX contract transcribed literally (eager, no jit)."""
  model = LiteralTiedTable(int(vocab_size), int(d_model), nnx.Rngs(int(seed)))
  return model(jnp.asarray(token_ids).astype(jnp.int32)).reshape(-1)


def _median_seconds(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _repeats_for(vocab_size: int, d_model: int, token_count: int) -> int:
  work = vocab_size * d_model * max(token_count, 1)
  return max(5, min(300, int(2e9 / max(work, 1))))


def measure_warm(vocab_size: int, d_model: int, token_count: int) -> dict[str, float]:
  """Warm medians in ms: entrypoint, bare compiled programs (args already on device), literal eager seed code."""
  ids = np.random.default_rng(0).integers(0, vocab_size, token_count).astype(np.float32)
  seed_arg = jnp.asarray(np.int64(7))
  ids_arg = jnp.asarray(ids)
  graphdef = _graphdef(vocab_size, d_model)
  init = _fresh_state.lower(seed_arg, vocab_size, d_model).compile()
  forward = _flat_logits.lower(graphdef, init(seed_arg), ids_arg).compile()
  repeats = _repeats_for(vocab_size, d_model, token_count)
  entry = lambda: tied_io_embed(7.0, ids, float(vocab_size), float(d_model))  # noqa: E731
  bare = lambda: forward(init(seed_arg), ids_arg)  # noqa: E731
  literal = lambda: literal_seed_code(7.0, ids, float(vocab_size), float(d_model))  # noqa: E731
  for fn in (entry, bare, literal):
    jax.block_until_ready(fn())
  # Interleave the three so machine noise hits them alike.
  rounds = {"entrypoint_ms": [], "bare_ms": [], "literal_eager_ms": []}
  for _ in range(5):
    for name, fn in zip(rounds, (entry, bare, literal), strict=True):
      rounds[name].append(_median_seconds(fn, max(1, repeats // 5)) * 1e3)
  result = {name: statistics.median(values) for name, values in rounds.items()}
  result["overhead_ratio"] = result["entrypoint_ms"] / result["bare_ms"]
  return result


def measure_cold() -> list[dict[str, float]]:
  """First call on each new shape (trace + compile + run) against the literal eager code's first call."""
  rows = []
  for vocab_size, d_model, token_count in COLD_SHAPES:
    ids = np.random.default_rng(1).integers(0, vocab_size, token_count).astype(np.float32)
    start = time.perf_counter()
    jax.block_until_ready(tied_io_embed(3.0, ids, vocab_size, d_model))
    cold = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(literal_seed_code(3.0, ids, vocab_size, d_model))
    literal = time.perf_counter() - start
    row = {"V": vocab_size, "D": d_model, "T": token_count}
    rows.append(row | {"cold_ms": cold * 1e3, "literal_first_ms": literal * 1e3})
  return rows


def measure() -> dict:
  """All entrypoint numbers, as a JSON-ready dict."""
  warm = [{"V": v, "D": d, "T": t, **measure_warm(v, d, t)} for v, d, t in SHAPES]
  return {"warm": warm, "cold": measure_cold()}


def main() -> None:
  results = measure()
  print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {jax.device_count()} device(s)")
  print(f"{'V':>6} {'D':>4} {'T':>4} | {'entrypoint ms':>13} {'bare ms':>9} {'ratio':>6} | {'literal eager ms':>16}")
  for row in results["warm"]:
    print(
        f"{row['V']:>6} {row['D']:>4} {row['T']:>4} | {row['entrypoint_ms']:>13.3f} {row['bare_ms']:>9.3f}"
        f" {row['overhead_ratio']:>6.2f} | {row['literal_eager_ms']:>16.3f}"
    )
  print("\ncold first calls on new shapes")
  print(f"{'V':>6} {'D':>4} {'T':>4} | {'cold ms':>8} | {'literal first call ms':>21}")
  for row in results["cold"]:
    print(f"{row['V']:>6} {row['D']:>4} {row['T']:>4} | {row['cold_ms']:>8.1f} | {row['literal_first_ms']:>21.1f}")


if __name__ == "__main__":
  main()
