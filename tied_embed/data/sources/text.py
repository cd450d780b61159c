"""The text source, as bytes or pieces: 'text', a local corpus (a file, a directory or a glob), tokenized as bytes or
by SentencePiece (`data.tokenizer`: 'bytes', 'sentencepiece' or a `.model` path). Its identity hashes the corpus: an
edit makes a new dataset, an unchanged corpus is tokenized once. Its references are sparse: the validation pairs'
empirical bigram table and entropy, and the add-k model."""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import pathlib
import pydoc_data
from collections.abc import Iterator
from typing import Any

import numpy as np

from tied_embed import util
from tied_embed.data import base
from tied_embed.data.text import corpus, count_bigram, draw
from tied_embed.data.text import tokenizer as tokenizer_lib
from tied_embed.util import require

log = logging.getLogger(__name__)

# The corpus when data.text_path is '': Python's pydoc topics (about 750 KB of English), in every installation
DEFAULT_CORPUS = pathlib.Path(pydoc_data.__file__).parent / "topics.py"
_MIN_BYTES = 32  # enough for a few pairs in the validation split
MIN_BYTES_PER_PIECE = 16  # less train text a piece cannot yield V pieces (English: 4-5 bytes a piece)
MIN_SUBWORD_VOCAB = 8  # SentencePiece needs room for <unk> and a few characters
_MAX_SUBWORD_VOCAB = 1 << 20
# tokenizer_key → a model `check_preparable` trained before the data dir may be written, until `prepare` caches it
_trained_models: dict[str, bytes] = {}


def tokenizer_setting(config: Any) -> str:
  return config.data.get("tokenizer", tokenizer_lib.BYTES) or tokenizer_lib.BYTES


