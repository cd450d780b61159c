"""The jitted evaluation: per-token losses of a batch, and a running total chained batch after batch.

Each pair is scored by the model itself (`model(ids)`, tied_embed/core/loss.py); with `model.dtype = bfloat16`
the projection's matmul takes bfloat16 operands, as the step's does (tied_embed/fast/precision.py).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from flax import nnx

from tied_embed.core import loss as loss_lib
from tied_embed.fast import chunked_loss


def _eval_losses(
    graphdef: nnx.GraphDef, chunk_size: int, compute_dtype: str, state: nnx.State, ids: jax.Array,
    next_ids: jax.Array,
):
  model = nnx.merge(graphdef, state).model

  def one(pair: tuple[jax.Array, jax.Array]) -> jax.Array:
    token, next_token = pair
    if compute_dtype == "float32":
      return loss_lib.per_token_losses(model, token[None], next_token[None])[0]
    hidden = model.hidden(model.embed(token[None]), model.hidden_params())
    return chunked_loss.full_cross_entropy(hidden, model.tables()[1], next_token[None], compute_dtype)

  if chunk_size <= 0:
    return jax.vmap(one)((ids, next_ids))
  return jax.lax.map(one, (ids, next_ids), batch_size=chunk_size)


def make_eval_losses(
    graphdef: nnx.GraphDef, chunk_size: int, compute_dtype: str = "float32"
) -> Callable[..., jax.Array]:
  """jit(state, ids (E,), next_ids (E,)) → per-token losses (E,) float32, matmuls in `compute_dtype`.

  Tokens are scored `chunk_size` at a time (all at once if 0), so no more than (chunk_size, V) logits are live.
  """
  return jax.jit(lambda state, ids, next_ids: _eval_losses(graphdef, chunk_size, compute_dtype, state, ids, next_ids))


def make_eval_total(
    graphdef: nnx.GraphDef, chunk_size: int, compute_dtype: str = "float32"
) -> Callable[..., jax.Array]:
  """jit(state, total () float32, ids (E,), next_ids (E,)) → total + the batch's summed per-token losses.

  Each call consumes the previous call's total, so the batches of an evaluation run one after the other on
  every device, never as independent programs in flight together.
  """
  return jax.jit(
      lambda state, total, ids, next_ids: total
      + _eval_losses(graphdef, chunk_size, compute_dtype, state, ids, next_ids).sum()
  )


def make_bucket_totals(
    graphdef: nnx.GraphDef, chunk_size: int, num_buckets: int, compute_dtype: str = "float32"
) -> Callable[..., tuple[jax.Array, jax.Array]]:
  """jit(state, total (), bucket_totals (K,), ids (E,), next_ids (E,), buckets (E,) int32) → (total, bucket_totals).

  `make_eval_total`'s running total, and beside it the batch's per-token losses summed by the bucket index each
  pair carries (K = `num_buckets`, e.g. the current token's input-frequency bucket), from one pass over the batch.
  """

  def add(state, total, bucket_totals, ids, next_ids, buckets):
    batch_losses = _eval_losses(graphdef, chunk_size, compute_dtype, state, ids, next_ids)
    by_bucket = jax.ops.segment_sum(batch_losses, buckets, num_segments=num_buckets)
    return total + batch_losses.sum(), bucket_totals + by_bucket

  return jax.jit(add)
