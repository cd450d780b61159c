"""tied-embed: one (V, D) table used for the token lookup `E[ids]` and, transposed, for the projection `x @ E.T`.

Importing this package imports nothing: its names load jax and flax when first used (so `python -m
tied_embed.inspection` can say in one line that the project's libraries are missing). Training, data, checkpoints and
inspection live in submodules that import TFDS, CLU and Orbax when they are used."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from tied_embed.core.model import ParamCounts, TiedEmbed, UntiedEmbed, param_counts
  from tied_embed.entrypoint import tied_io_embed

# name → the module that defines it
_EXPORTS = {"ParamCounts": "tied_embed.core.model", "TiedEmbed": "tied_embed.core.model",
            "UntiedEmbed": "tied_embed.core.model", "param_counts": "tied_embed.core.model",
            "tied_io_embed": "tied_embed.entrypoint"}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
  """The exported names, imported on first use (PEP 562)."""
  if name not in _EXPORTS:
    raise AttributeError(f"module 'tied_embed' has no attribute {name!r}")
  return getattr(importlib.import_module(_EXPORTS[name]), name)
