"""The graded entrypoint against a plain transcription of seed 001's procedure."""

import logging
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from seed_reference import seed_logits, seed_table

from tied_embed import TiedEmbed, tied_io_embed
from tied_embed.entrypoint import _fresh_state

CASES = [  # (seed, V, D, T)
    (0, 1, 1, 0),
    (0, 1, 1, 3),
    (1, 7, 1, 5),
    (2, 1, 9, 4),
    (3, 5, 4, 0),
    (42, 13, 8, 13),
    (2**31 - 1, 10, 3, 6),
    (2**31 - 2, 64, 16, 32),
    (123456789, 300, 17, 9),
    (7, 1000, 64, 128),
]


def _ids(vocab_size, token_count, seed=0):
  return np.random.default_rng(seed).integers(0, vocab_size, token_count).astype(np.float32)


@pytest.mark.parametrize("seed,vocab_size,d_model,token_count", CASES)
def test_matches_seed_procedure(seed, vocab_size, d_model, token_count):
  ids = _ids(vocab_size, token_count, seed % 97)
  out = tied_io_embed(float(seed), ids, float(vocab_size), float(d_model))
  assert out.shape == (token_count * vocab_size,)
  assert out.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(out), seed_logits(seed, ids, vocab_size, d_model), rtol=1e-5, atol=1e-6)


def test_matches_seed_procedure_on_random_shapes():
  rng = np.random.default_rng(2024)
  for _ in range(12):
    seed = int(rng.integers(0, 2**31))
    vocab_size, d_model, token_count = (int(n) for n in rng.integers(1, [200, 70, 30]))
    ids = _ids(vocab_size, token_count, seed % 13)
    expected = seed_logits(seed, ids, vocab_size, d_model)
    out = tied_io_embed(seed, ids, vocab_size, d_model)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-6)


def test_table_is_the_seed_draw_bitwise():
  """The entrypoint's compiled initialisation reproduces the eager `normal(key) / sqrt(D)` to the last bit."""
  for seed, vocab_size, d_model in [(5, 33, 7), (2**31 - 1, 10, 3), (0, 1, 1), (12345, 1000, 64), (9, 77, 768)]:
    state = _fresh_state(np.int64(seed), vocab_size, d_model)
    np.testing.assert_array_equal(state["embedding"][...], seed_table(seed, vocab_size, d_model))


def test_model_initialisation_under_jit_is_the_seed_draw_bitwise():
  init = jax.jit(lambda s: TiedEmbed(77, 5, rngs=nnx.Rngs(jax.random.key(s))).embedding[...])
  np.testing.assert_array_equal(init(np.int32(3)), seed_table(3, 77, 5))


