"""Checks of the data.* config fields, without TensorFlow: a typo fails at once, before any import of TFDS.

Data config fields (data.source, data.data_dir, data.train_fraction and data.task_d_model are declared with the
other run fields in `tied_embed.train.config_fields`; the others by the sources that read them):
  data.source           which task (`tied_embed.data.sources`); the source checks the fields it reads itself
  data.data_dir         where the dataset is generated and cached ('' = <workdir>/data): a writable directory
  data.train_fraction   the share of the train split trained on, its first pairs: a number in (0, 1]
  data.text_path        text: the corpus, a file, a directory (read recursively) or a glob
  data.tokenizer        text, tfds: 'bytes' (V = 256), 'sentencepiece' (trained, V pieces) or a .model file
  data.tfds_name        tfds: the TFDS dataset; data.tfds_train_split, data.tfds_eval_split: its splits
  data.text_feature     tfds: the text feature; data.tfds_data_dir: TFDS's data_dir ('' = TFDS's default)
  data.task_seed        synthetic: hidden table and sampled pairs (model init uses `seed`)
  data.num_train_pairs  synthetic train split size; data.num_eval_pairs: synthetic validation split size
  data.logit_scale      synthetic: E|e*_i|², the typical self (planted) / next (directed) logit
  data.zipf_exponent    synthetic: current tokens follow p_i ∝ (i + 1)^-s (0 = uniform)
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

from tied_embed.data import sources
from tied_embed.data.sources.base import is_int, is_number
from tied_embed.util import require

__all__ = ["is_int", "is_number", "validate_data_config", "validate_data_dir"]


def validate_data_dir(data_dir: str) -> None:
  """Raises UsageError unless `data_dir` ('' = inside the workdir) is, or can be made, a writable directory."""
  if not data_dir:
    return
  path = pathlib.Path(data_dir).expanduser().absolute()
  existing = next(p for p in (path, *path.parents) if p.exists() or p == p.parent)
  if existing == path:
    require(path.is_dir(), "data.data_dir", data_dir, "a directory (this is an existing file)")
  else:
    require(existing.is_dir(), "data.data_dir", data_dir, f"a path that can be created ({existing} is a file)")
  require(os.access(existing, os.W_OK | os.X_OK), "data.data_dir", data_dir,
          f"a writable directory ({existing} is not writable)")


def validate_data_config(config: Any) -> None:
  """Raises UsageError (field, value, what is allowed) for a data config that cannot work. Cheap; writes nothing.

  Checks data.source, then asks that source to check the model.* and data.* fields it reads, then data.data_dir
  (`tied_embed.train.config_fields` checks data.train_fraction with the other fields it declares).
  """
  data = config.data
  names = tuple(sorted(sources.REGISTRY))
  require(data.get("source") in names, "data.source", data.get("source"), f"one of {names}")
  sources.get(data.source).validate(config)
  data_dir = data.get("data_dir", "")
  require(isinstance(data_dir, str), "data.data_dir", data_dir, "a path ('' = <workdir>/data)")
  validate_data_dir(data_dir)
