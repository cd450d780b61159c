"""Gradient provenance against a NumPy float64 derivation of the softmax cross-entropy gradient.

The plain paths (tied_embed/core/paths.py) against hand gradients; the sparse lookup path
(tied_embed/fast/sparse_paths.py) against the plain one; the step's split check against an injected error; the
hidden map W against hand gradients.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from helpers import hand_hidden_gradients, hand_path_gradients, lookup_dense, model_with_tables

from tied_embed import TiedEmbed, UntiedEmbed
from tied_embed.core import loss as loss_lib
from tied_embed.core import paths as plain_paths
from tied_embed.core import step as step_lib
from tied_embed.core.model import WithHiddenMap
from tied_embed.fast import choose, sparse_paths

VOCAB, D_MODEL = 12, 5


def _case(ids=(0, 3, 3, 7, 1), seed=0):
  table = TiedEmbed(VOCAB, D_MODEL, rngs=nnx.Rngs(seed)).embedding[...]
  ids = np.array(ids)
  targets = (ids * 5 + 2) % VOCAB
  return table, ids, targets


def _assert_close(got, want):
  np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("tied", [True, False])
def test_plain_paths_match_the_hand_derived_gradients(tied):
  table, ids, targets = _case()
  other = UntiedEmbed(VOCAB, D_MODEL, rngs=nnx.Rngs(5)).output_embedding[...]
  model = model_with_tables(table, None if tied else other)
  paths = plain_paths.path_gradients(model, jnp.asarray(ids), jnp.asarray(targets))
  lookup, projection = hand_path_gradients(*model.tables(), ids, targets)
  _assert_close(paths.lookup, lookup)
  _assert_close(paths.projection, projection)
  assert paths.hidden == {}


def test_the_paths_sum_to_nnx_grad_of_the_tied_module():
  model = TiedEmbed(VOCAB, D_MODEL, rngs=nnx.Rngs(1))
  _, ids, targets = _case()
  direct = nnx.grad(lambda m: loss_lib.cross_entropy(m(jnp.asarray(ids)), jnp.asarray(targets)))(model)
  paths = plain_paths.path_gradients(model, jnp.asarray(ids), jnp.asarray(targets))
  np.testing.assert_allclose(paths.lookup + paths.projection, direct["embedding"][...], rtol=1e-5, atol=1e-7)
  grads = plain_paths.param_gradients(model, paths)
  np.testing.assert_allclose(grads["embedding"][...], direct["embedding"][...], rtol=1e-5, atol=1e-7)


def test_an_unselected_row_gets_the_projection_gradient_only():
  table, ids, targets = _case()
  paths = plain_paths.path_gradients(model_with_tables(table), jnp.asarray(ids), jnp.asarray(targets))
  never = 11
  assert never not in ids
  np.testing.assert_array_equal(paths.lookup[never], 0.0)
  assert np.linalg.norm(paths.projection[never]) > 1e-4


def test_repeated_ids_accumulate_lookup_gradient():
  model = model_with_tables(_case()[0])
  once = plain_paths.path_gradients(model, jnp.array([3]), jnp.array([4]))
  twice = plain_paths.path_gradients(model, jnp.array([3, 3]), jnp.array([4, 4]))
  # Mean over two identical positions: each contributes half of the single-position gradient, and they add up.
  np.testing.assert_allclose(twice.lookup[3], once.lookup[3], rtol=1e-5)
  summed = lambda x, e, t: jnp.sum((x @ e.T)[:, 4])  # noqa: E731  each repeat brings the whole gradient
  summed_twice = plain_paths.path_gradients(model, jnp.array([3, 3]), None, summed)
  summed_once = plain_paths.path_gradients(model, jnp.array([3]), None, summed)
  np.testing.assert_allclose(summed_twice.lookup[3], 2 * summed_once.lookup[3], rtol=1e-6)


def test_the_model_loss_equals_numpy_cross_entropy():
  table, ids, targets = _case()
  t = np.asarray(table, np.float64)
  logits = t[ids] @ t.T
  expected = np.mean(np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(len(ids)), targets])
  got = loss_lib.model_loss(model_with_tables(table), jnp.asarray(ids), jnp.asarray(targets))
  np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("ids", [(0, 3, 3, 7, 1), (5, 5, 5, 5), tuple(range(12))])
@pytest.mark.parametrize("form", ["plain", "sparse"])
def test_split_stats_count_rows_and_measure_paths(ids, form):
  table, ids, targets = _case(ids=ids)  # repeats, one id only, every row looked up
  build = plain_paths.path_gradients if form == "plain" else _sparse
  stats = build(model_with_tables(table), jnp.asarray(ids), jnp.asarray(targets)).split_stats()
  lookup, projection = hand_path_gradients(table, table, ids, targets)
  assert int(stats["rows_looked_up"]) == len(set(ids.tolist()))
  assert int(stats["rows_projection_only"]) == 12 - len(set(ids.tolist()))  # softmax touches every row
  np.testing.assert_allclose(stats["lookup_norm"], np.linalg.norm(lookup), rtol=1e-5)
  np.testing.assert_allclose(stats["projection_norm"], np.linalg.norm(projection), rtol=1e-5)
  np.testing.assert_allclose(stats["total_norm"], np.linalg.norm(lookup + projection), rtol=1e-5)
  cosine = np.sum(lookup * projection) / (np.linalg.norm(lookup) * np.linalg.norm(projection))
  np.testing.assert_allclose(stats["cosine"], cosine, rtol=1e-4, atol=1e-6)


def _sparse(model, ids, next_ids):
  return sparse_paths.path_gradients(model, ids, next_ids, loss_lib.hidden_cross_entropy)


def test_the_sparse_lookup_path_gives_the_plain_paths_rows_norms_and_sums():
  table, ids, targets = _case(ids=(0, 3, 3, 7, 1, 3, 7))  # repeats: their rows must add up before any norm
  model = model_with_tables(table)
  plain = plain_paths.path_gradients(model, jnp.asarray(ids), jnp.asarray(targets))
  paths = _sparse(model, jnp.asarray(ids), jnp.asarray(targets))
  lookup, projection = hand_path_gradients(table, table, ids, targets)
  _assert_close(lookup_dense(paths), lookup)
  _assert_close(paths.projection, projection)
  _assert_close(paths.lookup_row_norms(), np.linalg.norm(lookup, axis=1))
  assert np.all(np.asarray(paths.lookup_row_norms())[[2, 4, 5, 6, 8, 9, 10, 11]] == 0)  # rows never looked up
  rows = jnp.array([3, 5, 7, 0])
  _assert_close(paths.lookup_at(rows), lookup[[3, 5, 7, 0]])
  _assert_close(paths.add_lookup(paths.projection, 0.5), projection + 0.5 * lookup)
  for got, want in [(lookup_dense(paths), plain.lookup), (paths.lookup_row_norms(), plain.lookup_row_norms()),
                    (paths.lookup_at(rows), plain.lookup_at(rows)), (paths.add_lookup(paths.projection, 0.5),
                                                                     plain.add_lookup(plain.projection, 0.5))]:
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
  for added in (paths, plain):  # without a scale: the lookup path added once
    _assert_close(added.add_lookup(added.projection), projection + lookup)


def test_split_error_measures_a_wrong_split_against_the_direct_gradient():
  table, ids, targets = _case()
  model = model_with_tables(table)
  lookup, projection = hand_path_gradients(table, table, ids, targets)
  paths = plain_paths.path_gradients(model, jnp.asarray(ids), jnp.asarray(targets))
  wrong = plain_paths.param_gradients(model, paths._replace(projection=0.5 * paths.projection))
  error = step_lib.split_error(model, wrong, jnp.asarray(ids), jnp.asarray(targets))
  np.testing.assert_allclose(error, np.linalg.norm(0.5 * projection) / np.linalg.norm(lookup + projection), rtol=1e-4)
  right = plain_paths.param_gradients(model, paths)
  assert float(step_lib.split_error(model, right, jnp.asarray(ids), jnp.asarray(targets))) < 1e-6


def _step_model(vocab_size=64, d_model=8, hidden="none"):
  model = TiedEmbed(vocab_size, d_model, rngs=nnx.Rngs(2))
  if hidden == "linear":
    model = WithHiddenMap(model)
    model.hidden_map.kernel[...] += 0.1 * jax.random.normal(jax.random.key(3), (d_model, d_model))
  return nnx.split(step_lib.TrainState(model, optax.adam(1e-2)))


def _batch(size=256, vocab_size=64, seed=4):
  rng = np.random.default_rng(seed)
  ids = rng.zipf(1.3, size) % vocab_size  # text-like: many repeats, so the distinct-row path is exercised
  return jnp.asarray(ids, jnp.int32), jnp.asarray(rng.integers(0, vocab_size, size), jnp.int32)


def _off_by_one_percent(paths_fn):
  def wrong(model, ids, next_ids):
    paths = paths_fn(model, ids, next_ids)
    return paths._replace(projection=1.01 * paths.projection)

  return wrong


@pytest.mark.parametrize("check_tokens", [None, 64])  # the whole batch, and a slice of it
@pytest.mark.parametrize("hidden", ["none", "linear"])
def test_the_log_steps_split_error_catches_a_1_percent_error_in_the_fast_path(check_tokens, hidden):
  graphdef, state = _step_model(hidden=hidden)
  ids, next_ids = _batch()
  fast = choose.paths_function(chunk_size=256)
  assert fast is not plain_paths.path_gradients
  errors = {}
  for name, paths_fn in [("correct", fast), ("injected", _off_by_one_percent(fast))]:
    step = step_lib.make_train_step(graphdef, paths_fn, split_check_tokens=check_tokens)
    _, metrics = step(jax.tree.map(jnp.copy, state), ids, next_ids, with_stats=True)
    errors[name] = float(metrics["split_error"])
  assert errors["correct"] < 1e-5, errors
  assert errors["injected"] > 1e-3, errors


def test_the_split_check_uses_a_slice_where_the_whole_batchs_logits_would_not_fit():
  assert choose.split_check_tokens(1024, 1024) is None  # 4 MiB of logits: the whole batch
  tokens = choose.split_check_tokens(4096, 32768, shards=4)  # 512 MiB: a slice
  assert tokens is not None and tokens < 4096 and tokens % 4 == 0
  assert tokens * 32768 * 4 <= choose.SPLIT_CHECK_LOGITS_BYTES


def test_a_hidden_map_at_the_identity_gives_the_plain_models_loss_and_gradients():
  table, ids, targets = _case()
  plain = model_with_tables(table)
  mapped = WithHiddenMap(model_with_tables(table))
  np.testing.assert_array_equal(mapped(jnp.asarray(ids)), plain(jnp.asarray(ids)))
  a = plain_paths.path_gradients(plain, jnp.asarray(ids), jnp.asarray(targets))
  b = plain_paths.path_gradients(mapped, jnp.asarray(ids), jnp.asarray(targets))
  np.testing.assert_array_equal(a.loss, b.loss)
  np.testing.assert_allclose(b.lookup, a.lookup, rtol=1e-6, atol=1e-9)
  np.testing.assert_allclose(b.projection, a.projection, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("form", ["plain", "sparse"])
def test_hidden_map_paths_and_its_gradient_match_float64_hand_gradients(tied, form):
  table, ids, targets = _case(ids=(0, 3, 3, 7, 1, 3))
  other = UntiedEmbed(VOCAB, D_MODEL, rngs=nnx.Rngs(5)).output_embedding[...]
  model = WithHiddenMap(model_with_tables(table, None if tied else other), l2=0.3)
  kernel = np.eye(D_MODEL) + 0.2 * np.random.default_rng(1).standard_normal((D_MODEL, D_MODEL))
  model.hidden_map.kernel[...] = jnp.asarray(kernel, jnp.float32)
  build = plain_paths.path_gradients if form == "plain" else _sparse
  paths = build(model, jnp.asarray(ids), jnp.asarray(targets))
  kernel32 = np.asarray(model.hidden_map.kernel[...])
  loss, lookup, projection, d_kernel = hand_hidden_gradients(*model.tables(), kernel32, ids, targets, l2=0.3)
  np.testing.assert_allclose(paths.loss, loss, rtol=1e-5)
  dense_lookup = paths.lookup if form == "plain" else lookup_dense(paths)
  np.testing.assert_allclose(dense_lookup, lookup, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(paths.projection, projection, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(paths.hidden["hidden_map"]["kernel"], d_kernel, rtol=1e-4, atol=1e-6)
  grads = plain_paths.param_gradients(model, paths)  # and nnx.grad of the whole model agrees with their assembly
  assert float(step_lib.split_error(model, grads, jnp.asarray(ids), jnp.asarray(targets))) < 1e-5


def test_hidden_l2_is_lambda_times_the_squared_distance_to_the_identity():
  model = WithHiddenMap(TiedEmbed(4, 2, rngs=nnx.Rngs(0)), l2=0.5)
  model.hidden_map.kernel[...] = jnp.array([[1.0, 2.0], [0.0, 3.0]])
  # ‖W − I‖² = 0² + 2² + 0² + 2² = 8, times λ = 0.5: 4
  assert float(model.penalty()) == 4.0
  ids, next_ids = jnp.array([0, 1, 2]), jnp.array([1, 2, 3])
  plain = loss_lib.cross_entropy(model(ids), next_ids)
  np.testing.assert_allclose(loss_lib.model_loss(model, ids, next_ids), plain + 4.0, rtol=1e-6)
  stats = model.hidden_stats()
  np.testing.assert_allclose(stats["identity_distance"], np.sqrt(8.0), rtol=1e-6)
  # (W − Wᵀ)/2 = [[0, 1], [−1, 0]]: norm √2, over ‖W‖ = √14
  np.testing.assert_allclose(stats["antisymmetric_share"], np.sqrt(2.0) / np.sqrt(14.0), rtol=1e-6)
  assert WithHiddenMap(TiedEmbed(4, 2, rngs=nnx.Rngs(0))).penalty() is None


def test_the_cosine_of_a_path_that_is_all_zero_is_0_not_nan():
  # A path with no gradient (a batch whose loss does not reach one use) has no direction: its cosine reads 0.
  projection = jnp.asarray(np.arange(12, dtype=np.float32).reshape(4, 3))
  for lookup, other in ((jnp.zeros((4, 3)), projection), (projection, jnp.zeros((4, 3)))):
    paths = plain_paths.PathGradients(jnp.float32(0), jnp.array([0, 2]), lookup, other, {})
    stats = paths.split_stats()
    assert float(stats["cosine"]) == 0.0
    assert float(stats["total_norm"]) == pytest.approx(np.linalg.norm(np.arange(12)), rel=1e-6)
