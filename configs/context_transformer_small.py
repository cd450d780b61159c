"""A small causal transformer on Vim's help files (D = 64, 2 blocks, windows of 32): docs/results.md's context table
row beside the MLP, at the MLP's shape and steps. The count n-gram of its context beats it;
configs/context_transformer.py is the one that beats the n-gram.

  python train.py --config configs/context_transformer_small.py --workdir runs/context_transformer_small

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
