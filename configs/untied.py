"""The untied ablation on the planted task: separate input and output tables, everything else as default.py.

  python train.py --config configs/untied.py --workdir runs/untied
"""

import ml_collections

from configs import default


def get_config() -> ml_collections.ConfigDict:
  config = default.get_config()
  config.model.tied = False  # independent (V, D) input and output tables: 2*V*D parameters
  return config