def test_output_is_in_token_position_order():
  ids = np.array([2.0, 0.0, 2.0])
  table = np.asarray(seed_table(9, 4, 3), dtype=np.float64)
  out = np.asarray(tied_io_embed(9, ids, 4, 3)).reshape(3, 4)
  for t, token in enumerate([2, 0, 2]):
    np.testing.assert_allclose(out[t], [table[token] @ table[v] for v in range(4)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "seed,ids,vocab_size,d_model",
    [
        (11.0, [1.0, 4.0, 4.0], 6.0, 5.0),  # Python floats (ids as a list)
        (np.float64(11), np.array([1.0, 4.0, 4.0]), np.float32(6), np.int64(5)),  # NumPy scalars, float64 array
        (np.float32(11), np.array([1.0, 4.0, 4.0], np.float32), 6, 5),
        (jnp.float32(11), jnp.array([1.0, 4.0, 4.0]), jnp.float32(6), jnp.float32(5)),  # jax arrays
        (11, np.array([1, 4, 4], np.int64), 6, 5),  # integer inputs need no cast either
    ],
)
def test_accepts_floats_numpy_and_jax_inputs(seed, ids, vocab_size, d_model):
  expected = seed_logits(11, [1, 4, 4], 6, 5)
  np.testing.assert_allclose(np.asarray(tied_io_embed(seed, ids, vocab_size, d_model)), expected, rtol=1e-5, atol=1e-6)


def test_seeds_outside_int32_and_x64_switched_on_after_import_follow_jax_random_key():
  ids = np.array([0.0, 1.0, 2.0])
  for seed in (-1, 2**31, 2**33 + 1):
    np.testing.assert_allclose(np.asarray(tied_io_embed(seed, ids, 4, 3)), seed_logits(seed, ids, 4, 3), rtol=1e-5)
  with jax.enable_x64(True):
    for seed in (-1, 2**33 + 1):
      out = np.asarray(tied_io_embed(seed, ids, 4, 3))
      np.testing.assert_allclose(out, seed_logits(seed, ids, 4, 3), rtol=1e-5, atol=1e-6)


def test_works_under_caller_jit_with_dynamic_ids():
  jitted = jax.jit(tied_io_embed, static_argnums=(0, 2, 3))
  for seed, ids in [(3.0, [0.0, 2.0]), (4.0, [1.0, 1.0])]:
    out = jitted(seed, jnp.asarray(ids, jnp.float32), 5.0, 4.0)
    np.testing.assert_allclose(np.asarray(out), seed_logits(seed, ids, 5, 4), rtol=1e-5, atol=1e-6)


def _compilations(caplog):
  return [r.getMessage() for r in caplog.records if "Finished XLA compilation" in r.getMessage()]


def test_new_seed_or_new_ids_do_not_recompile(caplog):
  caplog.set_level(logging.WARNING, logger="jax")
  with jax.log_compiles(True):
    tied_io_embed(1.0, _ids(37, 11, 1), 37.0, 6.0)  # warm-up for this shape
    first = len(_compilations(caplog))
    assert first >= 1, "compile logging did not capture the first call's compilation"
    for seed in (2.0, 99.0, 2.0**31 - 1):
      tied_io_embed(seed, _ids(37, 11, int(seed) % 5), 37.0, 6.0)
    assert len(_compilations(caplog)) == first
    tied_io_embed(1.0, _ids(37, 12, 1), 37.0, 6.0)  # a new T compiles again (the forward pass only)
    assert len(_compilations(caplog)) > first


def test_output_depends_only_on_the_seed():
  ids = _ids(8, 4)
  first = np.asarray(tied_io_embed(5, ids, 8, 3))
  tied_io_embed(6, ids, 8, 3)
  np.testing.assert_array_equal(np.asarray(tied_io_embed(5, ids, 8, 3)), first)
  assert not np.allclose(np.asarray(tied_io_embed(6, ids, 8, 3)), first)


def test_import_stays_light():
  heavy = ("tensorflow", "tensorflow_datasets", "clu", "orbax")
  code = f"import sys, tied_embed; print([m for m in {heavy!r} if m in sys.modules])"
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "vocab_size,d_model,name",
    [(0, 3, "vocab_size"), (-1.0, 3, "vocab_size"), (0.9, 3, "vocab_size"), (5, -2, "d_model"), (5, 0.0, "d_model")],
)
def test_sizes_below_one_raise_value_error_naming_the_argument(vocab_size, d_model, name):
  for entrypoint in (tied_io_embed, jax.jit(tied_io_embed, static_argnums=(0, 2, 3))):
    with pytest.raises(ValueError, match=f"^{name}=.*expected an integer >= 1"):
      entrypoint(0.0, np.array([0.0]), vocab_size, d_model)


def test_ids_outside_the_vocabulary_index_like_jax_arrays():
  """Negative ids down to -V count from the end, as in NumPy; anything further out is clamped to row 0 or V - 1."""
  vocab_size = 5
  ids = np.array([-1.0, -5.0, -6.0, 5.0, 7.0, 1e10])
  rows = np.asarray(tied_io_embed(1, ids, vocab_size, 3)).reshape(len(ids), vocab_size)
  expected = seed_logits(1, [4, 0, 0, 4, 4, 4], vocab_size, 3).reshape(len(ids), vocab_size)
  np.testing.assert_allclose(rows, expected, rtol=1e-5, atol=1e-6)


def test_ids_of_any_shape_give_their_rows_flattened_in_row_major_order():
  ids = np.array([[0.0, 1.0, 4.0], [2.0, 2.0, 3.0]])
  out = tied_io_embed(2, ids, 5, 4)
  assert out.shape == (ids.size * 5,)
  np.testing.assert_allclose(np.asarray(out), seed_logits(2, ids.reshape(-1), 5, 4), rtol=1e-5, atol=1e-6)
