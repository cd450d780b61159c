"""Next-token cross-entropy through the tied projection.

The loss is written as a function of hidden vectors `x` and the projection table, so the (T, V) logits can be
formed whole (`chunk_size=0`) or for a chunk of tokens at a time (`tied_embed.chunked_loss`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from tied_embed.chunked_loss import chunked_cross_entropy


def full_cross_entropy(x: jax.Array, projection_table: jax.Array, targets: jax.Array) -> jax.Array:
  """Mean softmax cross-entropy with full logits: x (T, D), table (V, D), targets (T,) int → scalar."""
  logits = x @ projection_table.T
  target_logits = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
  return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - target_logits)


def cross_entropy(
    x: jax.Array, projection_table: jax.Array, targets: jax.Array, chunk_size: int = 0
) -> jax.Array:
  """Mean cross-entropy of `x @ table.T` against `targets`; (T, D), (V, D), (T,) → scalar.

  `chunk_size=0` materialises the (T, V) logits; a positive value never holds more than (chunk_size, V).
  """
  if chunk_size == 0:
    return full_cross_entropy(x, projection_table, targets)
  return chunked_cross_entropy(x, projection_table, targets, chunk_size)


def bigram_loss(
    lookup_table: jax.Array,
    projection_table: jax.Array,
    ids: jax.Array,
    next_ids: jax.Array,
    chunk_size: int = 0,
) -> jax.Array:
  """Bigram loss: look `ids` (T,) up in one table, score against the other, predict `next_ids` (T,).

  For a tied model both tables are the same array.
  """
  return cross_entropy(lookup_table[ids], projection_table, next_ids, chunk_size)
