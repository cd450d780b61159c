"""The bigram tasks, each a `base.Source` its module registers: `synthetic` ('planted', which a tied table represents
exactly; 'directed', which it cannot) and `text` ('text', a local corpus)."""

from __future__ import annotations

from typing import Any, NamedTuple

from tied_embed.data.base import REGISTRY, LogProbRows, Reference, Source
from tied_embed.data.sources import synthetic, text  # noqa: F401 (importing a module registers its sources)

SYNTHETIC_SOURCES = tuple(sorted(name for name, s in REGISTRY.items() if isinstance(s, synthetic.SyntheticSource)))

__all__ = ["REGISTRY", "SYNTHETIC_SOURCES", "DataSizes", "LogProbRows", "Reference", "Source", "get", "sizes"]


def get(name: Any) -> Source:
  """The registered source called `name`; KeyError if there is none (validation checks names first)."""
  return REGISTRY[name]


class DataSizes(NamedTuple):
  """How much data a config makes, as plain numbers for the checks that size a run (the selection split, memory)."""

  num_pairs: dict[str, int]  # {'train': N, 'validation': M}; for subwords an estimate (`Source.num_pairs`)
  fields: tuple[str, ...]  # the config fields the pair count grows with: data.num_* where the source has them


def sizes(config: Any) -> DataSizes:
  """The pairs each split of a validated config's data holds, read from its source once (a text source scans its
  corpus here)."""
  source = get(config.data.source)
  counts = [f"data.{field}" for field in source.fields if field.startswith("num_")]
  fields = tuple(counts or [f"data.{field}" for field in source.fields] or ["data.source"])
  return DataSizes(source.num_pairs(source.settings(config)), fields)
