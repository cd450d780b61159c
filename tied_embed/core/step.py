"""The train state and the step: path gradients, the Params' gradients, the update, the split check.

The jitted step takes and returns a `TrainState`'s `nnx.State` (the loop passes arrays only; the old state is donated).
It is the one step every run takes: its hook, `after_gradients`, is where a run adds what it keeps (train/run_step.py:
the provenance totals, the train-loss window, the non-finite marker, and the update on a fused kernel)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from tied_embed.core import loss as loss_lib
from tied_embed.core import paths as paths_lib
from tied_embed.core.model import LanguageModel

Metrics = dict[str, jax.Array]
TrainStep = Callable[..., tuple[nnx.State, Metrics]]
StepFunction = Callable[..., tuple[nnx.State, Metrics, nnx.State]]
# after_gradients(train_state, paths, grads, metrics, with_stats) → None: applies `grads` to `train_state` (and may
# record what a run keeps, adding to `metrics`).
AfterGradients = Callable[..., None]
# paths_fn(model, ids, next_ids (B,) or (B, L)) → path gradients: add_lookup, lookup_row_norms, lookup_at, split_stats.
PathsFn = Callable[[LanguageModel, jax.Array, jax.Array], paths_lib.PathGradients]


class TrainState(nnx.Module):
  """The model and its optimizer (an `nnx.Optimizer` over its Params, whose `step` counts updates)."""

  def __init__(self, model: LanguageModel, tx: optax.GradientTransformation):
    self.model = model
    self.optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)


def split_error(model: LanguageModel, grads: nnx.State, ids: jax.Array, next_ids: jax.Array) -> jax.Array:
  """‖g − Σ paths‖ / ‖g‖ over all Params, a scalar: `grads` (the paths' unscaled gradients) against g = `nnx.grad` of
  `loss_lib.model_loss`, which differentiates `model(ids)` itself, so a speed path's bug cannot cancel out."""
  direct = nnx.grad(loss_lib.model_loss)(model, ids, next_ids)
  residual = jax.tree.map(lambda d, g: jnp.sum(jnp.square(d - g)), direct, grads)
  direct_sq = jax.tree.map(lambda d: jnp.sum(jnp.square(d)), direct)
  norm = lambda tree: jnp.sqrt(sum(jax.tree.leaves(tree)))  # noqa: E731
  return norm(residual) / jnp.maximum(norm(direct_sq), jnp.finfo(jnp.float32).tiny)


def gradients(model: LanguageModel, ids: jax.Array, next_ids: jax.Array,
              paths_fn: PathsFn = paths_lib.path_gradients, *,
              lookup_grad_scale: float = 1.0, projection_grad_scale: float = 1.0,
              split_check_tokens: int | None = None,
              with_stats: bool = False) -> tuple[paths_lib.PathGradients, nnx.State, Metrics]:
  """The step up to the update: ids, next_ids (B,) pairs or (B, L) windows → (path gradients, grads, metrics).

  `paths_fn` gives the path gradients (core/paths.py or a speed path), which the model routes into its Params'
  gradients, weighted by the two scales (tied: they add up in the one table; clipping sees that sum). metrics:
  {'loss'}; with `with_stats` also the split statistics, 'split_error', 'hidden_norm' (the other Params' gradient
  norm), the model's `hidden_stats` as 'train/hidden_<name>' and 'applied_norm' (the weighted gradient's norm). The
  split check runs on the whole batch or, with `split_check_tokens` = S < B, on the first S pairs (or windows)."""
  paths = paths_fn(model, ids, next_ids)
  grads = paths_lib.param_gradients(model, paths, lookup_grad_scale, projection_grad_scale)
  metrics = {"loss": paths.loss}
  if not with_stats:
    return paths, grads, metrics
  metrics.update(paths.split_stats())
  if split_check_tokens is None or split_check_tokens >= ids.shape[0]:
    unscaled = grads if lookup_grad_scale == projection_grad_scale == 1.0 else paths_lib.param_gradients(model, paths)
    metrics["split_error"] = split_error(model, unscaled, ids, next_ids)
  else:
    ids, next_ids = ids[:split_check_tokens], next_ids[:split_check_tokens]
    check = paths_lib.param_gradients(model, paths_fn(model, ids, next_ids))
    metrics["split_error"] = split_error(model, check, ids, next_ids)
  if paths.hidden:
    metrics["hidden_norm"] = optax.tree.norm(paths.hidden)
  metrics.update({f"train/hidden_{name}": value for name, value in model.hidden_stats().items()})
  metrics["applied_norm"] = optax.tree.norm(grads)
  return paths, grads, metrics


def apply_gradients(train_state: TrainState, paths: paths_lib.PathGradients, grads: nnx.State, metrics: Metrics,
                    with_stats: bool) -> None:
  """The plain hook: the optimizer's update of the Params by `grads` (optax, through nnx.Optimizer); records nothing."""
  del paths, metrics, with_stats
  train_state.optimizer.update(train_state.model, grads)


def make_step_function(graphdef: nnx.GraphDef, paths_fn: PathsFn = paths_lib.path_gradients, *,
                       after_gradients: AfterGradients = apply_gradients, **options) -> StepFunction:
  """step(state, ids, next_ids (B,) pairs or (B, L) windows, with_stats=False) → (new state, metrics, grads), to be
  jitted: `gradients(..., **options)`, then `after_gradients` (the update, and whatever a run records)."""

  def step(state: nnx.State, ids: jax.Array, next_ids: jax.Array, with_stats: bool = False):
    train_state = nnx.merge(graphdef, state)
    train_state.model.train_at(train_state.optimizer.step[...])  # dropout's masks from (seed, step), if it has any
    paths, grads, metrics = gradients(train_state.model, ids, next_ids, paths_fn, with_stats=with_stats, **options)
    after_gradients(train_state, paths, grads, metrics, with_stats)
    return nnx.state(train_state), metrics, grads

  return step


def make_train_step(graphdef: nnx.GraphDef, paths_fn: PathsFn = paths_lib.path_gradients, *, state_shardings=None,
                    compiler_options: dict | None = None, **step_options) -> TrainStep:
  """jit(state, ids, next_ids, *, with_stats=False) → (new state on `state_shardings`, metrics), donating `state`."""
  step_fn = make_step_function(graphdef, paths_fn, **step_options)

  def step(state: nnx.State, ids: jax.Array, next_ids: jax.Array, with_stats: bool = False):
    new_state, metrics, _ = step_fn(state, ids, next_ids, with_stats)
    return new_state, metrics

  out_shardings = (state_shardings, None) if state_shardings is not None else None
  return jax.jit(step, donate_argnums=0, static_argnames="with_stats", out_shardings=out_shardings,
                 compiler_options=compiler_options)
