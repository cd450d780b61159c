"""Tied and untied input/output embeddings as Flax NNX modules.

`TiedEmbed` holds one (V, D) table, `embedding`, and uses it twice: `embed` looks rows up (the input
embedding) and `attend` scores a hidden vector against every row (the output projection, `x @ E.T`).
`UntiedEmbed` is the ablation with two independent tables of the same shape.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

# Logical axis names of a table's dimensions. `tied_embed.run.parallel.LOGICAL_AXIS_RULES` maps them to mesh axes; the
# optimizer's moments inherit them from the Param, so the whole train state is laid out from these annotations.
TABLE_AXES = ("vocab", "embed")


def table_param(table: jax.Array) -> nnx.Param:
  """A (V, D) table as an nnx.Param annotated with TABLE_AXES (applied on a mesh, not at creation)."""
  return nnx.Param(table, out_sharding=TABLE_AXES, eager_sharding=False)


def init_table(key: jax.Array, vocab_size: int, d_model: int) -> jax.Array:
  """One normal draw scaled by 1/sqrt(D): key → (V, D) float32 with entry variance 1/D.

  Under jit, XLA would fold the 1/sqrt(D) into `normal`'s own constant scale and change last bits; the
  optimization barrier keeps the jitted table bitwise equal to the literal eager `normal(...) / sqrt(D)`.
  """
  draw = jax.random.normal(key, (vocab_size, d_model), dtype=jnp.float32)
  return jax.lax.optimization_barrier(draw) / math.sqrt(d_model)


class TiedEmbed(nnx.Module):
  """One table for the token lookup and, transposed, for the output projection.

  Attributes:
    embedding: nnx.Param (V, D) float32, the only parameter.
  """

  def __init__(self, vocab_size: int, d_model: int, *, rngs: nnx.Rngs):
    self.vocab_size = vocab_size
    self.d_model = d_model
    self.embedding = table_param(init_table(rngs.params(), vocab_size, d_model))

  def embed(self, ids: jax.Array) -> jax.Array:
    """Lookup: (...,) int → (..., D) float32."""
    return self.embedding[...][ids]

  def attend(self, x: jax.Array) -> jax.Array:
    """Projection with the same table transposed: (..., D) → (..., V) raw scores."""
    return x @ self.embedding[...].T

  def __call__(self, ids: jax.Array) -> jax.Array:
    """(...,) int → (..., V) float32 logits, `logits[t, v] = E[ids[t]] · E[v]`."""
    return self.attend(self.embed(ids))


class UntiedEmbed(nnx.Module):
  """The ablation: independent input and output tables, each initialised like `TiedEmbed`'s.

  Attributes:
    input_embedding: nnx.Param (V, D) float32, read by `embed`.
    output_embedding: nnx.Param (V, D) float32, read by `attend`.
  """

  def __init__(self, vocab_size: int, d_model: int, *, rngs: nnx.Rngs):
    self.vocab_size = vocab_size
    self.d_model = d_model
    self.input_embedding = table_param(init_table(rngs.params(), vocab_size, d_model))
    self.output_embedding = table_param(init_table(rngs.params(), vocab_size, d_model))

  def embed(self, ids: jax.Array) -> jax.Array:
    """Lookup in the input table: (...,) int → (..., D)."""
    return self.input_embedding[...][ids]

  def attend(self, x: jax.Array) -> jax.Array:
    """Projection with the output table: (..., D) → (..., V)."""
    return x @ self.output_embedding[...].T

  def __call__(self, ids: jax.Array) -> jax.Array:
    """(...,) int → (..., V) float32 logits."""
    return self.attend(self.embed(ids))


def io_tables(model: TiedEmbed | UntiedEmbed) -> tuple[jax.Array, jax.Array]:
  """The (lookup table, projection table) a model reads, each (V, D); the same array when tied."""
  if isinstance(model, TiedEmbed):
    table = model.embedding[...]
    return table, table
  return model.input_embedding[...], model.output_embedding[...]


class ParamCounts(NamedTuple):
  """Parameters in the two vocabulary matrices, with and without tying."""

  tied: int  # V*D: one shared table
  untied: int  # 2*V*D: separate input and output tables
  saved: int  # untied - tied = V*D


def param_counts(vocab_size: int, d_model: int) -> ParamCounts:
  """Parameter counts of the embedding plus bias-free output projection, tied and untied."""
  tied = vocab_size * d_model
  return ParamCounts(tied=tied, untied=2 * tied, saved=tied)
