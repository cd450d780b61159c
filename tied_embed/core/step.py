"""The train state and the one jitted train step: path gradients, their sum, the update, the split check.

Everything a step reads and writes lives in one `TrainState` module, and the jitted step takes and returns its
`nnx.State`: the Python loop only passes arrays, a checkpoint of the state is everything a resumed run needs, and
the step donates the old state."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from tied_embed.core import loss as loss_lib
from tied_embed.core import paths as paths_lib
from tied_embed.core.model import Model

Metrics = dict[str, jax.Array]
TrainStep = Callable[..., tuple[nnx.State, Metrics]]
StepFunction = Callable[..., tuple[nnx.State, Metrics, nnx.State]]
# paths_fn(model, ids, next_ids (B,) or (B, L)) → path gradients: add_lookup, lookup_row_norms, lookup_at, split_stats.
PathsFn = Callable[[Model, jax.Array, jax.Array], paths_lib.PathGradients]
# apply_update(train_state, grads) → None, or a scalar finite exactly when everything the update wrote is.
UpdateFn = Callable[["TrainState", nnx.State], "jax.Array | None"]

TRACKED_ROWS = 16  # rows whose accumulated gradient direction through each path is kept (the most frequent ones)


class ProvenanceTotal(nnx.Variable):
  """A (V,) running sum over steps of each row's gradient norm through one path."""


class RunningMetric(nnx.Variable):
  """A scalar the step carries from one step to the next: a running sum, a count or a marker step."""


class PathDirections(nnx.Variable):
  """For a few tracked rows: which rows (K,) int32, or the running sum of one path's gradient rows (K, D)."""


class TrainState(nnx.Module):
  """The model, its optimizer, the provenance totals and the running train metrics."""

  def __init__(self, model: Model, tx: optax.GradientTransformation):
    self.model = model
    self.optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)  # its `step` counts updates: the run's step
    vocab_axis = {"out_sharding": ("vocab",), "eager_sharding": False}
    self.lookup_total = ProvenanceTotal(jnp.zeros((model.vocab_size,), jnp.float32), **vocab_axis)
    self.projection_total = ProvenanceTotal(jnp.zeros((model.vocab_size,), jnp.float32), **vocab_axis)
    # the train losses since the last log step, summed and counted
    self.train_loss_sum = RunningMetric(jnp.float32(0))
    self.train_loss_count = RunningMetric(jnp.int32(0))
    self.first_nonfinite_step = RunningMetric(jnp.int32(0))  # the first step with a non-finite loss or state; 0 if none
    # the trainer picks the most frequent rows: does the lookup pull each the same way as the projection?
    tracked = min(TRACKED_ROWS, model.vocab_size)
    self.tracked_rows = PathDirections(jnp.arange(tracked, dtype=jnp.int32))
    self.tracked_lookup = PathDirections(jnp.zeros((tracked, model.d_model), jnp.float32))
    self.tracked_projection = PathDirections(jnp.zeros((tracked, model.d_model), jnp.float32))


def param_gradients(model: Model, paths, lookup_scale: float = 1.0, projection_scale: float = 1.0) -> nnx.State:
  """The Params' gradients from the two paths, each weighted by its scale and routed by the model's tables
  (`paths_lib.param_gradients`). A scale of exactly 1 multiplies nothing: the default step is the same program, and
  bits, as one that never scales."""
  projection = paths.projection if projection_scale == 1.0 else projection_scale * paths.projection
  return paths_lib.param_gradients(model, lambda grad: paths.add_lookup(grad, lookup_scale), projection, paths.hidden)


def split_error(model: Model, grads: nnx.State, ids: jax.Array, next_ids: jax.Array) -> jax.Array:
  """‖g − Σ paths‖ / ‖g‖ over all Params, a scalar: `grads` (the paths' unscaled gradients) against g = `nnx.grad` of
  `loss_lib.model_loss`, which differentiates `model(ids)` itself, so a speed path's bug cannot cancel out."""
  direct = nnx.grad(loss_lib.model_loss)(model, ids, next_ids)
  residual = jax.tree.map(lambda d, g: jnp.sum(jnp.square(d - g)), direct, grads)
  direct_sq = jax.tree.map(lambda d: jnp.sum(jnp.square(d)), direct)
  norm = lambda tree: jnp.sqrt(sum(jax.tree.leaves(tree)))  # noqa: E731
  return norm(residual) / jnp.maximum(norm(direct_sq), jnp.finfo(jnp.float32).tiny)


def all_finite(loss: jax.Array, state: nnx.State) -> jax.Array:
  """Whether `loss` and every float array of `state` are finite: scalar bool.

  A sum of |x| is finite exactly when every x is, unless the sum overflows, and XLA reads each array once for it,
  where `isfinite(x).all()` writes and rereads a bool array the table's size. So the exact test runs only when
  the sum is not finite: a non-finite value, or values near float32's limit. Arrays of one shape (a table and its
  two optimizer moments) are summed as one reduction of |a| + |b| + |c|, which XLA:CPU runs faster than three."""
  floats = [loss] + [leaf for leaf in jax.tree.leaves(state) if jnp.issubdtype(leaf.dtype, jnp.floating)]

  def exact():
    return jnp.all(jnp.stack([jnp.isfinite(leaf).all() for leaf in floats]))

  by_shape: dict[tuple[int, ...], list[jax.Array]] = {}
  for leaf in floats:
    by_shape.setdefault(leaf.shape, []).append(jnp.abs(leaf).astype(jnp.float32))
  total = sum(jnp.sum(sum(group)) for group in by_shape.values())
  return jax.lax.cond(jnp.isfinite(total), lambda: jnp.bool_(True), exact)


