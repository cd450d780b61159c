"""The losses: the chunked cross-entropy equals the full one, in value and both gradients, and holds far less memory."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import loss_and_path_gradients, numpy_loss_and_grads, random_problem

from tied_embed.fast.chunked_loss import chunked_cross_entropy, cross_entropy, full_cross_entropy

RTOL = 1e-5


def _assert_close(actual, expected):
  expected = np.asarray(expected)
  # rtol on every entry, with an absolute floor far below the entries' scale for the ones that are ~0.
  np.testing.assert_allclose(np.asarray(actual), expected, rtol=RTOL, atol=RTOL * 1e-2 * np.abs(expected).max())


SHAPES = [  # (T, V, D, chunk of tokens)
    pytest.param(8, 24, 5, 4, id="T-divisible"),
    pytest.param(7, 23, 5, 3, id="T-and-V-not-divisible-by-chunk"),
    pytest.param(9, 50, 4, 4, id="tail-of-one-token"),
    pytest.param(1, 10, 3, 4, id="one-token"),
    pytest.param(6, 10, 4, 6, id="chunk-equals-T"),
    pytest.param(6, 10, 4, 64, id="chunk-above-T"),
    pytest.param(5, 6, 3, 1, id="chunk-of-one"),
]


@pytest.mark.parametrize("num_tokens, vocab_size, d_model, chunk", SHAPES)
def test_loss_and_both_gradients_equal_full_logits_and_closed_form(num_tokens, vocab_size, d_model, chunk):
  x, table, targets = random_problem(num_tokens, vocab_size, d_model)
  # Under jit, as the train step runs it (one compile instead of one per operation; eager calls: below).
  grad_fn = jax.jit(jax.value_and_grad(chunked_cross_entropy, argnums=(0, 1)), static_argnums=3)
  loss, (dx, d_table) = grad_fn(x, table, targets, chunk)
  full_loss, (full_dx, full_d_table) = jax.jit(jax.value_and_grad(full_cross_entropy, argnums=(0, 1)))(
      x, table, targets)
  ref_loss, ref_dx, ref_d_table = numpy_loss_and_grads(x, table, targets)
  triples = [(loss, full_loss, ref_loss), (dx, full_dx, ref_dx), (d_table, full_d_table, ref_d_table)]
  for actual, full, reference in triples:
    _assert_close(actual, full)
    _assert_close(actual, reference)


def test_large_logits_do_not_overflow_the_chunked_logsumexp():
  x, table, targets = random_problem(6, 19, 4, seed=1, scale=60.0)  # logits in the hundreds: exp overflows float32
  loss, (dx, d_table) = jax.value_and_grad(chunked_cross_entropy, argnums=(0, 1))(x, table, targets, 5)
  ref_loss, ref_dx, ref_d_table = numpy_loss_and_grads(x, table, targets)
  assert np.isfinite(float(loss))
  _assert_close(loss, ref_loss)
  _assert_close(dx, ref_dx)
  _assert_close(d_table, ref_d_table)


def test_jitted_and_undifferentiated_calls_match_the_full_loss():
  x, table, targets = random_problem(10, 37, 6, seed=2)
  expected = full_cross_entropy(x, table, targets)
  _assert_close(jax.jit(chunked_cross_entropy, static_argnums=3)(x, table, targets, 8), expected)
  _assert_close(cross_entropy(x, table, targets, chunk_size=8), expected)
  jitted_grad = jax.jit(jax.grad(lambda e: cross_entropy(x, e, targets, chunk_size=8)))
  _assert_close(jitted_grad(table), jax.grad(lambda e: full_cross_entropy(x, e, targets))(table))


def test_per_token_losses_under_vmap_match_the_full_loss():
  x, table, targets = random_problem(5, 13, 4, seed=4)  # evaluation vmaps the loss over single tokens

  def per_token(loss_fn):
    return jax.vmap(lambda xt, yt: loss_fn(xt[None], table, yt[None]))(x, targets)

  _assert_close(per_token(lambda a, e, y: chunked_cross_entropy(a, e, y, 4)), per_token(full_cross_entropy))


def test_provenance_split_is_the_same_with_chunked_and_full_loss():
  vocab_size = 29
  _, table, _ = random_problem(1, vocab_size, 6, seed=3)
  ids = np.array([0, 3, 3, 7, 12, 3, 20], np.int32)
  next_ids = np.array([3, 7, 12, 3, 20, 28, 0], np.int32)

  def split(chunk_size):
    def loss_fn(x, projection):
      return cross_entropy(x, projection, next_ids, chunk_size)

    return jax.jit(lambda e: loss_and_path_gradients(e, e, ids, loss_fn))(jnp.asarray(table))

  full_loss, full_lookup, full_projection = split(0)
  loss, lookup, projection = split(3)
  _assert_close(loss, full_loss)
  _assert_close(lookup, full_lookup)
  _assert_close(projection, full_projection)
  looked_up = np.zeros(vocab_size, bool)
  looked_up[ids] = True
  assert np.all(np.asarray(lookup)[~looked_up] == 0)  # the lookup path only reaches looked-up rows
  assert np.all(np.abs(np.asarray(projection)[~looked_up]).sum(axis=1) > 0)  # the projection reaches them all


def test_compiled_gradient_needs_under_an_eighth_of_the_full_losss_temporary_memory():
  num_tokens, vocab_size, d_model, chunk = 1024, 4096, 16, 32
  x = jax.ShapeDtypeStruct((num_tokens, d_model), jnp.float32)
  table = jax.ShapeDtypeStruct((vocab_size, d_model), jnp.float32)
  targets = jax.ShapeDtypeStruct((num_tokens,), jnp.int32)

  def temp_bytes(loss_fn):
    compiled = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1))).lower(x, table, targets).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  full = temp_bytes(full_cross_entropy)
  chunked = temp_bytes(lambda a, e, y: chunked_cross_entropy(a, e, y, chunk))
  logits_bytes = num_tokens * vocab_size * 4
  assert full >= logits_bytes  # the full loss does hold the (T, V) logits
  assert chunked * 8 <= full, (chunked, full)


def test_compiled_gradient_holds_one_table_sized_temporary_the_accumulator():
  # Wide rows and few tokens, so any extra (V, D) buffer (a transposed copy of the table, a second gradient)
  # would dominate: the chunked gradient should need its (V, D) accumulator, two (V, C) chunks and (T, D) rows.
  num_tokens, vocab_size, d_model, chunk = 256, 4096, 256, 32
  x = jax.ShapeDtypeStruct((num_tokens, d_model), jnp.float32)
  table = jax.ShapeDtypeStruct((vocab_size, d_model), jnp.float32)
  targets = jax.ShapeDtypeStruct((num_tokens,), jnp.int32)
  grad_fn = jax.value_and_grad(lambda a, e, y: chunked_cross_entropy(a, e, y, chunk), argnums=(0, 1))
  temp = jax.jit(grad_fn).lower(x, table, targets).compile().memory_analysis().temp_size_in_bytes
  table_bytes = vocab_size * d_model * 4
  assert temp < 2 * table_bytes, (temp, table_bytes)


@pytest.mark.parametrize("chunk_size", [0, -3, 2.5])
def test_chunk_size_must_be_a_positive_int(chunk_size):
  x, table, targets = random_problem(2, 5, 3)
  with pytest.raises(ValueError, match="chunk_size"):
    chunked_cross_entropy(x, table, targets, chunk_size)


DISTINCT_CASES = [  # (ids looked up, chunk of rows, groups)
    pytest.param([0, 3, 3, 7, 12, 3, 20, 7], 3, 1, id="repeats"),
    pytest.param([5, 5, 5, 5, 5, 5], 4, 1, id="one-distinct-id"),
    pytest.param([9, 1, 4, 0, 2, 8, 6], 2, 1, id="all-distinct-tail"),
    pytest.param([0, 3, 3, 7, 12, 3, 20, 7], 4, 2, id="two-blocks"),
    pytest.param([1, 1, 2, 2, 1, 2, 3, 3], 1, 4, id="four-blocks-chunk-of-one"),
    pytest.param([4, 4, 4, 9, 9, 1], 64, 3, id="chunk-above-block"),
]


@pytest.mark.parametrize("ids, chunk, groups", DISTINCT_CASES)
def test_each_distinct_row_once_gives_the_closed_form_loss_and_gradients(ids, chunk, groups):
  ids = np.asarray(ids, np.int32)
  _, table, _ = random_problem(1, 23, 5, seed=5)
  targets = np.random.default_rng(6).integers(0, 23, ids.size).astype(np.int32)
  x = table[ids]  # looked-up rows: equal wherever the ids are

  def loss_fn(a, e):
    return chunked_cross_entropy(a, e, targets, chunk, row_keys=ids, groups=groups)

  loss, (dx, d_table) = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1)))(x, table)
  ref_loss, ref_dx, ref_d_table = numpy_loss_and_grads(x, table, targets)
  _assert_close(loss, ref_loss)
  _assert_close(dx, ref_dx)  # per token, as if every row had been scored on its own
  _assert_close(d_table, ref_d_table)


def test_rows_sharing_a_key_are_scored_once_from_the_first_of_them():
  # The contract made visible: the logsumexp part is computed once per key, from the key's first row, and counted
  # for every token holding the key. Rows that differ under one key (a broken contract) show it.
  x, table, targets = random_problem(6, 11, 4, seed=7)
  keys = np.array([2, 2, 2, 5, 5, 2], np.int32)
  firsts = x[[0, 0, 0, 3, 3, 0]]
  lse = np.log(np.exp(firsts.astype(np.float64) @ table.T.astype(np.float64)).sum(axis=1))
  expected = np.mean(lse - np.sum(x * table[targets], axis=1))
  _assert_close(chunked_cross_entropy(x, table, targets, 2, row_keys=keys), expected)


def test_distinct_rows_in_the_train_step_match_autodiff_of_the_full_loss_under_jit():
  ids = jnp.asarray(np.random.default_rng(8).integers(0, 40, 96), jnp.int32)  # 96 draws of 40: many repeats
  next_ids = jnp.roll(ids, -1)
  _, table, _ = random_problem(1, 40, 8, seed=9)

  def split(loss_fn):
    return jax.jit(lambda e: loss_and_path_gradients(e, e, ids, loss_fn))(jnp.asarray(table))

  distinct = split(lambda a, e: chunked_cross_entropy(a, e, next_ids, 16, row_keys=ids, groups=2))
  full = split(lambda a, e: full_cross_entropy(a, e, next_ids))
  for actual, expected in zip(distinct, full, strict=True):
    _assert_close(actual, expected)


def test_groups_must_divide_the_tokens():
  x, table, targets = random_problem(6, 5, 3)
  with pytest.raises(ValueError, match="groups=4"):
    chunked_cross_entropy(x, table, targets, 2, row_keys=np.arange(6), groups=4)


@pytest.mark.parametrize("chunk", [0, 1, 4, 64])
def test_the_speed_paths_loss_and_gradients_equal_the_plain_loss_of_tied_embed_core(chunk):
  from tied_embed.core.loss import hidden_cross_entropy  # noqa: PLC0415

  x, table, targets = random_problem(24, 17, 6, seed=21)
  keys = np.arange(24) % 5  # rows sharing a key must be equal: make them so
  x = x[keys]

  def fast(a, e):
    if chunk == 0:
      return full_cross_entropy(a, e, targets)
    return chunked_cross_entropy(a, e, targets, chunk, row_keys=keys)

  plain = jax.jit(jax.value_and_grad(lambda a, e: hidden_cross_entropy(a, e, targets), argnums=(0, 1)))(x, table)
  got = jax.jit(jax.value_and_grad(fast, argnums=(0, 1)))(x, table)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(plain), strict=True):
    np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-7)
