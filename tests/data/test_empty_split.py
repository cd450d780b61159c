"""A split that would hold no pair of tokens (a one-byte or blank validation document, a last tenth of blank lines)
is refused in one line naming the corpus before anything is written, not at the end of TFDS's writing."""

from __future__ import annotations

import random

import pytest
from helpers import smoke_with

from tied_embed.data.text import corpus
from tied_embed.util import UsageError

WORDS = "the king queen cat dog sat ran on under a mat house river stone bright dark old young".split()


def _words(lines: int, seed: int = 0) -> str:
  rng = random.Random(seed)
  return "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10))) for _ in range(lines)) + "\n"


def _text_config(text_path, tmp_path, tokenizer: str, vocab_size: int, split: str = "contiguous"):
  config = smoke_with("data.source", "text")
  config.model.vocab_size = vocab_size
  config.data.update(text_path=str(text_path), tokenizer=tokenizer, split=split, data_dir=str(tmp_path / "data"))
  return config


def _refused(config, tmp_path) -> str:
  from tied_embed.train import config as config_lib  # noqa: PLC0415
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  config_lib.validate(config)  # passes: the split's pairs are known only once the text is read or tokenized
  with pytest.raises(UsageError) as refused:
    train_and_evaluate(config, tmp_path / "run")
  assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()  # nothing written
  assert "\n" not in str(refused.value)
  return str(refused.value)


@pytest.mark.parametrize("validation", [b"x", b"\n"])
def test_a_by_document_validation_file_of_one_byte_is_refused(tmp_path, validation):
  files = [tmp_path / "corpus" / name for name in ("a.txt", "b.txt")]
  files[0].parent.mkdir()
  last = files[corpus.document_order(files)[-1]]  # the validation document of two
  for path in files:
    path.write_bytes(validation if path == last else _words(200).encode())
  message = _refused(_text_config(tmp_path / "corpus", tmp_path, "bytes", 256, "by_document"), tmp_path)
  assert message.startswith(f"data.text_path={str(tmp_path / 'corpus')!r} is not allowed")
  assert "its validation split holds none" in message


def test_a_subword_validation_tenth_of_blank_lines_is_refused(tmp_path):
  text = tmp_path / "corpus.txt"
  body = _words(400)
  text.write_text(body + "\n" * (len(body) // 5))  # the last tenth of the bytes: newlines only, no piece
  message = _refused(_text_config(text, tmp_path, "sentencepiece", 32), tmp_path)
  assert message.startswith(f"data.text_path={str(text)!r} is not allowed")
  assert "its validation split holds none" in message


def test_a_by_document_subword_validation_document_of_blank_lines_is_refused(tmp_path):
  files = [tmp_path / "corpus" / name for name in ("a.txt", "b.txt", "c.txt")]
  files[0].parent.mkdir()
  order = corpus.document_order(files)
  for rank, index in enumerate(order):
    files[index].write_text("\n\n\n   \n" * 200 if rank == len(files) - 1 else _words(300, rank))
  message = _refused(_text_config(tmp_path / "corpus", tmp_path, "sentencepiece", 32, "by_document"), tmp_path)
  assert "its validation split holds none" in message
