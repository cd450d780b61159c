"""Plain transcriptions of the NNX and Linen contracts (docs/entrypoint.md): independent expected values for tests."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def seed_table(seed, vocab_size, d_model) -> jax.Array:
  """Seed 001, steps 1-2: nnx.Rngs(int(seed)), one rngs.params() key, normal((V, D), float32) / sqrt(D)."""
  rngs = nnx.Rngs(int(seed))
  key = rngs.params()
  return jax.random.normal(key, (int(vocab_size), int(d_model)), dtype=jnp.float32) / math.sqrt(int(d_model))


def seed_logits(seed, token_ids, vocab_size, d_model) -> np.ndarray:
  """Seed 001, steps 3-4, in NumPy float64 on the seed's table: (T * V,) scores E[ids[t]] · E[v]."""
  table = np.asarray(seed_table(seed, vocab_size, d_model), dtype=np.float64)
  ids = np.asarray(token_ids).astype(np.int32)
  return (table[ids] @ table.T).reshape(-1)
