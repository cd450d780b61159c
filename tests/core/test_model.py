"""TiedEmbed and UntiedEmbed: seed 001's worked example, the properties both seeds state, parameter counts."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from seed_reference import seed_table

from tied_embed import TiedEmbed, UntiedEmbed, param_counts


def _model_with(table) -> TiedEmbed:
  model = TiedEmbed(len(table), len(table[0]), rngs=nnx.Rngs(0))
  model.embedding[...] = jnp.asarray(table, jnp.float32)
  return model


def test_seed_001_worked_example():
  model = _model_with([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
  ids = jnp.array([0, 2, 0], dtype=jnp.int32)
  expected = jnp.array([[1.0, 2.0, 0.0], [0.0, 0.0, 9.0], [1.0, 2.0, 0.0]])
  assert jnp.allclose(model(ids), expected)
  # Updating one table changes both the lookup and projection paths.
  model.embedding[...] = model.embedding[...].at[0].set(jnp.array([2.0, 0.0]))
  assert jnp.allclose(model(ids)[0], jnp.array([4.0, 4.0, 0.0]))


def test_exactly_one_param_named_embedding_with_the_seed_initialisation():
  model = TiedEmbed(40, 6, rngs=nnx.Rngs(3))
  params = nnx.state(model, nnx.Param)
  assert [path for path, _ in nnx.to_flat_state(params)] == [("embedding",)]
  table = model.embedding[...]
  assert table.shape == (40, 6) and table.dtype == jnp.float32
  np.testing.assert_array_equal(table, seed_table(3, 40, 6))
  assert not any(isinstance(v, nnx.RngState) for _, v in nnx.graph.iter_graph(model))  # no stored Rngs


def test_initial_rows_have_unit_expected_squared_length():
  table = np.asarray(TiedEmbed(4000, 32, rngs=nnx.Rngs(1)).embedding[...])
  assert abs(np.mean(np.sum(table**2, axis=1)) - 1.0) < 0.02
  assert abs(np.var(table) - 1 / 32) < 0.001


def test_embed_and_attend_use_the_same_table_with_batch_dims():
  model = TiedEmbed(9, 4, rngs=nnx.Rngs(2))
  table = np.asarray(model.embedding[...], np.float64)
  ids = jnp.array([[0, 8], [3, 3]])
  x = model.embed(ids)
  assert x.shape == (2, 2, 4)
  np.testing.assert_allclose(x, table[np.asarray(ids)], rtol=1e-6)
  np.testing.assert_allclose(model.attend(x), table[np.asarray(ids)] @ table.T, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(model(ids), table[np.asarray(ids)] @ table.T, rtol=1e-5, atol=1e-6)


def test_forward_never_mutates_the_table():
  model = TiedEmbed(11, 5, rngs=nnx.Rngs(4))
  before = np.array(model.embedding[...])
  model(jnp.array([1, 2, 3]))
  nnx.jit(lambda m, i: m(i))(model, jnp.array([4, 5]))
  np.testing.assert_array_equal(model.embedding[...], before)


def test_own_score_is_the_squared_norm_and_need_not_be_the_largest():
  model = TiedEmbed(50, 4, rngs=nnx.Rngs(5))
  table = np.asarray(model.embedding[...], np.float64)
  ids = jnp.arange(50)
  logits = np.asarray(model(ids))
  np.testing.assert_allclose(np.diag(logits), np.sum(table**2, axis=1), rtol=1e-5)
  # With random vectors some token scores a longer, aligned vector above itself.
  assert np.any(np.argmax(logits, axis=1) != np.arange(50))


def test_repeated_ids_repeat_rows_and_reordering_only_reorders():
  model = TiedEmbed(20, 3, rngs=nnx.Rngs(6))
  ids = jnp.array([4, 7, 4, 19, 0])
  logits = np.asarray(model(ids))
  np.testing.assert_array_equal(logits[0], logits[2])
  order = np.array([3, 0, 4, 2, 1])
  np.testing.assert_allclose(np.asarray(model(ids[order])), logits[order], rtol=1e-6)


def test_logits_are_raw_scores_not_probabilities():
  logits = np.asarray(TiedEmbed(30, 8, rngs=nnx.Rngs(7))(jnp.arange(30)))
  assert logits.min() < 0  # dot products can be negative
  assert not np.allclose(logits.sum(axis=1), 1.0)


def test_untied_has_two_independent_tables_initialised_like_the_tied_one():
  model = UntiedEmbed(12, 4, rngs=nnx.Rngs(8))
  names = sorted(path[0] for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param)))
  assert names == ["input_embedding", "output_embedding"]
  rngs = nnx.Rngs(8)
  first, second = rngs.params(), rngs.params()
  scale = np.sqrt(4)
  np.testing.assert_array_equal(model.input_embedding[...], jax.random.normal(first, (12, 4)) / scale)
  np.testing.assert_array_equal(model.output_embedding[...], jax.random.normal(second, (12, 4)) / scale)
  ids = jnp.array([1, 5])
  expected = np.asarray(model.input_embedding[...])[[1, 5]] @ np.asarray(model.output_embedding[...]).T
  np.testing.assert_allclose(model(ids), expected, rtol=1e-5, atol=1e-6)


def test_param_counts_match_the_seeds_and_the_modules():
  assert param_counts(50000, 4096).saved == 204_800_000
  assert param_counts(50000, 768).saved == 38_400_000
  counts = param_counts(10, 3)
  assert counts.tied == 30 and counts.untied == 60

  def n_params(model):
    return sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))

  assert n_params(TiedEmbed(10, 3, rngs=nnx.Rngs(0))) == counts.tied
  assert n_params(UntiedEmbed(10, 3, rngs=nnx.Rngs(0))) == counts.untied
