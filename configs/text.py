"""Byte-level bigrams of a local UTF-8 file, by default the project's README.md.

  python train.py --config configs/text.py --workdir runs/text --config.data.text_path=/path/to/file.txt

The floor is the empirical conditional entropy of the validation split (the file's last bytes); the source is
tied_embed/sources/text.py, and the dataset's identity includes a hash of the file.
"""

import ml_collections

from configs import default


def get_config() -> ml_collections.ConfigDict:
  config = default.get_config()
  config.data.source = "text"  # byte bigrams: current byte → next byte
  config.data.text_path = ""  # UTF-8 file to read ('' = the project's README.md)
  config.model.vocab_size = 256  # one row per byte value (required by the text source)
  config.train.num_steps = 1000  # a README-sized file has only a few thousand distinct byte pairs
  return config
