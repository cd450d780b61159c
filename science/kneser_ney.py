"""The interpolated Kneser-Ney n-gram: the count baseline of the same order as a context model.

A context model scores the next token of every validation pair from the tokens before it in its window (the MLP
the last k, the transformer all of them back to the window's start). The n-gram here scores the same pairs from the
last min(n - 1, position in the window + 1) tokens, counted on the train documents (never across a document), so
its context is never longer than the model's. At its top order it uses raw counts; below, Kneser-Ney's continuation
counts (how many distinct tokens precede the shorter n-gram); at order 0 the continuation unigram interpolated with
the uniform 1/V. One absolute discount d serves every order. At order 2 this is `kneser_ney_loss`, the bigram on
`count_bigram.PairCounts` (its own implementation, at the end of this module).

Contexts are numbered, not hashed: the context of length k at a position is (its length-(k-1) context, the token
before that), and `np.unique` over those int64 keys numbers them, so lookups are exact (`np.searchsorted`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tied_embed.data.text import count_bigram
from tied_embed.data.text.count_bigram import PairCounts

# Interpolated Kneser-Ney: the discounts tried on the held-out pairs (a bigram's best lies in (0, 1)).
DISCOUNT_GRID = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)


def document_starts(count: int, document_ends: np.ndarray | None) -> np.ndarray:
  """(count,) int64: the index of the first pair of each pair's document (ends: the index one past each document)."""
  starts = np.zeros(count, np.int64)
  for end in () if document_ends is None else np.asarray(document_ends, np.int64):
    if 0 < end < count:
      starts[end:] = end
  return starts


def context_lengths(count: int, document_ends: np.ndarray | None, window: int, longest: int) -> np.ndarray:
  """(count,) int64: how many tokens each pair's model sees, its own included, at most `longest`: pairs tiled into
  windows of `window` from each document's start (`windows.tiled_windows`), so position p sees p + 1."""
  position = np.arange(count, dtype=np.int64) - document_starts(count, document_ends)
  return np.minimum(position % window + 1, longest)


