"""text: byte bigrams of a local file (one token per byte value); the floor is empirical.

The last 10% of the file's bytes is the validation split; the reference table and the floor are the bigram
statistics of those validation bytes (the best a bigram model can score on them). The dataset's identity
includes a hash of the file's contents, so editing the file makes a new dataset.
"""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import numpy as np

from tied_embed.errors import UsageError, require
from tied_embed.sources import base

VOCAB_SIZE = 256  # one token per byte value
VALIDATION_FRACTION = 0.1
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
_MIN_BYTES = 32  # enough for a few pairs in the validation split


def resolve_text_path(text_path: str) -> pathlib.Path:
  """'' → the project's README.md; anything else is taken as given (relative to the working directory)."""
  return pathlib.Path(text_path).expanduser() if text_path else REPO_ROOT / "README.md"


def text_pairs(
    data: bytes, validation_fraction: float = VALIDATION_FRACTION
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Byte bigrams of a file split by position: the last `validation_fraction` of the bytes is validation.

  bytes (n,) → {'train': (ids, next_ids), 'validation': (ids, next_ids)}, int32 arrays of n_split - 1 pairs.
  No pair straddles the split point, so the two splits share no bytes.
  """
  values = np.frombuffer(data, dtype=np.uint8).astype(np.int32)
  split_at = len(values) - int(len(values) * validation_fraction)
  train, validation = values[:split_at], values[split_at:]
  return {"train": (train[:-1], train[1:]), "validation": (validation[:-1], validation[1:])}


def pair_counts(ids: np.ndarray, next_ids: np.ndarray, vocab_size: int) -> np.ndarray:
  """count(i, j) of observed pairs: (N,), (N,) → (V, V) int64."""
  return np.bincount(ids.astype(np.int64) * vocab_size + next_ids, minlength=vocab_size**2).reshape(
      vocab_size, vocab_size)


def count_rows(counts: np.ndarray) -> base.LogProbRows:
  """log(count(i, j) / count(i)) row by row: (V, V) counts → LogProbRows (-inf unseen pairs, nan unseen rows)."""
  def rows(ids: np.ndarray) -> np.ndarray:
    block = counts[ids].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
      return np.log(block / block.sum(axis=1, keepdims=True))
  return base.LogProbRows(len(counts), rows)


def empirical_log_probs(ids: np.ndarray, next_ids: np.ndarray, vocab_size: int) -> np.ndarray:
  """log(count(i, j) / count(i)) of observed pairs: (N,), (N,) → (V, V) float64.

  -inf where a pair never occurs; a row whose token never occurs as current is all nan.
  """
  return np.asarray(count_rows(pair_counts(ids, next_ids, vocab_size)))


def empirical_conditional_entropy(ids: np.ndarray, next_ids: np.ndarray, vocab_size: int) -> float:
  """Empirical H(next | current) of observed pairs, the best a bigram model can score on them: → float nats."""
  log_probs = empirical_log_probs(ids, next_ids, vocab_size)
  return float(-log_probs[ids, next_ids].mean())


def _digest(path: pathlib.Path) -> str:
  return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


class Text(base.Source):
  name = "text"
  reference_name = "empirical"
  fields = ("text_path",)

  def validate(self, config: Any) -> None:
    vocab_size, text_path = config.model.get("vocab_size"), config.data.get("text_path") or ""
    require(vocab_size == VOCAB_SIZE, "model.vocab_size", vocab_size,
            f"{VOCAB_SIZE} for data.source={self.name!r} (one token per byte)")
    path = resolve_text_path(text_path)
    try:
      with path.open("rb") as f:
        size = len(f.read(_MIN_BYTES))
    except OSError as e:
      raise UsageError.bad_value("data.text_path", config.data.get("text_path"),
                                 f"a readable file ({path}: {e.strerror or e})") from None
    require(size >= _MIN_BYTES, "data.text_path", config.data.get("text_path"),
            f"a file of at least {_MIN_BYTES} bytes ({path} has {size})")

  def settings(self, config: Any) -> dict[str, Any]:
    path = resolve_text_path(config.data.get("text_path") or "").resolve()
    return {"vocab_size": VOCAB_SIZE, "text_path": str(path), "sha256": _digest(path),
            "num_bytes": path.stat().st_size}

  def identity(self, settings: dict[str, Any]) -> str:
    return f"{self.name}-v{settings['vocab_size']}-sha{settings['sha256']}"

  def num_pairs(self, settings: dict[str, Any]) -> dict[str, int]:
    size = settings["num_bytes"]
    split_at = size - int(size * VALIDATION_FRACTION)
    return {"train": max(split_at - 1, 0), "validation": max(size - split_at - 1, 0)}

  def splits(self, settings: dict[str, Any]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    contents = pathlib.Path(settings["text_path"]).read_bytes()
    if hashlib.sha256(contents).hexdigest()[:16] != settings["sha256"]:
      raise UsageError(f"data.text_path={settings['text_path']!r} changed while its dataset was being made; "
                       f"start the run again")
    return text_pairs(contents)

  def reference(self, settings: dict[str, Any], eval_ids: np.ndarray, eval_next: np.ndarray) -> base.Reference:
    counts = pair_counts(eval_ids, eval_next, settings["vocab_size"])
    log_probs = count_rows(counts)
    floor = float(-np.asarray(log_probs)[eval_ids, eval_next].mean())
    return base.Reference(self.reference_name, floor, log_probs, {"pair_counts": counts})

  def log_probs_from_record(self, vocab_size: int, record: dict[str, np.ndarray]) -> base.LogProbRows:
    return count_rows(np.asarray(record["pair_counts"], np.int64))

  def token_label(self, token: int) -> str:
    return repr(bytes([token]))[1:]  # printable literal: 'a', ' ', '\n', '\xc3'


base.register(Text())
