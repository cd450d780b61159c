"""What the text sources share: a tokenizer (`data.tokenizer`: 'bytes', 'sentencepiece' or a `.model` path), the token
stream's pairs, and sparse references: the validation pairs' empirical bigram table and entropy, the add-k model."""

from __future__ import annotations

import abc
import hashlib
import itertools
import logging
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from tied_embed import util
from tied_embed.data import base
from tied_embed.data.text import count_bigram
from tied_embed.data.text import tokenizer as tokenizer_lib
from tied_embed.util import require

log = logging.getLogger(__name__)

MIN_SUBWORD_VOCAB = 8  # SentencePiece needs room for <unk> and a few characters
_MAX_SUBWORD_VOCAB = 1 << 20
# tokenizer_key → a model `check_preparable` trained before the data dir may be written, until `prepare` caches it
_trained_models: dict[str, bytes] = {}


def tokenizer_setting(config: Any) -> str:
  return config.data.get("tokenizer", tokenizer_lib.BYTES) or tokenizer_lib.BYTES


class TextSource(base.Source):
  """A bigram task over tokenized text; subclasses provide the text of each split."""

  reference_name = "empirical"

  @abc.abstractmethod
  def validate_text(self, config: Any) -> None:
    """Raises UsageError unless the source's own data.* fields name readable text (cheap where it can be)."""

  @abc.abstractmethod
  def text_settings(self, config: Any, utf8: bool) -> dict[str, Any]:
    """The text's identity: at least 'content' (a hash or version naming the text) and 'num_bytes' per split."""

  @abc.abstractmethod
  def split_bytes(self, settings: dict[str, Any], split: str) -> Iterator[bytes]:
    """The raw bytes of split 'train' or 'validation', in order, in chunks."""

  @abc.abstractmethod
  def split_lines(self, settings: dict[str, Any], split: str) -> Iterator[str]:
    """The text of a split, line by line."""

  @abc.abstractmethod
  def sample_lines(self, settings: dict[str, Any]) -> Iterator[str]:
    """A bounded, fixed sample (about `tokenizer.SAMPLE_BYTES`) of the train text, line by line."""

  @abc.abstractmethod
  def corpus_name(self, settings: dict[str, Any]) -> str:
    """The corpus as the config names it, for messages: the source's own fields."""

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
    self.validate_text(config)

  def settings(self, config: Any) -> dict[str, Any]:
    choice = tokenizer_setting(config)
    settings = {"vocab_size": int(config.model.vocab_size), "tokenizer": choice,
                **self.text_settings(config, utf8=choice != tokenizer_lib.BYTES)}
    if choice == tokenizer_lib.SENTENCEPIECE:
      settings["tokenizer_key"] = tokenizer_lib.cache_key(settings["content"], settings["vocab_size"])
    elif choice != tokenizer_lib.BYTES:
      path = pathlib.Path(choice).expanduser().resolve()
      settings.update(tokenizer="model", tokenizer_file=str(path),
                      tokenizer_key=f"model{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}")
    return settings

  def identity(self, settings: dict[str, Any]) -> str:
    if settings["tokenizer"] == tokenizer_lib.SENTENCEPIECE:  # the key names the corpus, V and the settings
      return f"{self.name}-{settings['tokenizer_key']}"
    prefix = f"{self.name}-v{settings['vocab_size']}-{settings['content']}"
    return prefix if settings["tokenizer"] == tokenizer_lib.BYTES else f"{prefix}-{settings['tokenizer_key']}"

  def num_pairs(self, settings: dict[str, Any]) -> dict[str, int]:
    """Exact for bytes of local text; for subwords half the bytes (English: ~4 bytes a piece), for the memory check."""
    per_token = 1 if settings["tokenizer"] == tokenizer_lib.BYTES else 2
    return {split: max(size // per_token - 1, 0) for split, size in settings["num_bytes"].items()}

  def num_pairs_exact(self, settings: dict[str, Any]) -> bool:
    return settings["tokenizer"] == tokenizer_lib.BYTES

  def check_preparable(self, settings: dict[str, Any], data_dir: pathlib.Path) -> None:
    key = settings.get("tokenizer_key")
    if key not in _trained_models and self.prepared(settings, data_dir) is None:
      _trained_models[key] = self._train(settings)
    self._check_pairs(settings, data_dir)

  def split_documents(self, settings: dict[str, Any], split: str) -> Iterator[Iterator[str]]:
    """The lines of each document of a split, whose pairs never cross into the next: here one, the whole split."""
    yield self.split_lines(settings, split)

  def _check_pairs(self, settings: dict[str, Any], data_dir: pathlib.Path) -> None:
    """UsageError naming the corpus if a split would hold no pair of tokens (TFDS would fail after writing it)."""
    if self.num_pairs_exact(settings):
      empty = [split for split, count in self.num_pairs(settings).items() if count < 1]
    else:
      key = settings.get("tokenizer_key")
      model = _trained_models.get(key)
      tokenizer = (tokenizer_lib.SentencePieceTokenizer(model) if model is not None
                   else self.tokenizer(self.prepared(settings, data_dir) or settings))
      empty = [split for split in ("train", "validation") if not any(
          _at_least(2, (len(tokenizer.encode(line)) for line in lines))
          for lines in self.split_documents(settings, split))]
    for split in empty:
      raise util.UsageError(f"{self.corpus_name(settings)} is not allowed: expected text whose {split} split holds at "
                            f"least one pair of tokens (two tokens in a row, within one document where split by "
                            f"document); its {split} split holds none")

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
                                             self.corpus_name(settings))

  def tokenizer(self, settings: dict[str, Any]) -> tokenizer_lib.Tokenizer:
    """The tokenizer of prepared settings."""
    if settings["tokenizer"] == tokenizer_lib.BYTES:
      return tokenizer_lib.ByteTokenizer()
    return tokenizer_lib.load_model_file(settings["tokenizer_file"])

  def splits(self, settings: dict[str, Any]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    pairs = {}
    for split in ("train", "validation"):
      if settings["tokenizer"] == tokenizer_lib.BYTES:
        tokens = np.frombuffer(b"".join(self.split_bytes(settings, split)), np.uint8).astype(np.int32)
      else:
        tokens = tokenizer_lib.encode_stream(self.tokenizer(settings), self.split_lines(settings, split),
                                             f"the {split} split")
      pairs[split] = (tokens[:-1], tokens[1:])
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
    model = util.read_regular(path, tokenizer_lib.MAX_MODEL_BYTES)  # never waits on a FIFO
    return tokenizer_lib.SentencePieceTokenizer(model).vocab_size == vocab_size
  except (OSError, RuntimeError):
    return False
