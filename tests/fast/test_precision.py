"""model.dtype=bfloat16: the loss, its gradients and the provenance split stay within bfloat16's rounding of float64.

bfloat16 keeps 8 mantissa bits, so each matmul operand is rounded by up to u = 2^-9 ≈ 2e-3 relative; the dots
accumulate in float32 and the logsumexp is float32, so the loss and the gradients inherit errors of a few u
(measured 1.5e-3 to 3.5e-3 in norm here). BF16_BOUND = 2e-2, about 10 u, leaves a 6x margin for other shapes and
seeds. The same quantities must also differ from float32 by more than CAST_VISIBLE (50 times float32's 1e-5
tolerance, under a tenth of what bfloat16 gives), so a cast that is silently skipped fails the test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import hand_path_gradients, loss_and_path_gradients, numpy_loss_and_grads, random_problem, smoke_with

from tied_embed.fast.chunked_loss import chunked_cross_entropy, cross_entropy, full_cross_entropy

BF16_BOUND = 2e-2  # ≈ 10 u, u = 2^-9 (see the module docstring)
CAST_VISIBLE = 5e-4  # bfloat16's gradients must be at least this far from float64; float32's are ~2e-7
F32_BOUND = 1e-5
NUM_TOKENS, VOCAB, D_MODEL, CHUNK = 96, 200, 16, 16


def _relative_error(actual, expected) -> float:
  """‖actual − expected‖ / ‖expected‖, in float64."""
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def _ids(seed: int = 12) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 40, NUM_TOKENS).astype(np.int32)  # 96 draws of 40: repeats


def _loss_fns(targets, ids):
  """Each path of the loss as f(x, table, compute_dtype) → scalar: full, chunked per token, chunked distinct rows."""
  return {
      "full": lambda x, e, dtype: full_cross_entropy(x, e, targets, dtype),
      "chunked": lambda x, e, dtype: chunked_cross_entropy(x, e, targets, CHUNK, compute_dtype=dtype),
      "distinct": lambda x, e, dtype: chunked_cross_entropy(
          x, e, targets, CHUNK, row_keys=ids, groups=2, compute_dtype=dtype
      ),
  }


def _errors(path: str, dtype) -> tuple[list[float], jax.Array]:
  """Relative errors of (loss, dx, d table) against the float64 closed form, and the loss itself."""
  x, table, targets = random_problem(NUM_TOKENS, VOCAB, D_MODEL, seed=11)
  ids = _ids()
  if path == "distinct":
    x = table[ids]  # looked-up rows: equal wherever the ids are, as the distinct-rows path requires
  loss, grads = jax.value_and_grad(_loss_fns(targets, ids)[path], argnums=(0, 1))(x, table, dtype)
  assert loss.dtype == grads[0].dtype == grads[1].dtype == jnp.float32  # outputs stay float32
  reference = numpy_loss_and_grads(x, table, targets)
  return [_relative_error(got, want) for got, want in zip((loss, *grads), reference, strict=True)], loss


@pytest.mark.parametrize("path", ["full", "chunked", "distinct"])
def test_bfloat16_loss_and_gradients_are_within_its_rounding_and_visibly_not_float32(path):
  bf16_errors, bf16_loss = _errors(path, jnp.bfloat16)
  f32_errors, f32_loss = _errors(path, jnp.float32)
  assert max(f32_errors) < F32_BOUND, f32_errors
  assert max(bf16_errors) < BF16_BOUND, bf16_errors
  assert min(bf16_errors[1:]) > CAST_VISIBLE, bf16_errors  # both gradients show the cast
  assert float(bf16_loss) != float(f32_loss)


def test_the_dtype_name_from_the_config_selects_the_same_program_as_the_dtype():
  x, table, targets = random_problem(8, 30, 4, seed=3)
  by_name = cross_entropy(x, table, targets, chunk_size=3, compute_dtype="bfloat16")
  assert float(by_name) == float(cross_entropy(x, table, targets, chunk_size=3, compute_dtype=jnp.bfloat16))
  with pytest.raises(ValueError, match="compute_dtype='float16'"):
    cross_entropy(x, table, targets, chunk_size=3, compute_dtype="float16")


@pytest.mark.parametrize("chunk_size", [0, CHUNK])
def test_bfloat16_provenance_paths_are_within_its_rounding_of_the_hand_gradients(chunk_size):
  _, table, _ = random_problem(1, VOCAB, D_MODEL, seed=13)
  ids = _ids()
  next_ids = np.roll(ids, -1)
  want_lookup, want_projection = hand_path_gradients(table, table, ids, next_ids)

  def split(dtype):
    def loss_fn(x, projection):
      if chunk_size == 0:
        return full_cross_entropy(x, projection, next_ids, dtype)
      return chunked_cross_entropy(x, projection, next_ids, chunk_size, row_keys=ids, compute_dtype=dtype)

    table_array = jnp.asarray(table)
    _, lookup, projection = jax.jit(lambda e: loss_and_path_gradients(e, e, ids, loss_fn))(table_array)
    return _relative_error(lookup, want_lookup), _relative_error(projection, want_projection)

  assert max(split(jnp.float32)) < F32_BOUND
  bf16 = split(jnp.bfloat16)
  assert max(bf16) < BF16_BOUND and min(bf16) > CAST_VISIBLE, bf16


def test_a_bfloat16_smoke_run_ends_near_the_float32_one(smoke_run, tmp_path):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  summary = train_and_evaluate(smoke_with("model.dtype", "bfloat16"), tmp_path / "bf16")  # 60 steps, V=32, D=8

  want = smoke_run.summary.eval_loss  # float32: the same seed, batches and schedule
  assert np.isfinite(summary.eval_loss)
  assert summary.eval_loss != want  # bfloat16 was used
  assert abs(summary.eval_loss - want) < BF16_BOUND * want, (summary.eval_loss, want)


@pytest.mark.parametrize("path", ["full", "chunked", "distinct"])
def test_bfloat16_rounds_the_target_logit_as_it_rounds_the_others(path):
  # Confident predictions (x = E[ids], |E| large): the loss is ~0, so a target logit taken from float32 operands
  # beside a logsumexp from bfloat16 ones shows as a loss off by ~0.1, even below 0. Reference: float64 on the
  # bfloat16-rounded operands, which each path promises (bfloat16 operands, float32 accumulation).
  rng = np.random.default_rng(3)
  table = jnp.asarray(1.5 * rng.standard_normal((16, 64)), jnp.float32)
  ids = jnp.asarray(rng.integers(0, 16, 32), jnp.int32)
  x = table[ids]
  loss, grads = jax.value_and_grad(_loss_fns(ids, ids)[path], argnums=(0, 1))(x, table, jnp.bfloat16)
  rounded = [np.asarray(a.astype(jnp.bfloat16), np.float64) for a in (x, table)]
  want_loss, *want_grads = numpy_loss_and_grads(*rounded, np.asarray(ids))
  assert float(loss) >= 0 and abs(float(loss) - want_loss) < 1e-5
  # each gradient ~0: no floor of bfloat16's rounding of E / T. The distinct-rows path scales a row by its count
  # before rounding it (a pass over the (C, D) rows, not the (V, C) exponentials), so its d table keeps one.
  checked = grads if path != "distinct" else grads[:1]
  for got, want in zip(checked, want_grads, strict=False):
    assert np.abs(np.asarray(got, np.float64) - want).max() < 1e-4


def test_model_dtype_bfloat16_reaches_the_unchunked_training_paths_too():
  # loss.chunk_size=0 trains on the full logits: with model.dtype=bfloat16 those must be bfloat16's, not float32's
  import optax  # noqa: PLC0415
  from flax import nnx  # noqa: PLC0415
  from helpers import model_with_tables  # noqa: PLC0415

  from tied_embed.core import step as step_lib  # noqa: PLC0415
  from tied_embed.fast import choose  # noqa: PLC0415

  rng = np.random.default_rng(5)
  table = rng.standard_normal((64, 16)).astype(np.float32)
  ids, next_ids = rng.integers(0, 64, 96).astype(np.int32), rng.integers(0, 64, 96).astype(np.int32)
  lookup, projection = hand_path_gradients(table, table, ids, next_ids)
  errors = {}
  for dtype in ("float32", "bfloat16"):
    graphdef, state = nnx.split(step_lib.TrainState(model_with_tables(table), optax.sgd(1.0)))
    step = jax.jit(step_lib.make_step_function(graphdef, choose.paths_function(0, dtype)), static_argnums=3)
    grads = step(state, jnp.asarray(ids), jnp.asarray(next_ids), False)[2]
    errors[dtype] = _relative_error(grads["embedding"][...], lookup + projection)
  assert errors["float32"] < F32_BOUND
  assert CAST_VISIBLE < errors["bfloat16"] < BF16_BOUND


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_trainers_step_takes_the_configs_model_dtype(monkeypatch, dtype):
  from helpers import smoke_with  # noqa: PLC0415

  from tied_embed.train import run_step  # noqa: PLC0415

  asked = {}
  monkeypatch.setattr(run_step, "make_run_step", lambda *args, **options: asked.update(options))
  run_step.train_step_for(smoke_with("model.dtype", dtype), None, {})
  assert asked["compute_dtype"] == dtype
