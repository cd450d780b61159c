"""Next-token cross-entropy through the projection table: with the full logits, or a chunk of tokens at a time.

The loss is written as a function of hidden vectors `x` and the projection table, so the (T, V) logits can be
formed whole (`chunk_size=0`, `full_cross_entropy`) or for a chunk of tokens at a time (`chunked_cross_entropy`).

`full_cross_entropy` forms the (T, V) logits, and autodiff keeps them and builds a (T, V) gradient for the
backward pass: 2·T·V·4 bytes, 2 GiB at T=8192, V=32768. `chunked_cross_entropy` instead walks the tokens with a
`lax.scan` in chunks of C and, for each chunk, forms its (V, C) logits, their exact logsumexp over the whole
vocabulary, and at once the chunk's share of both gradients. With p = softmax(x Eᵀ) and one-hot targets Y,
  d loss / d x = (p E − E[targets]) / T,      d loss / d E = (pᵀ x − Yᵀ x) / T,
so nothing larger than (V, C) is ever live and nothing is recomputed: three matmuls in all, like the full loss.

Why tokens and not vocabulary chunks: a vocabulary scan needs the final logsumexp of every token before it can
form any p, so its backward pass must recompute the logits (a fourth matmul; measured 1.25x slower, see
benchmarks/README.md). MaxText's vocabulary tiling and Liger's fused linear cross-entropy chunk the same way.

The logits are formed transposed, (V, C): `pᵀ x` with p stored (C, V) misses XLA:CPU's fast matmul path and ran
20-60% slower in our timings. The chunk's dx is `pᵀ E` straight from the (V, C) exponentials and the table, with no
transposed copy of the table (benchmarks/README.md has the timings).

The gradients are computed in the forward pass of a `jax.custom_vjp` and scaled by the cotangent in the backward
pass, so the chunked loss supports first derivatives only. Called without differentiation (evaluation), it runs the
loss-only scan.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def full_cross_entropy(x: jax.Array, projection_table: jax.Array, targets: jax.Array) -> jax.Array:
  """Mean softmax cross-entropy with full logits: x (T, D), table (V, D), targets (T,) int → scalar."""
  logits = x @ projection_table.T
  target_logits = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
  return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - target_logits)


def cross_entropy(
    x: jax.Array, projection_table: jax.Array, targets: jax.Array, chunk_size: int = 0
) -> jax.Array:
  """Mean cross-entropy of `x @ table.T` against `targets`; (T, D), (V, D), (T,) → scalar.

  `chunk_size=0` materialises the (T, V) logits; a positive value never holds more than (chunk_size, V).
  """
  if chunk_size == 0:
    return full_cross_entropy(x, projection_table, targets)
  return chunked_cross_entropy(x, projection_table, targets, chunk_size)


def bigram_loss(
    lookup_table: jax.Array,
    projection_table: jax.Array,
    ids: jax.Array,
    next_ids: jax.Array,
    chunk_size: int = 0,
) -> jax.Array:
  """Bigram loss: look `ids` (T,) up in one table, score against the other, predict `next_ids` (T,).

  For a tied model both tables are the same array.
  """
  return cross_entropy(lookup_table[ids], projection_table, next_ids, chunk_size)


def chunked_cross_entropy(
    x: jax.Array, projection_table: jax.Array, targets: jax.Array, chunk_size: int
) -> jax.Array:
  """Mean softmax cross-entropy of `x @ table.T`, never holding more than (V, chunk_size) logits.

  Args:
    x: (T, D) float hidden vectors.
    projection_table: (V, D) float table scored against.
    targets: (T,) int indices into the V rows.
    chunk_size: tokens per chunk (a Python int > 0; values ≥ T use one chunk).

  Returns:
    Scalar mean loss; equal to `full_cross_entropy` up to float rounding, and so are its gradients
    with respect to `x` and `projection_table`.
  """
  if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size <= 0:
    raise ValueError(f"chunk_size={chunk_size!r} is not allowed: expected an int > 0")
  x, projection_table, targets = jnp.asarray(x), jnp.asarray(projection_table), jnp.asarray(targets)
  return _chunked_ce(x, projection_table, targets, min(chunk_size, max(x.shape[0], 1)))


def _token_chunks(x: jax.Array, chunk: int) -> jax.Array:
  """(T, D) → (n, C, D) with n = ceil(T / C): chunk i holds tokens i, i + n, i + 2n, ...

  Strided, not contiguous, so that a batch split over devices along T stays split along C inside every chunk:
  each device then scans its own tokens, where contiguous chunks would be gathered onto every device. The tail
  is padded with zero rows, which add nothing to d table (their p rows multiply x = 0) and are cut off again.
  """
  num_chunks = -(-x.shape[0] // chunk)
  padded = jnp.pad(x, ((0, num_chunks * chunk - x.shape[0]), (0, 0)))
  return jnp.swapaxes(padded.reshape(chunk, num_chunks, x.shape[1]), 0, 1)


def _unchunk(per_chunk: jax.Array, num_tokens: int) -> jax.Array:
  """(n, C, ...) per-chunk results → (T, ...) in token order, without the padding."""
  return jnp.swapaxes(per_chunk, 0, 1).reshape(-1, *per_chunk.shape[2:])[:num_tokens]


def _target_logits(x: jax.Array, table: jax.Array, targets: jax.Array) -> jax.Array:
  """x_t · E[targets_t], one dot product per token: (T, D), (V, D), (T,) → (T,)."""
  return jnp.sum(x * table[targets], axis=-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _chunked_ce(x: jax.Array, table: jax.Array, targets: jax.Array, chunk: int) -> jax.Array:
  """Mean loss, forward only; (T, D), (V, D), (T,) int, static chunk ≤ T → scalar."""

  def chunk_lse(carry, x_chunk):
    return carry, jax.nn.logsumexp(table @ x_chunk.T, axis=0)

  _, lse = jax.lax.scan(chunk_lse, None, _token_chunks(x, chunk))
  return jnp.mean(_unchunk(lse, x.shape[0]) - _target_logits(x, table, targets))


def _forward(x, table, targets, chunk):
  """Loss, plus the gradients for cotangent 1 as residuals: dx (T, D), d table (V, D)."""
  num_tokens = x.shape[0]

  def step(d_table, x_chunk):
    logits = table @ x_chunk.T  # (V, C)
    top = jnp.max(logits, axis=0)
    exp = jnp.exp(logits - top)
    total = jnp.sum(exp, axis=0)
    # p = exp / total, and the mean's 1/T: a per-token scale, applied to the (C, D) operand and product rather
    # than to the (V, C) exponentials, which saves a pass over them and a (V, C) buffer.
    scale = (1.0 / (num_tokens * total))[:, None]  # (C, 1)
    d_table = d_table + exp @ (x_chunk * scale)
    dx = jax.lax.dot_general(exp, table, (((0,), (0,)), ((), ()))) * scale  # pᵀ E, (C, D)
    return d_table, (top + jnp.log(total), dx)

  d_table, (lse, dx) = jax.lax.scan(step, jnp.zeros_like(table), _token_chunks(x, chunk))
  lse = _unchunk(lse, num_tokens)
  # The −Y part of (p − Y): one row per token, cheaper as a gather and a scatter than inside the scan.
  dx = _unchunk(dx, num_tokens) - table[targets] / num_tokens
  d_table = d_table.at[targets].add(-x / num_tokens)
  loss = jnp.mean(lse - _target_logits(x, table, targets))
  return loss, (dx, d_table)


def _backward(chunk, residuals, cotangent):
  del chunk
  dx, d_table = residuals
  return cotangent * dx, cotangent * d_table, None


_chunked_ce.defvjp(_forward, _backward)
