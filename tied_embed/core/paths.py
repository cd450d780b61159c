"""Gradient provenance: how the lookup path and the projection path add up in one shared table.

For a tied table E, `loss(E[ids] @ E.T)` reads E twice. Differentiating with respect to each use gives

  lookup path      d loss / d E[ids]  scattered into the looked-up rows (repeats add up), zero elsewhere;
  projection path  d loss / d Eᵀ      reaching every row the loss scores,

and by the chain rule `d loss / d E = lookup + projection`. An untied model has the same two paths, one per table;
whatever lies between the uses (W, a context mixer) gets a gradient of its own. `path_gradients` keeps both paths
dense (V, D); tied_embed/fast/sparse_paths.py keeps the lookup path as one row per token, tested equal to this."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

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
  hidden: dict  # the other Params' gradients, nested by name ({} without any), e.g. {'hidden_map': {'kernel': (D, D)}}

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


def table_paths(model) -> tuple[tuple, tuple]:
  """(lookup path, projection path): where in `model`'s graph its tables' Params are, by identity (tied: the same)."""
  found = {id(node): path for path, node in nnx.iter_graph(model) if isinstance(node, nnx.Variable)}
  return tuple(found[id(param)] for param in model.table_params())


def differentiate_uses(model, ids: jax.Array, next_ids: jax.Array,
                       loss_fn: HiddenLoss) -> tuple[jax.Array, jax.Array, jax.Array, dict]:
  """The training loss and its gradient with respect to each use of the tables, and to the model's other Params.

  The loss is a function of (looked-up rows (..., D), projection table (V, D), the other Params): the rows carry the
  lookup path, the table the projection path. `loss_fn` scores the model's `score_operands`. ids, next_ids (B,)
  pairs or (B, L) windows → (loss (), d rows (T, D), T = B·L, d table (V, D), the other Params' as a nested dict)."""
  tables = set(table_paths(model))
  graphdef, table_state, others, rest = nnx.split(model, lambda path, _: path in tables, nnx.Param, ...)

  windows = ids.ndim > 1  # (B, L): the loss scores the B·L positions as one list of T tokens

  def loss(rows: jax.Array, projection_table: jax.Array, others: nnx.State) -> jax.Array:
    hidden_model = nnx.merge(graphdef, table_state, others, rest)
    hidden = hidden_model.hidden(rows)
    if windows:
      hidden, targets = hidden.reshape(-1, hidden.shape[-1]), next_ids.reshape(-1)
    else:
      targets = next_ids
    value = loss_fn(*hidden_model.score_operands(hidden, projection_table), targets)
    penalty = hidden_model.penalty()
    return value if penalty is None else value + penalty

  lookup_table, projection_table = model.tables()
  value, (rows, projection, other_grads) = jax.value_and_grad(loss, argnums=(0, 1, 2))(
      lookup_table[ids], projection_table, others)
  return value, rows.reshape(-1, rows.shape[-1]), projection, other_grads.to_pure_dict()


def path_gradients(model, ids: jax.Array, next_ids: jax.Array,
                   loss_fn: HiddenLoss = loss_lib.hidden_cross_entropy) -> PathGradients:
  """The batch's loss and its gradient through each use: ids, next_ids (B,) or (B, L) int → PathGradients (dense),
  whose `lookup` is d loss / d rows scattered into the rows `ids` read (untied: the input table's whole gradient)."""
  loss, rows_grad, projection, hidden = differentiate_uses(model, ids, next_ids, loss_fn)
  ids = ids.reshape(-1)
  lookup = jnp.zeros_like(projection).at[ids].add(rows_grad)
  return PathGradients(loss=loss, ids=ids, lookup=lookup, projection=projection, hidden=hidden)


def param_gradients(model, paths, lookup_scale: float = 1.0, projection_scale: float = 1.0) -> nnx.State:
  """The Params' gradients from a batch's `paths` (these PathGradients, or a speed path's with the same methods),
  each path weighted by its scale and routed by which Param each use reads: the projection path into the projection
  table's Param, the lookup path added into the lookup table's (tied: the same Param, so both land in the one table),
  the other Params' gradients where they are. A scale of exactly 1 multiplies nothing: the default step is the same
  program, and bits, as one that never scales."""
  projection = paths.projection if projection_scale == 1.0 else projection_scale * paths.projection
  lookup_path, projection_path = table_paths(model)
  grads = nnx.state(model, nnx.Param)
  nnx.replace_by_pure_dict(grads, paths.hidden)
  flat = dict(grads.flat_state())
  if lookup_path == projection_path:
    flat[lookup_path] = flat[lookup_path].replace(paths.add_lookup(projection, lookup_scale))
  else:
    flat[lookup_path] = flat[lookup_path].replace(paths.add_lookup(jnp.zeros_like(projection), lookup_scale))
    flat[projection_path] = flat[projection_path].replace(projection)
  return nnx.from_flat_state(flat)
