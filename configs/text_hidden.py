"""Byte text (configs/text.py) with a D×D matrix W between lookup and projection: logits E[i]·W·Eᵀ, still tied.

  python train.py --config configs/text_hidden.py --workdir runs/text_hidden_10 --config.data.train_fraction=0.1

The pick of `python -m science.when_to_tie` on scarce byte text (docs/when_to_tie.md): up to 10% of the train data, each
model tuned and scored at its best step on a held-out selection split, it beats untied by 0.01-0.08 nats and
plain tying by 0.2-0.26. W starts at the identity, so step 0 is configs/text.py's tied model; it is D² = 1,024
parameters beside the table's V·D = 8,192, and it lets the tied table fit a non-symmetric bigram table (E·W·Eᵀ
need not be symmetric). model.hidden_l2 = λ adds λ·‖W − I‖² to the training loss, pulling W back towards the
plain tied model: 0.001 is what the sweep's selection chose at 3% and 10% of the data (0 at 1%, 30% and 100%).
"""

import ml_collections

from configs import text


def get_config() -> ml_collections.ConfigDict:
  config = text.get_config()
  config.model.hidden = "linear"  # h = E[ids]·W, W a (D, D) Param initialised to the identity
  config.model.hidden_l2 = 0.001  # λ of λ·‖W − I‖²; 0 = unpenalised W
  return config
