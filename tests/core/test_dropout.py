"""The transformer's dropout: off outside a train step, its masks from (seed, step) alone, the two path gradients
still the whole gradient with the masks on, and a rate that does nothing without the transformer refused."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from tied_embed.core import optim
from tied_embed.core import step as step_lib
from tied_embed.core.model import build_model
from tied_embed.train import config as config_lib
from tied_embed.util import UsageError

VOCAB, D_MODEL, LENGTH = 24, 8, 6


def _config(dropout: float, seed: int = 0) -> ml_collections.ConfigDict:
  from configs import default  # noqa: PLC0415

  config = default.get_config()
  config.seed, config.data.context_length = seed, LENGTH
  config.model.update(vocab_size=VOCAB, d_model=D_MODEL, context="transformer", layers=2, heads=2, dropout=dropout)
  config.train.update(learning_rate=0.01, warmup_steps=0)
  return config


def _windows():
  rng = np.random.default_rng(0)
  return (jnp.asarray(rng.integers(0, VOCAB, (4, LENGTH)), jnp.int32),
          jnp.asarray(rng.integers(0, VOCAB, (4, LENGTH)), jnp.int32))


def _step_loss(dropout: float, at_step: int, seed: int = 0) -> tuple[float, float]:
  """(loss, split_error) of one jitted train step at optimizer step `at_step`, from the same initial Params."""
  config = _config(dropout, seed)
  graphdef, state = nnx.split(step_lib.TrainState(build_model(config), optim.make_optimizer(config.train)))
  state["optimizer"]["step"][...] = jnp.asarray(at_step, state["optimizer"]["step"][...].dtype)
  _, metrics = step_lib.make_train_step(graphdef)(state, *_windows(), with_stats=True)
  return float(metrics["loss"]), float(metrics["split_error"])


def test_dropout_draws_nothing_outside_a_train_step():
  ids, _ = _windows()
  with_dropout, without = build_model(_config(0.5)), build_model(_config(0.0))
  for a, b in zip(jax.tree.leaves(nnx.state(with_dropout, nnx.Param)), jax.tree.leaves(nnx.state(without, nnx.Param)),
                  strict=True):
    np.testing.assert_array_equal(a, b)  # the rate draws no Params: the same initial model
  np.testing.assert_array_equal(with_dropout(ids), without(ids))  # evaluation and inspection: no masks


def test_a_train_steps_masks_follow_seed_and_step_and_keep_the_gradient_whole():
  plain, _ = _step_loss(0.0, at_step=3)
  loss, split_error = _step_loss(0.5, at_step=3)
  assert loss != plain  # the masks act in the step
  assert _step_loss(0.5, at_step=3) == (loss, split_error)  # the same (seed, step): the same masks, bit for bit
  assert _step_loss(0.5, at_step=4)[0] != loss and _step_loss(0.5, at_step=3, seed=1)[0] != loss
  assert split_error < 1e-5  # nnx.grad of the plain loss sees the same masks as the two paths


def test_a_mask_zeroes_about_the_rate_and_scales_the_rest():
  model = build_model(_config(0.25))
  model.train_at(jnp.int32(7))
  dropped = np.asarray(model._drop(jnp.ones((200, 100)), 0), np.float64)
  assert set(np.unique(dropped)) == {0.0, float(np.float32(1 / 0.75))}  # kept entries scaled by 1 / (1 − rate)
  assert abs((dropped == 0).mean() - 0.25) < 0.01  # 20,000 draws: the share within ~4 standard deviations

  def mask(seed: int, step: int, index: int = 0) -> np.ndarray:
    model = build_model(_config(0.25, seed))
    model.train_at(jnp.int32(step))
    return np.asarray(model._drop(jnp.ones((50, 40)), index)) == 0

  np.testing.assert_array_equal(mask(0, 7), mask(0, 7))  # (seed, step) alone decide it, from a fresh model
  for other in (mask(1, 7), mask(0, 8), mask(0, 7, index=1)):  # another seed, step or place: another mask
    assert (other != mask(0, 7)).mean() > 0.2


@pytest.mark.parametrize(("context", "value", "allowed"), [
    ("transformer", 1.0, "a finite number in [0, 1)"),
    ("mlp", 0.1, "0 (off) unless model.context='transformer'"),
])
def test_a_rate_outside_0_to_1_or_without_the_transformer_is_refused(context, value, allowed):
  config = _config(value)
  config.model.context = context
  if context != "transformer":
    config.model.heads = 4  # the transformer's other fields at their defaults: the rate is the one left on
  with pytest.raises(UsageError) as refused:
    config_lib.validate(config, num_devices=1, memory_bytes=2**50)
  assert str(refused.value) == f"model.dropout={value} is not allowed: expected {allowed}"
