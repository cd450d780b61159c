"""How the chunked loss's speed and memory depend on the chunk size, beside the full loss.

  python benchmarks/chunk_sweep.py [V D T]      (default 8192 256 4096)

For each chunk size: the fastest time of jit(value_and_grad(loss)) over interleaved rounds and the compiled
program's temporary bytes (XLA's memory_analysis; deterministic). Used to pick CHUNK_SIZE in run.py.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from benchmarks import workload  # noqa: E402
from tied_embed.losses import cross_entropy  # noqa: E402

CHUNKS = (0, 128, 256, 512, 1024, 2048)  # 0 = full logits


def sweep(vocab_size: int, d_model: int, num_tokens: int, rounds: int = 5) -> dict[int, tuple[float, float]]:
  """chunk → (fastest ms of loss + both gradients, compiled temporary MiB)."""
  keys = jax.random.split(jax.random.key(0), 2)
  x = jax.random.normal(keys[0], (num_tokens, d_model))
  table = jax.random.normal(keys[1], (vocab_size, d_model)) / d_model**0.5
  targets = workload.random_batch(vocab_size, num_tokens)[1]
  fns, temps = {}, {}
  for chunk in CHUNKS:
    grad = jax.jit(jax.value_and_grad(lambda a, e, y, c=chunk: cross_entropy(a, e, y, c), argnums=(0, 1)))
    temps[chunk] = grad.lower(x, table, targets).compile().memory_analysis().temp_size_in_bytes / 2**20
    fns[chunk] = lambda g=grad: jax.block_until_ready(g(x, table, targets))
  seconds = workload.interleaved_medians(fns, rounds, stat=min)
  return {chunk: (seconds[chunk] * 1e3, temps[chunk]) for chunk in CHUNKS}


if __name__ == "__main__":
  shape = tuple(int(a) for a in sys.argv[1:4]) or (8192, 256, 4096)
  print(f"V, D, T = {shape}; loss + both gradients")
  for chunk, (ms, mib) in sweep(*shape).items():
    print(f"  chunk {chunk or 'full':>5}: {ms:8.1f} ms  temp {mib:8.1f} MiB")
