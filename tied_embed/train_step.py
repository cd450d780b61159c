"""One training step with gradient provenance, the log-step diagnostics and evaluation, as jitted functions.

Everything a step reads and writes lives in one `TrainState` module (model, optimizer, provenance totals). The
jitted functions take and return its `nnx.State`, so the Python loop only passes arrays, and the step donates
the old state's buffers.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx

from tied_embed import losses, provenance
from tied_embed.model import TiedEmbed, UntiedEmbed, io_tables

Model = TiedEmbed | UntiedEmbed


class ProvenanceTotal(nnx.Variable):
  """A (V,) running sum over steps of each row's gradient norm through one path."""


class TrainState(nnx.Module):
  """The model, its optimizer and the provenance totals.

  Attributes:
    model: TiedEmbed or UntiedEmbed.
    optimizer: nnx.Optimizer over the model's Params (its `step` counts updates).
    lookup_total: ProvenanceTotal (V,) float32, Σ_steps ‖lookup-path gradient row‖.
    projection_total: ProvenanceTotal (V,) float32, Σ_steps ‖projection-path gradient row‖.
  """

  def __init__(self, model: Model, tx: optax.GradientTransformation):
    self.model = model
    self.optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    self.lookup_total = ProvenanceTotal(jnp.zeros((model.vocab_size,), jnp.float32))
    self.projection_total = ProvenanceTotal(jnp.zeros((model.vocab_size,), jnp.float32))


def build_model(config: ml_collections.ConfigDict) -> Model:
  """The model `config.model` describes, initialised from `config.seed`."""
  cls = TiedEmbed if config.model.tied else UntiedEmbed
  return cls(int(config.model.vocab_size), int(config.model.d_model), rngs=nnx.Rngs(int(config.seed)))


def _loss_fn(next_ids: jax.Array, chunk_size: int) -> provenance.HiddenLoss:
  return lambda x, table: losses.cross_entropy(x, table, next_ids, chunk_size)


def path_gradients(
    model: Model, ids: jax.Array, next_ids: jax.Array, chunk_size: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Loss and the gradient through each use of the tables: ids, next_ids (B,) → (scalar, (V, D), (V, D))."""
  lookup_table, projection_table = io_tables(model)
  return provenance.loss_and_path_gradients(
      lookup_table, projection_table, ids, _loss_fn(next_ids, chunk_size)
  )


def update_gradients(model: Model, lookup_grad: jax.Array, projection_grad: jax.Array) -> nnx.State:
  """The Param gradients the optimizer applies: their sum for the one tied table, each to its own if untied."""
  if isinstance(model, TiedEmbed):
    values = {"embedding": lookup_grad + projection_grad}
  else:
    values = {"input_embedding": lookup_grad, "output_embedding": projection_grad}
  grads = nnx.state(model, nnx.Param)
  nnx.replace_by_pure_dict(grads, values)
  return grads


def make_train_step(
    graphdef: nnx.GraphDef, chunk_size: int, state_shardings=None, *, track_provenance: bool = True
) -> Callable[[nnx.State, jax.Array, jax.Array], tuple[nnx.State, jax.Array]]:
  """jit(state, ids (B,), next_ids (B,)) → (new state, loss). Donates `state`.

  `track_provenance=False` is the plain step (one gradient, no per-row totals), kept to measure what the
  bookkeeping costs (benchmarks/train_step.py).
  """

  def step(state: nnx.State, ids: jax.Array, next_ids: jax.Array) -> tuple[nnx.State, jax.Array]:
    train_state = nnx.merge(graphdef, state)
    model = train_state.model
    if track_provenance:
      loss, lookup_grad, projection_grad = path_gradients(model, ids, next_ids, chunk_size)
      train_state.lookup_total[...] += provenance.row_norms(lookup_grad)
      train_state.projection_total[...] += provenance.row_norms(projection_grad)
      grads = update_gradients(model, lookup_grad, projection_grad)
    else:
      loss, grads = nnx.value_and_grad(direct_loss)(model, ids, next_ids, chunk_size)
    train_state.optimizer.update(model, grads)
    return nnx.state(train_state), loss

  return jax.jit(step, donate_argnums=0, out_shardings=(state_shardings, None) if state_shardings else None)


def direct_loss(model: Model, ids: jax.Array, next_ids: jax.Array, chunk_size: int) -> jax.Array:
  """The bigram loss as a function of the model itself, for `nnx.grad` without any split: (B,), (B,) → scalar."""
  return losses.bigram_loss(*io_tables(model), ids, next_ids, chunk_size)


def _split_error(model: Model, direct: nnx.State, lookup_grad: jax.Array, projection_grad: jax.Array) -> jax.Array:
  """|g − (g_lookup + g_proj)| / |g| with g from nnx.grad on the model.

  Untied, g is the pair (g_input, g_output) and the paths should reassemble it as (g_lookup, 0) + (0, g_proj).
  """
  if isinstance(model, TiedEmbed):
    return provenance.split_error(direct["embedding"][...], lookup_grad, projection_grad)
  zeros = jnp.zeros_like(lookup_grad)
  return provenance.split_error(
      jnp.stack([direct["input_embedding"][...], direct["output_embedding"][...]]),
      jnp.stack([lookup_grad, zeros]),
      jnp.stack([zeros, projection_grad]),
  )


def make_diagnostics(graphdef: nnx.GraphDef, chunk_size: int) -> Callable[..., dict[str, jax.Array]]:
  """jit(state, ids, next_ids) → the split statistics of this batch at these parameters, plus `split_error`.

  Run at log steps only, on the state *before* the step's update, so it describes the gradient the step applies.
  """

  def diagnostics(state: nnx.State, ids: jax.Array, next_ids: jax.Array) -> dict[str, jax.Array]:
    model = nnx.merge(graphdef, state).model
    _, lookup_grad, projection_grad = path_gradients(model, ids, next_ids, chunk_size)
    direct = nnx.grad(direct_loss)(model, ids, next_ids, chunk_size)
    stats = provenance.split_stats(lookup_grad, projection_grad, ids)
    stats["split_error"] = _split_error(model, direct, lookup_grad, projection_grad)
    return stats

  return jax.jit(diagnostics)


def make_eval_losses(graphdef: nnx.GraphDef, chunk_size: int) -> Callable[..., jax.Array]:
  """jit(state, ids (E,), next_ids (E,)) → per-token losses (E,) float32, for nnx.metrics.Average.

  Tokens are scored `chunk_size` at a time (all at once if 0), so no more than (chunk_size, V) logits are live.
  """

  def eval_losses(state: nnx.State, ids: jax.Array, next_ids: jax.Array) -> jax.Array:
    lookup_table, projection_table = io_tables(nnx.merge(graphdef, state).model)

    def one(pair: tuple[jax.Array, jax.Array]) -> jax.Array:
      token, next_token = pair
      return losses.bigram_loss(lookup_table, projection_table, token[None], next_token[None])

    if chunk_size <= 0:
      return jax.vmap(one)((ids, next_ids))
    return jax.lax.map(one, (ids, next_ids), batch_size=chunk_size)

  return jax.jit(eval_losses)
