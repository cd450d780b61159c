"""directed: P(j|i) = softmax_j(e*_i · e*_{j-1}), the planted logits shifted by one column.

The peak sits on the cycle i → i+1 (the reverse step is as unlikely as any other token): strongly one-way. An
untied model of width D represents it exactly (input row e*_i, output row e*_{j-1}); a tied one cannot (E·Eᵀ is
symmetric).
"""

from __future__ import annotations

import numpy as np

from tied_embed.data import base
from tied_embed.data.sources.synthetic import SyntheticSource


class Directed(SyntheticSource):
  name = "directed"

  def output_table(self, table: np.ndarray) -> np.ndarray:
    return np.roll(table, 1, axis=0)  # column j scores against row j-1


base.register(Directed())
