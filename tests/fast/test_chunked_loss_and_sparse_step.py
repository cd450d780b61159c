"""The speed paths with non-default arguments, against NumPy float64: the chunked loss's custom VJP under a cotangent
other than 1, the sparse lookup path in a step with path scales ≠ 1, and the rows at the table's edge (id V − 1).

Each test here fails on a small plausible bug the tests at the default arguments let through (a VJP that ignores
its cotangent, a scale dropped from one path): docs/testing.md lists them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from helpers import hand_path_gradients, lookup_dense, model_with_tables, numpy_loss_and_grads, random_problem

from tied_embed.core import step as step_lib
from tied_embed.fast import choose, sparse_paths
from tied_embed.fast.chunked_loss import chunked_cross_entropy


def _close(got, want):
  np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("mkl_kernel", [True, False])
@pytest.mark.parametrize("distinct", [False, True])
@pytest.mark.parametrize("cotangent", [2.0, -0.5])
def test_the_chunked_losss_vjp_scales_both_gradients_by_the_incoming_cotangent(cotangent, distinct, mkl_kernel):
  x, table, targets = random_problem(num_tokens=10, vocab_size=7, d_model=3, seed=1)  # 10 tokens, chunks of 4
  keys = np.arange(10) if distinct else None  # every row its own key: the distinct-row path on a plain batch

  def loss(a, e):
    return chunked_cross_entropy(a, e, jnp.asarray(targets), 4, row_keys=keys, mkl_kernel=mkl_kernel)

  value, vjp = jax.vjp(loss, jnp.asarray(x), jnp.asarray(table))
  dx, d_table = vjp(jnp.float32(cotangent))
  want_loss, want_dx, want_d_table = numpy_loss_and_grads(x, table, targets)
  _close(value, want_loss)
  _close(dx, cotangent * want_dx)
  _close(d_table, cotangent * want_d_table)


def test_the_gradient_of_twice_the_chunked_loss_is_twice_its_gradient():
  x, table, targets = random_problem(num_tokens=9, vocab_size=6, d_model=4, seed=2)
  keys = np.array([0, 1, 1, 2, 0, 3, 3, 3, 4])  # repeated keys: their rows must be repeated too
  x = x[[0, 1, 1, 3, 0, 5, 5, 5, 8]]

  def grads(scale):
    return jax.grad(lambda a, e: scale * chunked_cross_entropy(a, e, jnp.asarray(targets), 2, row_keys=keys),
                    argnums=(0, 1))(jnp.asarray(x), jnp.asarray(table))

  _, want_dx, want_d_table = numpy_loss_and_grads(x, table, targets)
  (dx1, de1), (dx2, de2) = grads(1.0), grads(2.0)
  _close(dx1, want_dx)
  _close(de1, want_d_table)
  _close(dx2, 2 * want_dx)
  _close(de2, 2 * want_d_table)


@pytest.mark.parametrize("chunk_size", [0, 4])
@pytest.mark.parametrize("scales", [(0.5, 1.0), (1.0, 3.0)])
def test_the_sparse_paths_step_with_path_scales_updates_by_the_weighted_sum(scales, chunk_size):
  lookup_scale, projection_scale = scales
  rng = np.random.default_rng(3)
  vocab, d_model = 9, 3
  table = rng.standard_normal((vocab, d_model)).astype(np.float32)
  ids = np.array([0, 8, 8, 2, 5, 8, 1, 0], np.int32)  # row V − 1 three times
  next_ids = rng.integers(0, vocab, ids.size).astype(np.int32)
  graphdef, state = nnx.split(step_lib.TrainState(model_with_tables(table), optax.sgd(1.0)))
  paths_fn = choose.paths_function(chunk_size=chunk_size, compute_dtype="bfloat16" if chunk_size == 0 else "float32")
  assert paths_fn is not None
  step = jax.jit(step_lib.make_step_function(graphdef, paths_fn, lookup_grad_scale=lookup_scale,
                                             projection_grad_scale=projection_scale), static_argnums=3)
  _, metrics, grads = step(state, jnp.asarray(ids), jnp.asarray(next_ids), True)
  lookup, projection = hand_path_gradients(table, table, ids, next_ids)
  tolerance = dict(rtol=2e-2, atol=2e-3) if chunk_size == 0 else dict(rtol=2e-5, atol=1e-6)  # bf16 logits at 0
  np.testing.assert_allclose(grads["embedding"][...], lookup_scale * lookup + projection_scale * projection,
                             **tolerance)
  np.testing.assert_allclose(float(metrics["lookup_norm"]), np.linalg.norm(lookup), **tolerance)
  np.testing.assert_allclose(float(metrics["projection_norm"]), np.linalg.norm(projection), **tolerance)


def test_the_sparse_lookup_path_at_the_last_row_and_with_every_row_looked_up():
  rng = np.random.default_rng(4)
  vocab, d_model = 5, 3
  table = rng.standard_normal((vocab, d_model)).astype(np.float32)
  for ids in (np.array([4, 4, 4, 4]), np.array([0, 1, 2, 3, 4, 4])):  # only V − 1; every row, V − 1 twice
    next_ids = rng.integers(0, vocab, ids.size)
    model = model_with_tables(table)
    paths = sparse_paths.path_gradients(model, jnp.asarray(ids), jnp.asarray(next_ids),
                                        lambda h, e, y: chunked_cross_entropy(h, e, y, 2))
    lookup, projection = hand_path_gradients(table, table, ids, next_ids)
    _close(lookup_dense(paths), lookup)
    _close(paths.lookup_row_norms(), np.linalg.norm(lookup, axis=1))
    _close(paths.lookup_at(jnp.arange(vocab)), lookup)
    stats = paths.split_stats()
    _close(stats["total_norm"], np.linalg.norm(lookup + projection))
    cosine = np.vdot(lookup, projection) / (np.linalg.norm(lookup) * np.linalg.norm(projection))
    _close(stats["cosine"], cosine)
    assert int(stats["rows_looked_up"]) == len(set(ids.tolist()))
    assert int(stats["rows_projection_only"]) == vocab - len(set(ids.tolist()))


def test_the_sparse_split_counts_no_row_whose_projection_gradient_is_zero():
  # every looked-up row zero: the hidden vectors are 0, so the projection gradient Σ (p − y) x is 0 in every row
  rng = np.random.default_rng(7)
  table = rng.standard_normal((12, 4)).astype(np.float32)
  ids, next_ids = np.array([0, 3, 3, 11, 5], np.int32), np.array([3, 11, 0, 5, 7], np.int32)
  table[ids] = 0.0
  paths = sparse_paths.path_gradients(model_with_tables(table), jnp.asarray(ids), jnp.asarray(next_ids),
                                      lambda h, e, y: chunked_cross_entropy(h, e, y, 2))
  stats = paths.split_stats()
  assert int(stats["rows_projection_only"]) == 0 and int(stats["rows_looked_up"]) == 4
