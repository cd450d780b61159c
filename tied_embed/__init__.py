"""tied-embed: one (V, D) table used for the token lookup `E[ids]` and, transposed, for the projection `x @ E.T`. Its
names load jax and flax when first used; training, data, checkpoints and inspection are submodules."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from tied_embed.core.model import ParamCounts, TiedEmbed, UntiedEmbed, param_counts  # noqa: F401
  from tied_embed.entrypoint import tied_io_embed  # noqa: F401

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