@dataclasses.dataclass
class Level:
  """The counts of one context length k ≥ 1: contexts numbered 0..C-1 by `keys` (C,) sorted int64 (the length-(k-1)
  context's number · V + the token before it; at k = 1 the token itself); for the top order raw pair counts, for a
  lower one continuation counts, each as sorted pair codes (context · V + next) with counts, and per context the
  total and the number of distinct next tokens."""

  keys: np.ndarray
  raw: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # codes, counts, totals (C,), types (C,)
  continuation: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _tally(contexts: np.ndarray, next_ids: np.ndarray, size: int, vocab_size: int):
  """Pairs (M,) of context number and next token → (sorted codes, counts, totals (size,), types (size,))."""
  codes, counts = np.unique(contexts * vocab_size + next_ids, return_counts=True)
  totals = np.bincount(codes // vocab_size, weights=counts, minlength=size)
  types = np.bincount(codes // vocab_size, minlength=size).astype(np.float64)
  return codes, counts.astype(np.float64), totals, types


def _lookup(codes: np.ndarray, counts: np.ndarray, wanted: np.ndarray) -> np.ndarray:
  """counts of the codes (M,) asked for (0 where absent or where wanted is negative): → (M,) float64."""
  if len(codes) == 0:
    return np.zeros(len(wanted))
  at = np.minimum(np.searchsorted(codes, wanted), len(codes) - 1)
  return np.where((codes[at] == wanted) & (wanted >= 0), counts[at], 0.0)


@dataclasses.dataclass
class NgramCounts:
  """What the n-gram of order `order` needs of a train stream of pairs: levels[k - 1] for context length k."""

  order: int
  vocab_size: int
  unigram: tuple[np.ndarray, float, float]  # N1+(·, w) (V,), their total, how many w have one
  levels: list[Level]

  @classmethod
  def of(cls, ids: np.ndarray, next_ids: np.ndarray, document_ends: np.ndarray | None, order: int,
         vocab_size: int) -> NgramCounts:
    """Counts the pairs (N,), (N,) of the train documents (ends as in `document_starts`) up to `order` ≥ 2."""
    ids, next_ids = np.asarray(ids, np.int64), np.asarray(next_ids, np.int64)
    since_start = np.arange(len(ids)) - document_starts(len(ids), document_ends)
    contexts, levels, keys = ids, [], np.arange(vocab_size, dtype=np.int64)
    valid = np.ones(len(ids), bool)
    shorter_contexts = contexts
    for length in range(1, order):
      if length > 1:  # the context one token longer: the shorter one's number and the token before it
        valid = valid & (since_start >= length - 1)
        key = contexts * vocab_size + np.where(valid, ids[np.maximum(np.arange(len(ids)) - length + 1, 0)], 0)
        keys = np.unique(key[valid])
        contexts = np.where(valid, np.searchsorted(keys, key), -1)
      raw = _tally(contexts[valid], next_ids[valid], len(keys), vocab_size)
      levels.append(Level(keys, raw, raw))
      if length > 1:  # the shorter level's continuation counts: distinct longer pairs per (shorter context, next)
        previous = levels[-2]
        longer = np.unique(contexts[valid] * vocab_size + next_ids[valid], return_index=True)[1]
        shorter = np.flatnonzero(valid)[longer]
        previous.continuation = _tally(shorter_contexts[shorter], next_ids[shorter], len(previous.keys), vocab_size)
      shorter_contexts = contexts
    first = np.unique(ids * vocab_size + next_ids)
    preceders = np.bincount(first % vocab_size, minlength=vocab_size).astype(np.float64)
    return cls(order, vocab_size, (preceders, float(len(first)), float(np.count_nonzero(preceders))), levels)

  def statistics(self, ids: np.ndarray, next_ids: np.ndarray, document_ends: np.ndarray | None,
                 window: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """What scoring pairs (M,), (M,) of a stream tiled into windows of `window` needs, whatever the discount: how
    many tokens each pair sees (`context_lengths`, at most order - 1), the continuation unigram count of its next
    token, and per context length k an array (6, M) of its raw and continuation counts (pair, context total,
    context types; zeros where the context was never seen)."""
    ids, next_ids = np.asarray(ids, np.int64), np.asarray(next_ids, np.int64)
    seen = context_lengths(len(ids), document_ends, window, self.order - 1)
    contexts, per_length = ids, []
    for length, level in enumerate(self.levels, start=1):
      if length > 1:
        key = contexts * self.vocab_size + ids[np.maximum(np.arange(len(ids)) - length + 1, 0)]
        at = np.minimum(np.searchsorted(level.keys, key), max(len(level.keys) - 1, 0))
        found = (contexts >= 0) & (seen >= length) & (level.keys[at] == key if len(level.keys) else False)
        contexts = np.where(found, at, -1)
      safe, known = np.maximum(contexts, 0), contexts >= 0
      wanted = np.where(known, contexts * self.vocab_size + next_ids, -1)
      rows = []
      for codes, pair_counts, totals, types in (level.raw, level.continuation):
        rows += [_lookup(codes, pair_counts, wanted), np.where(known, totals[safe], 0.0), types[safe]]
      per_length.append(np.stack(rows))
    return seen, self.unigram[0][next_ids], per_length

  def mix(self, statistics: tuple[np.ndarray, np.ndarray, list[np.ndarray]], discount: float,
          order: int | None = None) -> np.ndarray:
    """P(next | its context) of each pair of `statistics`, interpolated Kneser-Ney with absolute discount
    `discount`, as the n-gram of `order` (≤ the fitted order: a fit serves every lower order): → (M,) float64."""
    order = self.order if order is None else order
    seen, preceders, per_length = statistics
    seen = np.minimum(seen, order - 1)
    _, types_total, kinds = self.unigram
    probability = np.maximum(preceders - discount, 0.0) / types_total + discount * kinds / types_total / self.vocab_size
    for length, rows in enumerate(per_length[:order - 1], start=1):
      smoothed = probability
      for (pair, total, types), use in ((rows[:3], seen == length), (rows[3:], seen > length)):
        mixed = (np.maximum(pair - discount, 0.0) + discount * types * probability) / np.maximum(total, 1e-300)
        smoothed = np.where(use & (total > 0), mixed, smoothed)
      probability = smoothed
    return probability

  def probabilities(self, ids: np.ndarray, next_ids: np.ndarray, document_ends: np.ndarray | None, window: int,
                    discount: float) -> np.ndarray:
    """P(next | the last min(order - 1, p + 1) tokens) of each pair (M,), (M,) of a stream tiled into windows of
    `window` (`context_lengths`), interpolated Kneser-Ney with absolute discount `discount`: → (M,) float64."""
    return self.mix(self.statistics(ids, next_ids, document_ends, window), discount)

  def loss(self, ids: np.ndarray, next_ids: np.ndarray, document_ends: np.ndarray | None, window: int,
           discount: float) -> float:
    """Mean -log P of the pairs (M,), (M,) as `probabilities` scores them: → nats."""
    return float(-np.mean(np.log(self.probabilities(ids, next_ids, document_ends, window, discount))))


def held_out_fit(ids: np.ndarray, next_ids: np.ndarray, document_ends: np.ndarray | None, orders: tuple[int, ...],
                 window: int, vocab_size: int) -> tuple[NgramCounts, float]:
  """The order of `orders` and the discount of DISCOUNT_GRID with the lowest loss on the last
  HELD_OUT_FRACTION of the train pairs (N,), (N,), fitted on the rest (the held-out part scored as the validation
  pairs are, from its own start, in windows), then refitted on all of them: → (NgramCounts, discount)."""
  cut = len(ids) - max(int(len(ids) * count_bigram.HELD_OUT_FRACTION), 1)
  ends = None if document_ends is None else np.asarray(document_ends, np.int64)
  fit_ends = None if ends is None else ends[ends < cut]
  held_ends = None if ends is None else ends[ends > cut] - cut
  counts = NgramCounts.of(ids[:cut], next_ids[:cut], fit_ends, max(orders), vocab_size)
  _, order, discount = choose(counts, counts.statistics(ids[cut:], next_ids[cut:], held_ends, window), orders)
  return NgramCounts.of(ids, next_ids, ends, order, vocab_size), discount


def choose(counts: NgramCounts, statistics: tuple[np.ndarray, np.ndarray, list[np.ndarray]],
           orders: tuple[int, ...]) -> tuple[float, int, float]:
  """The order of `orders` (each ≤ counts.order) and the discount of DISCOUNT_GRID with the lowest loss
  on the pairs of `statistics`: → (that loss in nats, order, discount)."""
  return min((float(-np.mean(np.log(counts.mix(statistics, discount, order)))), order, discount)
             for order in orders for discount in DISCOUNT_GRID)


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
