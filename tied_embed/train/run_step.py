"""What a run adds to the story's step (tied_embed/core/step.py), through its one hook, `after_gradients`.

`RunState` is the story's `TrainState` plus what a run keeps: each row's accumulated path-gradient norms, a few tracked
rows' directions, the train-loss window, the first non-finite step; a checkpoint of its state is all a resume needs.
`bookkeeping` is the hook that keeps them around the update; `make_run_step` is the story's step with that hook, on
the paths and update a config asks for (fast/choose.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from tied_embed.core import paths as paths_lib
from tied_embed.core import step as step_lib
from tied_embed.core.model import LanguageModel
from tied_embed.fast import choose
from tied_embed.fast.kernels import fused_adamw

if TYPE_CHECKING:
  import ml_collections

# apply_update(run_state, grads) → None, or a scalar finite exactly when everything the update wrote is.
UpdateFn = Callable[["RunState", nnx.State], "jax.Array | None"]

TRACKED_ROWS = 16  # rows whose accumulated gradient direction through each path is kept (the most frequent ones)


class ProvenanceTotal(nnx.Variable):
  """A (V,) running sum over steps of each row's gradient norm through one path."""


class RunningMetric(nnx.Variable):
  """A scalar the step carries from one step to the next: a running sum, a count or a marker step."""


class PathDirections(nnx.Variable):
  """For a few tracked rows: which rows (K,) int32, or the running sum of one path's gradient rows (K, D)."""


class RunState(step_lib.TrainState):
  """The model, its optimizer, the provenance totals and the running train metrics."""

  def __init__(self, model: LanguageModel, tx: optax.GradientTransformation):
    super().__init__(model, tx)
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


def all_finite(loss: jax.Array, state: nnx.State) -> jax.Array:
  """Whether `loss` and every float array of `state` are finite: scalar bool.

  A sum of |x| is finite exactly when every x is, unless it overflows, and XLA reads each array once for it
  (`isfinite(x).all()` writes and rereads a bool array), so the exact test runs only where the sum is not finite. Arrays
  of one shape are summed as one reduction of |a| + |b| + |c|, faster on XLA:CPU."""
  floats = [loss] + [leaf for leaf in jax.tree.leaves(state) if jnp.issubdtype(leaf.dtype, jnp.floating)]

  def exact():
    return jnp.all(jnp.stack([jnp.isfinite(leaf).all() for leaf in floats]))

  by_shape: dict[tuple[int, ...], list[jax.Array]] = {}
  for leaf in floats:
    by_shape.setdefault(leaf.shape, []).append(jnp.abs(leaf).astype(jnp.float32))
  total = sum(jnp.sum(sum(group)) for group in by_shape.values())
  return jax.lax.cond(jnp.isfinite(total), lambda: jnp.bool_(True), exact)


def optimizer_update(run_state: RunState, grads: nnx.State) -> None:
  """Applies the Params' gradients with the state's optimizer (optax, through nnx.Optimizer); checks nothing."""
  run_state.optimizer.update(run_state.model, grads)


def bookkeeping(apply_update: UpdateFn = optimizer_update) -> step_lib.AfterGradients:
  """The run's `after_gradients` hook: the path totals and tracked rows, the update by `apply_update` (optax's, or a
  kernel's that checks what it writes), the train-loss window and the non-finite marker.

  On log steps (`with_stats`) it adds 'train_loss' (the mean since the previous log step) to the metrics. A non-finite
  loss or state is recorded in `first_nonfinite_step`, so a state that passes is safe to save."""

  def after_gradients(run_state: RunState, paths, grads: nnx.State, metrics: step_lib.Metrics,
                      with_stats: bool) -> None:
    loss, tracked = paths.loss, run_state.tracked_rows[...]
    run_state.projection_total[...] += paths_lib.row_norms(paths.projection)
    run_state.tracked_projection[...] += paths.projection[tracked]
    run_state.lookup_total[...] += paths.lookup_row_norms()
    run_state.tracked_lookup[...] += paths.lookup_at(tracked)
    written_check = apply_update(run_state, grads)

    run_state.train_loss_sum[...] += loss
    run_state.train_loss_count[...] += 1
    if with_stats:
      metrics["train_loss"] = run_state.train_loss_sum[...] / run_state.train_loss_count[...]
      run_state.train_loss_sum[...] = jnp.zeros_like(run_state.train_loss_sum[...])
      run_state.train_loss_count[...] = jnp.zeros_like(run_state.train_loss_count[...])

    first_bad = run_state.first_nonfinite_step[...]
    if written_check is None:
      finite = all_finite(loss, nnx.state(run_state))
    else:  # the update checked the Params and the optimizer state as it wrote them
      rest = nnx.state(run_state, nnx.Not(nnx.Any(nnx.Param, nnx.OptState)))
      finite = all_finite(loss, rest) & jnp.isfinite(written_check)
    done = run_state.optimizer.step[...].astype(jnp.int32)
    run_state.first_nonfinite_step[...] = jnp.where((first_bad == 0) & ~finite, done, first_bad)

  return after_gradients


def make_run_step(graphdef: nnx.GraphDef, chunk_size: int, state_shardings=None, lookup_grad_scale: float = 1.0,
                  projection_grad_scale: float = 1.0, compute_dtype: str = "float32", split_check: int | None = None,
                  train_config: ml_collections.ConfigDict | None = None) -> step_lib.TrainStep:
  """The story's step with the run's `bookkeeping`, jitted on the paths and update these settings pick. `split_check`: `choose.split_check_tokens`'s pairs (None: the whole batch);
  `train_config`: the config's `train` section (AdamW on one device updates on its fused kernel where it pays off)."""
  one_device = choose.mesh_devices(state_shardings) == 1
  fused = train_config is not None and train_config.optimizer == "adamw" and one_device
  paths_fn = choose.paths_function(chunk_size, compute_dtype, choose.data_shards(state_shardings), one_device)
  update = fused_adamw.make_update(train_config) if fused else optimizer_update
  step_fn = step_lib.make_step_function(graphdef, paths_fn, after_gradients=bookkeeping(update),
                                        lookup_grad_scale=lookup_grad_scale,
                                        projection_grad_scale=projection_grad_scale, split_check_tokens=split_check)
  return choose.StepWithGradientBuffer(graphdef, step_fn, state_shardings)


def train_step_for(config: ml_collections.ConfigDict, graphdef: nnx.GraphDef, target: nnx.State) -> step_lib.TrainStep:
  """The train step `config` asks for, for the state `target` (abstract arrays with their shardings)."""
  train, shardings = config.train, jax.tree.map(lambda leaf: leaf.sharding, target)
  # A window of L tokens has (L, V) logits: the check's rows are windows, each as wide as L pairs.
  length = int(config.data.get("context_length", 1))
  split_check = choose.split_check_tokens(int(train.batch_size), int(config.model.vocab_size) * length,
                                          choose.data_shards(shardings))
  return make_run_step(
      graphdef, int(config.loss.chunk_size), shardings, lookup_grad_scale=float(train.lookup_grad_scale),
      projection_grad_scale=float(train.projection_grad_scale), compute_dtype=str(config.model.dtype),
      split_check=split_check, train_config=train)
