"""A tiny planted run that finishes in seconds, for tests: every log/eval/checkpoint path is exercised.

  python train.py --config configs/smoke.py --workdir /tmp/smoke
"""

import ml_collections

from configs import default


def get_config() -> ml_collections.ConfigDict:
  config = default.get_config()
  config.model.vocab_size = 32  # small V: fast steps, and every row still gets looked up or projected
  config.model.d_model = 8  # narrow table
  config.data.task_d_model = 8  # the planted task's hidden width, as narrow
  config.data.num_train_pairs = 20_000  # small split: generated in well under a second
  config.data.num_eval_pairs = 2_000  # four eval batches of 512, the last one short
  config.train.num_steps = 60  # enough for the loss to fall clearly
  config.train.batch_size = 128  # pairs per step
  config.train.eval_batch_size = 512  # several eval batches, so batching over the split is exercised
  config.train.learning_rate = 0.05  # peak learning rate
  config.train.warmup_steps = 5  # short warmup
  config.train.log_every = 10  # six log steps
  config.train.eval_every = 20  # three evaluations
  config.train.checkpoint_every = 20  # checkpoints at 20, 40, 60
  config.train.keep_checkpoints = 2  # so pruning of old checkpoints is exercised (20 gets deleted)
  return config
