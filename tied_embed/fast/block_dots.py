"""A context model's own matmuls (its Linear layers, the attention's q/k/v and output projections) on the GEMM kernel
the chunked loss uses (kernels/gemm.py), forward and backward: the same products as XLA's dots, up to rounding.

At configs/context_transformer.py's shape (2,048 tokens, D = 128, an MLP of 512) oneDNN's float32 GEMM ran the blocks'
products 1.5-1.9x faster than XLA:CPU's dot with its YNNPACK fusions, the weight gradients (xᵀ·g, contracting the
tokens) most (benchmarks/README.md, "The context transformer's step, piece by piece"). `with_kernel_dots(model)` is
a copy of the model whose nnx.Linear and nnx.LinearGeneral layers make their products with `kernel_dot_general`; the
model's Params, its code and its plain path are unchanged (tests/fast/test_block_dots.py compares the two)."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

from tied_embed.fast.kernels import gemm as mkl

# Products of at least this many multiply-adds (M·K·N) take the kernel: measured 1.5-1.9x faster at 2048·128·512 and
# 2048·128·128 (2^25 and 2^27); a small product's call overhead would outweigh it, so below this XLA's dot.
MIN_PRODUCT = 2**22


def _trailing_by_leading(lhs, rhs, dimension_numbers) -> int:
  """k where `dimension_numbers` contracts lhs's last k axes with rhs's first k, in order, with no batch axes (what
  a Linear or LinearGeneral layer asks for); 0 for anything else."""
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  k = len(lhs_contract)
  if lhs_batch or rhs_batch or k == 0 or len(rhs_contract) != k:
    return 0
  trailing = tuple(range(lhs.ndim - k, lhs.ndim))
  if tuple(int(a) % lhs.ndim for a in lhs_contract) != trailing or tuple(int(a) for a in rhs_contract) != tuple(
      range(k)):
    return 0
  return k


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _gemm_product(lhs: jax.Array, rhs: jax.Array, k: int) -> jax.Array:
  """lhs (..., K₁..Kₖ) contracted with rhs (K₁..Kₖ, ...): one (M, K)·(K, N) GEMM in float32, shaped as the free axes."""
  return _forward(lhs, rhs, k)[0]


def _as_matrices(lhs, rhs, k):
  inner = math.prod(rhs.shape[:k])
  return lhs.reshape(-1, inner), rhs.reshape(inner, -1)


def _forward(lhs, rhs, k):
  a, b = _as_matrices(lhs, rhs, k)
  out = mkl.gemm(a, b).reshape(*lhs.shape[:lhs.ndim - k], *rhs.shape[k:])
  return out, (lhs, rhs)


def _backward(k, residuals, cotangent):
  lhs, rhs = residuals
  a, b = _as_matrices(lhs, rhs, k)
  g = cotangent.reshape(a.shape[0], b.shape[1])
  d_lhs = mkl.gemm(g, b, trans_b=True).reshape(lhs.shape)  # g · bᵀ
  d_rhs = mkl.gemm(a, g, trans_a=True).reshape(rhs.shape)  # aᵀ · g
  return d_lhs, d_rhs


_gemm_product.defvjp(_forward, _backward)


def kernel_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
  """`jax.lax.dot_general`'s signature: a float32 Linear-shaped product of at least MIN_PRODUCT multiply-adds on the
  kernel (with its own VJP, two kernel GEMMs), anything else on `jax.lax.dot_general` itself."""
  k = _trailing_by_leading(lhs, rhs, dimension_numbers)
  float32 = lhs.dtype == rhs.dtype == jnp.float32 and preferred_element_type in (None, jnp.float32)
  if k and float32 and pays_off(lhs.size * math.prod(rhs.shape[k:])) and not kwargs.get("out_sharding"):
    return _gemm_product(lhs, rhs, k)
  return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                             preferred_element_type=preferred_element_type, **kwargs)


def pays_off(multiply_adds: int) -> bool:
  """Whether one product of this many multiply-adds (M·K·N) runs faster on the kernel than as XLA's dot."""
  return multiply_adds >= MIN_PRODUCT


def takes_any(model, tokens: int) -> bool:
  """Whether `with_kernel_dots(model)` run on `tokens` rows (B·L) puts any product on the kernel: a Linear layer's
  product is tokens · its kernel's size multiply-adds (inputs (tokens, K), kernel (K, N)). `model`'s arrays may be
  abstract (shapes alone)."""
  return any(isinstance(module, nnx.Linear | nnx.LinearGeneral) and pays_off(tokens * math.prod(module.kernel.shape))
             for _, module in nnx.iter_graph(model))


def available() -> bool:
  """Whether the float32 kernel runs here (the CPU's route, the library built, not switched off)."""
  return mkl.available("float32")


def with_kernel_dots(model):
  """A copy of `model` (the same Params, arrays and graph) whose nnx.Linear and nnx.LinearGeneral layers make their
  products with `kernel_dot_general`; `model` itself is unchanged. For use inside a traced step."""
  graphdef, state = nnx.split(model)
  copy = nnx.merge(graphdef, state)
  for _, module in nnx.iter_graph(copy):
    if isinstance(module, nnx.Linear | nnx.LinearGeneral):
      module.dot_general = kernel_dot_general
  return copy
