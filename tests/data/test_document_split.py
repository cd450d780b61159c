"""data.split='by_document': a corpus of several files split by whole files in a fixed shuffled order.

Train, selection and validation hold disjoint files; the order is the same on every load and whatever order the
files were listed in; a corpus of one file and every config that leaves data.split at its default keep the split
and the dataset identity they had before the field existed.
"""

from __future__ import annotations

import hashlib
import pathlib
import random

import ml_collections
import numpy as np
import pytest

from tied_embed.data import bigram as data
from tied_embed.data import sources
from tied_embed.data.sources import text as text_source
from tied_embed.data.text import corpus
from tied_embed.data.text import tokenizer as tokenizer_lib
from tied_embed.util import UsageError

WORDS = "the king queen cat dog sat ran on under a mat house river stone bright dark old young and but then".split()


def write_corpus(directory: pathlib.Path, count: int = 12, creation_order=None) -> list[pathlib.Path]:
  """`count` files of distinct sizes and words, created in `creation_order` (default: by name)."""
  directory.mkdir(parents=True, exist_ok=True)
  names = [f"doc{index:02d}.txt" for index in range(count)]
  for index in creation_order or range(count):
    rng = random.Random(index)
    lines = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(20 + 15 * index))
    (directory / names[index]).write_text("\n".join(lines) + "\n")
  return [directory / name for name in names]


def config_for(text_path, tmp_path, split="by_document", tokenizer="bytes", vocab_size=256, **data_fields):
  fields = dict(source="text", text_path=str(text_path), tokenizer=tokenizer, data_dir=str(tmp_path / "data"))
  if split is not None:
    fields["split"] = split
  fields.update(data_fields)
  return ml_collections.ConfigDict(
      {"seed": 0, "model": {"vocab_size": vocab_size, "d_model": 4, "tied": True}, "data": fields})


def settings_of(config) -> dict:
  return data.builder_config(config).settings


def byte_pairs(path: pathlib.Path) -> tuple[np.ndarray, np.ndarray]:
  values = np.frombuffer(path.read_bytes(), np.uint8).astype(np.int32)
  return values[:-1], values[1:]


def pairs_of(paths) -> tuple[np.ndarray, np.ndarray]:
  pairs = [byte_pairs(path) for path in paths]
  return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def test_train_selection_and_validation_hold_disjoint_whole_files(tmp_path):
  write_corpus(tmp_path / "docs")
  config = config_for(tmp_path / "docs", tmp_path, selection_fraction=0.2)
  loaded = data.load_bigram_data(config, tmp_path / "work")
  text = sources.get("text")
  train_files, validation_files = (text.documents(settings_of(config), split) for split in ("train", "validation"))
  # the selection split is the pairs of the last few train files, whole; the rest are trained on
  selected = next(count for count in range(1, len(train_files))
                  if len(pairs_of(train_files[-count:])[0]) == len(loaded.select_ids))
  for (ids, next_ids), files in [((loaded.train_ids, loaded.train_next), train_files[:-selected]),
                                 ((loaded.select_ids, loaded.select_next), train_files[-selected:]),
                                 ((loaded.eval_ids, loaded.eval_next), validation_files)]:
    expected_ids, expected_next = pairs_of(files)  # each file's own pairs: none runs into the next file
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(next_ids, expected_next)
  groups = [set(train_files[:-selected]), set(train_files[-selected:]), set(validation_files)]
  assert all(groups) and sum(map(len, groups)) == len(set.union(*groups)) == 12
  assert loaded.identity == data.dataset_identity(config)
  assert "-bydoc0" in loaded.identity and loaded.identity.endswith("-select0.2")


def test_train_prefixes_are_prefixes_of_the_shuffled_files(tmp_path):
  write_corpus(tmp_path / "docs")
  whole = data.load_bigram_data(config_for(tmp_path / "docs", tmp_path), tmp_path / "a")
  part = data.load_bigram_data(config_for(tmp_path / "docs", tmp_path, train_fraction=0.25), tmp_path / "b")
  np.testing.assert_array_equal(part.train_ids, whole.train_ids[:len(part.train_ids)])
  np.testing.assert_array_equal(part.eval_ids, whole.eval_ids)  # one validation split for every fraction


