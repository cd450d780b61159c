"""A context model on Vim's help files: the previous k rows of a window through one hidden layer, still one table.

  python train.py --config configs/context_mlp.py --workdir runs/context_mlp
  python train.py --config configs/context_mlp.py --workdir runs/context_mlp_untied --config.model.tied=False
  python -m tied_embed.inspection --workdir runs/context_mlp --next "the cursor"

configs/subword.py's data (SentencePiece, V = 8192, split by whole files) cut into windows of data.context_length
tokens, never across a file. At each position the rows of that token and the k - 1 before it are concatenated and
pass through one tanh layer (Bengio et al. 2003), added to the token's own row, then scored against the same table:
`logits = (x_t + MLP([x_t, ..., x_t-k+1])) · Eᵀ`. eval/loss scores every validation pair once, as the bigram configs
do, so the numbers compare; eval/loss_floor and eval/count_bigram_loss stay the bigram references (a context model
can go below both).
"""

import ml_collections

from configs import subword


def windows() -> ml_collections.ConfigDict:
  """configs/subword.py's data on Vim's help files, cut into windows: what every context config starts from."""
  config = subword.get_config()
  config.data.text_path = "/usr/share/vim/vim*/doc/*.txt"  # Vim's help files, ~9.5 MB of English
  config.data.context_length = 32  # L, tokens per window
  config.train.batch_size = 32  # windows per step: 32 · 32 = 1024 tokens, configs/subword.py's pairs per step
  config.train.learning_rate = 0.01  # peak learning rate
  return config


def get_config() -> ml_collections.ConfigDict:
  config = windows()
  config.model.context = "mlp"  # the previous k rows through one hidden layer of 4·D units
  config.model.context_k = 4  # rows read at each position: the token's own and the 3 before it
  return config
