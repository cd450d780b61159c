"""The Linen form (seed 000): its worked example, and equality with nn.Embed + nn.Embed.attend."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tied_embed.linen import TiedEmbed


def test_seed_000_worked_example():
  W = jnp.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
  ids = jnp.array([0, 2, 0], dtype=jnp.int32)
  logits = TiedEmbed(3, 2).apply({"params": {"embedding": W}}, ids)
  assert jnp.array_equal(logits, jnp.array([[1.0, 2.0, 0.0], [0.0, 0.0, 1.0], [1.0, 2.0, 0.0]]))
  assert logits[0, 1] > logits[0, 0]  # The input token need not score highest.
  assert jnp.array_equal(logits[0], logits[2])  # Repeated IDs give repeated rows.


def test_one_param_named_embedding_with_stddev_0_02():
  params = TiedEmbed(500, 64).init(jax.random.key(0), jnp.array([1, 2]))["params"]
  assert list(params) == ["embedding"]
  table = np.asarray(params["embedding"])
  assert table.shape == (500, 64) and table.dtype == np.float32
  assert abs(table.std() - 0.02) < 0.0005 and abs(table.mean()) < 0.0005


def test_equals_nn_embed_plus_attend_on_the_same_table():
  params = TiedEmbed(17, 5).init(jax.random.key(1), jnp.array([0]))
  ids = jnp.array([3, 16, 3, 0])
  embed = nn.Embed(17, 5)
  x = embed.apply(params, ids)
  expected = embed.apply(params, x, method=nn.Embed.attend)
  np.testing.assert_allclose(TiedEmbed(17, 5).apply(params, ids), expected, rtol=1e-6)
  table = np.asarray(params["params"]["embedding"], np.float64)
  np.testing.assert_allclose(expected, table[np.asarray(ids)] @ table.T, rtol=1e-5, atol=1e-7)
