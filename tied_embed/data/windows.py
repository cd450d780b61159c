"""Windows of L consecutive pairs, never across a document boundary: what a context model trains and is scored on.

Within a document next_ids[i] = ids[i + 1], so L consecutive pairs are a window of L tokens. Training draws windows
inside one document; evaluation tiles each document from its start (or overlaps its windows, scoring each one's last
`stride` pairs), the positions past a document's end at weight 0: each pair once."""

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


def tiled_windows(ids: np.ndarray, next_ids: np.ndarray, document_ends: np.ndarray | None, length: int,
                  stride: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Every pair of (M,) ids, next_ids scored in exactly one window of `length` L, never across a document.
  → ids, next_ids (W, L) int32 and weights (W, L) float32 (1 where the position is scored, 0 elsewhere).

  `stride` S in [1, L] (None: L). Within a document [start, end) window k starts at w_k = start + k·S: window 0
  scores its positions [w_0, w_0 + L), each later one only its last S, [w_k + L − S, w_k + L), the first L − S
  being context; windows go on while the block they score starts before `end`, and positions past `end` are read
  from pair 0 at weight 0. S = L tiles each document from its start, the last window padded; a smaller S gives
  every scored pair after the first L of its document at least L − S earlier tokens of it (S = 1: L − 1)."""
  stride = length if stride is None else int(stride)
  if not 1 <= stride <= length:
    raise ValueError(f"stride {stride} is not in [1, {length}]")
  starts, first_scored, valid = [], [], []
  for start, end in document_bounds(len(ids), document_ends):
    first, skipped = start, 0  # the window's first pair, and how many of its first pairs are context only
    while first + skipped < end:
      starts.append(first)
      first_scored.append(skipped)
      valid.append(min(length, end - first))
      first, skipped = first + stride, length - stride
  column = np.arange(length)
  positions = np.asarray(starts, np.int64).reshape(-1, 1) + column
  inside = column < np.asarray(valid, np.int64).reshape(-1, 1)
  weights = (inside & (column >= np.asarray(first_scored, np.int64).reshape(-1, 1))).astype(np.float32)
  positions = np.where(inside, positions, 0)
  return ids[positions], next_ids[positions], weights
