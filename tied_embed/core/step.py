"""The train state and the one jitted train step (gradient provenance, running metrics, non-finite guard).

How the step is compiled is tied_embed/compilation.py; the jitted evaluation is tied_embed/evaluation.py.

Everything a step reads and writes lives in one `TrainState` module: the model, its optimizer, the provenance
totals and the running metrics. The jitted functions take and return its `nnx.State`, so the Python loop only
passes arrays, a checkpoint of the state is everything a resumed run needs, and the step donates the old state.

A log step is the same function with `with_stats=True`: it also returns the split statistics of its own gradient
and the mean train loss since the previous log step. Because the statistics come out of the step itself, and each
step consumes the state the previous one produced, at most one program with collectives is ever in flight on a
mesh: two independent programs whose collectives span different device groups can block each other on XLA:CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx

from tied_embed.core.model import TiedEmbed, UntiedEmbed, io_tables
from tied_embed.fast import chunked_loss as losses
from tied_embed.fast import compilation
from tied_embed.fast import sparse_paths as provenance
from tied_embed.run import parallel
from tied_embed.run.errors import RunStopped

Model = TiedEmbed | UntiedEmbed
Metrics = dict[str, jax.Array]
TrainStep = Callable[..., tuple[nnx.State, Metrics]]


class ProvenanceTotal(nnx.Variable):
  """A (V,) running sum over steps of each row's gradient norm through one path."""


class RunningMetric(nnx.Variable):
  """A scalar the step carries from one step to the next: a running sum, a count or a marker step."""


class PathDirections(nnx.Variable):
  """For a few tracked rows: which rows (K,) int32, or the running sum of one path's gradient rows (K, D)."""


TRACKED_ROWS = 16  # rows whose accumulated gradient direction through each path is kept (the most frequent ones)


class NonFinite(RunStopped):
  """The run stopped at a non-finite loss or gradient, saving nothing after it (exit status 1)."""

  def __init__(self, first_bad: int, step: int, last_saved: int | None):
    saved = "no checkpoint was written"
    if last_saved is not None:
      saved = f"the last checkpoint, step {last_saved}, is intact"
    super().__init__(
        f"step {first_bad}: the loss or a gradient is not finite (NaN or Inf); stopped at step {step} "
        f"without saving, {saved}. Try a lower train.learning_rate or a train.grad_clip_norm."
    )
    self.first_bad, self.step = first_bad, step


class TrainState(nnx.Module):
  """The model, its optimizer, the provenance totals and the running train metrics.

  Attributes:
    model: TiedEmbed or UntiedEmbed.
    optimizer: nnx.Optimizer over the model's Params (its `step` counts updates: the run's step).
    lookup_total: ProvenanceTotal (V,) float32, Σ_steps ‖lookup-path gradient row‖.
    projection_total: ProvenanceTotal (V,) float32, Σ_steps ‖projection-path gradient row‖.
    train_loss_sum: RunningMetric () float32, the train losses since the last log step, summed.
    train_loss_count: RunningMetric () int32, how many losses that sum holds.
    first_nonfinite_step: RunningMetric () int32, the first step whose loss or new state was not finite; 0 if none.
    tracked_rows: PathDirections (K,) int32, K = min(TRACKED_ROWS, V) rows (the trainer picks the most frequent).
    tracked_lookup, tracked_projection: PathDirections (K, D) float32, Σ_steps of those rows' gradient through
      each path: does the lookup pull a row the same way as the projection?
  """

  def __init__(self, model: Model, tx: optax.GradientTransformation):
    self.model = model
    self.optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    vocab_axis = {"out_sharding": ("vocab",), "eager_sharding": False}
    self.lookup_total = ProvenanceTotal(jnp.zeros((model.vocab_size,), jnp.float32), **vocab_axis)
    self.projection_total = ProvenanceTotal(jnp.zeros((model.vocab_size,), jnp.float32), **vocab_axis)
    self.train_loss_sum = RunningMetric(jnp.float32(0))
    self.train_loss_count = RunningMetric(jnp.int32(0))
    self.first_nonfinite_step = RunningMetric(jnp.int32(0))
    tracked = min(TRACKED_ROWS, model.vocab_size)
    self.tracked_rows = PathDirections(jnp.arange(tracked, dtype=jnp.int32))
    self.tracked_lookup = PathDirections(jnp.zeros((tracked, model.d_model), jnp.float32))
    self.tracked_projection = PathDirections(jnp.zeros((tracked, model.d_model), jnp.float32))


