"""The Linen form of the tied embedding (the Linen contract in docs/entrypoint.md): `nn.Embed(V, D).attend` is
Linen's built-in way to tie; this compact module makes the shared array and its initializer explicit."""

from __future__ import annotations

import flax.linen as nn
import jax


class TiedEmbed(nn.Module):
  """ids (...,) int → (..., V) float32 logits through one (V, D) parameter named `embedding`."""

  vocab_size: int
  d_model: int

  @nn.compact
  def __call__(self, ids: jax.Array) -> jax.Array:
    table = self.param("embedding", nn.initializers.normal(stddev=0.02), (self.vocab_size, self.d_model))
    return table[ids] @ table.T
