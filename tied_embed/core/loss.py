"""The plain loss: next-token softmax cross-entropy on the full (T, V) logits, which every speed path
(tied_embed/fast/chunked_loss.py) is tested equal to."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _token_cross_entropies(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """logits (T, V) float, targets (T,) int → (T,): each pair's softmax cross-entropy."""
  target_logits = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
  return jax.nn.logsumexp(logits, axis=-1) - target_logits


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """Mean softmax cross-entropy: logits (T, V) float, targets (T,) int → scalar float32."""
  return jnp.mean(_token_cross_entropies(logits, targets))


def hidden_cross_entropy(hidden: jax.Array, projection_table: jax.Array, targets: jax.Array) -> jax.Array:
  """The loss as a function of the projection's two inputs, hidden (T, D) and table (V, D), targets (T,) → scalar:
  the form the path split differentiates with respect to each (the lookup path, the projection path)."""
  return cross_entropy(hidden @ projection_table.T, targets)


def model_loss(model, ids: jax.Array, next_ids: jax.Array) -> jax.Array:
  """The mean loss of `model(ids)` plus any regulariser: ids, next_ids (B,) pairs or (B, L) windows, int → scalar."""
  loss = jnp.mean(per_token_losses(model, ids, next_ids))
  penalty = model.penalty()
  return loss if penalty is None else loss + penalty


def per_token_losses(model, ids: jax.Array, next_ids: jax.Array) -> jax.Array:
  """Each position's cross-entropy (no regulariser): ids, next_ids (B,) or (B, L) int → float32 of their shape."""
  logits = model(ids)
  return _token_cross_entropies(logits.reshape(-1, logits.shape[-1]), next_ids.reshape(-1)).reshape(next_ids.shape)
