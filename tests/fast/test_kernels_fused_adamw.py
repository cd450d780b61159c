"""AdamW's one-pass kernel: optax's arithmetic (NumPy float64), its finite check, and the step it runs in."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tied_embed.core import optim
from tied_embed.core.model import build_model
from tied_embed.fast.kernels import fused_adamw
from tied_embed.train import run_step

pytestmark = pytest.mark.skipif(not fused_adamw.available(), reason=f"{fused_adamw.unavailable_reason()}")

B1, B2, EPS = 0.9, 0.999, 1e-8  # optax.adamw's defaults, written out


def _arrays(size: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  grad, mu, param = (rng.standard_normal(size).astype(np.float32) for _ in range(3))
  nu = np.square(rng.standard_normal(size)).astype(np.float32)
  return grad, mu, nu, param


def _numpy_adamw(grad, mu, nu, param, scalars):
  """AdamW's update from the formulas (optax.scale_by_adam, add_decayed_weights, scale_by_learning_rate), float64.

  scalars: the kernel's, as float32 gives them (its bias corrections carry float32's rounding of b^t; the
  test of `scalars_for` checks them against the formulas).
  """
  scale, b1, one_minus_b1, b2, one_minus_b2, c1, c2, eps, weight_decay, neg_lr = np.asarray(scalars, np.float64)
  grad, mu, nu, param = (np.asarray(a, np.float64) for a in (grad, mu, nu, param))
  grad = grad * scale
  mu = one_minus_b1 * grad + b1 * mu
  nu = one_minus_b2 * grad**2 + b2 * nu
  return mu, nu, param + neg_lr * ((mu * c1) / (np.sqrt(nu * c2) + eps) + weight_decay * param)


def _scalars(*, scale, learning_rate, count, weight_decay):
  return fused_adamw.scalars_for(scale, learning_rate, jnp.int32(count), weight_decay)


def _kernel(grad, mu, nu, param, scalars):
  return jax.jit(fused_adamw.update_arrays)(*(jnp.asarray(a) for a in (grad, mu, nu, param)), scalars)


@pytest.mark.parametrize("count", [1, 3, 1000])
def test_the_scalars_are_adamws(count):
  got = np.asarray(_scalars(scale=0.5, learning_rate=0.01, count=count, weight_decay=0.1), np.float64)
  want = [0.5, B1, 1 - B1, B2, 1 - B2, 1 / (1 - B1**count), 1 / (1 - B2**count), EPS, 0.1, -0.01]
  # float32's b^t is off by up to an ulp, which 1 − b^t near 0 magnifies (count 1: 1 − 0.999 = 0.001)
  np.testing.assert_allclose(got, want, rtol=1e-4)
  np.testing.assert_allclose(got[[0, 1, 2, 3, 4, 7, 8, 9]], np.asarray(want)[[0, 1, 2, 3, 4, 7, 8, 9]], rtol=1e-7)


# 7 elements: the scalar tail alone; 3·2^16 + 5: several parts, each of whole registers, and a tail.
@pytest.mark.parametrize("size", [7, 3 * 2**16 + 5])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_the_kernel_is_adamws_arithmetic(size, weight_decay):
  arrays = _arrays(size)
  scalars = _scalars(scale=0.5, learning_rate=0.01, count=3, weight_decay=weight_decay)
  *got, check = _kernel(*arrays, scalars)
  for name, value, want in zip(("mu", "nu", "param"), got, _numpy_adamw(*arrays, scalars), strict=True):
    # The inputs are O(1): a few float32 roundings at 1 bound the error where p and its step nearly cancel.
    np.testing.assert_allclose(np.asarray(value), want, rtol=1e-6, atol=4e-7, err_msg=name)
  assert float(check) == 0.0


@pytest.mark.parametrize(
    "array, index, value",
    [("grad", 40, np.nan), ("mu", 3 * 2**16 + 2, np.inf), ("param", 0, -np.inf), ("grad", 17, 1e20)],
    ids=["nan-gradient", "inf-moment-in-the-tail", "inf-param", "second-moment-overflows"],
)
def test_the_check_is_nan_exactly_when_a_value_written_is_not_finite(array, index, value):
  arrays = dict(zip(("grad", "mu", "nu", "param"), _arrays(3 * 2**16 + 5), strict=True))
  scalars = _scalars(scale=1.0, learning_rate=0.01, count=1, weight_decay=0.0)
  *_, check = _kernel(*arrays.values(), scalars)
  assert float(check) == 0.0
  arrays[array][index] = value  # 1e20: g² overflows float32, nu becomes inf while the param stays finite
  *written, check = _kernel(*arrays.values(), scalars)
  assert not all(np.isfinite(np.asarray(a)).all() for a in written)
  assert np.isnan(float(check))


def test_values_near_float32s_limit_are_finite_for_the_check():
  grad, mu, nu, param = _arrays(1000)
  param[:] = 3e38  # a sum of |p| would overflow; the check's x - x does not
  scalars = _scalars(scale=1.0, learning_rate=0.0, count=1, weight_decay=0.0)
  *written, check = _kernel(grad, mu, nu, param, scalars)
  assert np.isfinite(np.asarray(written[2])).all()
  assert float(check) == 0.0


def _state(hidden="none", vocab_size=2048, d_model=256, **train_fields):
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  config.model.hidden = hidden
  config.model.vocab_size, config.model.d_model = vocab_size, d_model  # 2^19 entries: the kernel's threshold
  config.train.update(train_fields)
  return config, nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))


def _batch(vocab_size: int):
  ids = jnp.asarray(np.random.default_rng(0).integers(0, vocab_size, 64), jnp.int32)
  return ids, jnp.roll(ids, 1)


def _run(step, state, ids, next_ids, calls=(False, True, False)):
  state = jax.tree.map(jnp.copy, state)
  metrics = []
  for with_stats in calls:
    state, step_metrics = step(state, ids, next_ids, with_stats=with_stats)
    metrics.append(step_metrics)
  return state, metrics


# grad_clip_norm 0.01 clips every step; weight decay on: every scalar of the update is exercised.
@pytest.mark.parametrize("hidden", ["none", "linear"])
def test_the_fused_step_is_the_optax_step(hidden):
  config, (graphdef, state) = _state(hidden, grad_clip_norm=0.01, weight_decay=0.1)
  chunk_size, (ids, next_ids) = int(config.loss.chunk_size), _batch(int(config.model.vocab_size))
  optax_step = run_step.make_run_step(graphdef, chunk_size)
  fused_step = run_step.make_run_step(graphdef, chunk_size, train_config=config.train)
  assert fused_adamw.TARGET in fused_step.lower(state, ids, next_ids).as_text()
  assert fused_adamw.TARGET not in optax_step.lower(state, ids, next_ids).as_text()
  want, want_metrics = _run(optax_step, state, ids, next_ids)
  got, got_metrics = _run(fused_step, state, ids, next_ids)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for (path, value), (_, other) in zip(jax.tree.leaves_with_path(want), jax.tree.leaves_with_path(got), strict=True):
    if jnp.issubdtype(value.dtype, jnp.floating):  # the same operations, fused differently: a few roundings apart
      scale = float(np.max(np.abs(value))) if value.size else 0.0
      np.testing.assert_allclose(other, value, rtol=1e-5, atol=1e-6 * scale, err_msg=jax.tree_util.keystr(path))
    else:  # the counts: optax's, exactly
      np.testing.assert_array_equal(other, value, err_msg=jax.tree_util.keystr(path))
  for want_step, got_step in zip(want_metrics, got_metrics, strict=True):
    for name, value in want_step.items():
      np.testing.assert_allclose(got_step[name], value, rtol=1e-5, atol=1e-7, err_msg=name)


def test_the_fused_step_records_a_non_finite_optimizer_state():
  config, (graphdef, state) = _state()
  ids, next_ids = _batch(int(config.model.vocab_size))
  nu = state["optimizer"]["opt_state"][1][0].nu["embedding"]
  nu[...] = nu[...].at[5, 7].set(jnp.inf)  # the params and the loss stay finite: only the check of nu sees it
  for train_config in (None, config.train):  # optax's update with core's check, then the fused one's
    step = run_step.make_run_step(graphdef, int(config.loss.chunk_size), train_config=train_config)
    new_state, _ = step(jax.tree.map(jnp.copy, state), ids, next_ids)
    assert np.isfinite(np.asarray(new_state["model"]["embedding"][...])).all()
    assert int(new_state["first_nonfinite_step"][...]) == 1


@pytest.mark.parametrize("case", ["small model", "adam", "kernel off"])
def test_elsewhere_the_step_is_optaxs_bit_for_bit(case, monkeypatch):
  fields = {"optimizer": "adam"} if case == "adam" else {}
  sizes = {"vocab_size": 64, "d_model": 16} if case == "small model" else {}
  config, (graphdef, state) = _state(**sizes, **fields)
  if case == "kernel off":
    monkeypatch.setattr(fused_adamw, "available", lambda: False)
  chunk_size, (ids, next_ids) = int(config.loss.chunk_size), _batch(int(config.model.vocab_size))
  step = run_step.make_run_step(graphdef, chunk_size, train_config=config.train)
  assert fused_adamw.TARGET not in step.lower(state, ids, next_ids).as_text()
  want, _ = _run(run_step.make_run_step(graphdef, chunk_size), state, ids, next_ids, calls=(False,))
  got, _ = _run(step, state, ids, next_ids, calls=(False,))
  for (path, value), (_, other) in zip(jax.tree.leaves_with_path(want), jax.tree.leaves_with_path(got), strict=True):
    np.testing.assert_array_equal(other, value, err_msg=jax.tree_util.keystr(path))
