"""The chunked and distinct-row cross-entropy: tied_embed/core/loss.py's loss, never holding the (T, V) logits.

`chunked_cross_entropy` scans the tokens in chunks of C, forming each chunk's (V, C) logits, their logsumexp and at once
its share of both gradients (p = softmax(x Eᵀ), one-hot targets Y):

  d loss / d x = (p E − E[targets]) / T,      d loss / d E = (pᵀ x − Yᵀ x) / T,

in a `jax.custom_vjp`'s forward pass. The logits are formed (V, C): p stored (C, V) misses XLA:CPU's fast path for
`pᵀ x` (20-60% slower; benchmarks/README.md), but oneDNN's bfloat16 matmul runs x Eᵀ faster: its route forms (C, V)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from tied_embed.core import loss as loss_lib
from tied_embed.fast.kernels import gemm as mkl
from tied_embed.fast.precision import as_dtype, dot, operand


def full_cross_entropy(x: jax.Array, projection_table: jax.Array, targets: jax.Array,
                       compute_dtype=jnp.float32) -> jax.Array:
  """Mean softmax cross-entropy with full (T, V) float32 logits: x (T, D), table (V, D), targets (T,) int → scalar."""
  return loss_lib.cross_entropy(dot(x, projection_table.T, as_dtype(compute_dtype)), targets)


def cross_entropy(x: jax.Array, projection_table: jax.Array, targets: jax.Array, chunk_size: int = 0,
                  compute_dtype=jnp.float32) -> jax.Array:
  """`full_cross_entropy` for `chunk_size=0`, else `chunked_cross_entropy` (at most (chunk_size, V) logits)."""
  if chunk_size == 0:
    return full_cross_entropy(x, projection_table, targets, compute_dtype)
  return chunked_cross_entropy(x, projection_table, targets, chunk_size, compute_dtype=compute_dtype)


def chunked_cross_entropy(x: jax.Array, projection_table: jax.Array, targets: jax.Array, chunk_size: int,
                          row_keys: jax.Array | None = None, groups: int = 1, compute_dtype=jnp.float32,
                          mkl_kernel: bool = True) -> jax.Array:
  """Mean softmax cross-entropy of `x @ table.T` (x (T, D), table (V, D), targets (T,) → scalar) and its gradients,
  `full_cross_entropy`'s up to rounding, with at most (V, chunk_size) logits (an int > 0). row_keys (T,): equal where
  rows of `x` are (for a bigram, the ids): each distinct row is scored once within each of `groups` blocks of T (one per
  data shard). mkl_kernel: the dots on kernels/gemm.py where it pays off."""
  if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size <= 0:
    raise ValueError(f"chunk_size={chunk_size!r} is not allowed: expected an int > 0")
  x, projection_table, targets = jnp.asarray(x), jnp.asarray(projection_table), jnp.asarray(targets)
  chunk, compute_dtype = min(chunk_size, max(x.shape[0], 1)), as_dtype(compute_dtype)
  kernel = mkl_kernel and mkl.takes(projection_table.shape, compute_dtype)
  if row_keys is None:
    return _chunked_ce(x, projection_table, targets, chunk, compute_dtype, kernel)
  if x.shape[0] % groups:
    raise ValueError(f"groups={groups} is not allowed: expected a divisor of the {x.shape[0]} tokens")
  per_block = max(chunk // groups, 1)  # rows of each block per iteration: about `chunk` rows in all
  return _distinct_ce(x, projection_table, targets, jnp.asarray(row_keys), per_block, groups, compute_dtype, kernel)


def _token_chunks(x: jax.Array, chunk: int) -> jax.Array:
  """(T, D) → (n, C, D) with n = ceil(T / C): chunk i holds tokens i, i + n, i + 2n, ... Strided, so that a batch
  split over devices along T stays split along C inside every chunk; the zero rows padding the tail add nothing."""
  num_chunks = -(-x.shape[0] // chunk)
  padded = jnp.pad(x, ((0, num_chunks * chunk - x.shape[0]), (0, 0)))
  return jnp.swapaxes(padded.reshape(chunk, num_chunks, x.shape[1]), 0, 1)


def _unchunk(per_chunk: jax.Array, num_tokens: int) -> jax.Array:
  """(n, C, ...) per-chunk results → (T, ...) in token order, without the padding."""
  return jnp.swapaxes(per_chunk, 0, 1).reshape(-1, *per_chunk.shape[2:])[:num_tokens]


def _target_logits(x: jax.Array, table: jax.Array, targets: jax.Array, compute_dtype) -> jax.Array:
  """x_t · E[targets_t] per token, of operands rounded as the logits' are: (T, D), (V, D), (T,) → (T,)."""
  return jnp.sum(operand(x, compute_dtype).astype(jnp.float32) * operand(table[targets], compute_dtype), axis=-1)


