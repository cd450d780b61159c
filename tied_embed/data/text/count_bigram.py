"""Bigram statistics of a token stream held sparsely, never a dense (V, V) array: `count_bigram_loss`, the add-k model
(count(i, j) + k) / (count(i) + k·V) fitted on train and scored on validation."""

from __future__ import annotations

import dataclasses

import numpy as np

from tied_embed.data import base

K_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
HELD_OUT_FRACTION = 0.1


@dataclasses.dataclass
class PairCounts:
  """Observed pairs: codes (U,) int64 ascending (i·V + j: a row's pairs one slice), counts (U,), row totals (V,)."""

  vocab_size: int
  codes: np.ndarray
  counts: np.ndarray
  row_totals: np.ndarray

  @classmethod
  def of(cls, ids: np.ndarray, next_ids: np.ndarray, vocab_size: int) -> PairCounts:
    """Counts the pairs (N,), (N,) in O(N log N) time and O(U) memory beyond the codes."""
    codes, counts = np.unique(np.asarray(ids, np.int64) * vocab_size + next_ids, return_counts=True)
    row_totals = np.bincount(np.asarray(ids, np.int64), minlength=vocab_size).astype(np.int64)
    return cls(vocab_size, codes, counts.astype(np.int64), row_totals)

  @classmethod
  def from_record(cls, vocab_size: int, codes: np.ndarray, counts: np.ndarray) -> PairCounts:
    codes, counts = np.asarray(codes, np.int64), np.asarray(counts, np.int64)
    row_totals = np.bincount(codes // vocab_size, weights=counts, minlength=vocab_size).astype(np.int64)
    return cls(vocab_size, codes, counts, row_totals)

  def lookup(self, ids: np.ndarray, next_ids: np.ndarray) -> np.ndarray:
    """count(i, j) of each pair asked for: (M,), (M,) → (M,) int64 (0 for pairs never seen)."""
    wanted = np.asarray(ids, np.int64) * self.vocab_size + next_ids
    at = np.minimum(np.searchsorted(self.codes, wanted), max(len(self.codes) - 1, 0))
    found = self.codes[at] == wanted if len(self.codes) else np.zeros(len(wanted), bool)
    return np.where(found, self.counts[at] if len(self.codes) else 0, 0)

  def dense_rows(self, ids: np.ndarray) -> np.ndarray:
    """count(i, ·) of the rows asked for: (K,) → (K, V) int64, from each row's slice of the codes."""
    ids = np.asarray(ids, np.int64)
    block = np.zeros((len(ids), self.vocab_size), np.int64)
    starts = np.searchsorted(self.codes, ids * self.vocab_size)
    stops = np.searchsorted(self.codes, (ids + 1) * self.vocab_size)
    for row, (start, stop) in enumerate(zip(starts, stops, strict=True)):
      block[row, self.codes[start:stop] % self.vocab_size] = self.counts[start:stop]
    return block


def empirical_rows(counts: PairCounts) -> base.LogProbRows:
  """log(count(i, j) / count(i)) row by row: → LogProbRows (-inf unseen pairs, nan rows of unseen tokens)."""
  def rows(ids: np.ndarray) -> np.ndarray:
    block = counts.dense_rows(ids).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
      return np.log(block / block.sum(axis=1, keepdims=True))
  return base.LogProbRows(counts.vocab_size, rows)


def empirical_entropy(counts: PairCounts) -> float:
  """The counted pairs' mean -log(count(i, j) / count(i)): their empirical H(next | current) in nats."""
  total = counts.counts.sum()
  if total == 0:
    return 0.0
  rows = counts.row_totals[counts.codes // counts.vocab_size]
  return float(-(counts.counts * np.log(counts.counts / rows)).sum() / total)


def add_k_loss(train: PairCounts, ids: np.ndarray, next_ids: np.ndarray, k: float) -> float:
  """Mean -log P(next | current) of pairs (M,), (M,) under the add-k model of `train`: → nats."""
  pair = train.lookup(ids, next_ids).astype(np.float64)
  row = train.row_totals[np.asarray(ids, np.int64)].astype(np.float64)
  return float(-np.mean(np.log((pair + k) / (row + k * train.vocab_size))))


def best_k(fit: PairCounts, held_ids: np.ndarray, held_next: np.ndarray) -> float:
  """The k of K_GRID whose add-k model of `fit` has the lowest loss on the held-out pairs (M,), (M,)."""
  return min(K_GRID, key=lambda k: add_k_loss(fit, held_ids, held_next, k))


def count_bigram_loss(
    train_ids: np.ndarray, train_next: np.ndarray, eval_ids: np.ndarray, eval_next: np.ndarray, vocab_size: int
) -> tuple[float, float]:
  """The add-k count model fitted on train (N,) pairs and scored on eval (M,) pairs: → (loss in nats, k)."""
  k = 1.0
  if len(train_ids) >= 2:  # the k with the lowest loss on the last HELD_OUT_FRACTION of train, fitted on the rest
    cut = len(train_ids) - max(int(len(train_ids) * HELD_OUT_FRACTION), 1)
    k = best_k(PairCounts.of(train_ids[:cut], train_next[:cut], vocab_size), train_ids[cut:], train_next[cut:])
  return add_k_loss(PairCounts.of(train_ids, train_next, vocab_size), eval_ids, eval_next, k), k
