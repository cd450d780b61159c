"""Input-frequency buckets: rare, middle and frequent current tokens, by how often each is current in train (tying shows
most on rare inputs).

Tokens sorted by train count (ties: smaller id first) lay out the N train occurrences; a token goes to the bucket its
first occurrence falls in: frequent before 0.5·N, rare at 0.9·N or later (or never current), middle the rest."""

from __future__ import annotations

import numpy as np

BUCKETS = ("rare", "middle", "frequent")  # bucket index 0, 1, 2
FREQUENT_PERCENT = 50  # the frequent tokens make up the first half of train occurrences
RARE_PERCENT = 10  # the rare tokens make up the last tenth (and the never-seen ones)


def scalar_name(bucket: str) -> str:
  """The eval scalar of a bucket's loss: 'rare' → 'eval/loss_rare_inputs'."""
  return f"eval/loss_{bucket}_inputs"


def input_buckets(input_counts: np.ndarray) -> np.ndarray:
  """The bucket index (into BUCKETS) of every token: train counts (V,) → (V,) int32 (all rare for no pairs)."""
  counts = np.asarray(input_counts, np.int64)
  order = np.argsort(-counts, kind="stable")  # most frequent first; equal counts in id order
  first_occurrence = np.empty(len(counts), np.int64)
  first_occurrence[order] = np.cumsum(counts[order]) - counts[order]
  total = int(counts.sum())
  buckets = np.full(len(counts), BUCKETS.index("middle"), np.int32)
  # In integers, so that a boundary that falls exactly on an occurrence is decided the same on every machine.
  buckets[100 * first_occurrence < FREQUENT_PERCENT * total] = BUCKETS.index("frequent")
  buckets[(100 * (total - first_occurrence) <= RARE_PERCENT * total) | (counts == 0)] = BUCKETS.index("rare")
  return buckets


def bucket_sizes(input_counts: np.ndarray, eval_input_counts: np.ndarray | None) -> dict[str, dict[str, int | None]]:
  """{bucket: {tokens, train_pairs, eval_pairs}} from counts (V,) and (V,) or None (then eval_pairs None)."""
  counts = np.asarray(input_counts, np.int64)
  buckets = input_buckets(counts)
  eval_counts = None if eval_input_counts is None else np.asarray(eval_input_counts, np.int64)
  return {name: {"tokens": int(np.sum(buckets == index)), "train_pairs": int(counts[buckets == index].sum()),
                 "eval_pairs": None if eval_counts is None else int(eval_counts[buckets == index].sum())}
          for index, name in enumerate(BUCKETS)}