def build_model(config: ml_collections.ConfigDict) -> Model:
  """The model `config.model` describes, initialised from `config.seed`."""
  cls = TiedEmbed if config.model.tied else UntiedEmbed
  return cls(int(config.model.vocab_size), int(config.model.d_model), rngs=nnx.Rngs(int(config.seed)))


def path_gradients(
    model: Model, ids: jax.Array, next_ids: jax.Array, chunk_size: int, data_shards: int = 1,
    compute_dtype: str = "float32",
) -> provenance.PathGradients:
  """The batch's loss and its gradient through each use of the tables: ids, next_ids (B,) → PathGradients.

  The hidden vectors are looked-up rows, equal wherever the ids are, so the chunked loss forms the logits of each
  distinct id once (per data shard, `data_shards` dividing B): exact, and cheaper by the repeats in the batch.
  `compute_dtype` (`model.dtype`) is the loss's matmul operand dtype; the gradients are float32 either way.
  """
  lookup_table, projection_table = io_tables(model)

  def loss_fn(x: jax.Array, table: jax.Array) -> jax.Array:
    if chunk_size == 0:
      return losses.full_cross_entropy(x, table, next_ids, compute_dtype)
    return losses.chunked_cross_entropy(
        x, table, next_ids, chunk_size, row_keys=ids, groups=data_shards, compute_dtype=compute_dtype
    )

  return provenance.path_gradients(lookup_table, projection_table, ids, loss_fn)


def update_gradients(
    model: Model, paths: provenance.PathGradients, lookup_scale: float = 1.0, projection_scale: float = 1.0
) -> nnx.State:
  """The Param gradients the optimizer applies, each path weighted by its scale (a, b).

  Tied: b·g_projection with a·(the lookup rows) added into it, in place, so the step holds one (V, D) gradient;
  untied: a·g_lookup and b·g_projection, each to its own table. A scale of exactly 1 multiplies nothing, so the
  default step is the same program, and the same bits, as a step that never scales.
  """
  projection = paths.projection if projection_scale == 1.0 else projection_scale * paths.projection
  if isinstance(model, TiedEmbed):
    values = {"embedding": paths.add_lookup(projection, lookup_scale)}
  else:
    values = {"input_embedding": paths.add_lookup(jnp.zeros_like(projection), lookup_scale),
              "output_embedding": projection}
  grads = nnx.state(model, nnx.Param)
  nnx.replace_by_pure_dict(grads, values)
  return grads


def direct_loss(
    model: Model, ids: jax.Array, next_ids: jax.Array, chunk_size: int, compute_dtype: str = "float32"
) -> jax.Array:
  """The bigram loss as a function of the model itself, for `nnx.grad` without any split: (B,), (B,) → scalar."""
  return losses.bigram_loss(*io_tables(model), ids, next_ids, chunk_size, compute_dtype)


def split_diagnostics(
    model: Model, paths: provenance.PathGradients, next_ids: jax.Array, chunk_size: int,
    compute_dtype: str = "float32",
) -> Metrics:
  """The split statistics of one batch's path gradients, plus `split_error` against `nnx.grad` of the model.

  The direct gradient uses the same `compute_dtype` as the paths. In float32 the error is rounding (~1e-7); in
  bfloat16 it also holds the different roundings of the per-token and distinct-rows losses (~1e-2).
  """
  direct = nnx.grad(direct_loss)(model, paths.ids, next_ids, chunk_size, compute_dtype)
  stats = paths.split_stats()
  if isinstance(model, TiedEmbed):
    stats["split_error"] = paths.split_error(direct["embedding"][...])
  else:
    stats["split_error"] = paths.split_error(direct["input_embedding"][...], direct["output_embedding"][...])
  return stats


