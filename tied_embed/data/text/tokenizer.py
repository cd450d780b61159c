"""Tokenizers of text sources: bytes (V = 256) or SentencePiece, trained here or given as a `.model` file.

SentencePiece is trained as in Flax's lm1b example (unigram, a bounded sample of train), without BOS/EOS/padding ids,
deterministically (one thread, fixed sample): one corpus, one model file. Each line encodes alone: no newline token."""

from __future__ import annotations

import ast
import hashlib
import io
import itertools
import logging
import re
from collections.abc import Iterable, Iterator

import numpy as np

from tied_embed.util import UsageError, read_regular

log = logging.getLogger(__name__)

BYTES = "bytes"
SENTENCEPIECE = "sentencepiece"
SAMPLE_BYTES = 10_000_000  # text SentencePiece trains on, at most (lm1b: max_corpus_chars=10M)
SAMPLE_WINDOWS = 100  # the sample is this many evenly spaced stretches of the train split
TRAINER_SETTINGS = dict(  # spelled out in the cache key: changing one makes a new model
    model_type="unigram", character_coverage=1.0, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1,
    max_sentence_length=1 << 16, num_threads=1)
# The trainer silently drops a longer sentence (in raw bytes, before normalization): longer lines train as pieces
SENTENCE_BYTES = TRAINER_SETTINGS["max_sentence_length"]
PROGRESS_BYTES = 64 << 20  # one log line per this much text tokenized
ENCODE_BATCH = 4096  # lines encoded at a time
WORD_START = "\u2581"  # SentencePiece's '▁': the piece begins a word
MAX_MODEL_BYTES = 1 << 28  # a SentencePiece model file, at most (one of a million pieces is about 20 MB)


class Tokenizer:
  """Text ↔ ids and a readable label per id. `vocab_size` ids, 0..V-1."""

  vocab_size: int

  def encode(self, text: str) -> list[int]:
    raise NotImplementedError

  def decode(self, ids: Iterable[int]) -> str:
    raise NotImplementedError

  def label(self, token: int) -> str:
    raise NotImplementedError

  def lookup(self, text: str) -> int | None:
    """The id whose label or piece is `text` (a quoted literal such as '\\n' is unquoted first); None if none."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
      try:
        text = ast.literal_eval(text)
      except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):  # the parser's limits: no literal
        return None
      if not isinstance(text, str):  # e.g. "'a', 'b'", a tuple of two, is no piece either
        return None
    return self._lookup(text)

  def _lookup(self, text: str) -> int | None:
    raise NotImplementedError


class ByteTokenizer(Tokenizer):
  """One token per byte value; labels are printable literals ('a', ' ', '\\n', '\\xc3')."""

  vocab_size = 256

  def encode(self, text: str) -> list[int]:
    return list(text.encode())

  def decode(self, ids: Iterable[int]) -> str:
    return bytes(int(i) for i in ids).decode(errors="replace")

  def label(self, token: int) -> str:
    return repr(bytes([token]))[1:]

  def lookup(self, text: str) -> int | None:
    # A label as shown first: unquoted, '\\x80' would read as the character U+0080, which is two bytes in UTF-8.
    labels = [self.label(token) for token in range(256)]
    return labels.index(text) if text in labels else super().lookup(text)

  def _lookup(self, text: str) -> int | None:
    for token in range(256):
      if text == self.label(token)[1:-1]:  # a label unquoted: \\n, \\x80 (lookup matched the quoted ones)
        return token
    encoded = text.encode()
    return encoded[0] if len(encoded) == 1 else None


class SentencePieceTokenizer(Tokenizer):
  """A SentencePiece model from its serialized bytes; labels are its pieces ('▁the' begins a word)."""

  def __init__(self, model_proto: bytes):
    import sentencepiece as spm  # noqa: PLC0415

    self.model_proto = bytes(model_proto)
    self._processor = spm.SentencePieceProcessor(model_proto=self.model_proto)
    self.vocab_size = self._processor.GetPieceSize()

  def encode(self, text: str) -> list[int]:
    return self._processor.EncodeAsIds(text)

  def encode_lines(self, lines: list[str]) -> list[list[int]]:
    return self._processor.Encode(lines)

  def decode(self, ids: Iterable[int]) -> str:
    return self._processor.DecodeIds([int(i) for i in ids])

  def label(self, token: int) -> str:
    return self._processor.IdToPiece(int(token))

  def _lookup(self, text: str) -> int | None:
    for piece in (text, WORD_START + text, re.sub("^ ", WORD_START, text)):
      token = self._processor.PieceToId(piece)
      if token != self._processor.unk_id() or piece == self.label(self._processor.unk_id()):
        return token
    return None


def load_model_file(path: str) -> SentencePieceTokenizer:
  """A SentencePiece `.model` file as a tokenizer; UsageError on data.tokenizer if it cannot be read as one."""
  try:  # a regular file of a bounded size: a FIFO is not waited on, /dev/zero not read until memory runs out
    return SentencePieceTokenizer(read_regular(path, MAX_MODEL_BYTES))
  except OSError as e:
    raise UsageError.bad_value("data.tokenizer", path, "'bytes', 'sentencepiece' or a readable SentencePiece .model"
                               f" file ({e.strerror or e})") from None
  except RuntimeError as e:
    raise UsageError.bad_value("data.tokenizer", path,
                               f"a SentencePiece .model file ({str(e).splitlines()[0]})") from None


def cache_key(content_key: str, vocab_size: int) -> str:
  """The name of a trained model in the cache: the corpus hash and a hash of every training setting."""
  import sentencepiece as spm  # noqa: PLC0415 (only text sources with a subword vocabulary need it)

  settings = repr(sorted({**TRAINER_SETTINGS, "vocab_size": vocab_size, "sample_bytes": SAMPLE_BYTES,
                          "sample_windows": SAMPLE_WINDOWS, "sentencepiece": spm.__version__}.items()))
  return f"spm-v{vocab_size}-{content_key}-{hashlib.sha256(settings.encode()).hexdigest()[:12]}"


def train_sentencepiece(lines: Iterable[str], vocab_size: int, corpus: str = "the corpus") -> bytes:
  """Trains a unigram SentencePiece model of exactly `vocab_size` pieces on `lines`: → the model file's bytes.
  UsageError on model.vocab_size, naming `corpus` and the reason, when the text cannot support that many pieces."""
  import sentencepiece as spm  # noqa: PLC0415

  writer = io.BytesIO()
  try:
    spm.SentencePieceTrainer.Train(sentence_iterator=bounded_sentences(lines), model_writer=writer,
                                   vocab_size=vocab_size, minloglevel=2, **TRAINER_SETTINGS)
  except RuntimeError as e:
    raise UsageError.bad_value(
        "model.vocab_size", vocab_size,
        f"a vocabulary size the train text of {corpus} supports ({_refusal_reason(str(e))})") from None
  return writer.getvalue()


def _refusal_reason(message: str) -> str:
  """SentencePiece's refusal in words: its message after the failed check, or what the check means."""
  first = (message.splitlines() or [""])[0]
  # Its advice for too few pieces names its own flag (--character_coverage), which the config does not have.
  if counts := re.search(r"smaller than required_chars\. (\d+) vs (\d+)", first):
    return (f"its sample holds characters enough to need {counts[2]} pieces, each kept as a piece of its own: use a "
            f"model.vocab_size of at least {counts[2]}, or data.tokenizer='bytes'")
  reason = first.split("] ", 1)[-1].strip() if "] " in first else ""
  if reason:
    return f"SentencePiece: {reason}"
  if "sentences_.empty()" in first:
    return "SentencePiece found no sentence in the sample of it"
  if "all_chars_count" in first:
    return "its sample holds no characters but whitespace"
  return f"SentencePiece: {first}"