def _chunk_logits(table, x_chunk, compute_dtype, kernel: bool) -> tuple[jax.Array, int]:
  """(float32 logits, their vocabulary axis) of table (V, D) and x_chunk (C, D): table · x_chunkᵀ, (V, C), on the
  kernel if `kernel`; x_chunk · tableᵀ, (C, V), on a kernel route that runs that faster (gemm.LOGITS_BY_TOKEN)."""
  by_token = kernel and mkl.route(compute_dtype) in mkl.LOGITS_BY_TOKEN
  a, b = (x_chunk, table) if by_token else (table, x_chunk)
  return (mkl.gemm(a, b, trans_b=True, dtype=compute_dtype) if kernel else dot(a, b.T, compute_dtype)), int(by_token)


def _chunk_step(table, d_table, x_chunk, weights, num_tokens, compute_dtype, kernel):
  """One chunk's logsumexp and p-part of both gradients, float32: table (V, D) in `compute_dtype`, d_table (V, D) or
  None (the first chunk's), x_chunk (C, D), weights (C,) or None → (d_table + the chunk's, lse (C,), dx (C, D))."""
  logits, vocab_axis = _chunk_logits(table, x_chunk, compute_dtype, kernel)  # (V, C), or (C, V) on axis 1
  top = jnp.max(logits, axis=vocab_axis, keepdims=True)
  exp = jnp.exp(logits - top)
  total = jnp.sum(exp, axis=vocab_axis)
  # p = exp / total and the mean's 1/T scale the (C, D) operand and product: no pass over the (V, C) exponentials.
  scale = (1.0 / (num_tokens * total))[:, None]  # (C, 1)
  row_scale = scale if weights is None else scale * weights[:, None]
  if kernel:  # d_table accumulates in place (the kernel's output aliases it)
    d_table = mkl.gemm(exp, x_chunk * row_scale, trans_a=vocab_axis == 1, add_to=d_table, dtype=compute_dtype)
    dx = mkl.gemm(exp, table, trans_a=vocab_axis == 0, dtype=compute_dtype) * scale
  else:
    product = dot(exp, x_chunk * row_scale, compute_dtype)
    d_table = product if d_table is None else d_table + product
    dx = dot(exp, table, compute_dtype, (((0,), (0,)), ((), ()))) * scale  # pᵀ E, (C, D)
  return d_table, top.reshape(-1) + jnp.log(total), dx


def _add_target_rows(d_table, x, targets, piece, compute_dtype):
  """d table's −Y part, added in place: −x_t / T into row targets_t. (V, D), (T, D), (T,) → (V, D); `piece` tokens
  at a time (where they divide T): no (T, D) temporary of scaled rows."""
  pieces = x.shape[0] // piece if piece and x.shape[0] % piece == 0 else 1

  def add(d_table, rows):
    x_rows, target_rows = rows
    return d_table.at[target_rows].add(-operand(x_rows, compute_dtype).astype(jnp.float32) / x.shape[0]), None

  rows = (x.reshape(pieces, -1, x.shape[1]), targets.reshape(pieces, -1))
  return jax.lax.scan(add, d_table, rows)[0]


def _finish(table, targets, lse, dx, d_table, mean_target, compute_dtype):
  """The loss, and dx's −Y part: −E[targets_t] / T, one row per token (d table already holds its own)."""
  # E[targets] again, not the rows the mean target logit gathered: XLA would keep those (T, D) rows through the
  # scans. The barrier makes it a gather of its own, which XLA fuses into this subtraction.
  dx = dx - operand(table[jax.lax.optimization_barrier(targets)], compute_dtype).astype(jnp.float32) / targets.shape[0]
  return jnp.mean(lse) - mean_target, (dx, d_table)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _chunked_ce(x: jax.Array, table: jax.Array, targets: jax.Array, chunk: int, compute_dtype, kernel: bool):
  """Mean loss, forward only; (T, D), (V, D), (T,) int, static chunk ≤ T, static dtype and kernel → scalar."""
  operand_table = operand(table, compute_dtype)

  def chunk_lse(carry, x_chunk):
    return carry, jax.nn.logsumexp(*_chunk_logits(operand_table, x_chunk, compute_dtype, kernel))  # (logits, axis)

  _, lse = jax.lax.scan(chunk_lse, None, _token_chunks(x, chunk))
  return jnp.mean(_unchunk(lse, x.shape[0]) - _target_logits(x, table, targets, compute_dtype))


def _forward(x, table, targets, chunk, compute_dtype, kernel):
  """Loss, plus the gradients for cotangent 1 as residuals: dx (T, D), d table (V, D)."""
  num_tokens, operand_table = x.shape[0], operand(table, compute_dtype)

  def step(d_table, x_chunk):
    d_table, lse, dx = _chunk_step(operand_table, d_table, x_chunk, None, num_tokens, compute_dtype, kernel)
    return d_table, (lse, dx)

  mean_target = jnp.mean(_target_logits(x, table, targets, compute_dtype))
  chunks = _token_chunks(x, chunk)
  d_table, first = step(None, chunks[0])
  d_table = _add_target_rows(d_table, x, targets, chunk, compute_dtype)
  d_table, rest = jax.lax.scan(step, d_table, chunks[1:])
  lse, dx = (_unchunk(jnp.concatenate([a[None], b]), num_tokens) for a, b in zip(first, rest, strict=True))
  return _finish(table, targets, lse, dx, d_table, mean_target, compute_dtype)


