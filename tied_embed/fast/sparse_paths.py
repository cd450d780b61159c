"""Gradient provenance: how the lookup path and the projection path add up in one shared table.

For a tied table E, `loss(E[ids] @ E.T)` depends on E twice. Differentiating with respect to the two uses
separately gives the lookup-path gradient (non-zero only in looked-up rows, accumulated over repeats) and the
projection-path gradient (any row the loss scores). By the chain rule, their sum is the gradient of the tied
model. `PathGradients` keeps the lookup path as it comes, one (D,) row per token, and derives from it what the
step needs (row norms, tracked rows, the tied gradient, the logged statistics) without a (V, D) array.
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

  def lookup_sums(self) -> tuple[jax.Array, jax.Array]:
    """The lookup-path gradient's non-zero rows: (rows (T,) int, their gradient (T, D)), repeats summed.

    Each distinct id once, then padding rows with id V (out of range) and gradient 0.
    """
    vocab_size, num_tokens = self.projection.shape[0], self.ids.shape[0]
    rows, inverse = jnp.unique(self.ids, size=num_tokens, fill_value=vocab_size, return_inverse=True)
    return rows, jnp.zeros_like(self.lookup_rows).at[inverse.reshape(-1)].add(self.lookup_rows)

  def lookup_row_norms(self) -> jax.Array:
    """‖lookup-path gradient row‖ for every row, (V,): repeats summed per id first, without a (V, D) array."""
    rows, sums = self.lookup_sums()
    norms = jnp.zeros((self.projection.shape[0],), self.lookup_rows.dtype)
    return norms.at[rows].add(row_norms(sums), mode="drop")  # the padding rows (id V) are dropped

  def split_stats(self) -> dict[str, jax.Array]:
    """Scalar summaries of the split, for logging, from the sparse lookup path: no (V, D) array beyond P's.

    lookup_norm ‖L‖, projection_norm ‖P‖, total_norm ‖L + P‖, cosine of L and P, rows_looked_up, and
    rows_projection_only: rows the batch did not look up that still got a non-zero gradient. ‖L + P‖ is summed
    over the rows L misses and, separately, the looked-up rows, so nothing cancels.
    """
    rows, sums = self.lookup_sums()
    vocab_size = self.projection.shape[0]
    projection_rows = self.projection.at[rows].get(mode="fill", fill_value=0)  # (T, D); 0 for padding
    looked_up = looked_up_rows(self.ids, vocab_size)
    projection_sq = jnp.sum(jnp.square(self.projection), axis=-1)  # (V,)
    lookup_sq = jnp.sum(jnp.square(sums))
    projection_norm = jnp.sqrt(jnp.sum(projection_sq))
    lookup_norm = jnp.sqrt(lookup_sq)
    total_sq = jnp.sum(jnp.where(looked_up, 0.0, projection_sq)) + jnp.sum(jnp.square(projection_rows + sums))
    tiny = jnp.finfo(jnp.float32).tiny
    return {
        "lookup_norm": lookup_norm,
        "projection_norm": projection_norm,
        "total_norm": jnp.sqrt(total_sq),
        "cosine": jnp.vdot(sums, projection_rows) / jnp.maximum(lookup_norm * projection_norm, tiny),
        "rows_looked_up": jnp.sum(looked_up),
        "rows_projection_only": jnp.sum((projection_sq > 0) & ~looked_up),
    }

  def split_error(self, direct_lookup: jax.Array, direct_projection: jax.Array | None = None) -> jax.Array:
    """|g − (g_lookup + g_projection)| / |g|, with g the gradient autodiff gives the model directly: scalar.

    Tied: `direct_lookup` is the table's (V, D) gradient. Untied: the input and output tables' gradients, which
    should be g_lookup and g_projection alone. The lookup rows are subtracted in place, so no (V, D) sum is formed.
    """
    rows, sums = self.lookup_sums()
    if direct_projection is None:
      residuals = [(direct_lookup - self.projection).at[rows].add(-sums, mode="drop")]
      directs = [direct_lookup]
    else:
      residuals = [direct_lookup.at[rows].add(-sums, mode="drop"), direct_projection - self.projection]
      directs = [direct_lookup, direct_projection]
    norm = lambda arrays: jnp.sqrt(sum(jnp.sum(jnp.square(a)) for a in arrays))  # noqa: E731
    return norm(residuals) / jnp.maximum(norm(directs), jnp.finfo(jnp.float32).tiny)

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
