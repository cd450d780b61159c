"""The optimizer's clip: optax.clip_by_global_norm's answer, written so XLA stores no (V, D) copy of the update."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tied_embed.core import optim
from tied_embed.fast import compilation


def _tree(rng):
  return {
      "embedding": rng.standard_normal((64, 16)).astype(np.float32),
      "kernel": rng.standard_normal((16, 16)).astype(np.float32),
  }


@pytest.mark.parametrize("max_norm", [1.0, 1e4])
def test_the_clip_scales_by_min_one_and_max_norm_over_the_global_norm(max_norm):
  grads = _tree(np.random.default_rng(0))
  norm = np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in grads.values()))
  scale = min(1.0, max_norm / norm)
  clipped, _ = optim.clip_by_global_norm(max_norm).update(jax.tree.map(jnp.asarray, grads), optax.EmptyState())
  for name, g in grads.items():
    if scale == 1.0:  # an unclipped update is the gradient, bit for bit
      np.testing.assert_array_equal(clipped[name], g)
    else:
      np.testing.assert_allclose(clipped[name], g * scale, rtol=2e-6)


def test_a_clipped_adamw_update_stores_no_copy_of_the_gradient():
  # optax's (g / ‖g‖) · max_norm is a division XLA:CPU will not repeat in Adam's two moment updates, so it
  # stores it: one more (V, D) buffer in the step. The clip's multiply fuses into both.
  vocab_size, d_model = 1024, 64
  params = {"embedding": jnp.ones((vocab_size, d_model), jnp.float32)}
  tx = optax.chain(optim.clip_by_global_norm(1.0), optax.adamw(1e-3, weight_decay=0.1))

  def update(scale, opt_state, params):
    grads = jax.tree.map(lambda p: p * scale, params)  # a gradient computed inside the step, as in training
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  compiled = jax.jit(update, donate_argnums=(1, 2), compiler_options=compilation.compiler_options()).lower(
      jnp.float32(2.0), tx.init(params), params
  ).compile()
  table_bytes = vocab_size * d_model * 4
  assert compiled.memory_analysis().temp_size_in_bytes < 1.5 * table_bytes  # the gradient's own buffer only