def bounded_sentences(lines: Iterable[str], limit: int = SENTENCE_BYTES) -> Iterator[str]:
  """`lines` with each over `limit` UTF-8 bytes cut (before a space where it can) into pieces that join back."""
  for line in lines:
    encoded = line.encode()
    start = 0
    while len(encoded) - start > limit:
      cut = encoded.rfind(b" ", start + 1, start + limit + 1)
      if cut < 0:
        cut = start + limit
        while encoded[cut] & 0xC0 == 0x80:  # a UTF-8 continuation byte (10xxxxxx): the character began earlier
          cut -= 1
      yield encoded[start:cut].decode()
      start = cut
    yield encoded[start:].decode() if start else line


def sample_windows(total: int) -> list[tuple[int, int]]:
  """Byte ranges [start, stop) of a text of `total` bytes to train on: all of it, or evenly spaced windows."""
  if total <= SAMPLE_BYTES:
    return [(0, total)]
  width, stride = SAMPLE_BYTES // SAMPLE_WINDOWS, total // SAMPLE_WINDOWS
  return [(k * stride, k * stride + width) for k in range(SAMPLE_WINDOWS)]


def _batches(tokenizer: Tokenizer, lines: Iterable[str]) -> Iterator[tuple[int, bool, np.ndarray]]:
  """Encodes `lines` ENCODE_BATCH at a time: → per batch (characters read, whether it is full, (n,) int32 ids)."""
  encode = getattr(tokenizer, "encode_lines", lambda texts: [tokenizer.encode(t) for t in texts])
  lines = iter(lines)
  while pending := list(itertools.islice(lines, ENCODE_BATCH)):
    texts = [line for line in pending if line.strip()]
    encoded = encode(texts) if texts else []
    ids = np.fromiter((t for line_ids in encoded for t in line_ids), np.int32, sum(map(len, encoded)))
    yield sum(len(line) for line in pending), len(pending) == ENCODE_BATCH, ids


def encode_stream(tokenizer: Tokenizer, lines: Iterable[str], what: str) -> np.ndarray:
  """Tokenizes `lines` a batch at a time (never the text whole), logging progress: → (N,) int32 ids, concatenated."""
  return encode_documents(tokenizer, [lines], what, stream=True)[0]


def encode_documents(tokenizer: Tokenizer, documents: Iterable[Iterable[str]], what: str,
                     stream: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """Tokenizes each document's lines a batch at a time: → (N,) int32 ids of the documents concatenated, and (D,) int64
  ends, where document d's tokens are ids[ends[d - 1]:ends[d]] (ids[:ends[0]] for the first). `stream`: one text,
  its progress logged every PROGRESS_BYTES."""
  parts, ends, done, count, next_log = [], [], 0, 0, PROGRESS_BYTES
  for lines in documents:
    for size, full, ids in _batches(tokenizer, lines):
      parts.append(ids)
      done, count = done + size, count + len(ids)
      if stream and full and done >= next_log:
        log.info("Tokenized %.0f MB of %s (%d tokens so far).", done / 2**20, what, count)
        next_log += PROGRESS_BYTES
    ends.append(count)
  ids = np.concatenate(parts) if parts else np.zeros(0, np.int32)
  documents_read = "" if stream else f" in {len(ends)} documents"
  log.info("Tokenized %s: %.1f MB of text%s, %d tokens.", what, done / 2**20, documents_read, len(ids))
  return ids, np.asarray(ends, np.int64)
