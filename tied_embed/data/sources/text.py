"""The text source, as bytes or pieces: 'text', a local corpus (a file, a directory or a glob). Its identity hashes the
corpus: an edit makes a new dataset, an unchanged corpus is tokenized once."""

from __future__ import annotations

import pathlib
import pydoc_data
from collections.abc import Iterator
from typing import Any

import numpy as np

from tied_embed.data import base
from tied_embed.data.text import corpus, draw
from tied_embed.data.text import tokenizer as tokenizer_lib
from tied_embed.data.text.tokenized import TextSource
from tied_embed.util import require

# The corpus when data.text_path is '': Python's pydoc topics (about 750 KB of English), in every installation
DEFAULT_CORPUS = pathlib.Path(pydoc_data.__file__).parent / "topics.py"
_MIN_BYTES = 32  # enough for a few pairs in the validation split
MIN_BYTES_PER_PIECE = 16  # less train text a piece cannot yield V pieces (English: 4-5 bytes a piece)


class Text(TextSource):
  name = "text"
  fields = ("text_path", "tokenizer", "split")
  field_defaults = {"split": corpus.CONTIGUOUS}  # a saved config without data.split was split contiguously

  def validate_text(self, config: Any) -> None:
    split = config.data.get("split", corpus.CONTIGUOUS)
    require(split in corpus.SPLITS or draw.seed_of(split) is not None, "data.split", split,
            " | ".join(f'"{name}"' for name in corpus.SPLITS) + f' | "{draw.PREFIX}<draw seed>"')
    files = self._files(config)
    if draw.seed_of(split) is not None:
      count = len(draw.documents([p.resolve() for p in files]))
      require(count >= 2, "data.split", split, f"a corpus of at least 2 documents for a drawn split (it has {count}:"
              f" {len(files)} file(s); one file is cut into blocks of {draw.BLOCK_BYTES:,} bytes)")
    subword = config.data.get("tokenizer", tokenizer_lib.BYTES) != tokenizer_lib.BYTES
    size = corpus.scan(files, check_utf8=True).num_bytes if subword else sum(p.stat().st_size for p in files)
    require(size >= _MIN_BYTES, "data.text_path", config.data.get("text_path"),
            f"a corpus of at least {_MIN_BYTES} bytes ({', '.join(map(str, files[:3]))} has {size})")
    vocab_size = config.model.get("vocab_size")
    if config.data.get("tokenizer") == tokenizer_lib.SENTENCEPIECE:  # a hopeless size fails now, not after training
      by_document, seed = _by_document(config, files), draw.seed_of(config.data.get("split"))
      resolved = [p.resolve() for p in files]
      if seed is not None:
        train_bytes = size - draw.draw(resolved, seed)[2]
      else:
        train_bytes = size - _document_split(resolved)[2] if by_document else corpus.split_point(size)
      most = train_bytes // MIN_BYTES_PER_PIECE
      require(vocab_size <= most, "model.vocab_size", vocab_size,
              f"at most {most} pieces for the {train_bytes:,} bytes of train text in data.text_path="
              f"{config.data.get('text_path')!r} (SentencePiece needs {MIN_BYTES_PER_PIECE}+ bytes a piece; give a"
              f" larger corpus)")

  def _files(self, config: Any) -> list[pathlib.Path]:
    return corpus.resolve(config.data.get("text_path") or "", DEFAULT_CORPUS)

  def text_settings(self, config: Any, utf8: bool) -> dict[str, Any]:
    files = [p.resolve() for p in self._files(config)]
    scan = corpus.scan(files, check_utf8=utf8)
    text_path = str(files[0]) if len(files) == 1 else str(config.data.get("text_path"))
    seed = draw.seed_of(config.data.get("split"))
    if seed is not None:  # stored as a by-document dataset: its selection split is cut at a document end
      pieces, count, validation = draw.draw(files, seed)
      return {"text_path": text_path, "files": [str(p) for p in files],
              "content": f"sha{scan.sha256}-draw{seed}", "split": corpus.BY_DOCUMENT, "draw_seed": seed,
              "pieces": [list(piece) for piece in pieces], "validation_documents": count,
              "num_bytes": {"train": scan.num_bytes - validation, "validation": validation}}
    if _by_document(config, files):
      # The content hash stays that of the files in sorted order; the label beside it names the split and its
      # seed, so the tokenizer and the dataset of this split never share a cache entry with the contiguous ones.
      order, documents, validation = _document_split(files)
      return {"text_path": text_path, "files": [str(p) for p in files],
              "content": f"sha{scan.sha256}-{corpus.DOCUMENT_LABEL}", "split": corpus.BY_DOCUMENT,
              "document_order": order, "validation_documents": documents,
              "num_bytes": {"train": scan.num_bytes - validation, "validation": validation}}
    split_at = corpus.split_point(scan.num_bytes)
    split_at = corpus.char_boundary(files, split_at) if utf8 else split_at
    return {"text_path": text_path, "files": [str(p) for p in files], "content": f"sha{scan.sha256}",
            "split_at": split_at, "num_bytes": {"train": split_at, "validation": scan.num_bytes - split_at}}

  def corpus_name(self, settings: dict[str, Any]) -> str:
    return f"data.text_path={settings['text_path']!r}"

  def num_pairs(self, settings: dict[str, Any]) -> dict[str, int]:
    if settings.get("split") != corpus.BY_DOCUMENT:
      return super().num_pairs(settings)
    # no pair crosses from one document into the next: each document gives one pair fewer than its tokens
    per_token = 1 if settings["tokenizer"] == tokenizer_lib.BYTES else 2
    return {split: max(settings["num_bytes"][split] // per_token - len(self.documents(settings, split)), 0)
            for split in settings["num_bytes"]}

  def documents(self, settings: dict[str, Any], split: str) -> list[pathlib.Path]:
    """A by-document split's files in tokenizing order (drawn: its pieces, (file index, start, stop))."""
    pieces = _pieces(settings, split)
    return pieces if "draw_seed" in settings else [pathlib.Path(settings["files"][i]) for i, _, _ in pieces]

  def _range(self, settings: dict[str, Any], split: str) -> tuple[list[pathlib.Path], int, int | None]:
    files = [pathlib.Path(p) for p in settings["files"]]
    scan = corpus.scan(files, check_utf8=False)
    require(settings["content"].split("-")[0] == f"sha{scan.sha256}", "data.text_path", settings["text_path"],
            "a corpus that does not change while its dataset is being made (start the run again)")
    if settings.get("split") == corpus.BY_DOCUMENT:
      return self.documents(settings, split), 0, None
    return (files, 0, settings["split_at"]) if split == "train" else (files, settings["split_at"], None)

  def split_bytes(self, settings: dict[str, Any], split: str) -> Iterator[bytes]:
    if "draw_seed" in settings:
      return draw.read_bytes(self._checked_files(settings), _pieces(settings, split))
    return corpus.read_bytes(*self._range(settings, split))

  def split_lines(self, settings: dict[str, Any], split: str) -> Iterator[str]:
    if "draw_seed" in settings:
      return draw.read_lines(self._checked_files(settings), _pieces(settings, split))
    return corpus.read_lines(*self._range(settings, split))

  def split_documents(self, settings: dict[str, Any], split: str) -> Iterator[Iterator[str]]:
    if settings.get("split") != corpus.BY_DOCUMENT:
      yield from super().split_documents(settings, split)
      return
    files = self._checked_files(settings)
    for piece in _pieces(settings, split):  # each file, or drawn piece, a document of its own
      yield draw.read_lines(files, [piece])

  def _checked_files(self, settings: dict[str, Any]) -> list[pathlib.Path]:
    """The corpus files of the settings, checked unchanged since the settings were made."""
    self._range(settings, "train")
    return [pathlib.Path(p) for p in settings["files"]]

  def sample_lines(self, settings: dict[str, Any]) -> Iterator[str]:
    if "draw_seed" in settings:
      windows = tokenizer_lib.sample_windows(settings["num_bytes"]["train"])
      yield from draw.window_lines(self._checked_files(settings), _pieces(settings, "train"), windows)
      return
    files, _, _ = self._range(settings, "train")
    for start, end in tokenizer_lib.sample_windows(settings["num_bytes"]["train"]):
      lines = corpus.read_lines(files, start, end)
      if start > 0:
        next(lines, None)  # the window starts mid-line: drop the partial line
      yield from lines

  def splits(self, settings: dict[str, Any]) -> dict[str, tuple[np.ndarray, ...]]:
    """By document (files, or drawn pieces), each split's pairs within each and where each one's pairs end:
    {split: (ids, next_ids, ends)}, ends (D,) int64; otherwise the concatenated text's pairs."""
    if settings.get("split") != corpus.BY_DOCUMENT:
      return super().splits(settings)
    pairs = {}
    for split in ("train", "validation"):
      files, pieces = self._checked_files(settings), _pieces(settings, split)
      if settings["tokenizer"] == tokenizer_lib.BYTES:
        parts = [np.frombuffer(b"".join(draw.read_bytes(files, [piece])), np.uint8) for piece in pieces]
        tokens = np.concatenate(parts).astype(np.int32)
        ends = np.cumsum([len(part) for part in parts], dtype=np.int64)
      else:
        tokens, ends = tokenizer_lib.encode_documents(
            self.tokenizer(settings), (draw.read_lines(files, [piece]) for piece in pieces), f"the {split} split")
      pairs[split] = document_pairs(tokens, ends)
    return pairs


def _pieces(settings: dict[str, Any], split: str) -> list[tuple[int, int, int | None]]:
  """A by-document split's documents in tokenizing order as pieces (file index, start, stop; a whole file: 0, None)."""
  pieces = ([tuple(piece) for piece in settings["pieces"]] if "draw_seed" in settings
            else [(index, 0, None) for index in settings["document_order"]])
  validation = settings["validation_documents"]
  return pieces[:-validation] if split == "train" else pieces[-validation:]


def _by_document(config: Any, files: list[pathlib.Path]) -> bool:
  return config.data.get("split", corpus.CONTIGUOUS) == corpus.BY_DOCUMENT and len(files) > 1


def _document_split(files: list[pathlib.Path]) -> tuple[list[int], int, int]:
  """'by_document''s order of `files`, how many of the last are validation, and their bytes."""
  order = corpus.document_order(files)
  sizes = [files[i].stat().st_size for i in order]
  count = corpus.validation_documents(sizes)
  return order, count, sum(sizes[len(sizes) - count:])


def document_pairs(tokens: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """tokens (N,), document ends (D,) → ids, next_ids (P,) int32 within each document, and its pair ends (D,) int64."""
  tokens, ends = np.asarray(tokens, np.int32), np.asarray(ends, np.int64)
  starts = ends[(ends > 0) & (ends < len(tokens))]  # where a document after the first begins
  crossing = np.zeros(max(len(tokens) - 1, 0), bool)
  crossing[starts - 1] = True  # pair i joins tokens i and i + 1: it crosses when a document begins at i + 1
  lengths = np.diff(ends, prepend=0)
  pair_ends = np.cumsum(np.maximum(lengths - 1, 0), dtype=np.int64)
  return tokens[:-1][~crossing], tokens[1:][~crossing], pair_ends


base.register(Text())
