"""Only regular files are opened: a FIFO, a device or a directory where the program expects a file of its own
(kernels.json, a checkpoint's files, an event file, report_data.npz, a tokenizer model) is refused or skipped in one
line within a second, never waited on. Each call runs in a daemon thread with a deadline, so a wait shows as a
failure rather than a hung test."""

from __future__ import annotations

import logging
import os
import pathlib
import shutil

import ml_collections
import pytest
from helpers import smoke_with, within

from tied_embed import util
from tied_embed.train import config as config_lib
from tied_embed.util import UsageError


@pytest.fixture()
def run_copy(smoke_workdir, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_workdir, workdir, ignore=shutil.ignore_patterns("report"))
  return workdir


def _fifo(path: pathlib.Path) -> None:
  if path.is_dir():
    shutil.rmtree(path)
  else:
    path.unlink(missing_ok=True)
  os.mkfifo(path)


@pytest.mark.parametrize("what", ["fifo", "directory", "device", "too_big"])
def test_read_regular_refuses_what_is_not_a_small_regular_file_at_once(tmp_path, what):
  path = tmp_path / "f"
  if what == "fifo":
    os.mkfifo(path)
  elif what == "directory":
    path.mkdir()
  elif what == "device":
    path = pathlib.Path("/dev/zero")
  else:
    path.write_bytes(b"x" * 11)
  with pytest.raises(OSError, match="not a regular file|allowed") as refused:
    within(1, util.read_regular, path, 10)
  assert str(path) in str(refused.value)


def test_read_regular_reads_a_regular_file_whole(tmp_path):
  (path := tmp_path / "f").write_bytes(b"0123456789")
  assert within(1, util.read_regular, path, 10)[0] == b"0123456789"


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_kernels_json_that_is_not_a_file_is_refused_before_training(run_copy, kind):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  path = run_copy / "kernels.json"
  path.unlink()
  os.mkfifo(path) if kind == "fifo" else path.mkdir()
  config = smoke_with("train.num_steps", 80)
  with pytest.raises(UsageError, match=r"kernels\.json is a (FIFO|directory), not a regular file") as refused:
    within(120, train_and_evaluate, config, run_copy)
  assert "\n" not in str(refused.value)
  assert not (run_copy / "checkpoints" / "80").exists()


def test_a_fifo_in_a_checkpoint_skips_it_as_damaged_at_once(run_copy):
  from tied_embed.train import checkpoint  # noqa: PLC0415

  _fifo(run_copy / "checkpoints" / "60" / "manifest" / "metadata")
  restored, seconds = within(60, checkpoint.restore, run_copy)
  assert restored.step == 40
  assert [step for step, _ in restored.damaged] == [60]
  assert "is a FIFO, not a regular file" in checkpoint.reason(restored.damaged[0][1])



def test_a_checkpointer_moves_a_checkpoint_holding_a_fifo_aside_and_warns_why(run_copy, caplog):
  from tied_embed.train import checkpoint  # noqa: PLC0415

  fifo = run_copy / "checkpoints" / "60" / "manifest" / "metadata"
  _fifo(fifo)
  config = checkpoint.restore(run_copy, 40, arrays=False).config
  with caplog.at_level(logging.WARNING, logger="tied_embed.train.checkpoint"):
    saver, _ = within(60, checkpoint.Checkpointer, run_copy, 2, config)
  saver.close()
  moved = run_copy / "damaged_checkpoints" / "60"
  assert (moved / "manifest" / "metadata").is_fifo() and not (run_copy / "checkpoints" / "60").exists()
  ours = [record.getMessage() for record in caplog.records if record.name == checkpoint.__name__]
  assert ours == [f"Checkpoint 60 is damaged (Damaged: {fifo} is a FIFO, not a regular file): moved it "
                             f"to {moved}; Orbax would wait on it for ever."]

def test_inspection_skips_a_checkpoint_holding_a_fifo_with_a_warning(run_copy):
  from tied_embed.inspection.inspector import inspect_run  # noqa: PLC0415

  _fifo(run_copy / "checkpoints" / "60" / "manifest" / "metadata")
  report, _ = within(120, inspect_run, run_copy, pictures=False)
  assert report["step"] == 40
  assert any("checkpoint 60" in w and "FIFO" in w for w in report["warnings"]), report["warnings"]


@pytest.mark.parametrize("inside", ["state/_METADATA", "_CHECKPOINT_METADATA", "manifest/metadata"])
def test_a_resume_moves_a_checkpoint_holding_a_fifo_aside_and_goes_on(run_copy, inside):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  _fifo(run_copy / "checkpoints" / "60" / inside)
  within(300, train_and_evaluate, smoke_with("train.num_steps", 60), run_copy)
  assert (run_copy / "damaged_checkpoints" / "60").is_dir()
  assert (run_copy / "checkpoints" / "60" / inside).is_file()  # trained again from 40


def test_inspection_skips_an_event_file_that_is_a_fifo(run_copy):
  from tied_embed.inspection.inspector import inspect_run  # noqa: PLC0415

  events = sorted(run_copy.glob("events.out.tfevents.*"))
  assert events
  _fifo(events[0])
  report, _ = within(120, inspect_run, run_copy, pictures=False)
  assert report["step"] == 60
  assert any("is a FIFO, not a regular file" in w and "no loss curves" in w for w in report["warnings"])


def test_inspection_falls_back_to_the_dataset_for_a_report_data_fifo(run_copy):
  from tied_embed.inspection.inspector import inspect_run  # noqa: PLC0415

  _fifo(run_copy / "report_data.npz")
  report, _ = within(120, inspect_run, run_copy, pictures=False)
  assert any("report_data.npz" in w and "FIFO" in w and "using the dataset" in w for w in report["warnings"])


@pytest.mark.parametrize("model", ["/dev/zero", "fifo", "directory"])
def test_a_tokenizer_model_that_is_not_a_regular_file_is_refused_in_one_line_at_once(tmp_path, model):
  text = tmp_path / "corpus.txt"
  text.write_text("the cat sat on the mat\n" * 50)
  if model == "fifo":
    os.mkfifo(model := str(tmp_path / "model.fifo"))
  elif model == "directory":
    (tmp_path / "model.dir").mkdir()
    model = str(tmp_path / "model.dir")
  config = ml_collections.ConfigDict({"seed": 0, "model": {"vocab_size": 64, "d_model": 4, "tied": True}, "data": {
      "source": "text", "text_path": str(text), "tokenizer": model, "data_dir": str(tmp_path / "data")}})
  with pytest.raises(UsageError, match="^data.tokenizer=") as refused:
    within(1, config_lib.validate_data, config)
  assert "not a regular file" in str(refused.value) and "\n" not in str(refused.value)
