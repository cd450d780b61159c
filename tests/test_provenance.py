"""Gradient provenance against a NumPy derivation of the softmax cross-entropy gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import hand_path_gradients

from tied_embed import TiedEmbed
from tied_embed.fast.chunked_loss import bigram_loss
from tied_embed.fast.sparse_paths import path_gradients, split_gradient


def _case(vocab_size=12, d_model=5, ids=(0, 3, 3, 7, 1), seed=0):
  table = TiedEmbed(vocab_size, d_model, rngs=nnx.Rngs(seed)).embedding[...]
  ids = np.array(ids)
  targets = (ids * 5 + 2) % vocab_size
  return table, ids, targets



def _logits_ce(logits, targets):
  return jnp.mean(jax.nn.logsumexp(logits, axis=1) - logits[jnp.arange(len(targets)), targets])


def test_paths_match_the_hand_derived_gradients_and_sum_to_the_total():
  table, ids, targets = _case()
  split = split_gradient(table, jnp.asarray(ids), lambda logits: _logits_ce(logits, targets))
  lookup, projection = hand_path_gradients(table, table, ids, targets)
  np.testing.assert_allclose(split.lookup, lookup, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(split.projection, projection, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(split.total, lookup + projection, rtol=1e-5, atol=1e-7)


def test_total_equals_nnx_grad_of_the_tied_module():
  model = TiedEmbed(12, 5, rngs=nnx.Rngs(1))
  _, ids, targets = _case()

  def loss(m):
    return _logits_ce(m(jnp.asarray(ids)), targets)

  direct = nnx.grad(loss)(model)["embedding"][...]
  split = split_gradient(model.embedding[...], jnp.asarray(ids), lambda logits: _logits_ce(logits, targets))
  np.testing.assert_allclose(split.lookup + split.projection, direct, rtol=1e-5, atol=1e-7)
  assert float(_paths(model.embedding[...], ids, targets).split_error(direct)) < 1e-6


def test_unselected_row_gets_projection_gradient_only():
  table, ids, targets = _case()
  split = split_gradient(table, jnp.asarray(ids), lambda logits: _logits_ce(logits, targets))
  never = 11
  assert never not in ids
  np.testing.assert_array_equal(split.lookup[never], 0.0)
  assert np.linalg.norm(split.projection[never]) > 1e-4


def test_repeated_ids_accumulate_lookup_gradient():
  table, _, _ = _case()
  once = split_gradient(table, jnp.array([3]), lambda logits: _logits_ce(logits, np.array([4])))
  twice = split_gradient(table, jnp.array([3, 3]), lambda logits: _logits_ce(logits, np.array([4, 4])))
  # Mean over two identical positions: each contributes half of the single-position gradient, and they add up.
  np.testing.assert_allclose(twice.lookup[3], once.lookup[3], rtol=1e-5)
  # With a summed loss each repeat contributes the whole single-position gradient.
  summed_twice = split_gradient(table, jnp.array([3, 3]), lambda logits: jnp.sum(logits[:, 4]))
  summed_once = split_gradient(table, jnp.array([3]), lambda logits: jnp.sum(logits[:, 4]))
  np.testing.assert_allclose(summed_twice.lookup[3], 2 * summed_once.lookup[3], rtol=1e-6)


def test_bigram_loss_equals_numpy_cross_entropy():
  table, ids, targets = _case()
  t = np.asarray(table, np.float64)
  logits = t[ids] @ t.T
  expected = np.mean(np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(len(ids)), targets])
  np.testing.assert_allclose(bigram_loss(table, table, jnp.asarray(ids), jnp.asarray(targets)), expected, rtol=1e-5)


def _paths(table, ids, targets):
  return path_gradients(table, table, jnp.asarray(ids), lambda x, e: _logits_ce(x @ e.T, targets))


@pytest.mark.parametrize("ids", [(0, 3, 3, 7, 1), (5, 5, 5, 5), tuple(range(12))])
def test_split_stats_count_rows_and_measure_paths(ids):
  table, ids, targets = _case(ids=ids)  # repeats, one id only, every row looked up
  stats = _paths(table, ids, targets).split_stats()
  lookup, projection = hand_path_gradients(table, table, ids, targets)
  assert int(stats["rows_looked_up"]) == len(set(ids.tolist()))
  assert int(stats["rows_projection_only"]) == 12 - len(set(ids.tolist()))  # softmax touches every row
  np.testing.assert_allclose(stats["lookup_norm"], np.linalg.norm(lookup), rtol=1e-5)
  np.testing.assert_allclose(stats["projection_norm"], np.linalg.norm(projection), rtol=1e-5)
  np.testing.assert_allclose(stats["total_norm"], np.linalg.norm(lookup + projection), rtol=1e-5)
  cosine = np.sum(lookup * projection) / (np.linalg.norm(lookup) * np.linalg.norm(projection))
  np.testing.assert_allclose(stats["cosine"], cosine, rtol=1e-4, atol=1e-6)


def test_split_error_detects_a_wrong_split():
  table, ids, targets = _case()
  paths = _paths(table, ids, targets)
  lookup, projection = hand_path_gradients(table, table, ids, targets)
  total = lookup + projection
  error = paths._replace(projection=0.5 * paths.projection).split_error(jnp.asarray(total, jnp.float32))
  np.testing.assert_allclose(error, np.linalg.norm(0.5 * projection) / np.linalg.norm(total), rtol=1e-4)
  untied = paths.split_error(jnp.asarray(lookup, jnp.float32), jnp.asarray(2 * projection, jnp.float32))
  expected = np.linalg.norm(projection) / np.sqrt(np.sum(lookup**2) + np.sum((2 * projection) ** 2))
  np.testing.assert_allclose(untied, expected, rtol=1e-4)


def test_the_sparse_lookup_path_gives_the_hand_derived_rows_norms_and_sums():
  table, ids, targets = _case(ids=(0, 3, 3, 7, 1, 3, 7))  # repeats: their rows must add up before any norm
  paths = path_gradients(table, table, jnp.asarray(ids), lambda x, e: _logits_ce(x @ e.T, targets))
  lookup, projection = hand_path_gradients(table, table, ids, targets)
  np.testing.assert_allclose(paths.lookup_dense(), lookup, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(paths.projection, projection, rtol=1e-5, atol=1e-7)
  norms = np.linalg.norm(lookup, axis=1)
  np.testing.assert_allclose(paths.lookup_row_norms(), norms, rtol=1e-5, atol=1e-7)
  assert np.all(np.asarray(paths.lookup_row_norms())[[2, 4, 5, 6, 8, 9, 10, 11]] == 0)  # rows never looked up
  rows = jnp.array([3, 5, 7, 0])
  np.testing.assert_allclose(paths.lookup_at(rows), lookup[[3, 5, 7, 0]], rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(paths.add_lookup(paths.projection, 0.5), projection + 0.5 * lookup, rtol=1e-5, atol=1e-7)
