"""The run's bookkeeping around the story's step (tied_embed/train/run_step.py): each row's path norms, the tracked
rows' directions, the train-loss window, the first non-finite step and the finite check, against hand values."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from helpers import hand_path_gradients, hand_tied_loss, model_with_tables, small_problem

from tied_embed import TiedEmbed
from tied_embed.core import step as step_lib
from tied_embed.train import run_step

VOCAB = 10  # small_problem's table: 10 rows


def _sgd_state(table, learning_rate=1.0):
  return nnx.split(run_step.RunState(model_with_tables(table), optax.sgd(learning_rate)))


def test_the_step_records_each_rows_path_norms_and_the_tracked_rows_directions():
  table, ids, next_ids = small_problem(1)
  graphdef, state = _sgd_state(table, learning_rate=0.0)
  step = jax.jit(step_lib.make_step_function(graphdef, after_gradients=run_step.bookkeeping()), static_argnums=3)
  state, _, _ = step(state, jnp.asarray(ids), jnp.asarray(next_ids), False)
  state, _, _ = step(state, jnp.asarray(ids), jnp.asarray(next_ids), False)  # learning rate 0: the same gradients
  lookup, projection = hand_path_gradients(table, table, ids, next_ids)
  train_state = nnx.merge(graphdef, state)
  np.testing.assert_allclose(train_state.lookup_total[...], 2 * np.linalg.norm(lookup, axis=1), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(train_state.projection_total[...], 2 * np.linalg.norm(projection, axis=1), rtol=1e-5,
                             atol=1e-7)
  tracked = min(run_step.TRACKED_ROWS, VOCAB)  # every row of a 10-row table, 0 to V - 1
  np.testing.assert_array_equal(train_state.tracked_rows[...], np.arange(tracked))
  np.testing.assert_allclose(train_state.tracked_lookup[...], 2 * lookup[:tracked], rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(train_state.tracked_projection[...], 2 * projection[:tracked], rtol=1e-5, atol=1e-7)


def test_the_log_steps_train_loss_is_the_mean_since_the_previous_log_step():
  table, ids, next_ids = small_problem(2)
  graphdef, state = _sgd_state(table, learning_rate=0.5)
  step = jax.jit(step_lib.make_step_function(graphdef, after_gradients=run_step.bookkeeping()), static_argnums=3)
  losses, tables = [], [table.astype(np.float64)]
  for with_stats in (False, False, True, True):
    state, metrics, _ = step(state, jnp.asarray(ids), jnp.asarray(next_ids), with_stats)
    losses.append(hand_tied_loss(tables[-1], ids, next_ids))
    np.testing.assert_allclose(float(metrics["loss"]), losses[-1], rtol=1e-5)
    tables.append(np.asarray(nnx.merge(graphdef, state).model.embedding[...], np.float64))
    if len(losses) == 3:
      np.testing.assert_allclose(float(metrics["train_loss"]), np.mean(losses), rtol=1e-5)
  np.testing.assert_allclose(float(metrics["train_loss"]), losses[-1], rtol=1e-5)  # the window holds step 4 alone
  train_state = nnx.merge(graphdef, state)
  assert int(train_state.train_loss_count[...]) == 0 and float(train_state.train_loss_sum[...]) == 0.0
  assert int(train_state.first_nonfinite_step[...]) == 0


def test_the_first_nonfinite_step_is_the_step_count_after_the_first_bad_update():
  table, ids, next_ids = small_problem(3)
  graphdef, state = _sgd_state(table)
  step = jax.jit(step_lib.make_step_function(graphdef, after_gradients=run_step.bookkeeping()), static_argnums=3)
  state, _, _ = step(state, jnp.asarray(ids), jnp.asarray(next_ids), False)
  train_state = nnx.merge(graphdef, state)
  train_state.model.embedding[...] = train_state.model.embedding[...].at[VOCAB - 1, 0].set(jnp.inf)
  state = nnx.state(train_state)
  for _ in range(2):  # the second bad step keeps the first one's number
    state, _, _ = step(state, jnp.asarray(ids), jnp.asarray(next_ids), False)
  assert int(nnx.merge(graphdef, state).first_nonfinite_step[...]) == 2


def test_all_finite_finds_one_bad_entry_in_any_array_and_passes_values_near_the_float32_limit():
  big = jnp.full((3,), 3e38, jnp.float32)  # their sum overflows: the exact check decides
  assert bool(run_step.all_finite(jnp.float32(1.0), {"a": big, "b": big}))
  assert not bool(run_step.all_finite(jnp.float32(jnp.nan), {"a": big}))
  assert not bool(run_step.all_finite(jnp.float32(1.0), {"a": big, "b": big.at[2].set(jnp.inf)}))
  assert not bool(run_step.all_finite(jnp.float32(1.0), {"a": jnp.ones(4), "b": jnp.zeros(2).at[1].set(jnp.nan)}))
  assert bool(run_step.all_finite(jnp.float32(1.0), {"a": jnp.ones(4), "n": jnp.arange(3)}))


def test_the_tracked_rows_are_the_first_rows_of_a_table_smaller_than_their_count():
  model = TiedEmbed(5, 3, rngs=nnx.Rngs(0))
  train_state = run_step.RunState(model, optax.sgd(0.1))
  np.testing.assert_array_equal(train_state.tracked_rows[...], np.arange(5))
  assert train_state.tracked_lookup[...].shape == (5, 3)


def test_a_step_without_stats_reports_the_loss_alone_and_keeps_the_window():
  table, ids, next_ids = small_problem(4)
  graphdef, state = _sgd_state(table, learning_rate=0.0)
  step_fn = step_lib.make_step_function(graphdef, after_gradients=run_step.bookkeeping())
  state, metrics, _ = step_fn(state, jnp.asarray(ids), jnp.asarray(next_ids))
  assert set(metrics) == {"loss"}
  assert int(nnx.merge(graphdef, state).train_loss_count[...]) == 1


@pytest.mark.parametrize("written", [1.0, float("nan")])
def test_an_update_that_checks_what_it_wrote_decides_the_first_nonfinite_step(written):
  table, ids, next_ids = small_problem(5)
  graphdef, state = _sgd_state(table, learning_rate=0.1)

  def checked_update(train_state, grads):
    run_step.optimizer_update(train_state, grads)
    return jnp.float32(written)  # what a fused update reports: finite exactly when all it wrote is

  step_fn = step_lib.make_step_function(graphdef, after_gradients=run_step.bookkeeping(checked_update))
  step = jax.jit(step_fn, static_argnums=3)
  state, _, _ = step(state, jnp.asarray(ids), jnp.asarray(next_ids), False)
  assert int(nnx.merge(graphdef, state).first_nonfinite_step[...]) == (0 if written == 1.0 else 1)


@pytest.mark.parametrize(("mesh_shape", "xla_dots"), [(None, False), ((2, 2), True)])
def test_the_chunked_loss_keeps_the_kernel_on_one_device_and_runs_as_xlas_dots_on_a_mesh(caplog, mesh_shape, xla_dots):
  """`choose.paths_function`'s `mkl_kernel`: true for a state on one device (no shardings), false on a mesh of 4
  (an abstract one: the step is only built, never run), which says so in one line."""
  table, _, _ = small_problem(6)
  graphdef, state = _sgd_state(table)
  shardings = None
  if mesh_shape is not None:
    mesh = jax.sharding.AbstractMesh(mesh_shape, ("data", "model"))
    shardings = jax.tree.map(lambda _: jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()), state)
  with caplog.at_level(logging.INFO, logger="tied_embed.fast.choose"):
    run_step.make_run_step(graphdef, 4, shardings)
  line = "The chunked loss's matmuls run as XLA's dots: the oneMKL kernel runs on one device only."
  assert (line in caplog.messages) == xla_dots


def test_make_run_step_hands_the_step_its_scales_and_split_check(monkeypatch):
  asked = {}

  def make_step_function(graphdef, paths_fn, **kwargs):
    asked.update(kwargs, graphdef=graphdef)
    return lambda *args: None

  monkeypatch.setattr(step_lib, "make_step_function", make_step_function)
  table, _, _ = small_problem(7)
  graphdef, _ = _sgd_state(table)
  run_step.make_run_step(graphdef, 0, lookup_grad_scale=0.25, projection_grad_scale=2.0, split_check=6)
  assert asked["graphdef"] is graphdef
  assert (asked["lookup_grad_scale"], asked["projection_grad_scale"], asked["split_check_tokens"]) == (0.25, 2.0, 6)


def test_train_step_for_hands_make_run_step_the_configs_settings(monkeypatch):
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  config.train.update(lookup_grad_scale=0.25, projection_grad_scale=2.0)
  config.loss.chunk_size, config.model.dtype = 3, "bfloat16"
  asked = []
  monkeypatch.setattr(run_step, "make_run_step", lambda *args, **kwargs: asked.append((args, kwargs)))
  run_step.train_step_for(config, "graphdef", {})
  assert asked == [(("graphdef", 3, {}), {"lookup_grad_scale": 0.25, "projection_grad_scale": 2.0,
                                          "compute_dtype": "bfloat16", "split_check": None,
                                          "train_config": config.train})]


def test_the_provenance_totals_are_annotated_to_split_along_v():
  """On a mesh each (V,) total is split along V by its annotation, as the vocabulary Params are; the tracked rows'
  arrays (K of them) and the scalars carry none."""
  train_state = run_step.RunState(TiedEmbed(5, 3, rngs=nnx.Rngs(0)), optax.sgd(0.1))
  annotations = {path[0]: variable.get_metadata().get("out_sharding")
                 for path, variable in nnx.to_flat_state(nnx.state(train_state, run_step.ProvenanceTotal))}
  assert annotations == {"lookup_total": ("vocab",), "projection_total": ("vocab",)}
  others = nnx.state(train_state, nnx.Any(run_step.PathDirections, run_step.RunningMetric))
  assert all(variable.get_metadata().get("out_sharding") is None for _, variable in nnx.to_flat_state(others))
