"""A strongly one-way task (a noisy cycle i → i+1) that a tied table cannot represent, since E·Eᵀ is symmetric.

  python train.py --config configs/directed.py --workdir runs/directed_tied
  python train.py --config configs/directed.py --config.model.tied=False --workdir runs/directed_untied

The untied model ends near the floor; the tied model's gap stays several times larger. The source is
tied_embed/data/sources/synthetic.py.
"""

import ml_collections

from configs import default


def get_config() -> ml_collections.ConfigDict:
  config = default.get_config()
  config.data.source = "directed"  # P(j | i) = softmax_j(e*_i · e*_{j-1}): peaked on j = i + 1
  config.model.tied = True  # the point of the config: tied fails here; override with --config.model.tied=False
  return config
