"""A causal convolution between the two uses of one table, on Vim's help files: the plainest context mixer.

  python train.py --config configs/context_conv.py --workdir runs/context_conv
  python -m tied_embed.inspection --workdir runs/context_conv --next "the cursor"

configs/context_mlp.py's windows; at each position the rows of that token and the width - 1 before it are each
multiplied by their own (D, D) kernel and added to the token's own row: `h_t = x_t + Σ_j x_(t−j) · K_j + c`, then
scored against the same table.
"""

import ml_collections

from configs import context_mlp


def get_config() -> ml_collections.ConfigDict:
  config = context_mlp.windows()
  config.model.context = "conv"  # a causal convolution over the window
  config.model.conv_width = 4  # rows read at each position: the token's own and the 3 before it
  return config
