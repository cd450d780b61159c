"""Identities that follow a file's content, not its path (the corpus split by document, the tokenizer model), and
token id V refused by the check of a stored dataset as -1 is, V - 1 accepted."""

from __future__ import annotations

import pathlib
import shutil
import types

import numpy as np
import pytest
from helpers import make_config

from tied_embed.data import bigram, cache, sources

_WORDS = ("the", "cat", "sat", "on", "a", "mat", "dog", "ran")


def _corpus(directory: pathlib.Path, first: str = "t") -> pathlib.Path:
  """Three text files of words (~70 KB each), the first file's first character `first`."""
  directory.mkdir(parents=True, exist_ok=True)
  for index in range(3):
    text = " ".join(_WORDS[(i * 7 + i // 3 + index) % len(_WORDS)] for i in range(17_000))
    (directory / f"part{index}.txt").write_text((first if index == 0 else "t") + text[1:])
  return directory


def _identity(text_path: pathlib.Path, **fields) -> str:
  config = make_config(source="text", text_path=str(text_path))
  config.data.update(tokenizer="bytes", **fields)
  return bigram.dataset_identity(config)


def test_a_corpus_split_by_document_is_named_by_its_files_content(tmp_path):
  original = _identity(_corpus(tmp_path / "a"), split="by_document")
  assert _identity(_corpus(tmp_path / "elsewhere" / "b"), split="by_document") == original  # another folder
  assert _identity(_corpus(tmp_path / "c", first="X"), split="by_document") != original  # one byte changed
  assert _identity(_corpus(tmp_path / "a")) != original  # the contiguous split of the same files is other data


def _model_identity(corpus: pathlib.Path, model: pathlib.Path) -> str:
  config = make_config(source="text", text_path=str(corpus))
  config.data.tokenizer = str(model)
  return bigram.dataset_identity(config)


def test_a_given_tokenizer_model_is_named_by_its_bytes_not_its_path(tmp_path):
  corpus = _corpus(tmp_path / "corpus")
  model = tmp_path / "one" / "pieces.model"
  model.parent.mkdir()
  model.write_bytes(b"model bytes " * 100)  # only hashed here: the identity reads the file's bytes
  original = _model_identity(corpus, model)
  copy = tmp_path / "two" / "renamed.model"
  copy.parent.mkdir()
  shutil.copyfile(model, copy)
  assert _model_identity(corpus, copy) == original
  model.write_bytes(b"model bytes " * 99 + b"model bytez ")  # the same path, one byte changed
  assert _model_identity(corpus, model) != original
  assert original != _identity(corpus)  # and not the byte tokenizer's dataset


VOCAB = 16


@pytest.fixture
def stored(monkeypatch, tmp_path):
  """`cache.read_verified` over a stand-in stored dataset: its splits' arrays given, its digests taken as recorded."""
  blocks = {}
  builder = types.SimpleNamespace(as_data_source=lambda split: blocks[split])
  monkeypatch.setattr(cache, "_builder", lambda bc, directory: builder)
  monkeypatch.setattr(cache, "version_folder", lambda bc, directory: tmp_path)
  monkeypatch.setattr(cache, "_check_digests", lambda bc, directory, splits: "")
  monkeypatch.setattr(sources, "get", lambda name: types.SimpleNamespace(num_pairs_exact=lambda settings: False))
  bc = cache.BigramConfig(name="stand-in", source="stand-in", settings={"vocab_size": VOCAB})

  def read(train_ids, validation_next):
    ids = np.asarray(train_ids, np.int32)
    blocks["train"] = [{"ids": ids, "next_ids": np.zeros_like(ids)}]
    next_ids = np.asarray(validation_next, np.int32)
    blocks["validation"] = [{"ids": np.zeros_like(next_ids), "next_ids": next_ids}]
    return cache.read_verified(bc, tmp_path)

  return read


@pytest.mark.parametrize(("train_ids", "validation_next"), [
    ([0, 3, VOCAB], [1, 2]),  # id V in train's current tokens
    ([0, 3], [1, VOCAB]),  # id V in validation's next tokens
    ([0, -1], [1, 2]),
])
def test_a_stored_dataset_with_an_id_outside_the_vocabulary_is_not_used(stored, train_ids, validation_next):
  splits, why = stored(train_ids, validation_next)
  assert splits is None and f"token ids outside [0, {VOCAB})" in why


def test_a_stored_dataset_with_ids_up_to_v_minus_1_is_read(stored):
  splits, why = stored([0, VOCAB - 1, 5], [VOCAB - 1, 0])
  assert why == ""
  np.testing.assert_array_equal(splits["train"][0], [0, VOCAB - 1, 5])
  np.testing.assert_array_equal(splits["validation"][1], [VOCAB - 1, 0])
