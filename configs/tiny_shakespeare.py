"""Byte bigrams of TFDS's tiny_shakespeare (about 1 MB of Shakespeare), read from TFDS's own prepared copy.

  tfds build tiny_shakespeare --data_dir=~/tensorflow_datasets   # once, on a machine with a network
  python train.py --config configs/tiny_shakespeare.py --workdir runs/shakespeare
  python train.py --config configs/tiny_shakespeare.py --workdir runs/shakespeare_spm \
      --config.data.tokenizer=sentencepiece --config.model.vocab_size=2048

Without a prepared copy the run stops at once with the command that prepares it. The source is
tied_embed/data/sources/text.py.
"""

import ml_collections

from configs import default


def get_config() -> ml_collections.ConfigDict:
  config = default.get_config()
  config.data.source = "tfds"  # a TFDS text dataset
  config.data.tfds_name = "tiny_shakespeare"  # one example per split holding the whole text
  config.data.tfds_train_split = "train"  # about 1 MB of text
  config.data.tfds_eval_split = "validation"  # about 55 kB of text
  config.data.text_feature = "text"  # the dataset's text field
  config.data.tfds_data_dir = ""  # '' = TFDS's default (~/tensorflow_datasets or $TFDS_DATA_DIR)
  config.data.tokenizer = "bytes"  # one token per byte; 'sentencepiece' trains a vocabulary of model.vocab_size
  config.model.vocab_size = 256  # one row per byte value
  config.model.d_model = 32  # width of each row
  config.data.task_d_model = 32  # read by the synthetic tasks only; kept equal to the model's width
  config.train.num_steps = 2000  # about a million training bytes, sampled with replacement
  return config