class Text(base.Source):
  """A bigram task over a local corpus's tokens: contiguous (the train split, then validation) or by document."""

  name = "text"
  reference_name = "empirical"
  # text_path '' = Python's pydoc_data/topics.py; tokenizer: bytes (V = 256) | sentencepiece (trained, V pieces) | a
  # .model path; split: contiguous (the corpus's bytes in sorted file order) | by_document (whole files, shuffled)
  fields = {"text_path": "", "tokenizer": "bytes", "split": corpus.CONTIGUOUS}
  assumed_when_absent = {"split": corpus.CONTIGUOUS}  # a saved config without data.split was split contiguously

  def validate(self, config: Any) -> None:
    vocab_size, choice = config.model.get("vocab_size"), tokenizer_setting(config)
    require(isinstance(choice, str), "data.tokenizer", choice, "'bytes', 'sentencepiece' or a .model file path")
    if choice == tokenizer_lib.BYTES:
      require(vocab_size == tokenizer_lib.ByteTokenizer.vocab_size, "model.vocab_size", vocab_size,
              f"256 for data.source={self.name!r} with data.tokenizer='bytes' (one token per byte)")
    elif choice == tokenizer_lib.SENTENCEPIECE:
      require(base.is_int(vocab_size) and MIN_SUBWORD_VOCAB <= vocab_size <= _MAX_SUBWORD_VOCAB, "model.vocab_size",
              vocab_size, f"an integer in [{MIN_SUBWORD_VOCAB}, {_MAX_SUBWORD_VOCAB}] for a SentencePiece vocabulary")
    else:
      pieces = tokenizer_lib.load_model_file(os.path.expanduser(choice)).vocab_size
      require(vocab_size == pieces, "model.vocab_size", vocab_size,
              f"{pieces}, the pieces of data.tokenizer={choice!r}")
    split = config.data.get("split", corpus.CONTIGUOUS)
    require(split in corpus.SPLITS or draw.seed_of(split) is not None, "data.split", split,
            " | ".join(f'"{name}"' for name in corpus.SPLITS) + f' | "{draw.PREFIX}<draw seed>"')
    files = self._files(config)
    if draw.seed_of(split) is not None:
      count = len(draw.documents([p.resolve() for p in files]))
      require(count >= 2, "data.split", split, f"a corpus of at least 2 documents for a drawn split (it has {count}:"
              f" {len(files)} file(s); one file is cut into blocks of {draw.BLOCK_BYTES:,} bytes)")
    subword = choice != tokenizer_lib.BYTES
    size = corpus.scan(files, check_utf8=True).num_bytes if subword else sum(p.stat().st_size for p in files)
    require(size >= _MIN_BYTES, "data.text_path", config.data.get("text_path"),
            f"a corpus of at least {_MIN_BYTES} bytes ({', '.join(map(str, files[:3]))} has {size})")
    if choice == tokenizer_lib.SENTENCEPIECE:  # a hopeless size fails now, not after training
      train_bytes = self._text_settings(config, utf8=True)["num_bytes"]["train"]
      most = train_bytes // MIN_BYTES_PER_PIECE
      require(vocab_size <= most, "model.vocab_size", vocab_size,
              f"at most {most} pieces for the {train_bytes:,} bytes of train text in data.text_path="
              f"{config.data.get('text_path')!r} (SentencePiece needs {MIN_BYTES_PER_PIECE}+ bytes a piece; give a"
              f" larger corpus)")

  def _files(self, config: Any) -> list[pathlib.Path]:
    return corpus.resolve(config.data.get("text_path") or "", DEFAULT_CORPUS)

  def settings(self, config: Any) -> dict[str, Any]:
    choice = tokenizer_setting(config)
    settings = {"vocab_size": int(config.model.vocab_size), "tokenizer": choice,
                **self._text_settings(config, utf8=choice != tokenizer_lib.BYTES)}
    if choice == tokenizer_lib.SENTENCEPIECE:
      settings["tokenizer_key"] = tokenizer_lib.cache_key(settings["content"], settings["vocab_size"])
    elif choice != tokenizer_lib.BYTES:
      path = pathlib.Path(choice).expanduser().resolve()
      settings.update(tokenizer="model", tokenizer_file=str(path),
                      tokenizer_key=f"model{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}")
    return settings

  def _text_settings(self, config: Any, utf8: bool) -> dict[str, Any]:
    """The text's identity: 'content' (a hash naming the text), the split and 'num_bytes' per split."""
    files = [p.resolve() for p in self._files(config)]
    scan = corpus.scan(files, check_utf8=utf8)
    text_path = str(files[0]) if len(files) == 1 else str(config.data.get("text_path"))
    corpus_files = {"text_path": text_path, "files": [str(p) for p in files]}
    seed = draw.seed_of(config.data.get("split"))
    if seed is not None:  # stored as a by-document dataset: its selection split is cut at a document end
      pieces, count, validation = draw.draw(files, seed)
      return {**corpus_files, "content": f"sha{scan.sha256}{draw.label(seed, files)}", "split": corpus.BY_DOCUMENT,
              "draw_seed": seed, "pieces": [list(piece) for piece in pieces], "validation_documents": count,
              "num_bytes": {"train": scan.num_bytes - validation, "validation": validation}}
    if config.data.get("split", corpus.CONTIGUOUS) == corpus.BY_DOCUMENT and len(files) > 1:
      # The content hash stays that of the files in sorted order; the label beside it names the split and its
      # seed, so the tokenizer and the dataset of this split never share a cache entry with the contiguous ones.
      order = corpus.document_order(files)
      sizes = [files[i].stat().st_size for i in order]
      documents = corpus.validation_documents(sizes)
      validation = sum(sizes[len(sizes) - documents:])
      return {**corpus_files, "content": f"sha{scan.sha256}-{corpus.DOCUMENT_LABEL}", "split": corpus.BY_DOCUMENT,
              "document_order": order, "validation_documents": documents,
              "num_bytes": {"train": scan.num_bytes - validation, "validation": validation}}
    split_at = corpus.split_point(scan.num_bytes)
    split_at = corpus.char_boundary(files, split_at) if utf8 else split_at
    return {**corpus_files, "content": f"sha{scan.sha256}", "split_at": split_at,
            "num_bytes": {"train": split_at, "validation": scan.num_bytes - split_at}}

  def identity(self, settings: dict[str, Any]) -> str:
    if settings["tokenizer"] == tokenizer_lib.SENTENCEPIECE:  # the key names the corpus, V and the settings
      return f"{self.name}-{settings['tokenizer_key']}"
    prefix = f"{self.name}-v{settings['vocab_size']}-{settings['content']}"
    return prefix if settings["tokenizer"] == tokenizer_lib.BYTES else f"{prefix}-{settings['tokenizer_key']}"

  def num_pairs(self, settings: dict[str, Any]) -> dict[str, int]:
    """Exact for bytes; for subwords half the bytes (English: ~4 bytes a piece), for the memory check. No pair
    crosses from one document into the next: each document gives one pair fewer than its tokens."""
    per_token = 1 if settings["tokenizer"] == tokenizer_lib.BYTES else 2
    by_document = settings.get("split") == corpus.BY_DOCUMENT
    return {split: max(size // per_token - (len(self.documents(settings, split)) if by_document else 1), 0)
            for split, size in settings["num_bytes"].items()}

  def num_pairs_exact(self, settings: dict[str, Any]) -> bool:
    return settings["tokenizer"] == tokenizer_lib.BYTES

  def documents(self, settings: dict[str, Any], split: str) -> list[pathlib.Path]:
    """A by-document split's files in tokenizing order (drawn: its pieces, (file index, start, stop))."""
    pieces = _pieces(settings, split)
    return pieces if "draw_seed" in settings else [pathlib.Path(settings["files"][i]) for i, _, _ in pieces]

  def _range(self, settings: dict[str, Any], split: str) -> tuple[list[pathlib.Path], int, int | None]:
    """A split's text as (files, start, stop) of their bytes in that order (by document: the split's documents)."""
    files = self._checked_files(settings)
    if settings.get("split") == corpus.BY_DOCUMENT:
      return self.documents(settings, split), 0, None
    return (files, 0, settings["split_at"]) if split == "train" else (files, settings["split_at"], None)

  def _checked_files(self, settings: dict[str, Any]) -> list[pathlib.Path]:
    """The corpus files of the settings, checked unchanged since the settings were made."""
    files = [pathlib.Path(p) for p in settings["files"]]
    scan = corpus.scan(files, check_utf8=False)
    require(settings["content"].split("-")[0] == f"sha{scan.sha256}", "data.text_path", settings["text_path"],
            "a corpus that does not change while its dataset is being made (start the run again)")
    return files

  def check_preparable(self, settings: dict[str, Any], data_dir: pathlib.Path) -> None:
    """Also refuses, naming the corpus, a split that would hold no pair of tokens (TFDS would fail after writing it)."""
    if self.num_pairs_exact(settings):
      empty = [split for split, count in self.num_pairs(settings).items() if count < 1]
    else:
      tokenizer = self._tokenizer_before_caching(settings, data_dir)
      empty = [split for split in ("train", "validation") if not any(
          _at_least(2, (len(tokenizer.encode(line)) for line in lines))
          for lines in self.split_documents(settings, split))]
    for split in empty:
      raise util.UsageError.bad_value("data.text_path", settings["text_path"], f"text whose {split} split holds at "
                                      f"least one pair of tokens (two tokens in a row, within one document where split"
                                      f" by document); its {split} split holds none")

  def _tokenizer_before_caching(self, settings: dict[str, Any], data_dir: pathlib.Path) -> tokenizer_lib.Tokenizer:
    """The tokenizer of `settings`: the cached model's, else one trained now, kept until `prepare` caches it (a
    corpus that cannot train its vocabulary is refused before the data dir may be written)."""
    key = settings.get("tokenizer_key")
    if key not in _trained_models:
      prepared = self.prepared(settings, data_dir)
      if prepared is not None:
        return self.tokenizer(prepared)
      _trained_models[key] = self._train(settings)
    return tokenizer_lib.SentencePieceTokenizer(_trained_models[key])

  def prepare(self, settings: dict[str, Any], data_dir: pathlib.Path) -> dict[str, Any]:
    prepared = self.prepared(settings, data_dir)
    if prepared is None:
      path = self._model_path(settings, data_dir)
      data_dir.mkdir(parents=True, exist_ok=True)
      with util.exclusive(data_dir, f"data.data_dir={str(data_dir)!r}"):
        if not _usable(path, settings["vocab_size"]):
          model = _trained_models.get(settings["tokenizer_key"]) or self._train(settings)
          path.parent.mkdir(exist_ok=True)
          util.write_atomically(path, model)
          log.info("SentencePiece model cached at %s.", path)
      prepared = {**settings, "tokenizer_file": str(path)}
    _trained_models.pop(settings.get("tokenizer_key"), None)
    return prepared

  def prepared(self, settings: dict[str, Any], data_dir: pathlib.Path) -> dict[str, Any] | None:
    if settings["tokenizer"] != tokenizer_lib.SENTENCEPIECE:
      return settings
    path = self._model_path(settings, data_dir)
    return {**settings, "tokenizer_file": str(path)} if _usable(path, settings["vocab_size"]) else None

  def _model_path(self, settings: dict[str, Any], data_dir: pathlib.Path) -> pathlib.Path:
    return data_dir / "tokenizers" / f"{settings['tokenizer_key']}.model"

  def _train(self, settings: dict[str, Any]) -> bytes:
    log.info("Training a SentencePiece vocabulary of %d pieces on a sample of the train text.", settings["vocab_size"])
    return tokenizer_lib.train_sentencepiece(self.sample_lines(settings), settings["vocab_size"],
                                             f"data.text_path={settings['text_path']!r}")

  def sample_lines(self, settings: dict[str, Any]) -> Iterator[str]:
    """A bounded, fixed sample (about `tokenizer.SAMPLE_BYTES`) of the train text, line by line."""
    windows = tokenizer_lib.sample_windows(settings["num_bytes"]["train"])
    if "draw_seed" in settings:
      yield from draw.window_lines(self._checked_files(settings), _pieces(settings, "train"), windows)
      return
    files, _, _ = self._range(settings, "train")
    for start, end in windows:
      lines = corpus.read_lines(files, start, end)
      if start > 0:
        next(lines, None)  # the window starts mid-line: drop the partial line
      yield from lines

  def tokenizer(self, settings: dict[str, Any]) -> tokenizer_lib.Tokenizer:
    """The tokenizer of prepared settings."""
    if settings["tokenizer"] == tokenizer_lib.BYTES:
      return tokenizer_lib.ByteTokenizer()
    return tokenizer_lib.load_model_file(settings["tokenizer_file"])

  def split_documents(self, settings: dict[str, Any], split: str) -> Iterator[Iterator[str]]:
    """The lines of each document of a split, whose pairs never cross into the next (contiguous: the whole split)."""
    if settings.get("split") != corpus.BY_DOCUMENT:
      yield corpus.read_lines(*self._range(settings, split))
      return
    files = self._checked_files(settings)
    for piece in _pieces(settings, split):  # each file, or drawn piece, a document of its own
      yield draw.read_lines(files, [piece])

  def splits(self, settings: dict[str, Any]) -> dict[str, tuple[np.ndarray, ...]]:
    """By document (files, or drawn pieces), each split's pairs within each and where each one's pairs end:
    {split: (ids, next_ids, ends)}, ends (D,) int64; otherwise the concatenated text's pairs (ids, next_ids)."""
    pairs = {}
    for split in ("train", "validation"):
      if settings.get("split") != corpus.BY_DOCUMENT:
        if settings["tokenizer"] == tokenizer_lib.BYTES:
          text = b"".join(corpus.read_bytes(*self._range(settings, split)))
          tokens = np.frombuffer(text, np.uint8).astype(np.int32)
        else:
          tokens = tokenizer_lib.encode_stream(self.tokenizer(settings),
                                               corpus.read_lines(*self._range(settings, split)), f"the {split} split")
        pairs[split] = (tokens[:-1], tokens[1:])
        continue
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

  def reference(self, settings: dict[str, Any], eval_ids: np.ndarray, eval_next: np.ndarray) -> base.Reference:
    counts = count_bigram.PairCounts.of(eval_ids, eval_next, settings["vocab_size"])
    record = {"pair_codes": counts.codes, "pair_code_counts": counts.counts}
    if settings["tokenizer"] != tokenizer_lib.BYTES:
      record["tokenizer_model"] = np.frombuffer(self.tokenizer(settings).model_proto, np.uint8)
    return base.Reference(self.reference_name, count_bigram.empirical_entropy(counts),
                          count_bigram.empirical_rows(counts), record)

  def log_probs_from_record(self, vocab_size: int, record: dict[str, np.ndarray]) -> base.LogProbRows:
    if "pair_counts" in record:  # a dense (V, V) count table, as older workdirs hold
      dense = np.asarray(record["pair_counts"], np.int64).ravel()
      record = {"pair_codes": np.flatnonzero(dense), "pair_code_counts": dense[dense != 0]}
    counts = count_bigram.PairCounts.from_record(vocab_size, record["pair_codes"], record["pair_code_counts"])
    return count_bigram.empirical_rows(counts)

  def eval_references(
      self, settings: dict[str, Any], train: tuple[np.ndarray, np.ndarray], validation: tuple[np.ndarray, np.ndarray]
  ) -> dict[str, float]:
    loss, k = count_bigram.count_bigram_loss(*train, *validation, settings["vocab_size"])
    log.info("Count bigram model (add-k, k=%g chosen on held-out train): %.4f nats on validation.", k, loss)
    return {"count_bigram_loss": loss}

  def tokenizer_from_record(self, record: dict[str, np.ndarray]) -> tokenizer_lib.Tokenizer:
    if "tokenizer_model" in record:
      return tokenizer_lib.SentencePieceTokenizer(np.asarray(record["tokenizer_model"], np.uint8).tobytes())
    return tokenizer_lib.ByteTokenizer()

  def token_label(self, token: int) -> str:
    return tokenizer_lib.ByteTokenizer().label(token)


def _at_least(count: int, sizes: Iterator[int]) -> bool:
  """Whether `sizes` add up to `count` or more, read only as far as needed."""
  return any(total >= count for total in itertools.accumulate(sizes))


def _usable(path: pathlib.Path, vocab_size: int) -> bool:
  """A cached model that loads and has the pieces asked for (a damaged one is trained again)."""
  try:
    return tokenizer_lib.load_model_file(str(path)).vocab_size == vocab_size
  except util.UsageError:  # not a readable model file
    return False


def _pieces(settings: dict[str, Any], split: str) -> list[tuple[int, int, int | None]]:
  """A by-document split's documents in tokenizing order as pieces (file index, start, stop; a whole file: 0, None)."""
  pieces = ([tuple(piece) for piece in settings["pieces"]] if "draw_seed" in settings
            else [(index, 0, None) for index in settings["document_order"]])
  validation = settings["validation_documents"]
  return pieces[:-validation] if split == "train" else pieces[-validation:]


def document_pairs(tokens: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """tokens (N,), document ends (D,) → ids, next_ids (P,) int32 within each document, and its pair ends (D,) int64."""
  tokens, ends = np.asarray(tokens, np.int32), np.asarray(ends, np.int64)
  starts = ends[(ends > 0) & (ends < len(tokens))]  # where a document after the first begins
  crossing = np.zeros(max(len(tokens) - 1, 0), bool)
  crossing[starts - 1] = True  # pair i joins tokens i and i + 1: it crosses when a document begins at i + 1
  pair_ends = np.cumsum(np.maximum(np.diff(ends, prepend=0) - 1, 0), dtype=np.int64)  # each document's tokens less 1
  return tokens[:-1][~crossing], tokens[1:][~crossing], pair_ends


base.register(Text())
