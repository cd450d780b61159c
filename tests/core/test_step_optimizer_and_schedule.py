"""The story's arithmetic with non-default arguments, against hand formulas: the step with path scales ≠ 1, one
optimizer step with weight decay and clipping, the learning-rate schedule at chosen steps.

Each test here fails on a small plausible bug (a dropped factor, a flipped comparison, a transform chained in the
wrong order) that the tests at the default arguments let through: docs/testing.md lists them."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax import nnx
from helpers import hand_path_gradients, hand_tied_loss, model_with_tables, small_problem

from tied_embed import TiedEmbed
from tied_embed.core import optim
from tied_embed.core import paths as paths_lib
from tied_embed.core import step as step_lib
from tied_embed.core.model import WithHiddenMap, build_model, param_counts

VOCAB = 10  # small_problem's table: 10 rows


def _sgd_state(table, learning_rate=1.0):
  return nnx.split(step_lib.TrainState(model_with_tables(table), optax.sgd(learning_rate)))


@pytest.mark.parametrize("split_check_tokens", [None, 8])  # the whole batch, and its first 8 pairs
@pytest.mark.parametrize("scales", [(0.5, 1.0), (2.0, 1.0), (1.0, 3.0), (0.25, 2.0), (2.0, 2.0)])
def test_the_step_with_path_scales_updates_by_the_weighted_sum_and_checks_the_unweighted_split(scales,
                                                                                             split_check_tokens):
  lookup_scale, projection_scale = scales
  table, ids, next_ids = small_problem()
  graphdef, state = _sgd_state(table)
  step = jax.jit(step_lib.make_step_function(graphdef, lookup_grad_scale=lookup_scale,
                                             projection_grad_scale=projection_scale,
                                             split_check_tokens=split_check_tokens), static_argnums=3)
  new_state, metrics, grads = step(state, jnp.asarray(ids), jnp.asarray(next_ids), True)

  lookup, projection = hand_path_gradients(table, table, ids, next_ids)
  weighted = lookup_scale * lookup + projection_scale * projection
  np.testing.assert_allclose(grads["embedding"][...], weighted, rtol=1e-5, atol=1e-7)
  # the split check compares the unweighted paths with nnx.grad: a right split reads float32 rounding
  assert float(metrics["split_error"]) < 1e-5, float(metrics["split_error"])
  np.testing.assert_allclose(float(metrics["applied_norm"]), np.linalg.norm(weighted), rtol=1e-5)
  np.testing.assert_allclose(float(metrics["loss"]), hand_tied_loss(table, ids, next_ids), rtol=1e-5)
  # sgd at learning rate 1: the new table is the old one less the weighted gradient
  trained = nnx.merge(graphdef, new_state)
  np.testing.assert_allclose(trained.model.embedding[...], table - weighted, rtol=1e-5, atol=1e-6)


def test_the_jitted_train_step_passes_its_step_options_and_is_a_plain_step_unless_asked():
  """make_train_step hands its options (the path scales) to the step, and a call without with_stats is the plain
  step: its metrics are the loss alone, no split check."""
  table, ids, next_ids = small_problem()
  graphdef, state = _sgd_state(table)
  step = step_lib.make_train_step(graphdef, lookup_grad_scale=2.0, projection_grad_scale=0.5)
  new_state, metrics = step(state, jnp.asarray(ids), jnp.asarray(next_ids))
  assert set(metrics) == {"loss"}
  lookup, projection = hand_path_gradients(table, table, ids, next_ids)
  trained = nnx.merge(graphdef, new_state)  # sgd at learning rate 1: the old table less 2·lookup + 0.5·projection
  np.testing.assert_allclose(trained.model.embedding[...], table - (2.0 * lookup + 0.5 * projection), rtol=1e-5,
                             atol=1e-6)


def test_the_jitted_train_step_pins_its_new_state_to_the_shardings_it_is_given():
  """With `state_shardings` the compiled step's new state has exactly those shardings (on a 1-device mesh they are
  NamedShardings, where an unpinned step's come out as SingleDeviceShardings); without, nothing is pinned."""
  table, ids, next_ids = small_problem()
  graphdef, state = _sgd_state(table)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
  shardings = jax.tree.map(lambda leaf: jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()), state)
  batch = (jnp.asarray(ids), jnp.asarray(next_ids))
  pinned = step_lib.make_train_step(graphdef, state_shardings=shardings).lower(state, *batch).compile()
  assert jax.tree.leaves(pinned.output_shardings[0]) == jax.tree.leaves(shardings)
  free = step_lib.make_train_step(graphdef).lower(state, *batch).compile()
  leaves = jax.tree.leaves(free.output_shardings)
  assert not any(isinstance(sharding, jax.sharding.NamedSharding) for sharding in leaves)


