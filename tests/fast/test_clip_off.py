"""train.grad_clip_norm = 0 turns clipping off on every update path: optax's AdamW, Adam and SGD (core/optim.py, the
update `run_step.optimizer_update` applies) and the fused AdamW update (fast/kernels/fused_adamw.py), whose Python
side is checked with the kernel's arithmetic stood in where the kernel is not built, and with the kernel where it is.
A gradient of norm ~100 shows any clip: a clip at 0 writes no update, one at 1 a 100 times smaller one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from tied_embed.core import optim
from tied_embed.core.model import build_model
from tied_embed.fast.kernels import fused_adamw
from tied_embed.train import run_step

B1, B2, EPS, LR, STEPS, WD = 0.9, 0.999, 1e-8, 0.1, 10, 0.01


def _train(optimizer: str, weight_decay: float = 0.0) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({"optimizer": optimizer, "learning_rate": LR, "warmup_steps": 0,
                                    "num_steps": STEPS, "weight_decay": weight_decay, "grad_clip_norm": 0.0})


def _rate(t: int) -> float:
  """The cosine schedule from LR, no warmup, at update t (from 0), by hand."""
  return LR * 0.5 * (1 + np.cos(np.pi * t / STEPS))


def _grads(shape, seed):
  return 60.0 * np.random.default_rng(seed).standard_normal(shape)  # global norm ~ 60·sqrt(size)


def _numpy_updates(optimizer: str, param: np.ndarray, grads: list[np.ndarray], weight_decay: float) -> np.ndarray:
  """The parameter after the updates, unclipped, from the formulas in float64."""
  param, mu, nu = param.astype(np.float64), np.zeros(param.shape), np.zeros(param.shape)
  for t, g in enumerate(grads):
    if optimizer == "sgd":
      param = param - _rate(t) * g
      continue
    if optimizer == "adam" and weight_decay:
      g = g + weight_decay * param
    mu, nu = (1 - B1) * g + B1 * mu, (1 - B2) * g**2 + B2 * nu
    step = (mu / (1 - B1 ** (t + 1))) / (np.sqrt(nu / (1 - B2 ** (t + 1))) + EPS)
    if optimizer == "adamw":
      step = step + weight_decay * param
    param = param - _rate(t) * step
  return param


@pytest.mark.parametrize("optimizer", ["adamw", "adam", "sgd"])
def test_clip_0_leaves_optaxs_updates_unclipped(optimizer):
  tx = optim.make_optimizer(_train(optimizer, WD if optimizer != "sgd" else 0.0))
  param = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
  grads = [_grads(param.shape, seed) for seed in (1, 2, 3)]  # norms differ: a clip would change Adam's steps too
  state, value = tx.init(jnp.asarray(param)), jnp.asarray(param)
  for g in grads:
    updates, state = tx.update(jnp.asarray(g, jnp.float32), state, value)
    value = value + updates
  want = _numpy_updates(optimizer, param, grads, WD if optimizer != "sgd" else 0.0)
  # float32 steps: rounding ~1e-6 of a step; a clip would move each by ~lr
  np.testing.assert_allclose(np.asarray(value, np.float64), want, rtol=1e-4, atol=1e-5)


def _kernel_arithmetic(grad, mu, nu, param, scalars):
  """The kernel's formulas (fused_adamw's docstring) in JAX: the stand-in where the kernel is not built."""
  scale, b1, one_minus_b1, b2, one_minus_b2, c1, c2, eps, weight_decay, neg_lr = scalars
  grad = grad * scale
  mu = one_minus_b1 * grad + b1 * mu
  nu = one_minus_b2 * grad**2 + b2 * nu
  return mu, nu, param + neg_lr * ((mu * c1) / (jnp.sqrt(nu * c2) + eps) + weight_decay * param), jnp.float32(0)


@pytest.mark.parametrize("kernel", [False, pytest.param(True, marks=pytest.mark.skipif(
    not fused_adamw.available(), reason=f"{fused_adamw.unavailable_reason()}"))], ids=["stand-in", "kernel"])
def test_clip_0_leaves_the_fused_adamw_update_unclipped(kernel, monkeypatch):
  train = _train("adamw", WD)
  config = ml_collections.ConfigDict({"seed": 0, "data": {"context_length": 1},
                                      "model": {"vocab_size": 6, "d_model": 4, "tied": True}})
  state = run_step.RunState(build_model(config), optim.make_optimizer(train))
  monkeypatch.setattr(fused_adamw, "pays_off", lambda params: True)  # a small table, on the fused path all the same
  if not kernel:
    monkeypatch.setattr(fused_adamw, "available", lambda: True)
    monkeypatch.setattr(fused_adamw, "update_arrays", _kernel_arithmetic)
  update = fused_adamw.make_update(train)
  param = np.asarray(state.model.embedding[...])
  grads = [_grads(param.shape, seed) for seed in (1, 2)]
  for g in grads:
    grad_state = jax.tree.map(lambda _, g=g: jnp.asarray(g, jnp.float32), nnx.state(state.model, nnx.Param))
    assert update(state, grad_state) is not None  # the fused path ran, with its check
  want = _numpy_updates("adamw", param, grads, WD)
  np.testing.assert_allclose(np.asarray(state.model.embedding[...], np.float64), want, rtol=1e-4, atol=1e-5)
  assert int(state.optimizer.step[...]) == 2
