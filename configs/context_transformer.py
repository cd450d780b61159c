"""A small causal transformer on Vim's help files, between the two uses of one table (nanoGPT's tying).

  python train.py --config configs/context_transformer.py --workdir runs/context_transformer
  python train.py --config configs/context_transformer.py --workdir runs/context_transformer_untied \
      --config.model.tied=False
  python -m tied_embed.inspection --workdir runs/context_transformer --next "the cursor"

configs/context_mlp.py's windows (data.context_length tokens of configs/subword.py's data, never across a file);
learned positions are added to the looked-up rows, which pass through model.layers pre-norm blocks (causal
attention with model.heads heads, then an MLP of 4·D) and a final LayerNorm, then are scored against the same
table. eval/loss scores every validation pair once, so it compares with the bigram configs'.
"""

import ml_collections

from configs import context_mlp


def get_config() -> ml_collections.ConfigDict:
  config = context_mlp.windows()
  config.model.context = "transformer"  # learned positions, pre-norm causal blocks
  config.model.layers = 2  # blocks
  config.model.heads = 4  # heads per block, 16 dimensions each at D = 64
  return config