def test_the_step_function_is_the_plain_step_unless_asked_for_its_statistics():
  """make_step_function's step, called without `with_stats` (as a caller that jits it itself does), returns the loss
  alone: the split check's second backward pass runs only when asked for."""
  table, ids, next_ids = small_problem()
  graphdef, state = _sgd_state(table)
  new_state, metrics, grads = jax.jit(step_lib.make_step_function(graphdef))(state, jnp.asarray(ids),
                                                                             jnp.asarray(next_ids))
  assert set(metrics) == {"loss"}
  # the default scales are 1: the gradient is the two paths' plain sum, and sgd at rate 1 subtracts it
  lookup, projection = hand_path_gradients(table, table, ids, next_ids)
  np.testing.assert_allclose(grads["embedding"][...], lookup + projection, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(nnx.merge(graphdef, new_state).model.embedding[...], table - (lookup + projection),
                             rtol=1e-5, atol=1e-6)
  # and `gradients` itself, called with its defaults, is the plain step up to the update
  _, direct, metrics = step_lib.gradients(model_with_tables(table), jnp.asarray(ids), jnp.asarray(next_ids))
  assert set(metrics) == {"loss"}
  np.testing.assert_allclose(direct["embedding"][...], lookup + projection, rtol=1e-5, atol=1e-7)


def test_the_jitted_train_step_donates_the_old_state_and_passes_its_compiler_options():
  """The step writes its new state into the old one's buffers (the loop keeps one state's memory, not two): after a
  call every old state array is deleted; its compiler options reach XLA, which refuses an option it has no name for."""
  table, ids, next_ids = small_problem()
  graphdef, state = _sgd_state(table)
  old = jax.tree.leaves(state)
  new_state, _ = step_lib.make_train_step(graphdef)(state, jnp.asarray(ids), jnp.asarray(next_ids))
  assert old and all(leaf.is_deleted() for leaf in old)
  assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(new_state))
  step = step_lib.make_train_step(graphdef, compiler_options={"xla_no_such_option_here": True})
  with pytest.raises(Exception, match="xla_no_such_option_here"):
    step(new_state, jnp.asarray(ids), jnp.asarray(next_ids))


def _train(optimizer="adamw", learning_rate=0.1, weight_decay=0.0, grad_clip_norm=0.0, warmup_steps=0,
           num_steps=10):
  return ml_collections.ConfigDict(dict(optimizer=optimizer, learning_rate=learning_rate, weight_decay=weight_decay,
                                        grad_clip_norm=grad_clip_norm, warmup_steps=warmup_steps,
                                        num_steps=num_steps))


def _one_step(train, params, grads):
  tx = optim.make_optimizer(train)
  params = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
  updates, _ = tx.update({k: jnp.asarray(v, jnp.float32) for k, v in grads.items()}, tx.init(params), params)
  return {k: np.asarray(v, np.float64) for k, v in optax.apply_updates(params, updates).items()}


_PARAMS = {"w": np.array([1.0, -2.0, 0.5]), "k": np.array([[0.25, 3.0]])}
_GRADS = {"w": np.array([0.0, 0.5, -1.5]), "k": np.array([[2.0, 0.0]])}


def _adam_first_step(g, lr):
  """Adam's first update (bias-corrected moments are g and g²): −lr · g / (|g| + eps), eps = 1e-8."""
  return -lr * g / (np.abs(g) + 1e-8)


def test_one_adamw_step_decays_the_weights_decoupled_from_the_gradient():
  lr, wd = 0.1, 0.5
  got = _one_step(_train("adamw", lr, wd), _PARAMS, _GRADS)
  for name, w in _PARAMS.items():
    np.testing.assert_allclose(got[name], w + _adam_first_step(_GRADS[name], lr) - lr * wd * w, rtol=1e-6,
                               atol=2e-6)


