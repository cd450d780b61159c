"""Windows of data.context_length pairs: drawn inside one document, tiled so every held-out pair is scored once."""

from __future__ import annotations

import numpy as np
import pytest

from tied_embed.data import windows
from tied_embed.data.bigram import BigramData
from tied_embed.train.trainer import train_batch


def _stream(ends):
  """Pairs of a token stream cut into documents ending at `ends`: the tokens are 0, 1, 2, ... (pair i = (i, i+1))."""
  count = ends[-1]
  return np.arange(count, dtype=np.int32), np.arange(1, count + 1, dtype=np.int32), np.asarray(ends, np.int64)


def test_every_window_start_lies_with_its_whole_window_inside_one_document():
  ids, _, ends = _stream([7, 9, 20, 22])
  starts = windows.window_starts(22, ends, 4)
  # by hand: documents [0, 7), [7, 9), [9, 20), [20, 22); windows of 4 start at 0..3 and 9..16; none in the short ones
  np.testing.assert_array_equal(starts, [0, 1, 2, 3, 9, 10, 11, 12, 13, 14, 15, 16])
  assert list(windows.window_starts(15, ends, 4)) == [0, 1, 2, 3, 9, 10, 11]  # the first 15 pairs only


def test_a_batch_of_windows_is_consecutive_pairs_whose_next_token_is_the_next_id():
  ids, next_ids, ends = _stream([30, 64])
  starts = windows.window_starts(64, ends, 8)
  batch_ids, batch_next = windows.window_batch(ids, next_ids, starts, np.array([0, 5, len(starts) - 1]), 8)
  assert batch_ids.shape == batch_next.shape == (3, 8)
  np.testing.assert_array_equal(batch_ids[:, 1:], batch_next[:, :-1])  # next_ids[t] = ids[t + 1] in a window
  np.testing.assert_array_equal(batch_ids[:, 0], [0, 5, 56])


def test_tiled_windows_score_every_pair_exactly_once():
  ids, next_ids, ends = _stream([5, 6, 17])
  tiled_ids, tiled_next, weights = windows.tiled_windows(ids, next_ids, ends, 4)
  # documents of 5, 1 and 11 pairs: windows [0..3], [4+pad], [5+pad], [6..9], [10..13], [14..16+pad]
  assert tiled_ids.shape == (6, 4)
  np.testing.assert_array_equal(weights.sum(axis=1), [4, 1, 1, 4, 4, 3])
  scored = np.sort(tiled_ids[weights > 0])
  np.testing.assert_array_equal(scored, np.arange(17))
  np.testing.assert_array_equal(tiled_next[weights > 0], tiled_ids[weights > 0] + 1)
  assert np.all(tiled_ids[:, 0] == [0, 4, 5, 6, 10, 14])  # each window starts a document or follows one


def _data(length, starts=None):
  ids, next_ids, _ = _stream([100])
  return BigramData(source="text", vocab_size=101, train_ids=ids, train_next=next_ids, eval_ids=ids,
                    eval_next=next_ids, select_ids=ids[:0], select_next=ids[:0], loss_floor=0.0, true_log_probs=None,
                    input_counts=np.ones(101, np.int64), identity="x", reference=None, eval_references={},
                    context_length=length, train_starts=starts)


def test_pairs_are_drawn_as_they_always_were():
  data = _data(1)
  rows = np.random.default_rng([3, 7]).integers(0, 100, size=16)  # (seed, step) → uniform rows with replacement
  got_ids, got_next = train_batch(data, 3, 7, 16)
  np.testing.assert_array_equal(got_ids, np.arange(100)[rows])
  np.testing.assert_array_equal(got_next, np.arange(100)[rows] + 1)


@pytest.mark.parametrize("step", [0, 5])
def test_windows_are_a_pure_function_of_seed_and_step(step):
  data = _data(8, windows.window_starts(100, None, 8))
  first, again = train_batch(data, 1, step, 4), train_batch(data, 1, step, 4)
  np.testing.assert_array_equal(first[0], again[0])
  assert first[0].shape == (4, 8)
  np.testing.assert_array_equal(first[0][:, 1:], first[1][:, :-1])
  assert not np.array_equal(train_batch(data, 1, step + 1, 4)[0], first[0])


