"""Byte-level bigrams of a local corpus (a file, a directory or a glob), by default the project's README.md.

  python train.py --config configs/text.py --workdir runs/text --config.data.text_path=/path/to/file.txt
  python train.py --config configs/text.py --workdir runs/text_dir --config.data.text_path='/path/to/docs/**/*.txt'

The floor is the empirical conditional entropy of the validation split (the corpus's last bytes); beside it,
eval/count_bigram_loss is the add-k count bigram model fitted on train. The source is tied_embed/sources/text.py,
and the dataset's identity includes a hash of the corpus.
"""

import ml_collections

from configs import default


def get_config() -> ml_collections.ConfigDict:
  config = default.get_config()
  config.data.source = "text"  # byte bigrams: current byte → next byte
  config.data.text_path = ""  # a file, a directory (recursive) or a glob ('' = the project's README.md)
  config.data.tokenizer = "bytes"  # one token per byte (see configs/subword.py for a trained vocabulary)
  config.model.vocab_size = 256  # one row per byte value (required by the text source)
  config.train.num_steps = 1000  # a README-sized file has only a few thousand distinct byte pairs
  return config
