"""A stored dataset is verified whole: besides each split's pairs, TFDS's own files that decide how the pairs are
read and cut (metadata.json's document ends, dataset_info.json, features.json) have their sha256 recorded when it is
built. An edit is generated again by a run, so the data it resumes on is the uninterrupted run's, and refused by
inspection, which writes nothing. A FIFO anywhere in the stored dataset is refused in one line before TFDS or
array_record opens a file."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
from helpers import within
from test_document_split import config_for, write_corpus

from tied_embed.data import bigram as data_lib
from tied_embed.data import cache
from tied_embed.util import UsageError

ARRAYS = ("train_ids", "train_next", "eval_ids", "eval_next", "select_ids", "select_next", "train_starts",
          "train_document_ends", "eval_document_ends", "select_document_ends")


@pytest.fixture()
def stored(tmp_path):
  """A by-document text dataset with windows of 4 pairs, stored and loaded once: (config, workdir, its version
  folder, the loaded BigramData)."""
  write_corpus(tmp_path / "docs")
  config = config_for(tmp_path / "docs", tmp_path, selection_fraction=0.1, context_length=4)
  data = data_lib.load_bigram_data(config, tmp_path / "work")
  return config, tmp_path / "work", data_lib.split_files(config, tmp_path / "work"), data


def _drop_a_train_document_end(version_dir) -> None:
  """Merges the first two train documents in metadata.json: the ends still fit the pairs, only the windows change."""
  metadata = json.loads((version_dir / "metadata.json").read_text())
  del metadata["document_ends"]["train"][0]
  (version_dir / "metadata.json").write_text(json.dumps(metadata))


def test_the_metadata_files_digests_are_recorded_beside_the_pairs(stored):
  _, _, version_dir, _ = stored
  recorded = json.loads((version_dir / cache.DIGEST_FILE).read_text())
  by_hand = {name: hashlib.sha256((version_dir / name).read_bytes()).hexdigest()
             for name in ("dataset_info.json", "features.json", "metadata.json")}
  assert recorded["metadata_sha256"] == by_hand


@pytest.mark.parametrize("edit", ["document_end", "dataset_info"])
def test_an_edited_metadata_file_is_generated_again_and_the_run_gets_the_uninterrupted_data(stored, edit, caplog):
  config, workdir, version_dir, first = stored
  if edit == "document_end":
    _drop_a_train_document_end(version_dir)
    changed = "metadata.json"
  else:
    info = json.loads((version_dir / "dataset_info.json").read_text())
    info["splits"].reverse()  # the same splits listed in another order: TFDS reads the same pairs
    (version_dir / "dataset_info.json").write_text(json.dumps(info))
    changed = "dataset_info.json"
  again = data_lib.load_bigram_data(config, workdir)
  assert f"{changed} is not the file written when the dataset was built" in caplog.text
  for name in ARRAYS:
    np.testing.assert_array_equal(getattr(again, name), getattr(first, name), err_msg=name)


def test_inspection_refuses_an_edited_document_end_in_one_line(stored):
  config, workdir, version_dir, _ = stored
  _drop_a_train_document_end(version_dir)
  with pytest.raises(UsageError, match="metadata.json is not the file written when the dataset was built") as refused:
    data_lib.load_existing_bigram_data(config, workdir)
  assert "\n" not in str(refused.value)


@pytest.mark.parametrize("where", ["dataset_info.json", "bigram_pairs-train.array_record-00000-of-00001",
                                   "nested/extra"])
@pytest.mark.parametrize("reader", ["run", "inspection"])
def test_a_fifo_in_the_stored_dataset_is_refused_in_one_line_before_it_is_opened(stored, where, reader):
  config, workdir, version_dir, _ = stored
  fifo = version_dir / where
  fifo.parent.mkdir(exist_ok=True)
  fifo.unlink(missing_ok=True)
  os.mkfifo(fifo)
  load = data_lib.load_bigram_data if reader == "run" else data_lib.load_existing_bigram_data
  with pytest.raises(UsageError, match="is a FIFO, not a regular file") as refused:
    within(20, load, config, workdir)
  assert str(fifo) in str(refused.value) and "\n" not in str(refused.value)
  assert fifo.exists()  # refused, not deleted with the dataset


def test_a_record_from_before_the_metadata_digests_gets_them_at_the_next_load(stored):
  config, workdir, version_dir, _ = stored
  digests = version_dir / cache.DIGEST_FILE
  recorded = json.loads(digests.read_text())
  digests.write_text(json.dumps({split: recorded[split] for split in ("train", "validation")}))
  data_lib.load_bigram_data(config, workdir)
  assert json.loads(digests.read_text()) == recorded
