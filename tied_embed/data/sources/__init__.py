"""The bigram tasks, each a `base.Source` its module registers: `synthetic` ('planted', which a tied table represents
exactly; 'directed', which it cannot) and `text` ('text', a local corpus; 'tfds', a TFDS text dataset)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tied_embed.data.base import REGISTRY, LogProbRows, Reference, Source, zipf_probs
from tied_embed.data.sources import synthetic
from tied_embed.data.sources.synthetic import conditional_entropy, sample_pairs, synthetic_splits
from tied_embed.data.sources.text import text_pairs

SYNTHETIC_SOURCES = tuple(sorted(name for name, s in REGISTRY.items() if isinstance(s, synthetic.SyntheticSource)))

__all__ = [
    "REGISTRY", "SYNTHETIC_SOURCES", "LogProbRows", "Reference", "Source", "conditional_entropy", "get", "sample_pairs",
    "synthetic_splits", "synthetic_task", "text_pairs", "transition_log_probs", "zipf_probs",
]


def get(name: Any) -> Source:
  """The registered source called `name`; KeyError if there is none (validation checks names first)."""
  return REGISTRY[name]


def transition_log_probs(name: str, table: np.ndarray) -> np.ndarray:
  """log P(next=j | current=i) of a synthetic source from its hidden table: (V, D) → (V, V) float64."""
  return np.asarray(synthetic.table_rows(table, get(name).output_table(table)))


def synthetic_task(
    name: str, vocab_size: int, d_model: int, logit_scale: float, zipf_exponent: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
  """A synthetic task's current-token distribution p (V,) and log P(next | current) (V, V), both float64."""
  table = synthetic.hidden_table(vocab_size, d_model, logit_scale, seed)
  return zipf_probs(vocab_size, zipf_exponent), transition_log_probs(name, table)
