"""Windows of L consecutive pairs, never across a document boundary: what a context model trains and is scored on.

Within a document next_ids[i] = ids[i + 1], so L consecutive pairs are a window of L tokens. Training draws windows
inside one document; evaluation tiles each document from its start, the last padded (weight 0): each pair once."""

from __future__ import annotations

import numpy as np


def document_bounds(count: int, document_ends: np.ndarray | None) -> list[tuple[int, int]]:
  """[(start, end)] of each document among the first `count` pairs (one document without `document_ends`)."""
  ends = [int(end) for end in (() if document_ends is None else document_ends) if 0 < end < count] + [count]
  return [(start, end) for start, end in zip([0] + ends[:-1], ends, strict=True) if end > start]


def window_starts(count: int, document_ends: np.ndarray | None, length: int) -> np.ndarray:
  """(W,) int64: the first pair of every window of `length` pairs lying inside one document of the first `count`."""
  ranges = [np.arange(start, end - length + 1) for start, end in document_bounds(count, document_ends)]
  return np.concatenate([np.zeros(0, np.int64)] + ranges).astype(np.int64)


def window_batch(ids: np.ndarray, next_ids: np.ndarray, starts: np.ndarray, rows: np.ndarray,
                 length: int) -> tuple[np.ndarray, np.ndarray]:
  """The windows starting at starts[rows]: → ids, next_ids (B, L) int32."""
  positions = starts[rows][:, None] + np.arange(length)
  return ids[positions], next_ids[positions]


def tiled_windows(ids: np.ndarray, next_ids: np.ndarray, document_ends: np.ndarray | None,
                  length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Every pair of (M,) ids, next_ids in exactly one window: each document cut into windows of `length` from its
  start, the last one padded with id 0 at weight 0. → ids, next_ids (W, L) int32 and weights (W, L) float32."""
  starts, valid = [], []
  for start, end in document_bounds(len(ids), document_ends):
    for first in range(start, end, length):
      starts.append(first)
      valid.append(min(length, end - first))
  positions = np.asarray(starts, np.int64).reshape(-1, 1) + np.arange(length)
  weights = (np.arange(length) < np.asarray(valid, np.int64).reshape(-1, 1)).astype(np.float32)
  positions = np.where(weights > 0, positions, 0)
  return ids[positions], next_ids[positions], weights
