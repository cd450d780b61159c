"""The stored dataset is verified, not trusted: each split's pairs have a sha256 recorded beside them when built
(or first read) and in every checkpoint's manifest. A stored split swapped for another task's (same pair count, ids
in range) is generated again from the source, so the resumed run ends bitwise on the uninterrupted run's state;
one whose recorded digests were rewritten with it is refused in one line naming the files."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
from helpers import smoke_with

from tied_embed.data import bigram as data_lib
from tied_embed.data import cache
from tied_embed.train import checkpoint
from tied_embed.util import UsageError

TRAIN_FILE = "bigram_pairs-train.array_record-00000-of-00001"


def _sha256(ids: np.ndarray, next_ids: np.ndarray) -> str:
  """By hand: hashlib over the two int32 arrays' little-endian bytes, ids first."""
  return hashlib.sha256(ids.astype("<i4").tobytes() + next_ids.astype("<i4").tobytes()).hexdigest()


@pytest.fixture()
def stopped_at_40(smoke_run, tmp_path):
  """A copy of the smoke run as if stopped after checkpoint 40, and the folder of its stored dataset."""
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir, ignore=shutil.ignore_patterns("report"))
  shutil.rmtree(workdir / "checkpoints" / "60")
  return workdir, data_lib.split_files(smoke_run.config, workdir)


def _swap_in_another_tasks_train_split(tmp_path, stored) -> None:
  other = smoke_with("data.task_seed", 1)  # same pair count and V, other pairs
  data_lib.load_bigram_data(other, tmp_path / "other")
  shutil.copyfile(data_lib.split_files(other, tmp_path / "other") / TRAIN_FILE, stored / TRAIN_FILE)


def test_the_digests_are_recorded_beside_the_dataset_and_in_each_checkpoint(smoke_run):
  data = data_lib.load_bigram_data(smoke_run.config, smoke_run.workdir)
  expected = {"train": _sha256(data.train_ids, data.train_next), "validation": _sha256(data.eval_ids, data.eval_next)}
  stored = data_lib.split_files(smoke_run.config, smoke_run.workdir)
  recorded = json.loads((stored / cache.DIGEST_FILE).read_text())
  assert {split: recorded[split] for split in ("train", "validation")} == expected
  assert checkpoint.restore(smoke_run.workdir, arrays=False).manifest["dataset_sha256"] == expected


def test_a_swapped_train_split_is_generated_again_and_the_resume_is_bitwise(smoke_run, stopped_at_40, tmp_path):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  workdir, stored = stopped_at_40
  _swap_in_another_tasks_train_split(tmp_path, stored)
  train_and_evaluate(smoke_run.config, workdir)
  resumed = checkpoint.restore(workdir, 60, arrays=False).manifest["arrays"]
  assert resumed == checkpoint.restore(smoke_run.workdir, 60, arrays=False).manifest["arrays"]


def test_a_swapped_split_with_its_digests_rewritten_is_refused_in_one_line(smoke_run, stopped_at_40, tmp_path):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  workdir, stored = stopped_at_40
  _swap_in_another_tasks_train_split(tmp_path, stored)
  (stored / cache.DIGEST_FILE).unlink()  # recorded again from the swapped pairs at the next read
  with pytest.raises(UsageError, match="holds other pairs than checkpoint 40 was trained on") as refused:
    train_and_evaluate(smoke_run.config, workdir)
  assert f"{stored}/bigram_pairs-train.array_record*" in str(refused.value) and "\n" not in str(refused.value)
  assert not (workdir / "checkpoints" / "60").exists()


def test_a_dataset_stored_without_digests_gets_them_at_its_first_read(smoke_run, tmp_path):
  config = smoke_with("data.data_dir", str(tmp_path / "data"))
  data_lib.load_bigram_data(config, tmp_path)
  digests = data_lib.split_files(config, tmp_path) / cache.DIGEST_FILE
  recorded = json.loads(digests.read_text())
  digests.unlink()
  data = data_lib.load_bigram_data(config, tmp_path)
  assert json.loads(digests.read_text()) == recorded
  assert {split: recorded[split] for split in ("train", "validation")} == {
      "train": _sha256(data.train_ids, data.train_next), "validation": _sha256(data.eval_ids, data.eval_next)}


def test_a_garbled_digest_file_makes_the_dataset_generated_again(tmp_path, caplog):
  config = smoke_with("data.data_dir", str(tmp_path / "data"))
  first = data_lib.load_bigram_data(config, tmp_path)
  digests = data_lib.split_files(config, tmp_path) / cache.DIGEST_FILE
  digests.write_text("{not json")
  again = data_lib.load_bigram_data(config, tmp_path)
  assert "its digests cannot be read" in caplog.text
  np.testing.assert_array_equal(again.train_ids, first.train_ids)
  recorded = json.loads(digests.read_text())
  assert {split: recorded[split] for split in ("train", "validation")} == first.digests
