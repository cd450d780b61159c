"""The compute dtype of the loss's matmuls (`model.dtype`, Flax's name for it): float32 or bfloat16.

The compute dtype is the dtype of the matmul operands. bfloat16 casts the table
and the hidden rows (and, for the chunked gradients, the (V, C) exponentials and the scaled rows) to bfloat16 and
accumulates every dot in float32 (`preferred_element_type`); the logsumexp (max, exp, sum, log), the gradient
accumulators, the inputs and the outputs stay float32. The full loss is differentiated by autodiff, which rounds the
gradient of each cast operand to bfloat16 once before handing it back as float32. float32 (the default) inserts no
casts: the same program as without the option. bfloat16 has an 8-bit mantissa (u = 2^-9), so the gradients move by
a few 1e-3 relative in norm on random problems (tests/fast/test_precision.py: at most 2e-2). XLA:CPU widens bfloat16
operands to float32 before each dot, so there these dots cost time (the converts) and save none; on a CPU with AMX
the chunked loss runs its bfloat16 dots through tied_embed/fast/kernels/gemm.py instead.
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
  """`lhs @ rhs`, or `lax.dot_general(lhs, rhs, dims)`, with operands in `compute_dtype` and a float32 result.

  bfloat16 operands are multiplied with float32 accumulation; float32 is the plain dot, as written without this.
  """
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
