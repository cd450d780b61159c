"""data.split='drawn-<seed>': one distribution for every split, the draw a seed of its own.

The corpus is cut into documents (its files, a file over MAX_DOCUMENT_BYTES in blocks of about that size; one file in
blocks of about BLOCK_BYTES; each block ending at a line end), shuffled by the seed; the last (about VALIDATION_FRACTION
of the bytes) are validation, the selection split is cut at a document end before them, and train sizes are prefixes
of the rest. The seed is in the dataset identity (`label`)."""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator

import numpy as np

from tied_embed.data.text import corpus

PREFIX = "drawn-"  # data.split = "drawn-0", "drawn-1", ...
BLOCK_BYTES = 1 << 13  # a one-file corpus's document: ~90 of them in the 750 KB default corpus
MAX_DOCUMENT_BYTES = 1 << 16  # a longer file among several is cut in blocks (whole, Vim's version9.txt was a split)
_LINE_SEARCH = 1 << 16  # how far past a block's nominal end to look for the line end that closes it
_NAME = re.compile(r"drawn-(0|[1-9][0-9]{0,8})")


def seed_of(split: object) -> int | None:
  """The draw seed of a data.split value 'drawn-<seed>' (a whole number), None for any other value."""
  found = _NAME.fullmatch(split) if isinstance(split, str) else None
  return int(found.group(1)) if found else None


def label(seed: int, files: list[pathlib.Path]) -> str:
  """Draw `seed` in the dataset identity: '-draw<seed>', and the cut size for several files (a rule of its own)."""
  return f"-draw{seed}" if len(files) == 1 else f"-draw{seed}-max{MAX_DOCUMENT_BYTES}"


def documents(files: list[pathlib.Path]) -> list[tuple[int, int, int]]:
  """The corpus's documents in order, each (file index, start byte, stop byte): every file where there are several
  (a file over MAX_DOCUMENT_BYTES in blocks of about that size), else blocks of about BLOCK_BYTES."""
  return (_blocks(files[0], 0, BLOCK_BYTES) if len(files) == 1
          else [piece for index, path in enumerate(files) for piece in _blocks(path, index, MAX_DOCUMENT_BYTES)])


def _blocks(path: pathlib.Path, index: int, size_bytes: int) -> list[tuple[int, int, int]]:
  """File `index` in blocks ending after the first newline at least `size_bytes` in (or at a character start)."""
  cuts, size = [0], path.stat().st_size
  with path.open("rb") as f:
    while cuts[-1] + size_bytes < size:
      f.seek(cuts[-1] + size_bytes - 1)
      newline = f.read(_LINE_SEARCH).find(b"\n")
      cut = cuts[-1] + size_bytes + newline if newline >= 0 else corpus.char_boundary([path], cuts[-1] + size_bytes)
      if cut >= size:
        break
      cuts.append(cut)
  return [(index, start, stop) for start, stop in zip(cuts, [*cuts[1:], size], strict=True)]


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
