"""Cross-entropy through the projection table, one vocabulary chunk at a time.

`full_cross_entropy` forms the (T, V) logits, and autodiff keeps them (and builds their gradient) for the backward
pass: 2·T·V·4 bytes, a gigabyte at T=8192, V=32768. Here a `lax.scan` walks the table in chunks of C rows:
the forward pass keeps a running max and sum of exponentials per token (an online logsumexp), and the backward
pass recomputes each chunk's logits from the saved logsumexp to form that chunk's softmax. Nothing larger than
(T, C) is ever live, at the price of one extra (T, D)×(D, V) matmul.

The gradient is written by hand (`jax.custom_vjp`) instead of `jax.checkpoint` around the scan because the
softmax gradient has a closed form: with p = softmax(x Eᵀ) and one-hot targets Y,
  d loss / d x = (p E − E[targets]) / T,      d loss / d E = (pᵀ x − Yᵀ x) / T.
Both are sums over chunks of p, so the backward pass is the same scan as the forward one.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from tied_embed.errors import UsageError


def chunked_cross_entropy(
    x: jax.Array, projection_table: jax.Array, targets: jax.Array, chunk_size: int
) -> jax.Array:
  """Mean softmax cross-entropy of `x @ table.T`, never holding more than (T, chunk_size) logits.

  Args:
    x: (T, D) float hidden vectors.
    projection_table: (V, D) float table scored against.
    targets: (T,) int indices into the V rows.
    chunk_size: rows of the table per chunk (a Python int > 0; values ≥ V use one chunk).

  Returns:
    Scalar mean loss; equal to `losses.full_cross_entropy` up to float rounding, and so are its gradients
    with respect to `x` and `projection_table`.
  """
  if not isinstance(chunk_size, int) or chunk_size <= 0:
    raise UsageError.bad_value("loss.chunk_size", chunk_size, "a positive int (0 selects the full loss)")
  return _chunked_ce(x, projection_table, targets, min(chunk_size, projection_table.shape[0]))


def _table_chunks(table: jax.Array, chunk: int) -> jax.Array:
  """(V, D) → (ceil(V / C), C, D), the tail chunk padded with zero rows that `_chunk_logits` masks out."""
  vocab_size, d_model = table.shape
  num_chunks = -(-vocab_size // chunk)
  padded = jnp.pad(table, ((0, num_chunks * chunk - vocab_size), (0, 0)))
  return padded.reshape(num_chunks, chunk, d_model)


def _chunk_logits(x: jax.Array, rows: jax.Array, index: jax.Array, vocab_size: int) -> jax.Array:
  """Logits against chunk `index`: x (T, D), rows (C, D) → (T, C), −inf in padding columns (so p = 0 there)."""
  logits = x @ rows.T
  chunk = rows.shape[0]
  if vocab_size % chunk == 0:  # static: only a padded tail chunk needs the mask
    return logits
  column = index * chunk + jnp.arange(chunk)
  return jnp.where(column < vocab_size, logits, -jnp.inf)


def _logsumexp(x: jax.Array, table: jax.Array, chunk: int) -> jax.Array:
  """Online logsumexp over the vocabulary: x (T, D), table (V, D) → (T,) = log Σ_v exp(x · E_v)."""
  chunks = _table_chunks(table, chunk)

  def step(carry, inputs):
    running_max, running_sum = carry
    index, rows = inputs
    logits = _chunk_logits(x, rows, index, table.shape[0])
    new_max = jnp.maximum(running_max, jnp.max(logits, axis=-1))
    # Rescale the old sum to the new max; on the first chunk exp(−inf − finite) = 0 drops the empty start.
    running_sum = running_sum * jnp.exp(running_max - new_max) + jnp.sum(
        jnp.exp(logits - new_max[:, None]), axis=-1
    )
    return (new_max, running_sum), None

  start = (jnp.full(x.shape[:1], -jnp.inf, x.dtype), jnp.zeros(x.shape[:1], x.dtype))
  (running_max, running_sum), _ = jax.lax.scan(step, start, (jnp.arange(chunks.shape[0]), chunks))
  return running_max + jnp.log(running_sum)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _chunked_ce(x: jax.Array, table: jax.Array, targets: jax.Array, chunk: int) -> jax.Array:
  """Mean loss; (T, D), (V, D), (T,) int, static chunk ≤ V → scalar."""
  return _forward(x, table, targets, chunk)[0]


def _forward(x, table, targets, chunk):
  """Loss plus the residuals the backward pass needs: only (T,) logsumexps beyond the inputs."""
  lse = _logsumexp(x, table, chunk)
  # The target logit is one dot product per token; no need to find it inside the chunks.
  target_logits = jnp.sum(x * table[targets], axis=-1)
  return jnp.mean(lse - target_logits), (x, table, targets, lse)


def _backward(chunk, residuals, cotangent):
  """Recompute each chunk's softmax from the saved logsumexp and accumulate dx (T, D) and d table (V, D)."""
  x, table, targets, lse = residuals
  vocab_size, d_model = table.shape
  scale = cotangent / x.shape[0]
  chunks = _table_chunks(table, chunk)

  def step(dx, inputs):
    index, rows = inputs
    probs = jnp.exp(_chunk_logits(x, rows, index, vocab_size) - lse[:, None]) * scale
    return dx + probs @ rows, probs.T @ x

  dx, d_chunks = jax.lax.scan(step, jnp.zeros_like(x), (jnp.arange(chunks.shape[0]), chunks))
  dx = dx - scale * table[targets]
  d_table = d_chunks.reshape(-1, d_model)[:vocab_size].at[targets].add(-scale * x)
  return dx, d_table, None


_chunked_ce.defvjp(_forward, _backward)
