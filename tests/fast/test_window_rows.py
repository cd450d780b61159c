"""The speed paths on windows: an id repeated inside a window has a different hidden vector at each position (its
context differs), so the bigram shortcut (one row scored per distinct id) must not apply; the loss and both path
gradients equal the plain paths' (core/paths.py) whatever the repeats."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx
from helpers import lookup_dense

from tied_embed.core import paths as plain_paths
from tied_embed.core.model import build_model
from tied_embed.fast import choose

VOCAB, D_MODEL, LENGTH = 16, 4, 4


def _model(context: str):
  return build_model(ml_collections.ConfigDict({
      "seed": 0, "data": {"context_length": LENGTH},
      "model": {"vocab_size": VOCAB, "d_model": D_MODEL, "tied": True, "context": context, "context_k": 2,
                "layers": 1, "heads": 2, "hidden": "none"}}))


# jitted once for the module: eager, each op of the gradients would compile apart (~10 s)
PLAIN = nnx.jit(plain_paths.path_gradients)
FAST = nnx.jit(choose.paths_function(chunk_size=3, shards=2))  # chunks of 3, in two data shards' blocks


WINDOWS = [  # each window's ids repeated, so every distinct id has several hidden vectors
    [[5, 5, 5, 5], [5, 5, 5, 5]],
    [[3, 7, 3, 7], [7, 3, 7, 3]],
]


@pytest.mark.parametrize("context", ["mlp", "transformer"])
@pytest.mark.parametrize("windows", WINDOWS, ids=["one-id", "two-ids"])
def test_repeated_ids_in_a_window_are_scored_at_each_position(context, windows):
  model = _model(context)
  ids = jnp.asarray(windows, jnp.int32)
  next_ids = jnp.asarray(np.arange(ids.size).reshape(ids.shape) % VOCAB, jnp.int32)
  plain, fast = PLAIN(model, ids, next_ids), FAST(model, ids, next_ids)
  np.testing.assert_allclose(fast.loss, plain.loss, rtol=1e-5)
  np.testing.assert_allclose(lookup_dense(fast), plain.lookup, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(fast.projection, plain.projection, rtol=1e-4, atol=1e-6)
  want = jax.tree_util.tree_leaves(plain.hidden)
  for got, expected in zip(jax.tree_util.tree_leaves(fast.hidden), want, strict=True):
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
