"""A causal transformer between the two uses of one table (nanoGPT's tying), on Vim's help files: wide and deep
enough to beat the count n-gram of its context.

  python train.py --config configs/context_transformer.py --workdir runs/context_transformer
  python train.py --config configs/context_transformer.py --workdir runs/context_transformer_untied \
      --config.model.tied=False
  python -m tied_embed.inspection --workdir runs/context_transformer --next "the cursor"

configs/context_mlp.py's data (Vim's help files, V = 8192, never across a file); learned positions are added to the
looked-up rows, which pass through model.layers pre-norm blocks (causal attention with model.heads heads, then an MLP
of 4·D) and a final LayerNorm, then are scored against the same table. D = 128, 4 blocks over windows of 64 tokens,
4,000 AdamW steps of 2,048 tokens at a peak learning rate of 0.003, scored at its best step on a selection split,
and evaluated in windows 64 tokens long that start every 32 (train.eval_stride), so every scored token after the
first 64 of its document sees at least 32 earlier ones. What it scores against the Kneser-Ney n-grams, what each
lever bought, and the untied model at tied's parameter count: docs/results.md (a transformer that beats the n-gram).
"""

import ml_collections

from configs import context_mlp


def get_config() -> ml_collections.ConfigDict:
  config = context_mlp.windows()
  config.model.context = "transformer"  # learned positions, pre-norm causal blocks
  config.model.d_model = 128  # width of each row and of the blocks
  config.model.layers = 4  # blocks
  config.model.heads = 4  # heads per block, 32 dimensions each
  config.data.context_length = 64  # L, tokens per window
  config.data.selection_fraction = 0.05  # the train split's last 5% picks the best step
  config.train.batch_size = 32  # windows per step: 32 · 64 = 2,048 tokens
  config.train.num_steps = 4000  # optimizer updates
  config.train.learning_rate = 0.003  # peak learning rate
  config.train.warmup_steps = 200  # linear warmup, then cosine decay to 0
  config.train.eval_every = 500  # evaluations of validation and selection
  config.train.checkpoint_every = 500  # checkpoints (each eval's best is kept)
  config.train.eval_stride = 32  # windows of 64 every 32 tokens: each scored token sees at least 32 before it
  return config