def optimizer_update(train_state: TrainState, grads: nnx.State) -> None:
  """Applies the Params' gradients with the train state's optimizer (optax, through nnx.Optimizer); checks nothing."""
  train_state.optimizer.update(train_state.model, grads)


def make_step_function(graphdef: nnx.GraphDef, paths_fn: PathsFn = paths_lib.path_gradients, *,
                       lookup_grad_scale: float = 1.0, projection_grad_scale: float = 1.0,
                       split_check_tokens: int | None = None,
                       apply_update: UpdateFn = optimizer_update) -> StepFunction:
  """step(state, ids, next_ids (B,) pairs or (B, L) windows, with_stats=False) → (new state, metrics, grads), to be
  jitted.

  `paths_fn` gives the batch's path gradients (tied_embed/core/paths.py, or a speed path with the same answers); the
  model turns them, weighted by `lookup_grad_scale` and `projection_grad_scale`, into its Params' gradients `grads`
  (tied: they add up in the one table; any clipping sees that weighted sum), applied by `apply_update` (`UpdateFn`):
  the optimizer's own update, or the same arithmetic faster (tied_embed/fast/kernels), checking what it writes.

  metrics: {'loss'}; with `with_stats` (log steps) also the split statistics of the unweighted path gradients (at
  the parameters before the update), 'split_error', 'hidden_norm' (‖dW‖, with a hidden map), the model's
  `hidden_stats` as 'train/hidden_<name>', 'applied_norm' (the weighted gradient's global norm, before clipping)
  and 'train_loss' (the mean loss since the previous log step, whose window it then empties).

  The split check (`split_error`) runs on the whole batch or, with `split_check_tokens` = S < B (where the (B, V)
  logits would not fit), on the first S pairs (or windows). A non-finite loss or new state is recorded in
  `first_nonfinite_step` (the loop checks it where it syncs anyway), so a state that passes is safe to save."""

  def log_metrics(model, paths, grads, ids, next_ids) -> Metrics:
    metrics = dict(paths.split_stats())
    if split_check_tokens is None or split_check_tokens >= ids.shape[0]:
      unscaled = grads if lookup_grad_scale == projection_grad_scale == 1.0 else param_gradients(model, paths)
      metrics["split_error"] = split_error(model, unscaled, ids, next_ids)
    else:
      ids, next_ids = ids[:split_check_tokens], next_ids[:split_check_tokens]
      metrics["split_error"] = split_error(model, param_gradients(model, paths_fn(model, ids, next_ids)), ids, next_ids)
    if paths.hidden:
      metrics["hidden_norm"] = optax.tree.norm(paths.hidden)
    metrics.update({f"train/hidden_{name}": value for name, value in model.hidden_stats().items()})
    metrics["applied_norm"] = optax.tree.norm(grads)
    return metrics

  def step(state: nnx.State, ids: jax.Array, next_ids: jax.Array, with_stats: bool = False):
    train_state = nnx.merge(graphdef, state)
    model = train_state.model
    paths = paths_fn(model, ids, next_ids)
    loss = paths.loss
    metrics = {"loss": loss}
    tracked = train_state.tracked_rows[...]
    train_state.projection_total[...] += paths_lib.row_norms(paths.projection)
    train_state.tracked_projection[...] += paths.projection[tracked]
    train_state.lookup_total[...] += paths.lookup_row_norms()
    train_state.tracked_lookup[...] += paths.lookup_at(tracked)
    grads = param_gradients(model, paths, lookup_grad_scale, projection_grad_scale)
    if with_stats:
      metrics.update(log_metrics(model, paths, grads, ids, next_ids))
    written_check = apply_update(train_state, grads)

    train_state.train_loss_sum[...] += loss
    train_state.train_loss_count[...] += 1
    if with_stats:
      metrics["train_loss"] = train_state.train_loss_sum[...] / train_state.train_loss_count[...]
      train_state.train_loss_sum[...] = jnp.zeros_like(train_state.train_loss_sum[...])
      train_state.train_loss_count[...] = jnp.zeros_like(train_state.train_loss_count[...])

    first_bad = train_state.first_nonfinite_step[...]
    if written_check is None:
      finite = all_finite(loss, nnx.state(train_state))
    else:  # the update checked the Params and the optimizer state as it wrote them
      rest = nnx.state(train_state, nnx.Not(nnx.Any(nnx.Param, nnx.OptState)))
      finite = all_finite(loss, rest) & jnp.isfinite(written_check)
    done = train_state.optimizer.step[...].astype(jnp.int32)
    train_state.first_nonfinite_step[...] = jnp.where((first_bad == 0) & ~finite, done, first_bad)
    return nnx.state(train_state), metrics, grads

  return step


def make_train_step(graphdef: nnx.GraphDef, paths_fn: PathsFn = paths_lib.path_gradients, *, state_shardings=None,
                    compiler_options: dict | None = None, **step_options) -> TrainStep:
  """jit(state, ids (B,), next_ids (B,), *, with_stats=False) → (new state, metrics), donating `state`: the step of
  `make_step_function(graphdef, paths_fn, **step_options)`, its new state pinned to `state_shardings`."""
  step_fn = make_step_function(graphdef, paths_fn, **step_options)

  def step(state: nnx.State, ids: jax.Array, next_ids: jax.Array, with_stats: bool = False):
    new_state, metrics, _ = step_fn(state, ids, next_ids, with_stats)
    return new_state, metrics

  out_shardings = (state_shardings, None) if state_shardings is not None else None
  return jax.jit(step, donate_argnums=0, static_argnames="with_stats", out_shardings=out_shardings,
                 compiler_options=compiler_options)
