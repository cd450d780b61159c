"""The compute dtype of the loss's matmuls (`model.dtype`, Flax's name for it): float32 or bfloat16.

bfloat16 casts the matmul operands (the table and hidden rows; for the chunked gradients also the (V, C)
exponentials and scaled rows) and accumulates every dot in float32 (`preferred_element_type`); the logsumexp, the
gradient accumulators, inputs and outputs stay float32. Autodiff of the full loss rounds each cast operand's
gradient to bfloat16 once before handing it back as float32. float32 (the default) inserts no casts. bfloat16's
8-bit mantissa (u = 2^-9) moves the gradients by a few 1e-3 relative in norm on random problems
(tests/fast/test_precision.py: at most 2e-2). XLA:CPU widens bfloat16 operands to float32 before each dot (time
spent, none saved); on a CPU with AMX the chunked loss runs them through tied_embed/fast/kernels/gemm.py instead.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

COMPUTE_DTYPES = ("float32", "bfloat16")  # the values `model.dtype` and `compute_dtype` may take


def operand(array: jax.Array, compute_dtype: np.dtype) -> jax.Array:
  """`array` as a matmul operand: cast to `compute_dtype`, or itself (no cast at all) for float32."""
  return array if compute_dtype == jnp.float32 else array.astype(compute_dtype)


def dot(lhs: jax.Array, rhs: jax.Array, compute_dtype: np.dtype, dims=None) -> jax.Array:
  """`lhs @ rhs`, or `lax.dot_general(lhs, rhs, dims)`, with operands in `compute_dtype` and a float32 result
  (bfloat16 with float32 accumulation; float32 the plain dot)."""
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
