"""Checks of the data.* config fields, without TensorFlow: a typo fails at once, before any import of TFDS.

Data config fields (beside data.source, data.text_path, data.data_dir):
  data.task_seed        hidden table and sampled pairs of the synthetic tasks (model init uses `seed`)
  data.num_train_pairs  synthetic train split size; data.num_eval_pairs: synthetic validation split size
  data.logit_scale      E|e*_i|²: the typical self (planted) / next (directed) logit
  data.zipf_exponent    current tokens follow p_i ∝ (i + 1)^-s (0 = uniform)
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from tied_embed import sources
from tied_embed.errors import UsageError

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
_MIN_TEXT_BYTES = 32  # enough for a few pairs in the 10% validation split


def resolve_text_path(text_path: str) -> pathlib.Path:
  """'' → the project's README.md; anything else is taken as given (relative to the working directory)."""
  return pathlib.Path(text_path).expanduser() if text_path else REPO_ROOT / "README.md"


def _check(ok: bool, field: str, value: Any, allowed: str) -> None:
  if not ok:
    raise UsageError.bad_value(field, value, allowed)


def is_int(value: Any) -> bool:
  """A Python or NumPy integer, not a bool."""
  return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
  """A Python or NumPy real number, not a bool."""
  return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


def validate_data_config(config: Any) -> None:
  """Raises UsageError (field, value, what is allowed) for a data config that cannot work. Cheap; writes nothing.

  Checks: data.source; model.vocab_size for that source (text: 256, synthetic: ≥ 2); for synthetic sources
  model.d_model and the data.* task fields; for text that data.text_path is a readable file of some bytes.
  """
  data = config.data
  _check(data.get("source") in sources.SOURCES, "data.source", data.get("source"), f"one of {sources.SOURCES}")
  vocab_size = config.model.get("vocab_size")
  if data.source == "text":
    _check(vocab_size == sources.TEXT_VOCAB_SIZE, "model.vocab_size", vocab_size,
           f"{sources.TEXT_VOCAB_SIZE} for data.source='text' (one token per byte)")
    path = resolve_text_path(data.get("text_path") or "")
    try:
      with path.open("rb") as f:
        size = len(f.read(_MIN_TEXT_BYTES))
    except OSError as e:
      raise UsageError.bad_value("data.text_path", data.get("text_path"),
                                 f"a readable file ({path}: {e.strerror or e})") from None
    _check(size >= _MIN_TEXT_BYTES, "data.text_path", data.get("text_path"),
           f"a file of at least {_MIN_TEXT_BYTES} bytes ({path} has {size})")
    return
  _check(is_int(vocab_size) and vocab_size >= 2, "model.vocab_size", vocab_size,
         f"an integer >= 2 for data.source={data.source!r}")
  d_model = config.model.get("d_model")
  _check(is_int(d_model) and d_model >= 1, "model.d_model", d_model, "an integer >= 1")
  _check(is_int(data.get("task_seed")) and data.task_seed >= 0, "data.task_seed", data.get("task_seed"),
         "an integer >= 0")
  for field in ("num_train_pairs", "num_eval_pairs"):
    _check(is_int(data.get(field)) and data[field] >= 1, f"data.{field}", data.get(field), "an integer >= 1")
  for field in ("logit_scale", "zipf_exponent"):
    _check(is_number(data.get(field)) and data[field] >= 0, f"data.{field}", data.get(field), "a number >= 0")