def _backward(*args):  # (the static arguments, residuals, cotangent) → cotangents of x, table, targets
  (dx, d_table), cotangent = args[-2:]
  return cotangent * dx, cotangent * d_table, None


_chunked_ce.defvjp(_forward, _backward)


def _distinct_p_part(x, table, targets, keys, chunk, num_tokens, compute_dtype, kernel):
  """d table (with its −Y part), lse and dx's p part, each distinct row of each block once: x (G, B, D), keys (G, B),
  targets (G·B,) → ((V, D), (G, B), (G, B, D)); step i takes chunk i of each block's distinct rows, count-weighted."""
  groups, size, d_model = x.shape
  padded = -(-size // chunk) * chunk
  unique = functools.partial(jnp.unique, size=size, fill_value=0, return_index=True, return_inverse=True,
                             return_counts=True)
  _, first, inverse, counts = jax.vmap(unique)(keys)
  first = jnp.pad(first, ((0, 0), (0, padded - size)))
  weights = jnp.pad(counts, ((0, 0), (0, padded - size))).astype(x.dtype)
  num_chunks = (jnp.max(jnp.sum(counts > 0, axis=1)) + chunk - 1) // chunk
  operand_table = operand(table, compute_dtype)

  def chunk_i(i, d_table):  # → (d table, lse (G, C), dx (G, C, D)) of chunk i of every block
    rows = jax.lax.dynamic_slice_in_dim(first, i * chunk, chunk, axis=1)  # (G, C)
    row_weights = jax.lax.dynamic_slice_in_dim(weights, i * chunk, chunk, axis=1).reshape(-1)
    x_chunk = jnp.take_along_axis(x, rows[..., None], axis=1).reshape(-1, d_model)  # (G·C, D)
    d_table, lse, dx = _chunk_step(operand_table, d_table, x_chunk, row_weights, num_tokens, compute_dtype, kernel)
    return d_table, lse.reshape(groups, chunk), dx.reshape(groups, chunk, d_model)

  def body(i, carry):
    d_table, lse, dx = carry
    d_table, chunk_lse, chunk_dx = chunk_i(i, d_table)
    lse = jax.lax.dynamic_update_slice_in_dim(lse, chunk_lse, i * chunk, axis=1)
    dx = jax.lax.dynamic_update_slice_in_dim(dx, chunk_dx, i * chunk, axis=1)
    return d_table, lse, dx

  # Chunk 0 starts d table (every block has a distinct row), and its rows start lse and dx; the loop adds the rest.
  d_table, lse, dx = chunk_i(0, None)
  # In pieces on one device only: split over a mesh, pieces of the batch would be gathered whole.
  d_table = _add_target_rows(d_table, x.reshape(-1, d_model), targets, chunk if groups == 1 else 0, compute_dtype)
  rest = ((0, 0), (0, padded - chunk))
  after_first = (d_table, jnp.pad(lse, rest), jnp.pad(dx, (*rest, (0, 0))))
  d_table, lse, dx = jax.lax.fori_loop(1, num_chunks, body, after_first)
  lse = jnp.take_along_axis(lse, inverse.reshape(groups, size), axis=1)
  dx = jnp.take_along_axis(dx, inverse.reshape(groups, size)[..., None], axis=1)
  return d_table, lse, dx


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7))
def _distinct_ce(x, table, targets, keys, chunk: int, groups: int, compute_dtype, kernel: bool) -> jax.Array:
  """`_chunked_ce` computing each distinct row of `x` once; (T, D), (V, D), (T,), (T,) int → scalar."""
  return _distinct_forward(x, table, targets, keys, chunk, groups, compute_dtype, kernel)[0]


def _distinct_forward(x, table, targets, keys, chunk, groups, compute_dtype, kernel):
  """Loss and both gradients for cotangent 1 (residuals), `chunk` rows per block and loop iteration."""
  num_tokens = x.shape[0]
  mean_target = jnp.mean(_target_logits(x, table, targets, compute_dtype))
  d_table, lse, dx = _distinct_p_part(x.reshape(groups, -1, x.shape[1]), table, targets, keys.reshape(groups, -1),
                                      chunk, num_tokens, compute_dtype, kernel)
  return _finish(table, targets, lse.reshape(-1), dx.reshape(x.shape), d_table, mean_target, compute_dtype)


_distinct_ce.defvjp(_distinct_forward, lambda *args: (*_backward(*args), None))  # and None for the keys
