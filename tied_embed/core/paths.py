"""Gradient provenance: how the lookup path and the projection path add up in one shared table.

For a tied table E, `loss(E[ids] @ E.T)` reads E twice. Differentiating with respect to the two uses separately
gives two gradients:

  lookup path      d loss / d E[ids]  scattered into the looked-up rows (repeats add up), zero elsewhere;
  projection path  d loss / d Eᵀ      reaching every row the loss scores.

By the chain rule their sum is the gradient of the tied model, `d loss / d E = lookup + projection`. An untied
model has the same two paths, each in its own table. With a hidden map W between the uses, the lookup path is
still the gradient through `E[ids]` (now through W as well), and W gets a gradient of its own.

`path_gradients` here is the plain form: both paths as dense (V, D) arrays. tied_embed/fast/sparse_paths.py keeps
the lookup path as one row per token instead, and is tested equal to this."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from tied_embed.core import loss as loss_lib

# loss_fn(hidden (T, D), projection table (V, D), targets (T,)) → scalar: the plain loss or a speed path.
HiddenLoss = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


def row_norms(grad: jax.Array) -> jax.Array:
  """Euclidean norm of each row: (V, D) → (V,)."""
  return jnp.sqrt(jnp.sum(jnp.square(grad), axis=-1))


def looked_up_rows(ids: jax.Array, vocab_size: int) -> jax.Array:
  """Mask of the rows a batch looks up: ids (...,) int → (V,) bool."""
  return jnp.zeros((vocab_size,), jnp.bool_).at[ids.reshape(-1)].set(True)


class PathGradients(NamedTuple):
  """A batch's loss and its gradient through each use of the tables, both paths dense."""

  loss: jax.Array  # () float32, the training loss (cross-entropy plus any regulariser)
  ids: jax.Array  # (T,) int, the looked-up rows
  lookup: jax.Array  # (V, D), through `E[ids]`
  projection: jax.Array  # (V, D), through `x @ E.T`
  hidden: dict  # the hidden map's gradients ({} without one), e.g. {'kernel': (D, D)}

  def add_lookup(self, grad: jax.Array, scale: float = 1.0) -> jax.Array:
    """grad + scale · lookup-path gradient: (V, D) → (V, D)."""
    return grad + (self.lookup if scale == 1.0 else scale * self.lookup)

  def lookup_row_norms(self) -> jax.Array:
    """‖lookup-path gradient row‖ for every row: (V,)."""
    return row_norms(self.lookup)

  def lookup_at(self, rows: jax.Array) -> jax.Array:
    """The lookup-path gradient's rows `rows` (K,) int → (K, D)."""
    return self.lookup[rows]

  def split_stats(self) -> dict[str, jax.Array]:
    """Scalar summaries of the split, for logging: lookup_norm ‖L‖, projection_norm ‖P‖, total_norm ‖L + P‖,
    cosine of L and P, rows_looked_up, and rows_projection_only (not looked up, yet a non-zero gradient)."""
    lookup, projection = self.lookup, self.projection
    looked_up = looked_up_rows(self.ids, projection.shape[0])
    lookup_norm, projection_norm = jnp.linalg.norm(lookup), jnp.linalg.norm(projection)
    tiny = jnp.finfo(jnp.float32).tiny
    return {"lookup_norm": lookup_norm, "projection_norm": projection_norm,
            "total_norm": jnp.linalg.norm(lookup + projection),
            "cosine": jnp.vdot(lookup, projection) / jnp.maximum(lookup_norm * projection_norm, tiny),
            "rows_looked_up": jnp.sum(looked_up),
            "rows_projection_only": jnp.sum((row_norms(projection) > 0) & ~looked_up)}


def differentiate_uses(model, ids: jax.Array, next_ids: jax.Array,
                       loss_fn: HiddenLoss) -> tuple[jax.Array, jax.Array, jax.Array, dict]:
  """The training loss and its gradient with respect to each use of the tables, and to the hidden map.

  The loss is written as a function of (looked-up rows (T, D), projection table (V, D), the hidden map's arrays), so
  differentiating it with respect to each argument separates the paths: the rows carry the lookup path, the table
  the projection path. → (loss (), d rows (T, D), d projection table (V, D), {name: d hidden array})."""

  def loss(rows: jax.Array, projection_table: jax.Array, hidden: dict) -> jax.Array:
    value = loss_fn(model.hidden(rows, hidden), projection_table, next_ids)
    penalty = model.penalty(hidden)
    return value if penalty is None else value + penalty

  lookup_table, projection_table = model.tables()
  value, (rows, projection, hidden) = jax.value_and_grad(loss, argnums=(0, 1, 2))(
      lookup_table[ids], projection_table, model.hidden_params())
  return value, rows, projection, hidden


def path_gradients(model, ids: jax.Array, next_ids: jax.Array,
                   loss_fn: HiddenLoss = loss_lib.hidden_cross_entropy) -> PathGradients:
  """The batch's loss and its gradient through each use: ids, next_ids (T,) int → PathGradients (dense), whose
  `lookup` is d loss / d rows scattered into the rows `ids` read (untied: the input table's whole gradient)."""
  loss, rows_grad, projection, hidden = differentiate_uses(model, ids, next_ids, loss_fn)
  lookup = jnp.zeros_like(projection).at[ids].add(rows_grad)
  return PathGradients(loss=loss, ids=ids, lookup=lookup, projection=projection, hidden=hidden)
