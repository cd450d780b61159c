"""The Optax optimizer a config asks for: optimizer, warmup + cosine schedule, clipping, weight decay."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import optax

if TYPE_CHECKING:  # only for the annotations: the story imports no config machinery
  import ml_collections

OPTIMIZERS = ("adamw", "adam", "sgd")
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-8  # optax's defaults, named: the moments' decays and the denominator's eps


def learning_rate_schedule(train: ml_collections.ConfigDict) -> optax.Schedule:
  """Linear warmup from 0 to `train.learning_rate` over `warmup_steps`, then cosine decay to 0 at `num_steps`."""
  warmup_steps = max(int(train.warmup_steps), 0)
  # optax wants the decay to outlast the warmup; a run shorter than its warmup simply ends mid-ramp.
  decay_steps = max(int(train.num_steps), warmup_steps + 1)
  return optax.warmup_cosine_decay_schedule(init_value=0.0, peak_value=float(train.learning_rate),
                                            warmup_steps=warmup_steps, decay_steps=decay_steps, end_value=0.0)


def clip_scale(norm: jax.Array, max_norm: float) -> jax.Array:
  """The clip's factor for updates of global norm `norm`: min(1, max_norm / norm), exactly 1 below max_norm."""
  return jnp.where(norm < max_norm, 1.0, max_norm / norm)


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformation:
  """optax.clip_by_global_norm as one multiply by min(1, max_norm / ‖updates‖).

  optax's (g / ‖g‖) · max_norm: XLA:CPU stores that (V, D) division before Adam's two moments read it, where a
  multiply by one scalar fuses into both. Unclipped updates are exactly g; clipped ones differ by rounding."""

  def update_fn(updates, state, params=None):
    scale = clip_scale(optax.tree.norm(updates), max_norm)
    return jax.tree.map(lambda g: g * scale.astype(g.dtype), updates), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def make_optimizer(train: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """clip_by_global_norm (if `grad_clip_norm` > 0) followed by the optimizer `train.optimizer`.

  adamw decays weights decoupled from the gradient; for adam and sgd a positive `weight_decay` adds the classic L2
  term `weight_decay * params` to the gradient instead. A name not in `OPTIMIZERS` raises ValueError."""
  schedule = learning_rate_schedule(train)
  weight_decay = float(train.weight_decay)
  name = train.optimizer
  if name == "adamw":
    core = [optax.adamw(schedule, b1=ADAM_B1, b2=ADAM_B2, eps=ADAM_EPS, weight_decay=weight_decay)]
  elif name in ("adam", "sgd"):
    decay = [optax.add_decayed_weights(weight_decay)] if weight_decay > 0 else []
    adam = optax.adam(schedule, b1=ADAM_B1, b2=ADAM_B2, eps=ADAM_EPS)
    core = decay + [adam if name == "adam" else optax.sgd(schedule)]
  else:
    raise ValueError(f"optimizer {name!r} is not one of {OPTIMIZERS}")
  clip = [clip_by_global_norm(float(train.grad_clip_norm))] if train.grad_clip_norm > 0 else []
  return optax.chain(*clip, *core)
