"""Tied and untied input/output embeddings as Flax NNX modules, and the optional hidden map between the two uses.

`TiedEmbed` holds one (V, D) table, `embedding`, and uses it twice: `embed` looks rows up (the input embedding) and
`attend` scores a hidden vector against every row (the output projection, `x @ E.T`). `UntiedEmbed` is the ablation
with two independent tables of the same shape. `WithHiddenMap` puts a learned (D, D) matrix W between the two uses,
`logits = E[ids] · W · Eᵀ`: a tied model's logits `E·Eᵀ` are symmetric, W's antisymmetric part is what lets it score
(a, b) and (b, a) differently.

Every model answers the same questions, so the step never asks which class it has:
  - `tables()`: which (V, D) arrays the lookup and the projection read (the same array when tied);
  - `hidden(rows, params)`: what happens between them, as a pure function of the hidden map's arrays;
  - `param_gradients(add_lookup, projection, hidden)`: how the two paths' gradients become the Params' gradients
    (tied: they add up in the one table; untied: each goes to its own table)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

if TYPE_CHECKING:  # only for the annotations: the story imports no config machinery
  import ml_collections

# Logical axis names of a table's dimensions. `tied_embed.train.mesh.LOGICAL_AXIS_RULES` maps them to mesh axes;
# the optimizer's moments inherit them from the Param, so the whole train state is laid out from these annotations.
TABLE_AXES = ("vocab", "embed")

HIDDEN_MAPS = ("none", "linear")  # the values `model.hidden` may take

# add_lookup(grad (V, D)) → grad + the lookup-path gradient, added in place of `grad`.
AddLookup = Callable[[jax.Array], jax.Array]


def table_param(table: jax.Array) -> nnx.Param:
  """A (V, D) table as an nnx.Param annotated with TABLE_AXES (applied on a mesh, not at creation)."""
  return nnx.Param(table, out_sharding=TABLE_AXES, eager_sharding=False)


def init_table(key: jax.Array, vocab_size: int, d_model: int) -> jax.Array:
  """One normal draw scaled by 1/sqrt(D): key → (V, D) float32 with entry variance 1/D.

  Under jit, XLA would fold the 1/sqrt(D) into `normal`'s own constant scale and change last bits; the
  optimization barrier keeps the jitted table bitwise equal to the literal eager `normal(...) / sqrt(D)`."""
  draw = jax.random.normal(key, (vocab_size, d_model), dtype=jnp.float32)
  return jax.lax.optimization_barrier(draw) / math.sqrt(d_model)


class _Embedder(nnx.Module):
  """What tied and untied tables share: the forward pass, and no hidden map between the two uses."""

  def __call__(self, ids: jax.Array) -> jax.Array:
    """(...,) int → (..., V) float32 logits, `logits[t, v] = E_in[ids[t]] · E_out[v]` (tied: E_in = E_out = E)."""
    return self.attend(self.embed(ids))

  def scoring_tables(self) -> tuple[jax.Array, jax.Array]:
    """(A, B), each (V, D), with logits(ids) = A[ids] · Bᵀ: the tables themselves, for inspection."""
    return self.tables()

  def hidden_params(self) -> dict[str, jax.Array]:
    """The hidden map's arrays: none."""
    return {}

  def hidden(self, rows: jax.Array, params: dict[str, jax.Array]) -> jax.Array:
    """The identity: the looked-up rows (T, D) are the hidden vectors."""
    return rows

  def penalty(self, params: dict[str, jax.Array]) -> jax.Array | None:
    """No regulariser."""
    return None

  def hidden_stats(self) -> dict[str, jax.Array]:
    """Nothing to log."""
    return {}


class TiedEmbed(_Embedder):
  """One table, `embedding`: nnx.Param (V, D) float32 and the only parameter, for the token lookup and, transposed,
  for the output projection."""

  def __init__(self, vocab_size: int, d_model: int, *, rngs: nnx.Rngs):
    self.vocab_size, self.d_model = vocab_size, d_model
    self.embedding = table_param(init_table(rngs.params(), vocab_size, d_model))

  def embed(self, ids: jax.Array) -> jax.Array:
    """Lookup: (...,) int → (..., D) float32."""
    return self.embedding[...][ids]

  def attend(self, x: jax.Array) -> jax.Array:
    """Projection with the same table transposed: (..., D) → (..., V) raw scores."""
    return x @ self.embedding[...].T

  def tables(self) -> tuple[jax.Array, jax.Array]:
    """(lookup table, projection table), each (V, D): the one table, twice."""
    table = self.embedding[...]
    return table, table

  def param_gradients(self, add_lookup: AddLookup, projection: jax.Array, hidden: dict) -> dict:
    """Tying: both paths land in the one table, the lookup rows added into the projection gradient (V, D)."""
    return {"embedding": add_lookup(projection)}


class UntiedEmbed(_Embedder):
  """The ablation: independent (V, D) float32 Params `input_embedding` (read by `embed`) and `output_embedding`
  (read by `attend`), each initialised like `TiedEmbed`'s."""

  def __init__(self, vocab_size: int, d_model: int, *, rngs: nnx.Rngs):
    self.vocab_size, self.d_model = vocab_size, d_model
    self.input_embedding = table_param(init_table(rngs.params(), vocab_size, d_model))
    self.output_embedding = table_param(init_table(rngs.params(), vocab_size, d_model))

  def embed(self, ids: jax.Array) -> jax.Array:
    """Lookup in the input table: (...,) int → (..., D)."""
    return self.input_embedding[...][ids]

  def attend(self, x: jax.Array) -> jax.Array:
    """Projection with the output table: (..., D) → (..., V)."""
    return x @ self.output_embedding[...].T

  def tables(self) -> tuple[jax.Array, jax.Array]:
    """(lookup table, projection table), each (V, D): two different arrays."""
    return self.input_embedding[...], self.output_embedding[...]

  def param_gradients(self, add_lookup: AddLookup, projection: jax.Array, hidden: dict) -> dict:
    """Untied: the lookup path is the input table's whole gradient, the projection path the output table's."""
    return {"input_embedding": add_lookup(jnp.zeros_like(projection)), "output_embedding": projection}


