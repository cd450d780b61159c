"""AdamW in one pass over memory: the step's optimizer update and its finite check as one CPU kernel.

XLA:CPU runs optax's AdamW as three passes over each (V, D) array and the finite check as a fourth; adamw.cc reads g,
mu, nu and p once (at GPT-2's shape 25 ms, not 64 ms, of a 780 ms step; benchmarks/README.md). The arithmetic is
optax.adamw's after the project's clip, the scalars computed in JAX as optax does:

    g' = g · s,  s = min(1, max_norm / ‖g‖);   mu = (1 − b1)·g' + b1·mu,   nu = (1 − b2)·g'² + b2·nu
    p  = p − lr(t)·((mu · c1) / (sqrt(nu · c2) + eps) + wd·p),   c1 = 1 / (1 − b1^(t+1)), c2 = 1 / (1 − b2^(t+1))

optax's results up to float rounding (tests/fast/test_kernels_fused_adamw.py), in optax's state layout."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from tied_embed.core import optim
from tied_embed.fast.kernels import library

if TYPE_CHECKING:
  import ml_collections

  from tied_embed.core.step import TrainState

SWITCH = "TIED_EMBED_FUSED_ADAMW"  # "0" keeps optax's update
TARGET = "tied_embed_fused_adamw"
# Below this many parameter entries the kernel's call costs more than it saves; configs/default.py stays on optax's.
MIN_PARAMS = 2**19

log = logging.getLogger(__name__)


@functools.cache
def unavailable_reason() -> str | None:
  """None where the kernel runs here, else why not in a line (logged once); registers its FFI target once."""
  reason = library.switched_off(SWITCH) or library.register({TARGET: (library.ADAMW, "FusedAdamW")})
  if reason is not None:
    log.info("AdamW runs as optax's update: %s.", reason)
  return reason


@functools.cache
def _log_once(message: str) -> None:  # each compile of the step traces the update again
  log.info("%s", message)


def available() -> bool:
  """Whether the kernel runs here (the CPU backend, built, loaded, not switched off)."""
  return unavailable_reason() is None


def pays_off(params) -> bool:
  """Whether a pytree of Params (arrays or abstract arrays) is float32 and large enough for the kernel."""
  leaves = jax.tree.leaves(params)
  return all(leaf.dtype == jnp.float32 for leaf in leaves) and sum(leaf.size for leaf in leaves) >= MIN_PARAMS


def takes(params) -> bool:
  """Whether AdamW's update of these Params runs on the kernel here: it runs, and they are float32 and enough."""
  return available() and pays_off(params)


def update_arrays(grad, mu, nu, param, scalars: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """One parameter's update on the kernel, from float32 arrays of a shape and `scalars_for`'s: (new mu, new nu, new
  param, aliasing the old ones, and check: () float32, 0 if every value written is finite, else NaN)."""
  shape = jax.ShapeDtypeStruct(param.shape, jnp.float32)
  call = jax.ffi.ffi_call(TARGET, (shape, shape, shape, jax.ShapeDtypeStruct((), jnp.float32)),
                          input_output_aliases={1: 0, 2: 1, 3: 2})
  return call(grad, mu, nu, param, scalars)


def scalars_for(clip_scale, learning_rate, count, weight_decay: float) -> jax.Array:
  """The kernel's (10,) float32 scalars (clip scale, b1, 1 − b1, b2, 1 − b2, c1, c2, eps, wd, −lr) at update `count`."""
  b1, b2 = optim.ADAM_B1, optim.ADAM_B2  # what make_optimizer gives optax.adamw
  corrections = [optax.tree.bias_correction(jnp.float32(1), decay, count) for decay in (b1, b2)]
  values = [clip_scale, b1, 1 - b1, b2, 1 - b2, *corrections, optim.ADAM_EPS, weight_decay, -learning_rate]
  return jnp.stack([jnp.asarray(value, jnp.float32) for value in values])


def make_update(train: ml_collections.ConfigDict):
  """apply_update(train_state, grads): the kernel's update → its finite check (0 or NaN), or optax's → None."""
  if train.optimizer != "adamw":
    raise ValueError(f"train.optimizer={train.optimizer!r} is not allowed here: the fused update is AdamW's")
  schedule = optim.learning_rate_schedule(train)
  max_norm, weight_decay = float(train.grad_clip_norm), float(train.weight_decay)

  def apply_update(train_state: TrainState, grads: nnx.State) -> jax.Array | None:
    optimizer, model = train_state.optimizer, train_state.model
    params = nnx.as_pure(nnx.state(model, nnx.Param))
    if not takes(params):
      if available():
        _log_once(f"AdamW runs as optax's update: the model is not float32 with at least {MIN_PARAMS} parameters.")
      optimizer.update(model, grads)
      return None
    _log_once("AdamW's update and its finite check run in one pass (tied_embed/fast/kernels).")
    grads = nnx.as_pure(nnx.state(grads, nnx.Param))
    *clip_state, (adam, decay, schedule_state) = nnx.as_pure(optimizer.opt_state)  # make_optimizer's chain
    scale = optim.clip_scale(optax.tree.norm(grads), max_norm) if max_norm > 0 else 1.0
    count = optax.safe_increment(adam.count)
    scalars = scalars_for(scale, schedule(schedule_state.count), count, weight_decay)
    leaves = [jax.tree.leaves(tree) for tree in (grads, adam.mu, adam.nu, params)]
    per_param = [update_arrays(*arrays, scalars) for arrays in zip(*leaves, strict=True)]
    mu, nu, new_params, checks = (list(outputs) for outputs in zip(*per_param, strict=True))
    mu, nu, new_params = (jax.tree.unflatten(jax.tree.structure(tree), arrays)
                          for tree, arrays in ((adam.mu, mu), (adam.nu, nu), (params, new_params)))
    new_state = (*clip_state, (adam._replace(count=count, mu=mu, nu=nu), decay,
                               schedule_state._replace(count=optax.safe_increment(schedule_state.count))))
    nnx.update(model, new_params)
    nnx.update(optimizer.opt_state, nnx.state(new_state))
    optimizer.step[...] += 1
    return sum(checks)

  return apply_update
