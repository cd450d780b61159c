"""The gradient buffer: the trainer's step writes each gradient where the last one was, and is the same step jitted
without it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tied_embed.core import optim
from tied_embed.core import step as step_lib
from tied_embed.core.model import build_model
from tied_embed.fast import choose, compilation
from tied_embed.train import run_step


def _smoke_state(hidden: str = "none"):
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  config.model.hidden = hidden
  return config, nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))


def _batch(vocab_size: int):
  ids = jnp.asarray(np.random.default_rng(0).integers(0, vocab_size, 64), jnp.int32)
  return ids, jnp.roll(ids, 1)


@pytest.mark.parametrize("hidden", ["none", "linear"])
def test_the_step_with_a_buffer_is_the_unbuffered_step_bit_for_bit(hidden):
  config, (graphdef, state) = _smoke_state(hidden)
  chunk_size = int(config.loss.chunk_size)
  ids, next_ids = _batch(int(config.model.vocab_size))
  step_fn = step_lib.make_step_function(graphdef, choose.paths_function(chunk_size),
                                       after_gradients=run_step.bookkeeping())
  plain = jax.jit(lambda state, ids, next_ids, with_stats=False: step_fn(state, ids, next_ids, with_stats)[:2],
                 donate_argnums=0, static_argnames="with_stats", compiler_options=compilation.compiler_options())
  buffered = run_step.make_run_step(graphdef, chunk_size)
  want, got = jax.tree.map(jnp.copy, state), jax.tree.map(jnp.copy, state)
  for with_stats in (False, True, False):
    want, want_metrics = plain(want, ids, next_ids, with_stats=with_stats)
    got, got_metrics = buffered(got, ids, next_ids, with_stats=with_stats)
    for name, value in want_metrics.items():
      np.testing.assert_array_equal(got_metrics[name], value, err_msg=name)
  for (path, value), (_, other) in zip(jax.tree.leaves_with_path(want), jax.tree.leaves_with_path(got), strict=True):
    np.testing.assert_array_equal(other, value, err_msg=jax.tree_util.keystr(path))


def test_each_step_writes_its_gradient_into_the_last_steps_buffer():
  config, (graphdef, state) = _smoke_state()
  ids, next_ids = _batch(int(config.model.vocab_size))
  step = run_step.make_run_step(graphdef, int(config.loss.chunk_size))
  state, _ = step(state, ids, next_ids)
  buffer = step._buffer["embedding"][...]
  address = buffer.unsafe_buffer_pointer()
  state, _ = step(state, ids, next_ids)
  assert buffer.is_deleted()  # donated
  assert step._buffer["embedding"][...].unsafe_buffer_pointer() == address
  table_bytes = int(config.model.vocab_size) * int(config.model.d_model) * 4
  compiled = step.lower(state, ids, next_ids).compile()
  assert compiled.memory_analysis().alias_size_in_bytes >= table_bytes  # the buffer, beside the donated state