def test_one_adamw_step_with_a_zero_gradient_shrinks_the_weight():
  got = _one_step(_train("adamw", 0.1, 1.0), {"w": np.array([1.0])}, {"w": np.array([0.0])})
  np.testing.assert_allclose(got["w"], [0.9], rtol=1e-6)


def test_adams_epsilon_is_1e_8_where_it_matters_most_a_gradient_of_its_size():
  # g = 1e-8: the first update is −lr · g / (|g| + eps) = −0.1 · 1e-8 / 2e-8 = −0.05 (eps 1e-7 would give −0.0091)
  got = _one_step(_train("adam", 0.1, 0.0), {"w": np.array([1.0])}, {"w": np.array([1e-8])})
  np.testing.assert_allclose(got["w"], [1.0 - 0.05], rtol=1e-6)


def test_one_adam_step_adds_the_l2_term_to_the_gradient_first():
  lr, wd = 0.1, 0.5
  got = _one_step(_train("adam", lr, wd), _PARAMS, _GRADS)
  for name, w in _PARAMS.items():
    np.testing.assert_allclose(got[name], w + _adam_first_step(_GRADS[name] + wd * w, lr), rtol=1e-6, atol=2e-6)


@pytest.mark.parametrize("wd", [0.0, 0.5])
def test_one_sgd_step_is_w_minus_lr_times_the_gradient_plus_the_l2_term(wd):
  lr = 0.1
  got = _one_step(_train("sgd", lr, wd), _PARAMS, _GRADS)
  for name, w in _PARAMS.items():
    np.testing.assert_allclose(got[name], w - lr * (_GRADS[name] + wd * w), rtol=1e-6)


def test_an_unknown_optimizer_name_is_refused_naming_it():
  with pytest.raises(ValueError, match="'adagrad'"):
    optim.make_optimizer(_train("adagrad"))


def _global_norm(tree) -> float:
  return math.sqrt(sum(float(np.sum(np.square(v))) for v in tree.values()))


@pytest.mark.parametrize("max_norm", [0.5, 1.0, 100.0])
def test_one_clipped_sgd_step_scales_the_gradient_to_at_most_max_norm(max_norm):
  norm = _global_norm(_GRADS)  # 2.5: clipped at 0.5 and 1, untouched at 100
  got = _one_step(_train("sgd", 0.1, grad_clip_norm=max_norm), _PARAMS, _GRADS)
  for name, w in _PARAMS.items():
    np.testing.assert_allclose(got[name], w - 0.1 * _GRADS[name] * min(1.0, max_norm / norm), rtol=1e-6)


def test_a_clip_norm_of_zero_means_no_clipping():
  got = _one_step(_train("sgd", 0.1, grad_clip_norm=0.0), _PARAMS, _GRADS)
  for name, w in _PARAMS.items():
    np.testing.assert_allclose(got[name], w - 0.1 * _GRADS[name], rtol=1e-6)


def test_the_clip_at_exactly_max_norm_and_either_side_of_it():
  assert float(optim.clip_scale(jnp.float32(2.0), 2.0)) == 1.0  # at the edge: the gradient as it is
  assert float(optim.clip_scale(jnp.float32(1.999), 2.0)) == 1.0
  np.testing.assert_allclose(float(optim.clip_scale(jnp.float32(8.0), 2.0)), 0.25, rtol=1e-7)
  grads = {"g": jnp.array([3.0, 4.0])}  # norm 5, exactly max_norm
  clipped, _ = optim.clip_by_global_norm(5.0).update(grads, optax.EmptyState())
  np.testing.assert_array_equal(clipped["g"], [3.0, 4.0])


def _closed_form(step: int, peak: float, warmup: int, total: int) -> float:
  """Linear warmup 0 → peak over `warmup` steps, then peak · (1 + cos(π · progress)) / 2 to 0 at `total`."""
  if step < warmup:
    return peak * step / warmup
  progress = min(step - warmup, total - warmup) / (total - warmup)
  return peak * 0.5 * (1 + math.cos(math.pi * progress))


@pytest.mark.parametrize("step", [0, 1, 5, 9, 10, 11, 55, 99, 100, 120])
def test_the_schedule_at_chosen_steps_is_warmup_then_cosine(step):
  schedule = optim.learning_rate_schedule(_train(learning_rate=0.2, warmup_steps=10, num_steps=100))
  np.testing.assert_allclose(float(schedule(step)), _closed_form(step, 0.2, 10, 100), rtol=1e-5, atol=1e-9)


