"""The sparse lookup path: core/paths.py's path gradients with the lookup path kept as one (D,) row per token, so the
step holds one (V, D) gradient, not two; on a mesh it crosses the data axis as rows and ids."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from tied_embed.core import paths
from tied_embed.core.paths import looked_up_rows, row_norms


class PathGradients(NamedTuple):
  """A batch's loss and its gradient through each use of the tables: the lookup path as one row per token, (T, D),
  added into ids (repeats add up) only when asked for; the projection path, reaching every row, dense."""

  loss: jax.Array  # () float32, the training loss (cross-entropy plus any regulariser)
  ids: jax.Array  # (T,) int, the looked-up rows
  lookup_rows: jax.Array  # (T, D), d loss / d E[ids[t]] for each token t
  projection: jax.Array  # (V, D), through `x @ E.T`
  hidden: dict  # the other Params' gradients, nested by name ({} without any)

  def add_lookup(self, grad: jax.Array, scale: float = 1.0) -> jax.Array:
    """grad + scale · lookup-path gradient, the rows added in place of `grad`: (V, D) → (V, D)."""
    rows = self.lookup_rows if scale == 1.0 else scale * self.lookup_rows
    return grad.at[self.ids].add(rows)

  def lookup_sums(self) -> tuple[jax.Array, jax.Array]:
    """(rows (T,), lookup-path gradient (T, D)) with repeats summed: each id once, then rows of id V and gradient 0."""
    vocab_size, num_tokens = self.projection.shape[0], self.ids.shape[0]
    rows, inverse = jnp.unique(self.ids, size=num_tokens, fill_value=vocab_size, return_inverse=True)
    return rows, jnp.zeros_like(self.lookup_rows).at[inverse.reshape(-1)].add(self.lookup_rows)

  def lookup_row_norms(self) -> jax.Array:
    """‖lookup-path gradient row‖ for every row, (V,): repeats summed per id first, without a (V, D) array."""
    rows, sums = self.lookup_sums()
    norms = jnp.zeros((self.projection.shape[0],), self.lookup_rows.dtype)
    return norms.at[rows].add(row_norms(sums), mode="drop")  # the padding rows (id V) are dropped

  def split_stats(self) -> dict[str, jax.Array]:
    """The split's logged scalars with no (V, D) array beyond P's: ‖L‖, ‖P‖, ‖L + P‖ (the rows L misses apart from
    the looked-up rows, so nothing cancels), cosine of L and P, rows looked up, rows with only a projection gradient."""
    rows, sums = self.lookup_sums()
    projection_rows = self.projection.at[rows].get(mode="fill", fill_value=0)  # (T, D); 0 for padding
    looked_up = looked_up_rows(self.ids, self.projection.shape[0])
    projection_sq = jnp.sum(jnp.square(self.projection), axis=-1)  # (V,)
    lookup_norm = jnp.sqrt(jnp.sum(jnp.square(sums)))
    projection_norm = jnp.sqrt(jnp.sum(projection_sq))
    total_sq = jnp.sum(jnp.where(looked_up, 0.0, projection_sq)) + jnp.sum(jnp.square(projection_rows + sums))
    tiny = jnp.finfo(jnp.float32).tiny
    return {"lookup_norm": lookup_norm, "projection_norm": projection_norm, "total_norm": jnp.sqrt(total_sq),
            "cosine": jnp.vdot(sums, projection_rows) / jnp.maximum(lookup_norm * projection_norm, tiny),
            "rows_looked_up": jnp.sum(looked_up), "rows_projection_only": jnp.sum((projection_sq > 0) & ~looked_up)}

  def lookup_at(self, rows: jax.Array) -> jax.Array:
    """The lookup-path gradient's rows `rows` (K,) int → (K, D)."""
    hits = (rows[:, None] == self.ids[None, :]).astype(self.lookup_rows.dtype)  # (K, T)
    return hits @ self.lookup_rows


def path_gradients(model, ids: jax.Array, next_ids: jax.Array, loss_fn: paths.HiddenLoss) -> PathGradients:
  """`core.paths.path_gradients` without scattering the lookup rows: ids, next_ids (B,) or (B, L) → PathGradients."""
  loss, lookup_rows, projection, hidden = paths.differentiate_uses(model, ids, next_ids, loss_fn)
  return PathGradients(loss=loss, ids=ids.reshape(-1), lookup_rows=lookup_rows, projection=projection, hidden=hidden)
