"""Two ends mutation testing found unpinned in data/: a one-file draw's block cut where no line end is near (at the
start of a UTF-8 character, by hand), and the tiling of an empty split (no windows, int32 arrays of L columns)."""

from __future__ import annotations

import numpy as np

from tied_embed.data import windows
from tied_embed.data.text import draw


def test_a_block_with_no_line_end_in_reach_ends_at_the_character_its_size_falls_in(tmp_path, monkeypatch):
  path = tmp_path / "one.txt"
  path.write_bytes("é".encode() * 20)  # 40 bytes, C3 A9 twenty times: every odd byte continues a character
  monkeypatch.setattr(draw, "_LINE_SEARCH", 4)  # no newline within reach of any block's end
  # cuts[-1] + 7 falls on an odd byte (a continuation) each time, so each cut is one byte back: 6, 12, ..., 36
  want = [(0, 0, 6), (0, 6, 12), (0, 12, 18), (0, 18, 24), (0, 24, 30), (0, 30, 36), (0, 36, 40)]
  assert draw._blocks(path, 0, 7) == want


def test_an_empty_split_tiles_into_no_windows():
  empty = np.zeros(0, np.int32)
  ids, next_ids, weights = windows.tiled_windows(empty, empty, None, 4)
  assert ids.shape == next_ids.shape == weights.shape == (0, 4)
  assert ids.dtype == next_ids.dtype == np.int32 and weights.dtype == np.float32
  ids, _, weights = windows.tiled_windows(empty, empty, np.array([0]), 4, stride=2)
  assert ids.shape == weights.shape == (0, 4)