def test_the_order_is_fixed_and_does_not_depend_on_how_the_files_are_listed(tmp_path):
  files = write_corpus(tmp_path / "a")
  listed = [files[i] for i in (5, 0, 11, 3, 7, 1, 10, 2, 9, 4, 8, 6)]
  assert [files[i] for i in corpus.document_order(files)] == [listed[i] for i in corpus.document_order(listed)]
  # pinned: a change to the order would silently give datasets of an existing identity other files
  names = [pathlib.Path(f"/x/{c}.txt") for c in "abcdefghij"]
  assert [names[i].stem for i in corpus.document_order(names)] == list("fgiedchjba")
  # the same names created in another order, elsewhere: the same split, the same content hash
  write_corpus(tmp_path / "b", creation_order=[11, 3, 0, 7, 1, 9, 5, 2, 10, 4, 8, 6])
  first, second = (settings_of(config_for(tmp_path / name, tmp_path)) for name in ("a", "b"))
  assert first["document_order"] == second["document_order"] and first["content"] == second["content"]
  text = sources.get("text")
  for split in ("train", "validation"):
    assert [p.name for p in text.documents(first, split)] == [p.name for p in text.documents(second, split)]


def test_a_resume_loads_the_same_split_and_a_damaged_record_of_the_ends_is_made_again(tmp_path, caplog):
  write_corpus(tmp_path / "docs")
  config = config_for(tmp_path / "docs", tmp_path, selection_fraction=0.1)
  first = data.load_bigram_data(config, tmp_path / "work")
  metadata = next((tmp_path / "data").rglob("metadata.json"))
  metadata.unlink()
  again = data.load_bigram_data(config, tmp_path / "work")
  assert "has no document ends" in caplog.text
  for name in ("train_ids", "select_ids", "eval_ids"):
    np.testing.assert_array_equal(getattr(again, name), getattr(first, name))
  fresh = data.load_bigram_data(config_for(tmp_path / "docs", tmp_path / "other", selection_fraction=0.1),
                                tmp_path / "work2")
  np.testing.assert_array_equal(fresh.select_next, first.select_next)


def test_a_corpus_of_one_file_is_split_as_before(tmp_path):
  path = write_corpus(tmp_path / "docs", count=3)[2]
  by_document, contiguous = (config_for(path, tmp_path, split) for split in ("by_document", "contiguous"))
  assert settings_of(by_document) == settings_of(contiguous)
  assert data.dataset_identity(by_document) == data.dataset_identity(contiguous)
  loaded = data.load_bigram_data(by_document, tmp_path / "work")
  values = np.frombuffer(path.read_bytes(), np.uint8)
  np.testing.assert_array_equal(loaded.train_ids, values[:corpus.split_point(len(values)) - 1])


def test_the_default_split_keeps_every_existing_identity(tmp_path):
  files = write_corpus(tmp_path / "docs", count=4)
  digest = hashlib.sha256()
  for path in files:  # the content hash as it always was: each file's name and bytes, in sorted order
    digest.update(f"\0{path.name}\0".encode())
    digest.update(path.read_bytes())
  content = f"sha{digest.hexdigest()[:16]}"
  for split in (None, "contiguous"):  # a config from before the field, and one that sets the default
    settings = settings_of(config_for(tmp_path / "docs", tmp_path, split))
    assert "split" not in settings and "document_order" not in settings
    assert data.dataset_identity(config_for(tmp_path / "docs", tmp_path, split)) == f"text-v256-{content}"
    subword = config_for(tmp_path / "docs", tmp_path, split, tokenizer="sentencepiece", vocab_size=32,
                         selection_fraction=0.05)
    assert data.dataset_identity(subword) == f"text-{tokenizer_lib.cache_key(content, 32)}-select0.05"
  by_document = config_for(tmp_path / "docs", tmp_path, tokenizer="sentencepiece", vocab_size=32)
  assert data.dataset_identity(by_document) == f"text-{tokenizer_lib.cache_key(f'{content}-bydoc0', 32)}"


