"""The bigram tasks, each a `base.Source` its module registers: `synthetic` ('planted', which a tied table represents
exactly; 'directed', which it cannot) and `text` ('text', a local corpus)."""

from __future__ import annotations

from typing import Any

from tied_embed.data.base import REGISTRY, LogProbRows, Reference, Source
from tied_embed.data.sources import synthetic, text  # noqa: F401 (importing a module registers its sources)

SYNTHETIC_SOURCES = tuple(sorted(name for name, s in REGISTRY.items() if isinstance(s, synthetic.SyntheticSource)))

__all__ = ["REGISTRY", "SYNTHETIC_SOURCES", "LogProbRows", "Reference", "Source", "get"]


def get(name: Any) -> Source:
  """The registered source called `name`; KeyError if there is none (validation checks names first)."""
  return REGISTRY[name]
