"""tied-embed: one (V, D) table used for the token lookup `E[ids]` and, transposed, for the projection `x @ E.T`.

Importing this package stays light (jax and flax only); training, data, checkpoints and inspection live in
submodules that import TFDS, CLU, TensorBoard and Orbax when they are used (TensorFlow: never)."""

from tied_embed.core.model import ParamCounts, TiedEmbed, UntiedEmbed, param_counts
from tied_embed.entrypoint import tied_io_embed

__all__ = ["ParamCounts", "TiedEmbed", "UntiedEmbed", "param_counts", "tied_io_embed"]
