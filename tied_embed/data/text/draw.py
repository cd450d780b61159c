"""data.split='drawn-<seed>': one distribution for every split, the draw a seed of its own.

The corpus is cut into documents (its files, or blocks of about BLOCK_BYTES ending at a line end), shuffled by the seed;
the last (about VALIDATION_FRACTION of the bytes) are validation, the selection split is cut at a document end before
them, and train sizes are prefixes of the rest. The seed is in the dataset identity (`-draw<seed>`)."""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator

import numpy as np

from tied_embed.data.text import corpus

PREFIX = "drawn-"  # data.split = "drawn-0", "drawn-1", ...
BLOCK_BYTES = 1 << 13  # a one-file corpus's document: ~90 of them in the 750 KB default corpus
_LINE_SEARCH = 1 << 16  # how far past a block's nominal end to look for the line end that closes it
_NAME = re.compile(r"drawn-(0|[1-9][0-9]{0,8})")


def seed_of(split: object) -> int | None:
  """The draw seed of a data.split value 'drawn-<seed>' (a whole number), None for any other value."""
  found = _NAME.fullmatch(split) if isinstance(split, str) else None
  return int(found.group(1)) if found else None


def documents(files: list[pathlib.Path]) -> list[tuple[int, int, int]]:
  """The corpus's documents in order, each (file index, start byte, stop byte): every file where there are several, else
  blocks ending after the first newline at least BLOCK_BYTES in (or at a UTF-8 character start)."""
  sizes = [path.stat().st_size for path in files]
  if len(files) > 1:
    return [(index, 0, size) for index, size in enumerate(sizes)]
  cuts, size = [0], sizes[0]
  with files[0].open("rb") as f:
    while cuts[-1] + BLOCK_BYTES < size:
      f.seek(cuts[-1] + BLOCK_BYTES - 1)
      newline = f.read(_LINE_SEARCH).find(b"\n")
      cut = cuts[-1] + BLOCK_BYTES + newline if newline >= 0 else corpus.char_boundary(files, cuts[-1] + BLOCK_BYTES)
      if cut >= size:
        break
      cuts.append(cut)
  return [(0, start, stop) for start, stop in zip(cuts, [*cuts[1:], size], strict=True)]


def draw(files: list[pathlib.Path], seed: int) -> tuple[list[tuple[int, int, int]], int, int]:
  """The documents in draw `seed`'s order, how many of the last are validation, and their bytes."""
  pieces = documents(files)
  drawn = [pieces[i] for i in np.random.default_rng(seed).permutation(len(pieces))]
  count = corpus.validation_documents([stop - start for _, start, stop in drawn])
  return drawn, count, sum(stop - start for _, start, stop in drawn[len(drawn) - count:])


def read_bytes(files: list[pathlib.Path], pieces: list[tuple[int, int, int]]) -> Iterator[bytes]:
  """The bytes of `pieces` (file index, start, stop), one after another, in chunks."""
  for index, start, stop in pieces:
    yield from corpus.read_bytes([files[index]], start, stop)


def read_lines(files: list[pathlib.Path], pieces: list[tuple[int, int, int]]) -> Iterator[str]:
  """The text of `pieces`, line by line (each piece starts at a line start)."""
  for index, start, stop in pieces:
    yield from corpus.read_lines([files[index]], start, stop)


def window_lines(files: list[pathlib.Path], pieces: list[tuple[int, int, int]],
                 windows: list[tuple[int, int]]) -> Iterator[str]:
  """The lines of byte windows [start, stop) of the pieces' text, each window's partial first line dropped."""
  offsets = np.cumsum([0] + [stop - start for _, start, stop in pieces])
  for low, high in windows:
    first = True
    for k in range(int(np.searchsorted(offsets, low, side="right")) - 1, len(pieces)):
      if offsets[k] >= high:
        break
      index, start, _ = pieces[k]
      begin, end = start + max(low - offsets[k], 0), start + min(high, offsets[k + 1]) - offsets[k]
      lines = corpus.read_lines([files[index]], int(begin), int(end))
      if first and begin > start:
        next(lines, None)  # the window starts mid-line
      first = False
      yield from lines