class LinearMap(nnx.Module):
  """h = x · W with W = `kernel`, a (D, D) float32 Param (replicated on a mesh) initialised to the identity, so a
  model starts as it would without it."""

  def __init__(self, d_model: int):
    self.kernel = nnx.Param(jnp.eye(d_model, dtype=jnp.float32))

  def __call__(self, x: jax.Array) -> jax.Array:
    """(..., D) → (..., D)."""
    return x @ self.kernel[...]


class WithHiddenMap(nnx.Module):
  """`embedder` (TiedEmbed or UntiedEmbed, tables unchanged) with `hidden_map` W between lookup and projection; the
  training loss adds `l2 · ‖W − I‖²_F`, pulling W towards the plain model (the eval loss is the cross-entropy alone)."""

  def __init__(self, embedder: TiedEmbed | UntiedEmbed, l2: float = 0.0):
    self.embedder = embedder
    self.hidden_map = LinearMap(embedder.d_model)
    self.l2 = float(l2)
    self.vocab_size, self.d_model = embedder.vocab_size, embedder.d_model

  def embed(self, ids: jax.Array) -> jax.Array:
    """The embedder's lookup: (...,) int → (..., D)."""
    return self.embedder.embed(ids)

  def __call__(self, ids: jax.Array) -> jax.Array:
    """(...,) int → (..., V) float32 logits, `E[ids] · W · Eᵀ` when tied."""
    return self.embedder.attend(self.hidden_map(self.embed(ids)))

  def tables(self) -> tuple[jax.Array, jax.Array]:
    """The embedder's (lookup table, projection table)."""
    return self.embedder.tables()

  def scoring_tables(self) -> tuple[jax.Array, jax.Array]:
    """(E_in · W, E_out), each (V, D): logits(ids) = (E_in · W)[ids] · E_outᵀ, for inspection."""
    lookup_table, projection_table = self.tables()
    return lookup_table @ self.hidden_map.kernel[...], projection_table

  def hidden_params(self) -> dict[str, jax.Array]:
    """{'kernel': W (D, D)}."""
    return {"kernel": self.hidden_map.kernel[...]}

  def hidden(self, rows: jax.Array, params: dict[str, jax.Array]) -> jax.Array:
    """rows (T, D) · W → (T, D)."""
    return rows @ params["kernel"]

  def penalty(self, params: dict[str, jax.Array]) -> jax.Array | None:
    """l2 · ‖W − I‖²_F, a scalar; None (nothing to add) at l2 = 0."""
    if self.l2 == 0.0:
      return None
    kernel = params["kernel"]
    return self.l2 * jnp.sum(jnp.square(kernel - jnp.eye(kernel.shape[0], dtype=kernel.dtype)))

  def param_gradients(self, add_lookup: AddLookup, projection: jax.Array, hidden: dict) -> dict:
    """The embedder's table gradients, and W's."""
    return {"embedder": self.embedder.param_gradients(add_lookup, projection, {}), "hidden_map": hidden}

  def hidden_stats(self) -> dict[str, jax.Array]:
    """‖W − I‖_F, and W's antisymmetric share ‖(W − Wᵀ)/2‖_F / ‖W‖_F: the part that breaks the symmetry of E·Eᵀ."""
    kernel = self.hidden_map.kernel[...]
    identity_distance = jnp.linalg.norm(kernel - jnp.eye(kernel.shape[0], dtype=kernel.dtype))
    antisymmetric = jnp.linalg.norm((kernel - kernel.T) / 2) / jnp.maximum(jnp.linalg.norm(kernel), 1e-30)
    return {"identity_distance": identity_distance, "antisymmetric_share": antisymmetric}


Model = TiedEmbed | UntiedEmbed | WithHiddenMap


def build_model(config: ml_collections.ConfigDict) -> Model:
  """The model `config.model` describes, initialised from `config.seed`."""
  model = config.model
  cls = TiedEmbed if model.tied else UntiedEmbed
  embedder = cls(int(model.vocab_size), int(model.d_model), rngs=nnx.Rngs(int(config.seed)))
  if model.get("hidden", "none") == "linear":
    return WithHiddenMap(embedder, float(model.get("hidden_l2", 0.0)))
  return embedder


class ParamCounts(NamedTuple):
  """Parameters in the two vocabulary matrices (and the hidden map), with and without tying."""

  tied: int  # V*D: one shared table (+ D*D with a hidden map)
  untied: int  # 2*V*D: separate input and output tables (+ D*D with a hidden map)
  saved: int  # untied - tied = V*D


def param_counts(vocab_size: int, d_model: int, hidden: str = "none") -> ParamCounts:
  """Parameter counts of the embedding plus bias-free output projection, tied and untied."""
  extra = d_model * d_model if hidden == "linear" else 0
  tied = vocab_size * d_model
  return ParamCounts(tied=tied + extra, untied=2 * tied + extra, saved=tied)
