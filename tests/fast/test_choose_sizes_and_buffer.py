"""fast/choose.py's sizes and its kept buffer, where mutation testing found them unpinned: the split check's share of a
batch (a whole number of pairs, a multiple of the data shards, at least one a shard) by hand, and a buffer a failed
call left deleted made again."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tied_embed.core import optim
from tied_embed.core.model import build_model
from tied_embed.fast import choose
from tied_embed.train import run_step

LIMIT = 64 * 2**20  # bytes of float32 logits the check may hold


@pytest.mark.parametrize(("batch", "vocab", "shards", "want"), [
    # V = 5,000,000: 4 · V = 20,000,000 bytes a row, 67,108,864 // 20,000,000 = 3 rows fit
    (3, 5_000_000, 1, None),  # the whole batch fits
    (4, 5_000_000, 1, 3),  # 3 rows, a multiple of 1
    (4, 5_000_000, 2, 2),  # 3 // 2 = 1 row a shard, 2 shards
    (8, 5_000_000, 4, 4),  # 3 // 4 = 0 rows a shard: at least 1, so 4
    (2, 2**24, 1, 1),  # 4 · 2^24 = 2^26 bytes: exactly one row fits
    (7, 2**24, 3, 3),  # 1 // 3 = 0: one row a shard
])
def test_the_split_checks_share_is_a_whole_number_of_pairs_a_multiple_of_the_shards(batch, vocab, shards, want):
  assert LIMIT // (4 * vocab) == (3 if vocab == 5_000_000 else 1)  # by hand
  got = choose.split_check_tokens(batch, vocab, shards)
  assert got == want
  assert got is None or type(got) is int  # a slice size: 3.0 is not one


def test_the_split_check_reads_one_data_shard_unless_told():
  assert choose.split_check_tokens(4, 5_000_000) == 3  # two shards would give 2


def test_a_buffer_a_failed_call_left_deleted_is_made_again():
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  graphdef, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  ids = jnp.asarray(np.random.default_rng(0).integers(0, int(config.model.vocab_size), 64), jnp.int32)
  next_ids = jnp.roll(ids, 1)
  want_step, got_step = (run_step.make_run_step(graphdef, int(config.loss.chunk_size)) for _ in range(2))
  want, got = jax.tree.map(jnp.copy, state), jax.tree.map(jnp.copy, state)
  want, _ = want_step(want, ids, next_ids)
  got, _ = got_step(got, ids, next_ids)
  for leaf in jax.tree.leaves(got_step._buffer):  # as a call that donated the buffer, then failed, leaves it
    leaf.delete()
  want, _ = want_step(want, ids, next_ids)
  got, _ = got_step(got, ids, next_ids)
  assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(got_step._buffer))
  for (path, value), (_, other) in zip(jax.tree.leaves_with_path(want), jax.tree.leaves_with_path(got), strict=True):
    np.testing.assert_array_equal(other, value, err_msg=jax.tree_util.keystr(path))


def test_the_buffered_step_returns_the_plain_metrics_unless_asked_for_its_statistics():
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  graphdef, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  ids = jnp.asarray(np.random.default_rng(0).integers(0, int(config.model.vocab_size), 64), jnp.int32)
  step = run_step.make_run_step(graphdef, int(config.loss.chunk_size))
  state, unasked = step(state, ids, jnp.roll(ids, 1))
  state, plain = step(state, ids, jnp.roll(ids, 1), with_stats=False)
  _, stats = step(state, ids, jnp.roll(ids, 1), with_stats=True)
  assert set(unasked) == set(plain) and set(stats) > set(plain)
