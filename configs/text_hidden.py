"""Byte text (configs/text.py) with a D×D matrix W between lookup and projection: logits E[i]·W·Eᵀ, still tied.

  python train.py --config configs/text_hidden.py --workdir runs/text_hidden_10 --config.data.train_fraction=0.1

The best model of science/when_to_tie.py on scarce byte text (docs/when_to_tie.md): on the first 10% of the train
split it ends about 19.5% above the floor, against 31.2% untied and 38.4% tied without W. W starts at the
identity, so step 0 is configs/text.py's tied model; it is D² = 1,024 parameters beside the table's V·D = 8,192,
and it lets the tied table fit a non-symmetric bigram table (E·W·Eᵀ need not be symmetric). model.hidden_l2 = λ
adds λ·‖W − I‖² to the training loss, pulling W back towards the plain tied model: 0.001 is what the sweep's
held-out selection chose at 3% to 100% of the data.
"""

import ml_collections

from configs import text


def get_config() -> ml_collections.ConfigDict:
  config = text.get_config()
  config.model.hidden = "linear"  # h = E[ids]·W, W a (D, D) Param initialised to the identity
  config.model.hidden_l2 = 0.001  # λ of λ·‖W − I‖²; 0 = unpenalised W
  return config
