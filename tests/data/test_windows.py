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
