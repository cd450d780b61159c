"""Gradient provenance: how the lookup path and the projection path add up in one shared table.

For a tied table E, `loss(E[ids] @ E.T)` depends on E twice. Differentiating with respect to the two uses
separately gives the lookup-path gradient (non-zero only in looked-up rows, accumulated over repeats) and the
projection-path gradient (any row the loss scores). By the chain rule, their sum is the gradient of the tied
model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

HiddenLoss = Callable[[jax.Array, jax.Array], jax.Array]  # (x (T, D), projection table (V, D)) → scalar


class GradientSplit(NamedTuple):
  """Gradients of a loss with respect to a (V, D) table, split by the path they came through."""

  lookup: jax.Array  # (V, D), through `E[ids]`
  projection: jax.Array  # (V, D), through `x @ E.T`
  total: jax.Array  # (V, D), lookup + projection


class PathGradients(NamedTuple):
  """A batch's loss and its gradient through each use of the tables, the lookup path kept sparse.

  The lookup path reaches only the looked-up rows, so it is held as one row per token, (T, D): the lookup table's
  gradient is those rows added into ids (repeats add up), never a (V, D) array unless asked for. The projection
  path reaches every row and is dense.
  """

  loss: jax.Array  # () float32
  ids: jax.Array  # (T,) int, the looked-up rows
  lookup_rows: jax.Array  # (T, D), d loss / d E[ids[t]] for each token t
  projection: jax.Array  # (V, D), through `x @ E.T`

  def lookup_dense(self) -> jax.Array:
    """The lookup-path gradient as a (V, D) array."""
    return self.add_lookup(jnp.zeros_like(self.projection))

  def add_lookup(self, grad: jax.Array, scale: float = 1.0) -> jax.Array:
    """grad + scale · lookup-path gradient, the rows added in place of `grad`: (V, D) → (V, D)."""
    rows = self.lookup_rows if scale == 1.0 else scale * self.lookup_rows
    return grad.at[self.ids].add(rows)

  def lookup_row_norms(self) -> jax.Array:
    """‖lookup-path gradient row‖ for every row, (V,): repeats summed per id first, without a (V, D) array."""
    vocab_size, num_tokens = self.projection.shape[0], self.ids.shape[0]
    rows, inverse = jnp.unique(self.ids, size=num_tokens, fill_value=vocab_size, return_inverse=True)
    per_row = jnp.zeros_like(self.lookup_rows).at[inverse.reshape(-1)].add(self.lookup_rows)
    norms = jnp.zeros((vocab_size,), self.lookup_rows.dtype)
    return norms.at[rows].add(row_norms(per_row), mode="drop")  # the padding rows (id V) are dropped

  def lookup_at(self, rows: jax.Array) -> jax.Array:
    """The lookup-path gradient's rows `rows` (K,) int → (K, D)."""
    hits = (rows[:, None] == self.ids[None, :]).astype(self.lookup_rows.dtype)  # (K, T)
    return hits @ self.lookup_rows


def path_gradients(
    lookup_table: jax.Array, projection_table: jax.Array, ids: jax.Array, loss_fn: HiddenLoss
) -> PathGradients:
  """Loss and its gradients through each use: tables (V, D), ids (T,) → PathGradients.

  Pass the same array twice for a tied model; for an untied one the two paths are simply the two tables'
  gradients. By the chain rule, `lookup_dense() + projection` is the tied table's gradient.
  """
  loss, (lookup_rows, projection) = jax.value_and_grad(loss_fn, argnums=(0, 1))(lookup_table[ids], projection_table)
  return PathGradients(loss=loss, ids=ids, lookup_rows=lookup_rows, projection=projection)


def loss_and_path_gradients(
    lookup_table: jax.Array, projection_table: jax.Array, ids: jax.Array, loss_fn: HiddenLoss
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Loss and its gradients through each use, both dense: tables (V, D), ids (T,) → (scalar, (V, D), (V, D))."""
  paths = path_gradients(lookup_table, projection_table, ids, loss_fn)
  return paths.loss, paths.lookup_dense(), paths.projection


def split_gradient(
    table: jax.Array, ids: jax.Array, logits_loss: Callable[[jax.Array], jax.Array]
) -> GradientSplit:
  """Split d loss(E[ids] @ E.T) / dE by path: table (V, D), ids (T,), loss on (T, V) logits → GradientSplit."""
  _, lookup, projection = loss_and_path_gradients(table, table, ids, lambda x, e: logits_loss(x @ e.T))
  return GradientSplit(lookup=lookup, projection=projection, total=lookup + projection)


def row_norms(grad: jax.Array) -> jax.Array:
  """Euclidean norm of each row: (V, D) → (V,)."""
  return jnp.sqrt(jnp.sum(jnp.square(grad), axis=-1))


def looked_up_rows(ids: jax.Array, vocab_size: int) -> jax.Array:
  """Mask of the rows a batch looks up: ids (...,) int → (V,) bool."""
  return jnp.zeros((vocab_size,), jnp.bool_).at[ids.reshape(-1)].set(True)


def split_stats(lookup_grad: jax.Array, projection_grad: jax.Array, ids: jax.Array) -> dict[str, jax.Array]:
  """Scalar summaries of one step's split, for logging: (V, D), (V, D), ids (T,) → dict of scalars.

  `rows_projection_only` counts rows the batch did not look up that still got a non-zero gradient.
  """
  total = lookup_grad + projection_grad
  lookup_norm = jnp.linalg.norm(lookup_grad)
  projection_norm = jnp.linalg.norm(projection_grad)
  tiny = jnp.finfo(jnp.float32).tiny
  looked_up = looked_up_rows(ids, lookup_grad.shape[0])
  projected = row_norms(projection_grad) > 0
  return {
      "lookup_norm": lookup_norm,
      "projection_norm": projection_norm,
      "total_norm": jnp.linalg.norm(total),
      "cosine": jnp.vdot(lookup_grad, projection_grad) / jnp.maximum(lookup_norm * projection_norm, tiny),
      "rows_looked_up": jnp.sum(looked_up),
      "rows_projection_only": jnp.sum(projected & ~looked_up),
  }


def split_error(direct_total: jax.Array, lookup_grad: jax.Array, projection_grad: jax.Array) -> jax.Array:
  """|g − (g_lookup + g_proj)| / |g|, with g the gradient autodiff gives the tied table directly.

  (V, D), (V, D), (V, D) → scalar float32.
  """
  residual = direct_total - (lookup_grad + projection_grad)
  return jnp.linalg.norm(residual) / jnp.maximum(jnp.linalg.norm(direct_total), jnp.finfo(jnp.float32).tiny)
