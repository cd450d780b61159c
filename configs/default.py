"""The tied model on the planted bigram task, which a tied table can represent exactly.

  python train.py --config configs/default.py --workdir runs/default

About 15 s on 2 CPU cores (well within the minute it is meant for); the final eval loss ends 0.34% above the
printed loss floor (the target is 2%).

Every field at its default: V = 1024 rows of D = 32, tied; 3,000 AdamW steps of 1,024 (current, next) pairs, peak
learning rate 0.05 after 100 warmup steps, clipping at 1.0; the loss over chunks of 256 tokens. Each field's default,
meaning and allowed values are declared once, in tied_embed/train/config.py's `FIELDS` (a data source's fields beside
its source, a model variant's beside its class in tied_embed/core/model.py); docs/configs.md lists them all. The
other configs start from this one and change a few fields.
"""

import ml_collections

from tied_embed.train import config as config_lib


def get_config() -> ml_collections.ConfigDict:
  return config_lib.default_config()
