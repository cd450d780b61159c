"""How the chunked loss's speed and memory depend on the chunk size, beside the full loss.

  python benchmarks/chunk_sweep.py [V D T]      (default 8192 256 4096)

For each chunk size: the fastest time of jit(value_and_grad(loss)) over interleaved rounds and the compiled
program's temporary bytes (XLA's memory_analysis; deterministic), for the tied bigram loss as the train step
computes it (each distinct id of a uniform batch once; the step's XLA options). Used to pick CHUNK_SIZE in run.py.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from benchmarks import workload  # noqa: E402
from tied_embed.fast import chunked_loss as losses  # noqa: E402
from tied_embed.fast import compilation

CHUNKS = (0, 128, 256, 512, 1024, 2048)  # 0 = full logits


def sweep(vocab_size: int, d_model: int, num_tokens: int, rounds: int = 5) -> dict[int, tuple[float, float]]:
  """chunk → (fastest ms of loss + both gradients, compiled temporary MiB)."""
  table = jax.random.normal(jax.random.key(0), (vocab_size, d_model)) / d_model**0.5
  ids, targets = workload.random_batch(vocab_size, num_tokens)
  fns, temps = {}, {}
  for chunk in CHUNKS:

    def loss(e, c=chunk):
      if c == 0:
        return losses.full_cross_entropy(e[ids], e, targets)
      return losses.chunked_cross_entropy(e[ids], e, targets, c, row_keys=ids)

    grad = jax.jit(jax.value_and_grad(loss), compiler_options=compilation.compiler_options())
    temps[chunk] = grad.lower(table).compile().memory_analysis().temp_size_in_bytes / 2**20
    fns[chunk] = lambda g=grad: jax.block_until_ready(g(table))
  seconds = workload.interleaved_medians(fns, rounds, stat=min)
  return {chunk: (seconds[chunk] * 1e3, temps[chunk]) for chunk in CHUNKS}


if __name__ == "__main__":
  shape = tuple(int(a) for a in sys.argv[1:4]) or (8192, 256, 4096)
  print(f"V, D, T = {shape}; loss + both gradients")
  for chunk, (ms, mib) in sweep(*shape).items():
    print(f"  chunk {chunk or 'full':>5}: {ms:8.1f} ms  temp {mib:8.1f} MiB")
