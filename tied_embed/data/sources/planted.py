"""planted: P(j|i) = softmax_j(e*_i · e*_j) for a hidden table e* (V, D).

Symmetric logits: a tied model of width D represents the task exactly.
"""

from __future__ import annotations

import numpy as np

from tied_embed.data import base
from tied_embed.data.sources.synthetic import SyntheticSource


class Planted(SyntheticSource):
  name = "planted"

  def output_table(self, table: np.ndarray) -> np.ndarray:
    return table


base.register(Planted())
