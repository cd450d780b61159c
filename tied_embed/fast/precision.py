"""The compute dtype of the loss's matmuls (`model.dtype`): float32, or bfloat16 operands with float32 accumulation,
everything else float32; the gradients move by a few 1e-3 relative (tests/fast/test_precision.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

COMPUTE_DTYPES = ("float32", "bfloat16")  # the values `model.dtype` and `compute_dtype` may take


def operand(array: jax.Array, compute_dtype: np.dtype) -> jax.Array:
  """`array` as a matmul operand: cast to `compute_dtype`, or itself (no cast at all) for float32."""
  return array if compute_dtype == jnp.float32 else array.astype(compute_dtype)


def dot(lhs: jax.Array, rhs: jax.Array, compute_dtype: np.dtype, dims=None) -> jax.Array:
  """`lhs @ rhs`, or `lax.dot_general(lhs, rhs, dims)`, from `compute_dtype` operands to a float32 result."""
  preferred = None if compute_dtype == jnp.float32 else jnp.float32
  lhs, rhs = operand(lhs, compute_dtype), operand(rhs, compute_dtype)
  if dims is None:
    return jnp.matmul(lhs, rhs, preferred_element_type=preferred)
  return jax.lax.dot_general(lhs, rhs, dims, preferred_element_type=preferred)


def as_dtype(compute_dtype) -> np.dtype:
  """'float32' | 'bfloat16' | a dtype → np.dtype; ValueError for anything else."""
  dtype = jnp.dtype(compute_dtype)
  if dtype.name not in COMPUTE_DTYPES:
    raise ValueError(f"compute_dtype={compute_dtype!r} is not allowed: expected one of {COMPUTE_DTYPES}")
  return dtype
