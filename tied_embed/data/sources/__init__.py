"""The bigram tasks, in pure NumPy: one module per source, behind the `base.Source` interface.

A bigram task is current tokens `p` (V,) and a table `log P(next | current)` (V, V); its loss floor is
H(next | current) = -Σ_i p_i Σ_j P(j|i) log P(j|i).

- `planted`: symmetric logits e*_i · e*_j, which a tied table represents exactly;
- `directed`: e*_i · e*_{j-1}, a one-way cycle a tied table cannot represent;
- `text`: bigrams of a local corpus (bytes or SentencePiece pieces), with an empirical floor;
- `tfds`: the same over a TFDS text dataset.

The text sources share `tied_embed.data.text`. Every module of this package is imported here, so adding a source
is one new module that defines a `base.Source` and calls `base.register` on it.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import numpy as np

from tied_embed.data.base import REGISTRY, LogProbRows, Reference, Source, log_softmax, zipf_probs
from tied_embed.data.sources.synthetic import (
  SyntheticSource,
  conditional_entropy,
  hidden_table,
  sample_pairs,
  synthetic_splits,
  table_rows,
)
from tied_embed.data.sources.text import empirical_log_probs, text_pairs

for _module in pkgutil.iter_modules(__path__):  # each source module registers itself
  importlib.import_module(f"{__name__}.{_module.name}")

SOURCES = tuple(sorted(REGISTRY))
SYNTHETIC_SOURCES = tuple(name for name in SOURCES if isinstance(REGISTRY[name], SyntheticSource))

__all__ = [
    "REGISTRY", "SOURCES", "SYNTHETIC_SOURCES", "LogProbRows", "Reference", "Source", "conditional_entropy",
    "empirical_log_probs", "get", "hidden_table", "log_softmax", "sample_pairs", "synthetic_splits", "synthetic_task",
    "text_pairs", "transition_log_probs", "zipf_probs",
]


def get(name: Any) -> Source:
  """The registered source called `name`; KeyError if there is none (validation checks names first)."""
  return REGISTRY[name]


def transition_log_probs(name: str, table: np.ndarray) -> np.ndarray:
  """log P(next=j | current=i) of a synthetic source from its hidden table: (V, D) → (V, V) float64."""
  source = get(name)
  if not isinstance(source, SyntheticSource):
    raise ValueError(f"not a synthetic source: {name!r}")
  return np.asarray(table_rows(table, source.output_table(table)))


def synthetic_task(
    name: str, vocab_size: int, d_model: int, logit_scale: float, zipf_exponent: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
  """A synthetic task's current-token distribution p (V,) and log P(next | current) (V, V), both float64."""
  table = hidden_table(vocab_size, d_model, logit_scale, seed)
  return zipf_probs(vocab_size, zipf_exponent), transition_log_probs(name, table)
