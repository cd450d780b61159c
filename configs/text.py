"""Byte-level bigrams of a local corpus (a file, a directory or a glob), by default Python's pydoc topics.

  python train.py --config configs/text.py --workdir runs/text --config.data.text_path=/path/to/file.txt
  python train.py --config configs/text.py --workdir runs/text_dir --config.data.text_path='/path/to/docs/**/*.txt'

The floor is the empirical conditional entropy of the validation split (the corpus's last bytes); beside it,
eval/count_bigram_loss is the add-k count bigram model fitted on train. The source is tied_embed/data/sources/text.py,
and the dataset's identity includes a hash of the corpus.
"""

import ml_collections

from configs import default


def get_config() -> ml_collections.ConfigDict:
  config = default.get_config()
  config.data.source = "text"  # byte bigrams: current byte → next byte
  # a file, a directory (recursive) or a glob ('' = Python's pydoc_data/topics.py, ~750 KB of English)
  config.data.text_path = ""
  config.data.tokenizer = "bytes"  # one token per byte (see configs/subword.py for a trained vocabulary)
  config.model.vocab_size = 256  # one row per byte value (required by the text source)
  config.train.num_steps = 1000  # byte bigrams are learned quickly: V = 256 gives only 65,536 pairs
  return config