def test_the_schedule_without_warmup_starts_at_the_peak():
  schedule = optim.learning_rate_schedule(_train(learning_rate=0.2, warmup_steps=0, num_steps=4))
  got = [float(schedule(s)) for s in range(5)]
  np.testing.assert_allclose(got, [_closed_form(s, 0.2, 0, 4) for s in range(5)], rtol=1e-5, atol=1e-9)
  assert got[0] == pytest.approx(0.2)


def test_a_run_shorter_than_its_warmup_ends_mid_ramp():
  schedule = optim.learning_rate_schedule(_train(learning_rate=0.2, warmup_steps=10, num_steps=4))
  got = [float(schedule(s)) for s in range(5)]
  np.testing.assert_allclose(got, [0.2 * s / 10 for s in range(5)], rtol=1e-5, atol=1e-9)
  np.testing.assert_allclose(float(schedule(10)), 0.2, rtol=1e-5)  # the peak, one step before the decay ends
  np.testing.assert_allclose(float(schedule(11)), 0.0, atol=1e-9)


def test_the_optimizer_step_follows_the_schedule_from_its_first_update():
  # warmup 2: the first update uses the learning rate of step 0, which is 0; the second, half the peak
  tx = optim.make_optimizer(_train("sgd", 0.2, warmup_steps=2, num_steps=10))
  params = {"w": jnp.array([1.0])}
  opt_state = tx.init(params)
  moved = []
  for _ in range(2):
    updates, opt_state = tx.update({"w": jnp.array([1.0])}, opt_state, params)
    moved.append(float(updates["w"][0]))
  np.testing.assert_allclose(moved, [0.0, -0.1], rtol=1e-6, atol=1e-9)


def test_two_adam_steps_follow_the_moments_closed_form():
  # the first step's bias correction hides b1 and b2 (m̂ = g, v̂ = g²); the second shows them: b1 0.9, b2 0.999
  lr, g1, g2 = 0.1, np.array([1.0, -2.0]), np.array([3.0, 0.5])
  tx = optim.make_optimizer(_train("adam", lr))
  params = {"w": jnp.zeros(2)}
  opt_state = tx.init(params)
  for g in (g1, g2):
    updates, opt_state = tx.update({"w": jnp.asarray(g, jnp.float32)}, opt_state, params)
  m = 0.9 * 0.1 * g1 + 0.1 * g2
  v = 0.999 * 0.001 * g1**2 + 0.001 * g2**2
  second_lr = _closed_form(1, lr, 0, 10)  # the cosine's second step
  want = -second_lr * (m / (1 - 0.9**2)) / (np.sqrt(v / (1 - 0.999**2)) + 1e-8)
  np.testing.assert_allclose(updates["w"], want, rtol=5e-5)  # float32 moments


def test_the_split_statistics_against_hand_norms_and_counts():
  table, ids, next_ids = small_problem(6)
  ids[:] = np.array([0, 1, 1, 2, 2, 2, 3, 3, 0, 1, 2, VOCAB - 1])  # rows 4..8 are never looked up
  model = model_with_tables(table)
  stats = paths_lib.path_gradients(model, jnp.asarray(ids), jnp.asarray(next_ids)).split_stats()
  lookup, projection = hand_path_gradients(table, table, ids, next_ids)
  assert np.all(np.linalg.norm(projection, axis=1) < 1)  # so a count of norms > 1 would differ
  want = {"lookup_norm": np.linalg.norm(lookup), "projection_norm": np.linalg.norm(projection),
          "total_norm": np.linalg.norm(lookup + projection),
          "cosine": np.vdot(lookup, projection) / (np.linalg.norm(lookup) * np.linalg.norm(projection))}
  for name, value in want.items():
    np.testing.assert_allclose(float(stats[name]), value, rtol=1e-5, err_msg=name)
  assert int(stats["rows_looked_up"]) == 5
  assert int(stats["rows_projection_only"]) == VOCAB - 5


def test_rows_with_a_zero_projection_gradient_are_not_counted_as_projection_only():
  table, ids, next_ids = small_problem(7)
  table[ids] = 0.0  # every looked-up row is zero: the projection gradient Σ (p − y) x is zero in every row
  stats = paths_lib.path_gradients(model_with_tables(table), jnp.asarray(ids), jnp.asarray(next_ids)).split_stats()
  assert int(stats["rows_projection_only"]) == 0
  assert int(stats["rows_looked_up"]) == len(set(ids.tolist()))