def test_a_checkpoint_config_from_before_the_field_resumes_under_the_default():
  from configs import default  # noqa: PLC0415
  from tied_embed.train import run_setup  # noqa: PLC0415

  saved = default.get_config()
  del saved.data["split"]  # what a checkpoint written before data.split existed holds
  saved.data.source = "text"
  current = saved.copy_and_resolve_references()
  current.data.split = "contiguous"
  assert run_setup.config_differences(saved, current) == []
  current.data.split = "by_document"
  assert run_setup.config_differences(saved, current) == [
      "data.split: 'contiguous' in the checkpoints, 'by_document' now"]


def test_subword_pieces_are_tokenized_file_by_file(tmp_path):
  write_corpus(tmp_path / "docs", count=6)
  (tmp_path / "docs" / "doc01.txt").write_text("no newline at the end")  # it must not run into the next file
  config = config_for(tmp_path / "docs", tmp_path, tokenizer="sentencepiece", vocab_size=32)
  loaded = data.load_bigram_data(config, tmp_path / "work")
  sp = tokenizer_lib.SentencePieceTokenizer(next((tmp_path / "data" / "tokenizers").glob("*.model")).read_bytes())
  text = sources.get("text")
  ids, next_ids = [], []
  for path in text.documents(settings_of(config), "train"):
    tokens = [t for line in path.read_text().split("\n") if line.strip() for t in sp.encode(line)]
    ids += tokens[:-1]
    next_ids += tokens[1:]
  np.testing.assert_array_equal(loaded.train_ids, ids)
  np.testing.assert_array_equal(loaded.train_next, next_ids)


def test_document_pairs_and_the_selection_cut_by_hand():
  ids, next_ids, ends = text_source.document_pairs(np.array([1, 2, 3, 4, 5, 6]), np.array([2, 2, 3, 6]))
  assert ids.tolist() == [1, 4, 5] and next_ids.tolist() == [2, 5, 6] and ends.tolist() == [1, 1, 1, 3]
  # 10% of 100 pairs is 10: the nearest document end leaves 85 to train on (15 selected)
  assert data.selection_pairs(100, 0.1, np.array([30, 60, 85, 100])) == 15
  assert data.selection_pairs(100, 0.1, np.array([100])) == 10  # one train document: nowhere to cut
  assert data.selection_pairs(100, 0.0, np.array([30, 60, 85, 100])) == 0
  assert corpus.validation_documents([10, 10, 10, 10, 10, 50]) == 1  # at least one file
  assert corpus.validation_documents([100] * 20) == 2
  # 10% of 100 bytes is 10: the last file (8) and the last two (12) are both 2 away; a tie goes to fewer files
  assert corpus.validation_documents([88, 4, 8]) == 1


def test_a_split_the_text_source_does_not_know_is_refused_by_name(tmp_path):
  assert "split" in sources.get("text").fields  # declared and checked by the source that reads it
  with pytest.raises(UsageError, match=r"^data\.split='by_file' is not allowed: expected \"contiguous\""):
    sources.get("text").validate(config_for(write_corpus(tmp_path / "docs", 2)[0], tmp_path, "by_file"))


def test_a_document_without_tokens_adds_no_pair_and_no_step_back_in_the_ends():
  from tied_embed.data.sources.text import document_pairs  # noqa: PLC0415

  # tokens 1 2 | (empty) | 3 4: the pairs (1, 2) and (3, 4); pair ends 1, 1, 2 (the empty document ends where its
  # predecessor did)
  ids, next_ids, pair_ends = document_pairs(np.array([1, 2, 3, 4]), np.array([2, 2, 4]))
  assert ids.tolist() == [1, 3] and next_ids.tolist() == [2, 4] and pair_ends.tolist() == [1, 1, 2]
