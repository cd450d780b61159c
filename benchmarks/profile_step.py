"""Where the chunked train step's time goes: each layer of it jitted alone, timed side by side.

  python benchmarks/profile_step.py [V D T C]      (default 8192 256 4096 256)

From the inside out: one lone (T, D)×(D, V) matmul (the unit), the chunked loss's forward pass alone (the
logsumexp of each distinct id of a uniform batch, as the step computes it), the loss with both gradients, the two
path gradients (provenance), the plain step (one gradient of every token's logits + clip + AdamW,
benchmarks/workload.py), and the trainer's step (provenance, totals, guard). The differences between neighbours
are the cost of each layer. Rounds alternate; the fastest call of each is printed
(on a shared machine the least disturbed one; medians there mix in other people's load).
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from benchmarks import workload  # noqa: E402
from tied_embed.fast import chunked_loss as losses  # noqa: E402
from tied_embed.fast import compilation  # noqa: E402


def measure(vocab_size: int, d_model: int, num_tokens: int, chunk: int, rounds: int = 9) -> dict[str, float]:
  """{layer: fastest ms}."""
  keys = jax.random.split(jax.random.key(0), 2)
  table = jax.random.normal(keys[0], (vocab_size, d_model)) / d_model**0.5
  x = jax.random.normal(keys[1], (num_tokens, d_model)) / d_model**0.5
  ids, targets = workload.random_batch(vocab_size, num_tokens)

  def loss(a, e):  # as the step computes it: each distinct id's logits once
    return losses.chunked_cross_entropy(a, e, targets, chunk, row_keys=ids)

  def jit(f):
    return jax.jit(f, compiler_options=compilation.compiler_options())

  layers = {
      "matmul": (jit(lambda a, e: a @ e.T), (x, table)),
      "loss forward": (jit(lambda e: loss(e[ids], e)), (table,)),
      "loss + both gradients": (jit(jax.value_and_grad(lambda e: loss(e[ids], e))), (table,)),
      # what tied_embed/fast/sparse_paths.py differentiates: the looked-up rows and the table, separately
      "path gradients": (jit(lambda e: jax.value_and_grad(loss, argnums=(0, 1))(e[ids], e)), (table,)),
  }
  fns = {name: (lambda f=f, a=a: jax.block_until_ready(f(*a))) for name, (f, a) in layers.items()}
  config = workload.bench_config(vocab_size, d_model, num_tokens, chunk)
  fns["plain step"] = workload.Stepper(config, plain=True)
  fns["train step"] = workload.Stepper(config)
  return {name: seconds * 1e3 for name, seconds in workload.interleaved_medians(fns, rounds, stat=min).items()}


if __name__ == "__main__":
  shape = tuple(int(a) for a in sys.argv[1:5]) or (8192, 256, 4096, 256)
  print(f"V, D, T, chunk = {shape}, {workload.cpu_threads()} threads")
  result = measure(*shape)
  for name, ms in result.items():
    print(f"  {name:<22} {ms:8.1f} ms  {ms / result['matmul']:5.2f} matmuls")
