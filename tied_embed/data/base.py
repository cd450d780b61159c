"""What every data source provides, and the probability arithmetic they share (pure NumPy): a bigram task's table `log
P(next | current)` (V, V) is never built whole; `LogProbRows` computes the rows asked for."""

from __future__ import annotations

import abc
import dataclasses
import pathlib
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import numpy as np

_BLOCK_ELEMENTS = 1 << 18  # float64 entries of one block of rows: 2 MB (a few temporaries of that while computing)


def row_block(vocab_size: int) -> int:
  """Rows of a (V, V) table computed at once: as many as fit in about 2 MB, at least one."""
  return max(1, _BLOCK_ELEMENTS // vocab_size)


def row_blocks(vocab_size: int) -> Iterator[np.ndarray]:
  """The row ids 0..V-1 in consecutive blocks of `row_block(V)`: → (K,) int64 arrays."""
  size = row_block(vocab_size)
  for start in range(0, vocab_size, size):
    yield np.arange(start, min(start + size, vocab_size))


def log_softmax(logits: np.ndarray) -> np.ndarray:
  """Row-wise log-softmax: (K, V) → (K, V) float64."""
  shifted = logits - logits.max(axis=1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def zipf_probs(vocab_size: int, exponent: float) -> np.ndarray:
  """Current-token distribution p_i ∝ (i + 1)^-exponent: () → (V,) float64 summing to 1 (exponent 0: uniform)."""
  weights = np.arange(1, vocab_size + 1, dtype=np.float64) ** -exponent
  return weights / weights.sum()


@dataclasses.dataclass(eq=False)
class LogProbRows:
  """A (V, V) table log P(next=j | current=i) whose rows are computed on demand: `rows(ids)` (K,) → (K, V) float64.
  Indexing computes only the rows named; `np.asarray(table)` builds the whole table (for small V and tests)."""

  vocab_size: int
  rows: Callable[[np.ndarray], np.ndarray]

  def __len__(self) -> int:
    return self.vocab_size

  def __getitem__(self, key: Any) -> np.ndarray:
    row_key, col_key = (key if isinstance(key, tuple) else (key, slice(None)))
    ids = np.asarray(row_key)
    if ids.ndim == 0:
      return self.rows(ids[None])[0][col_key]
    unique, inverse = np.unique(ids, return_inverse=True)
    block = self.rows(unique)[inverse.reshape(ids.shape)]
    if isinstance(col_key, slice):
      return block[..., col_key]
    return np.take_along_axis(block, np.asarray(col_key)[..., None], axis=-1)[..., 0]

  def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
    del copy  # always a new array
    table = np.concatenate([self.rows(ids) for ids in row_blocks(self.vocab_size)])
    return table if dtype is None else table.astype(dtype)


def dense_rows(log_probs: np.ndarray) -> LogProbRows:
  """A dense (V, V) table as `LogProbRows`."""
  log_probs = np.asarray(log_probs, np.float64)
  return LogProbRows(len(log_probs), lambda ids: log_probs[ids])


@dataclasses.dataclass
class Reference:
  """The best possible model's loss_floor (nats) and (V, V) table, 'true' or 'empirical'; record: what rebuilds it."""

  name: str
  loss_floor: float
  log_probs: LogProbRows
  record: dict[str, np.ndarray]


def is_int(value: Any) -> bool:
  return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
  return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


class Source(abc.ABC):
  """One bigram task; subclasses set `name`, `reference_name` and `fields`, and call `register`. `settings` (plain
  JSON) determines the data, so the dataset builder can rebuild it from its builder config alone."""

  name: ClassVar[str]
  reference_name: ClassVar[str] = "true"  # 'true' or 'empirical': what the reference table is
  fields: ClassVar[dict[str, Any]]  # the data.* config fields this source reads, with their defaults
  # what the resume check assumes where a saved config lacks a field: only a field added after checkpoints existed
  assumed_when_absent: ClassVar[dict[str, Any]] = {}

  @abc.abstractmethod
  def validate(self, config: Any) -> None:
    """Raises UsageError (field, value, what is allowed) unless the config's model.* and data.* fields fit."""

  @abc.abstractmethod
  def settings(self, config: Any) -> dict[str, Any]:
    """The task's parameters from a validated config: → JSON-able dict (may read a file, cheaply)."""

  @abc.abstractmethod
  def identity(self, settings: dict[str, Any]) -> str:
    """The dataset's name: spells out (or hashes) everything that changes the data, so caches never mix."""

  @abc.abstractmethod
  def num_pairs(self, settings: dict[str, Any]) -> dict[str, int]:
    """How many pairs each split holds: → {'train': N, 'validation': M}."""

  @abc.abstractmethod
  def splits(self, settings: dict[str, Any]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The pairs: → {'train': (ids, next_ids), 'validation': (ids, next_ids)}, (N,) int32 each."""

  @abc.abstractmethod
  def reference(self, settings: dict[str, Any], eval_ids: np.ndarray, eval_next: np.ndarray) -> Reference:
    """The loss floor and the reference table of the task, given its validation pairs (M,), (M,)."""

  @abc.abstractmethod
  def log_probs_from_record(self, vocab_size: int, record: dict[str, np.ndarray]) -> LogProbRows:
    """The reference table again, from `Reference.record`."""

  def num_pairs_exact(self, settings: dict[str, Any]) -> bool:
    """Whether `num_pairs` is exact, not an estimate for the memory check."""
    return True

  def prepare(self, settings: dict[str, Any], data_dir: pathlib.Path) -> dict[str, Any]:
    """Makes what `splits` needs (a trained tokenizer) under `data_dir`: → settings to use, of the same identity."""
    return settings

  def check_preparable(self, settings: dict[str, Any], data_dir: pathlib.Path) -> None:
    """Raises the UsageError `prepare` would, in memory before a run writes anything; `prepare` reuses the work."""
    del settings, data_dir  # nothing that can refuse

  def prepared(self, settings: dict[str, Any], data_dir: pathlib.Path) -> dict[str, Any] | None:
    """`prepare`'s settings if what it makes is already under `data_dir`, else None; reads only, never writes."""
    return settings

  def eval_references(
      self, settings: dict[str, Any], train: tuple[np.ndarray, np.ndarray], validation: tuple[np.ndarray, np.ndarray]
  ) -> dict[str, float]:
    """Further losses to compare eval/loss with, {name: nats}, from the loaded (ids, next_ids) pairs."""
    return {}

  def tokenizer_from_record(self, record: dict[str, np.ndarray]) -> Any:
    """The run's `tokenizer.Tokenizer` from `Reference.record`, or None where tokens are plain ids."""
    return None

  def token_label(self, token: int) -> str:
    """How a token id is shown to a person."""
    return str(token)


REGISTRY: dict[str, Source] = {}


def register(source: Source) -> None:
  REGISTRY[source.name] = source