def all_finite(loss: jax.Array, state: nnx.State) -> jax.Array:
  """Whether `loss` and every float array of `state` are finite: scalar bool."""
  floats = [leaf for leaf in jax.tree.leaves(state) if jnp.issubdtype(leaf.dtype, jnp.floating)]
  return jnp.all(jnp.stack([jnp.isfinite(loss)] + [jnp.isfinite(leaf).all() for leaf in floats]))


def make_train_step(
    graphdef: nnx.GraphDef, chunk_size: int, state_shardings=None, lookup_grad_scale: float = 1.0,
    projection_grad_scale: float = 1.0, compute_dtype: str = "float32",
) -> TrainStep:
  """jit(state, ids (B,), next_ids (B,), *, with_stats=False) → (new state, metrics). Donates `state`.

  The optimizer receives the path gradients weighted by `lookup_grad_scale` and `projection_grad_scale`
  (`update_gradients`); any clipping in its chain sees that weighted sum. metrics: {'loss': the batch's loss};
  with `with_stats` (log steps) also the split statistics of this step's unweighted path gradients (computed at
  the parameters before its update), 'applied_norm', the global norm of the weighted gradient handed to the
  optimizer (before clipping), and 'train_loss', the mean loss of the steps since the previous log step, whose
  window it then empties. A non-finite loss or new state is recorded in
  `first_nonfinite_step` (the loop checks it where it syncs anyway), so a state that passes is safe to save.
  `compute_dtype` (`model.dtype`) is the loss's matmul operand dtype.
  """

  data_shards = parallel.data_shards(state_shardings)

  def step(state: nnx.State, ids: jax.Array, next_ids: jax.Array, with_stats: bool = False):
    train_state = nnx.merge(graphdef, state)
    model = train_state.model
    paths = path_gradients(model, ids, next_ids, chunk_size, data_shards, compute_dtype)
    loss = paths.loss
    metrics = {"loss": loss}
    if with_stats:
      metrics.update(split_diagnostics(model, paths, next_ids, chunk_size, compute_dtype))
    tracked = train_state.tracked_rows[...]
    train_state.projection_total[...] += provenance.row_norms(paths.projection)
    train_state.tracked_projection[...] += paths.projection[tracked]
    train_state.lookup_total[...] += paths.lookup_row_norms()
    train_state.tracked_lookup[...] += paths.lookup_at(tracked)
    grads = update_gradients(model, paths, lookup_grad_scale, projection_grad_scale)
    if with_stats:
      metrics["applied_norm"] = optax.tree.norm(grads)
    train_state.optimizer.update(model, grads)

    train_state.train_loss_sum[...] += loss
    train_state.train_loss_count[...] += 1
    if with_stats:
      metrics["train_loss"] = train_state.train_loss_sum[...] / train_state.train_loss_count[...]
      train_state.train_loss_sum[...] = jnp.zeros_like(train_state.train_loss_sum[...])
      train_state.train_loss_count[...] = jnp.zeros_like(train_state.train_loss_count[...])

    first_bad = train_state.first_nonfinite_step[...]
    finite = all_finite(loss, nnx.state(train_state))
    done = train_state.optimizer.step[...].astype(jnp.int32)
    train_state.first_nonfinite_step[...] = jnp.where((first_bad == 0) & ~finite, done, first_bad)
    return nnx.state(train_state), metrics

  out_shardings = (state_shardings, None) if state_shardings is not None else None
  return jax.jit(
      step, donate_argnums=0, static_argnames="with_stats", out_shardings=out_shardings,
      compiler_options=compilation.compiler_options(),
  )


def check_finite(state: nnx.State, last_saved: int | None) -> None:
  """Raises NonFinite if any step so far was not finite (a host sync: call it where the loop syncs anyway)."""
  first_bad = int(state["first_nonfinite_step"][...])
  if first_bad:
    raise NonFinite(first_bad, int(state["optimizer"]["step"][...]), last_saved)
