"""The plain loss: next-token softmax cross-entropy on the full (T, V) logits.

Every speed path (tied_embed/fast/chunked_loss.py) is tested equal to these functions; the log step's split check
differentiates `model_loss` with `nnx.grad`, so it shares no code with the loss the step trains on.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """Mean softmax cross-entropy: logits (T, V) float, targets (T,) int → scalar float32."""
  target_logits = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
  return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - target_logits)


def hidden_cross_entropy(hidden: jax.Array, projection_table: jax.Array, targets: jax.Array) -> jax.Array:
  """The loss as a function of the projection's two inputs: hidden (T, D), table (V, D), targets (T,) → scalar.

  This is the form the path split differentiates: with respect to `hidden` (the lookup path) and to the
  projection table (the projection path) separately.
  """
  return cross_entropy(hidden @ projection_table.T, targets)


def model_loss(model, ids: jax.Array, next_ids: jax.Array) -> jax.Array:
  """The training loss of a model, called as a whole: ids, next_ids (T,) int → scalar.

  The cross-entropy of `model(ids)` against `next_ids`, plus the model's regulariser if it has one.
  """
  loss = cross_entropy(model(ids), next_ids)
  penalty = model.penalty(model.hidden_params())
  return loss if penalty is None else loss + penalty


def per_token_losses(model, ids: jax.Array, next_ids: jax.Array) -> jax.Array:
  """Each pair's cross-entropy (no regulariser): ids, next_ids (T,) int → (T,) float32."""
  logits = model(ids)
  target_logits = jnp.take_along_axis(logits, next_ids[:, None], axis=-1)[:, 0]
  return jax.nn.logsumexp(logits, axis=-1) - target_logits