def test_the_hidden_maps_statistics_and_penalty_against_hand_values():
  model = WithHiddenMap(TiedEmbed(6, 2, rngs=nnx.Rngs(0)), l2=0.5)
  kernel = np.array([[0.3, 0.2], [-0.1, 0.4]])  # ‖W‖ < 1
  model.hidden_map.kernel[...] = jnp.asarray(kernel, jnp.float32)
  stats = model.hidden_stats()
  np.testing.assert_allclose(float(stats["identity_distance"]), np.linalg.norm(kernel - np.eye(2)), rtol=1e-6)
  np.testing.assert_allclose(float(stats["antisymmetric_share"]),
                             np.linalg.norm((kernel - kernel.T) / 2) / np.linalg.norm(kernel), rtol=1e-6)
  np.testing.assert_allclose(float(model.penalty()), 0.5 * np.sum((kernel - np.eye(2)) ** 2),
                             rtol=1e-6)


def test_the_steps_hidden_norm_is_the_norm_of_ws_gradient():
  """With statistics, the step's 'hidden_norm' is ‖∂L/∂W‖ for tied + W, against jax.grad of the loss written out by
  hand in W alone (the paths machinery not used): L(W) = mean CE(E[ids]·W·Eᵀ, next)."""
  table, ids, next_ids = small_problem()
  model = WithHiddenMap(model_with_tables(table))
  kernel = np.eye(table.shape[1]) + 0.2 * np.random.default_rng(1).standard_normal((table.shape[1],) * 2)
  model.hidden_map.kernel[...] = jnp.asarray(kernel, jnp.float32)

  def hand_loss(w):
    logits = jnp.asarray(table)[ids] @ w @ jnp.asarray(table).T
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - logits[jnp.arange(len(ids)), next_ids])

  expected = np.linalg.norm(np.asarray(jax.grad(hand_loss)(jnp.asarray(kernel, jnp.float32))))
  _, _, metrics = step_lib.gradients(model, jnp.asarray(ids), jnp.asarray(next_ids), with_stats=True)
  assert expected > 1e-3
  np.testing.assert_allclose(float(metrics["hidden_norm"]), expected, rtol=1e-5)


def test_the_split_error_of_an_all_zero_gradient_is_0_not_nan():
  """An all-zero table has an all-zero gradient (the lookup path is (p − y)·E = 0, the projection path (p − y)ᵀ·x = 0):
  the split error of zero paths against it is 0/tiny = 0, where dividing by float64's tiny (0 in float32) gives NaN."""
  table, ids, next_ids = small_problem()
  model = model_with_tables(np.zeros_like(table))
  zero = jax.tree.map(jnp.zeros_like, nnx.state(model, nnx.Param))
  assert float(step_lib.split_error(model, zero, jnp.asarray(ids), jnp.asarray(next_ids))) == 0.0


def test_a_model_config_without_hidden_fields_builds_the_plain_model():
  config = ml_collections.ConfigDict({"seed": 0, "model": {"vocab_size": 6, "d_model": 3, "tied": False}})
  assert type(build_model(config)).__name__ == "UntiedEmbed"
  config.model.tied = True
  config.model.hidden = "linear"
  model = build_model(config)
  assert isinstance(model, WithHiddenMap) and model.l2 == 0.0 and model.penalty() is None
  config.model.hidden_l2 = 0.25
  assert build_model(config).l2 == 0.25


def test_param_counts_by_hand():
  assert tuple(param_counts(10, 4)) == (40, 80, 40)
  assert tuple(param_counts(10, 4, hidden="linear")) == (56, 96, 40)


def test_the_clip_keeps_each_gradients_dtype():
  grads = {"half": jnp.array([3.0, 4.0], jnp.bfloat16), "full": jnp.array([0.0, 12.0], jnp.float32)}  # norm 13
  clipped, _ = optim.clip_by_global_norm(1.0).update(grads, optax.EmptyState())
  assert clipped["half"].dtype == jnp.bfloat16 and clipped["full"].dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(clipped["full"], np.float64), [0.0, 12.0 / 13.0], rtol=1e-6)
