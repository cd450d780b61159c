"""Windows at their edges: at every document end and at the end of the train fraction's share, after the selection
cut; the validation and selection windows cut at their own split's document ends. `_bigram_data` is fed loaded
splits by hand (a stream whose token i is i, so a window's pairs name their own positions)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from tied_embed.data import bigram, cache, sources, windows
from tied_embed.train.trainer import train_batch

TRAIN_ENDS = [6, 10, 19, 24, 30]  # five train documents, 30 pairs
EVAL_ENDS = [4, 9, 16]  # three validation documents, 16 pairs
VOCAB = 64


class _Source:
  """A stand-in source: a reference of zeros, no further references (only the cutting is under test here)."""

  name = "stand-in"

  def reference(self, settings, eval_ids, eval_next):
    return sources.Reference(name="empirical", loss_floor=0.0, log_probs=None, record={})

  def eval_references(self, settings, train, validation):
    return {}


def _loaded(monkeypatch, length: int, fraction: float, held_out: float) -> bigram.BigramData:
  monkeypatch.setattr(sources, "get", lambda name: _Source())
  splits = {
      "train": (np.arange(30, dtype=np.int32), np.arange(1, 31, dtype=np.int32)),
      "validation": (np.arange(32, 48, dtype=np.int32), np.arange(33, 49, dtype=np.int32)),
      cache.DOCUMENT_ENDS: np.asarray(TRAIN_ENDS, np.int64),
      f"{cache.DOCUMENT_ENDS}_validation": np.asarray(EVAL_ENDS, np.int64),
      cache.DIGESTS: {},
  }
  bc = cache.BigramConfig(name="stand-in", source="stand-in", settings={"vocab_size": VOCAB})
  plan = bigram.DataPlan(bc, pathlib.Path("unused"), train_fraction=fraction, selection_fraction=held_out,
                         context_length=length)
  return bigram._bigram_data(bc, splits, plan)


def test_windows_reach_the_train_fractions_end_and_never_past_it(monkeypatch):
  # selection 0.2 of 30 → 6 pairs, at the document end 24: 24 kept; train fraction 0.75 of 24 → the first 18 pairs.
  # Documents among them: [0, 6), [6, 10), [10, 18) (the third cut at 18). Windows of 3 start at 0-3, 6-7, 10-15.
  data = _loaded(monkeypatch, 3, 0.75, 0.2)
  assert len(data.train_ids) == 18 and len(data.select_ids) == 6
  np.testing.assert_array_equal(data.train_starts, [0, 1, 2, 3, 6, 7, 10, 11, 12, 13, 14, 15])
  np.testing.assert_array_equal(data.train_document_ends, [6, 10])
  np.testing.assert_array_equal(data.select_ids, np.arange(24, 30))
  np.testing.assert_array_equal(data.select_document_ends, [6])  # the selection's one document, 24..29
  np.testing.assert_array_equal(data.eval_document_ends, EVAL_ENDS)


def test_drawn_windows_stay_inside_the_pairs_trained_on_and_inside_one_document(monkeypatch):
  data = _loaded(monkeypatch, 3, 0.75, 0.2)
  seen = set()
  for step in range(40):
    ids, next_ids = train_batch(data, 0, step, 8)
    assert ids.max() < 18 and next_ids.max() <= 18  # pair 17 → token 18 is the last pair trained on
    np.testing.assert_array_equal(ids[:, 1:], next_ids[:, :-1])  # consecutive: no document end inside
    for first in ids[:, 0]:
      assert not any(first < end < first + 3 for end in TRAIN_ENDS), first
    seen.update(int(first) for first in ids[:, 0])
  assert {3, 7, 15} <= seen  # the last window before each document end and before the fraction's end is drawn


@pytest.mark.parametrize("length", [2, 4, 5])
def test_every_window_start_by_hand_at_each_document_end(length):
  ends = np.asarray(TRAIN_ENDS, np.int64)
  want = [start for begin, end in zip([0] + TRAIN_ENDS[:-1], TRAIN_ENDS, strict=True)
          for start in range(begin, end) if start + length <= end]
  np.testing.assert_array_equal(windows.window_starts(30, ends, length), want)
  # a count that cuts a document: its windows end at the count, the last one exactly there
  cut = [start for start in want if start + length <= 17]
  np.testing.assert_array_equal(windows.window_starts(17, ends, length), cut)
  assert cut[-1] + length == 17


def test_validation_windows_are_cut_at_the_validations_own_document_ends(monkeypatch):
  data = _loaded(monkeypatch, 4, 1.0, 0.0)
  ids, next_ids, weights = windows.tiled_windows(data.eval_ids, data.eval_next, data.eval_document_ends, 4)
  # documents of 4, 5 and 7 pairs: windows [0..3], [4..7], [8+pad], [9..12], [13..15+pad], by hand (eval id = 32 + i)
  np.testing.assert_array_equal(ids[:, 0] - 32, [0, 4, 8, 9, 13])
  np.testing.assert_array_equal(weights.sum(1), [4, 4, 1, 4, 3])
  for row in range(len(ids)):
    scored = ids[row][weights[row] > 0] - 32
    assert not any(scored[0] < end <= scored[-1] for end in EVAL_ENDS), scored  # no window crosses an end
  np.testing.assert_array_equal(np.sort(ids[weights > 0]) - 32, np.arange(16))


def test_selection_windows_follow_the_selections_documents(monkeypatch):
  # selection 0.4 of 30 → 12 pairs, moved to the nearest end within half: 19 → 11 pairs held out, 19..29, whose
  # documents end at 24 and 30: 5 and 6 pairs
  data = _loaded(monkeypatch, 4, 1.0, 0.4)
  np.testing.assert_array_equal(data.select_ids, np.arange(19, 30))
  np.testing.assert_array_equal(data.select_document_ends, [5, 11])
  ids, _, weights = windows.tiled_windows(data.select_ids, data.select_next, data.select_document_ends, 4)
  np.testing.assert_array_equal(ids[:, 0], [19, 23, 24, 28])
  np.testing.assert_array_equal(weights.sum(1), [4, 1, 4, 2])
