"""Bigram statistics of a token stream held sparsely, never a dense (V, V) array: `count_bigram_loss`, the add-k model
(count(i, j) + k) / (count(i) + k·V) fitted on train and scored on validation, and `kneser_ney_loss`, the interpolated
Kneser-Ney bigram, the stronger count baseline."""

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


# Interpolated Kneser-Ney: the discounts tried on the held-out pairs (a bigram's best lies in (0, 1)).
DISCOUNT_GRID = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)


def continuation_probs(fit: PairCounts, discount: float) -> np.ndarray:
  """Kneser-Ney's lower order: how many distinct tokens precede j, N1+(·, j), over the distinct pairs, discounted
  and interpolated with the uniform 1/V (so a token never seen after anything keeps some mass): → (V,) float64."""
  vocab_size = fit.vocab_size
  preceders = np.bincount(fit.codes % vocab_size, minlength=vocab_size).astype(np.float64)
  types = float(len(fit.codes))
  if types == 0:
    return np.full(vocab_size, 1.0 / vocab_size)
  backoff = discount * np.count_nonzero(preceders) / types
  return np.maximum(preceders - discount, 0.0) / types + backoff / vocab_size


def kneser_ney_probs(fit: PairCounts, ids: np.ndarray, next_ids: np.ndarray, discount: float) -> np.ndarray:
  """P(next | current) of pairs (M,), (M,) under the interpolated Kneser-Ney bigram of `fit`:
  max(c(i, j) − d, 0) / c(i) + d · N1+(i, ·) / c(i) · P_cont(j), and P_cont(j) for a token never current: → (M,)."""
  ids = np.asarray(ids, np.int64)
  lower = continuation_probs(fit, discount)[np.asarray(next_ids, np.int64)]
  pair = fit.lookup(ids, next_ids).astype(np.float64)
  row = fit.row_totals[ids].astype(np.float64)
  followers = np.bincount(fit.codes // fit.vocab_size, minlength=fit.vocab_size)[ids].astype(np.float64)
  seen = row > 0
  safe = np.where(seen, row, 1.0)
  return np.where(seen, (np.maximum(pair - discount, 0.0) + discount * followers * lower) / safe, lower)


def kneser_ney_loss(fit: PairCounts, ids: np.ndarray, next_ids: np.ndarray, discount: float) -> float:
  """Mean -log P(next | current) of pairs (M,), (M,) under the interpolated Kneser-Ney bigram of `fit`: → nats."""
  return float(-np.mean(np.log(kneser_ney_probs(fit, ids, next_ids, discount))))


def best_discount(fit: PairCounts, held_ids: np.ndarray, held_next: np.ndarray) -> float:
  """The discount of DISCOUNT_GRID whose Kneser-Ney bigram of `fit` has the lowest loss on the held-out pairs."""
  return min(DISCOUNT_GRID, key=lambda discount: kneser_ney_loss(fit, held_ids, held_next, discount))
