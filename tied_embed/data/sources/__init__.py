"""The bigram tasks, each a `base.Source` its module registers: `synthetic` ('planted', which a tied table represents
exactly; 'directed', which it cannot) and `text` ('text', a local corpus)."""

from __future__ import annotations

from typing import Any

from tied_embed.data.base import REGISTRY, LogProbRows, Reference, Source, zipf_probs
from tied_embed.data.sources import synthetic, text  # noqa: F401 (importing a module registers its sources)
from tied_embed.data.sources.synthetic import conditional_entropy, sample_pairs, synthetic_splits

SYNTHETIC_SOURCES = tuple(sorted(name for name, s in REGISTRY.items() if isinstance(s, synthetic.SyntheticSource)))

__all__ = [
    "REGISTRY", "SYNTHETIC_SOURCES", "LogProbRows", "Reference", "Source", "conditional_entropy", "get", "sample_pairs",
    "synthetic_splits", "zipf_probs",
]


def get(name: Any) -> Source:
  """The registered source called `name`; KeyError if there is none (validation checks names first)."""
  return REGISTRY[name]