def _old_tiling(ids, next_ids, ends, length):
  """Each document cut into windows of `length` from its start, the last one's positions past the end read from
  pair 0 at weight 0: the tiling spelled out window by window."""
  rows_ids, rows_next, rows_weights = [], [], []
  for start, end in zip([0, *ends[:-1]], ends, strict=True):
    for first in range(start, end, length):
      real = list(range(first, min(first + length, end)))
      positions = real + [0] * (length - len(real))
      rows_ids.append(ids[positions])
      rows_next.append(next_ids[positions])
      rows_weights.append([1.0] * len(real) + [0.0] * (length - len(real)))
  return np.array(rows_ids), np.array(rows_next), np.array(rows_weights, np.float32)


# Documents (their lengths in pairs) around L = 4: shorter, equal, one longer by 1, long; and one of 1 pair.
DOCUMENT_LENGTHS = [3, 4, 5, 13, 1, 9]


@pytest.mark.parametrize("stride", [1, 2, 3, 4])
def test_strided_windows_score_every_pair_once_with_at_least_l_minus_s_earlier_tokens(stride):
  length = 4
  ends = list(np.cumsum(DOCUMENT_LENGTHS))
  ids, next_ids, ends = _stream(ends)  # pair i is (i, i + 1), so an id names its position
  document_start = np.repeat(np.concatenate([[0], ends[:-1]]), DOCUMENT_LENGTHS)  # (M,): each pair's first
  got_ids, got_next, weights = windows.tiled_windows(ids, next_ids, ends, length, stride)
  assert got_ids.shape == got_next.shape == weights.shape and got_ids.shape[1] == length
  scored = got_ids[weights > 0]
  np.testing.assert_array_equal(np.sort(scored), np.arange(ends[-1]))  # every pair exactly once
  np.testing.assert_array_equal(got_next[weights > 0], scored + 1)
  assert np.all(weights.sum(axis=1) > 0)  # no window that scores nothing
  for row, row_weights in zip(got_ids, weights, strict=True):
    start = document_start[row[0]]
    for column in np.flatnonzero(row_weights):
      position = row[column]
      # the window's tokens before this one are the pairs of its own document just before it
      np.testing.assert_array_equal(row[:column], np.arange(position - column, position))
      assert position - column >= start
      assert column >= min(position - start, length - stride), (row, column)
  if stride == length:  # the tiling, bit for bit
    for got, want in zip((got_ids, got_next, weights), _old_tiling(ids, next_ids, list(ends), length), strict=True):
      assert got.dtype == want.dtype
      np.testing.assert_array_equal(got, want)
    for got, want in zip(windows.tiled_windows(ids, next_ids, ends, length), (got_ids, got_next, weights),
                         strict=True):
      np.testing.assert_array_equal(got, want)


def test_stride_one_scores_the_last_pair_of_each_window_after_the_first():
  ids, next_ids, ends = _stream([6, 8])
  got_ids, _, weights = windows.tiled_windows(ids, next_ids, ends, 4, 1)
  # by hand: document [0, 6): [0 1 2 3] all scored, then [1 2 3 4] scores 4 and [2 3 4 5] scores 5;
  # document [6, 8): [6 7 pad pad] scores 6 and 7
  np.testing.assert_array_equal(got_ids, [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [6, 7, 0, 0]])
  np.testing.assert_array_equal(weights, [[1, 1, 1, 1], [0, 0, 0, 1], [0, 0, 0, 1], [1, 1, 0, 0]])


@pytest.mark.parametrize("stride", [0, 5, -1])
def test_a_stride_outside_the_window_is_refused(stride):
  ids, next_ids, ends = _stream([6])
  with pytest.raises(ValueError, match=r"stride"):
    windows.tiled_windows(ids, next_ids, ends, 4, stride)
