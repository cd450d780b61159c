"""The entrypoint's inputs at their edges: 1-D and 2-D ids counted alike by the memory guard and the output, and ids
that arrive as floats cast to int32 as seed 001's step 3 says (a harness conversion: no rounding, no refusal)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from seed_reference import seed_table

from tied_embed import entrypoint, tied_io_embed


def _rows(seed, ids, vocab_size, d_model) -> np.ndarray:
  """E[ids] · Eᵀ in float64 for integer `ids` given by hand: (T, V)."""
  table = np.asarray(seed_table(seed, vocab_size, d_model), np.float64)
  return table[np.asarray(ids, np.int64)] @ table.T


@pytest.mark.parametrize("shape", [(6,), (2, 3), (3, 2), (1, 6)])
def test_the_memory_guard_counts_every_id_of_a_1d_or_2d_input(monkeypatch, shape):
  # V = 10, D = 1 and 6 ids: 4 · (10 + 6 · 10) = 280 bytes; a count of the first axis alone would be at most 4 · 40
  ids = np.zeros(shape, np.float32)
  monkeypatch.setattr(entrypoint, "_memory_bytes", lambda: 279)
  with pytest.raises(ValueError, match="need 280 bytes, more than the 279 bytes"):
    tied_io_embed(0, ids, 10, 1)
  monkeypatch.setattr(entrypoint, "_memory_bytes", lambda: 280)
  assert tied_io_embed(0, ids, 10, 1).shape == (60,)


def test_a_2d_input_gives_the_rows_of_its_ids_in_row_major_order():
  ids = np.array([[4.0, 0.0], [1.0, 4.0], [2.0, 2.0]])
  out = np.asarray(tied_io_embed(5, ids, 6, 3), np.float64)
  np.testing.assert_allclose(out.reshape(6, 6), _rows(5, [4, 0, 1, 4, 2, 2], 6, 3), rtol=1e-5, atol=1e-6)


def test_integer_valued_floats_of_every_width_are_the_integer_ids():
  want = _rows(3, [0, 6, 2, 6], 7, 2).reshape(-1)
  for dtype in (np.float16, np.float32, np.float64, jnp.bfloat16, np.int32, np.int64):
    ids = np.array([0, 6, 2, 6]).astype(dtype)
    np.testing.assert_allclose(np.asarray(tied_io_embed(3.0, ids, 7.0, 2.0), np.float64), want, rtol=1e-5,
                               atol=1e-6, err_msg=str(dtype))


def test_fractional_ids_are_cast_toward_zero_not_rounded_nor_refused():
  # seed 001: "Cast token_ids to jnp.int32 ... not validation or rounding": 2.7 → 2, 0.5 → 0, 5.999 → 5
  ids = np.array([2.7, 0.5, 5.999, 1.0])
  want = _rows(1, [2, 0, 5, 1], 7, 3).reshape(-1)
  np.testing.assert_allclose(np.asarray(tied_io_embed(1, ids, 7, 3), np.float64), want, rtol=1e-5, atol=1e-6)
  jitted = jax.jit(tied_io_embed, static_argnums=(0, 2, 3))
  np.testing.assert_allclose(np.asarray(jitted(1, jnp.asarray(ids, jnp.float32), 7, 3), np.float64), want,
                             rtol=1e-5, atol=1e-6)
