"""A local text corpus: `data.text_path` as a file, a directory (recursively) or a glob, read in bounded memory.

Its non-empty, non-hidden files in sorted order are split before tokenizing, as `data.split` says: 'contiguous'
concatenates them, the last VALIDATION_FRACTION of the bytes validation; 'by_document' takes whole files in a fixed
pseudo-random order, the last of them validation."""

from __future__ import annotations

import codecs
import glob
import hashlib
import os
import pathlib
from collections.abc import Iterator
from typing import NamedTuple

from tied_embed.util import UsageError, require

VALIDATION_FRACTION = 0.1
CONTIGUOUS, BY_DOCUMENT = "contiguous", "by_document"  # the values of data.split
SPLITS = (CONTIGUOUS, BY_DOCUMENT)
DOCUMENT_SEED = 0  # the shuffled order of 'by_document'
DOCUMENT_LABEL = f"bydoc{DOCUMENT_SEED}"  # what 'by_document' adds to the corpus's content hash in the identity
READ_BYTES = 1 << 20  # bytes read at a time: memory stays bounded however large the corpus
_FIELD = "data.text_path"
_scans: dict[tuple, tuple[Scan, bool]] = {}  # files' (path, size, mtime, inode) → (scan, whether UTF-8 checked)


class Scan(NamedTuple):
  """What one pass over a corpus learns: a content hash (16 hex digits) and the total size."""

  sha256: str
  num_bytes: int


def resolve(text_path: str, default: pathlib.Path) -> list[pathlib.Path]:
  """The corpus files of `data.text_path` ('' = `default`): a file, a directory's or a glob's, sorted; or UsageError."""
  path = pathlib.Path(text_path).expanduser() if text_path else default
  if any(c in "*?[" for c in text_path):
    candidates = [pathlib.Path(p) for p in glob.glob(os.path.expanduser(text_path), recursive=True)]
    files = sorted(p for p in candidates if p.is_file() and not p.name.startswith("."))
    require(bool(files), _FIELD, text_path, "a file, a directory or a glob that matches files (it matches none)")
  elif path.is_dir():
    files = sorted(p for p in path.rglob("*")
                   if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
  elif path.exists():
    files = [path]
  else:
    raise UsageError.bad_value(_FIELD, text_path, f"a readable file, directory or glob ({path}: no such file)")
  shortest: dict[pathlib.Path, pathlib.Path] = {}  # each file once, named by its shortest path (links, `self -> .`)
  for file in sorted(files, key=lambda p: (len(p.parts), str(p))):
    shortest.setdefault(file.resolve(), file)
  readable = [p for p in sorted(shortest.values()) if _size(p) > 0]
  if not readable:
    where = f"{path} (a directory)" if path.is_dir() else f"{len(files)} file(s)"
    raise UsageError.bad_value(_FIELD, text_path, f"a corpus with readable text ({where} holds no non-empty file)")
  return readable


def _size(path: pathlib.Path) -> int:
  try:
    return path.stat().st_size if os.access(path, os.R_OK) else 0
  except OSError:
    return 0


def scan(files: list[pathlib.Path], check_utf8: bool) -> Scan:
  """The corpus's hash and size, once per (path, size, mtime); `check_utf8`: UsageError naming a non-UTF-8 file."""
  key = tuple((str(p), s.st_size, s.st_mtime_ns, s.st_ino) for p in files for s in [p.stat()])
  if key in _scans and (_scans[key][1] or not check_utf8):
    return _scans[key][0]
  digest, total = hashlib.sha256(), 0
  for path in files:
    if len(files) > 1:
      digest.update(f"\0{path.name}\0".encode())  # so moving bytes from one file to the next changes the hash
    decoder, offset = codecs.getincrementaldecoder("utf-8")(), 0
    try:
      with path.open("rb") as f:
        while chunk := f.read(READ_BYTES):
          digest.update(chunk)
          if check_utf8:
            decoder.decode(chunk)
          offset += len(chunk)
        if check_utf8:
          decoder.decode(b"", True)
    except OSError as e:
      raise UsageError.bad_value(_FIELD, str(path), f"a readable file ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
      raise UsageError.bad_value(
          _FIELD, str(path), f"UTF-8 text for a subword tokenizer (byte {offset + e.start} is not UTF-8; convert the"
          f" file, e.g. with iconv, or use data.tokenizer='bytes')") from None
    total += offset
  result = Scan(digest.hexdigest()[:16], total)
  _scans[key] = (result, check_utf8)
  return result


def split_point(num_bytes: int) -> int:
  """Where the validation split starts: the last VALIDATION_FRACTION of the bytes is validation."""
  return num_bytes - int(num_bytes * VALIDATION_FRACTION)


def document_order(files: list[pathlib.Path]) -> list[int]:
  """The indices of `files` in the order 'by_document' splits them: by sha256 of (seed, file name), ties by path.
  Hashing names keeps the order the same on every machine and leaves it as it was when a file is added."""
  return sorted(range(len(files)), key=lambda index: (
      hashlib.sha256(f"{DOCUMENT_SEED}\0{files[index].name}".encode()).hexdigest(), str(files[index])))


def validation_documents(sizes: list[int]) -> int:
  """How many of the last documents (sizes in bytes, in split order) form the validation split: the count whose
  bytes come nearest VALIDATION_FRACTION of the whole, at least one, leaving at least one for train (ties: fewer)."""
  target, total, best, best_gap = VALIDATION_FRACTION * sum(sizes), 0, 1, float("inf")
  for count in range(1, len(sizes)):
    total += sizes[-count]
    if abs(total - target) < best_gap:
      best, best_gap = count, abs(total - target)
    if total >= target:
      break
  return best


def read_bytes(files: list[pathlib.Path], start: int = 0, stop: int | None = None) -> Iterator[bytes]:
  """The corpus bytes [start, stop) as chunks of at most READ_BYTES, across file boundaries."""
  position = 0
  for path in files:
    size = path.stat().st_size
    lo, hi = max(start - position, 0), size if stop is None else min(stop - position, size)
    if lo < hi:
      with path.open("rb") as f:
        f.seek(lo)
        remaining = hi - lo
        while remaining > 0 and (chunk := f.read(min(READ_BYTES, remaining))):
          remaining -= len(chunk)
          yield chunk
    position += size


def char_boundary(files: list[pathlib.Path], position: int) -> int:
  """`position` moved back to the start of the UTF-8 character it falls in (continuation bytes are 10xxxxxx)."""
  window_start = max(position - 3, 0)
  window = b"".join(read_bytes(files, window_start, position + 1))
  while window_start < position < window_start + len(window) and window[position - window_start] & 0xC0 == 0x80:
    position -= 1
  return position


def read_lines(files: list[pathlib.Path], start: int = 0, stop: int | None = None) -> Iterator[str]:
  """The UTF-8 text of bytes [start, stop) line by line (without the newline), in bounded memory, across files."""
  decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
  pending = ""
  for chunk in read_bytes(files, start, stop):
    lines = (pending + decoder.decode(chunk)).split("\n")
    pending = lines.pop()
    yield from lines
  pending += decoder.decode(b"", True)
  if pending:
    yield pending
