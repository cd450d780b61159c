"""Nothing is written or deleted through a link the program did not make: a chosen data.data_dir is checked as the
workdir is. A link where the run would write or delete its dataset or tokenizer is refused in one line (exit 2)
before anything is written, and what is behind the link is left as it was."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from conftest import ROOT
from helpers import smoke_with

from tied_embed.data import bigram as data_lib
from tied_embed.util import UsageError


def _foreign_folder(tmp_path: pathlib.Path) -> pathlib.Path:
  """A folder the run never made, holding what a damaged dataset looks like (the run would delete it)."""
  elsewhere = tmp_path / "elsewhere"
  (elsewhere / "1.0.0").mkdir(parents=True)
  (elsewhere / "1.0.0" / "precious.txt").write_text("not the run's")
  return elsewhere


def _shared_dir_with_link(tmp_path: pathlib.Path, where: str) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
  """(config data dir S, the link, its target): the link at `where` relative to S/bigram_pairs/<dataset name>."""
  shared = tmp_path / "shared"
  config = smoke_with("data.data_dir", str(shared))
  name = data_lib.builder_config(config).name
  target = _foreign_folder(tmp_path)
  link = {"dataset": shared / "bigram_pairs" / name,
          "bigram_pairs": shared / "bigram_pairs",
          "version": shared / "bigram_pairs" / name / "1.0.0",
          "tokenizers": shared / "tokenizers"}[where]
  link.parent.mkdir(parents=True, exist_ok=True)
  link.symlink_to(target / "1.0.0" if where == "version" else target, target_is_directory=True)
  return shared, link, target


@pytest.mark.parametrize("where", ["dataset", "bigram_pairs", "version", "tokenizers"])
def test_a_link_in_a_chosen_data_dir_is_refused_and_its_target_kept(tmp_path, where):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  shared, link, target = _shared_dir_with_link(tmp_path, where)
  workdir = tmp_path / "run"
  with pytest.raises(UsageError, match="is a symbolic link") as refused:
    train_and_evaluate(smoke_with("data.data_dir", str(shared)), workdir)
  assert str(link) in str(refused.value) and "data.data_dir" in str(refused.value)
  assert (target / "1.0.0" / "precious.txt").read_text() == "not the run's"
  assert sorted(p.name for p in target.rglob("*")) == ["1.0.0", "precious.txt"]
  assert not workdir.exists()  # refused before the workdir is made


def test_a_link_in_a_chosen_data_dir_is_one_line_and_exit_2_on_the_command_line(tmp_path):
  shared, link, target = _shared_dir_with_link(tmp_path, "dataset")
  result = subprocess.run(
      [sys.executable, str(ROOT / "train.py"), "--config", "configs/smoke.py", f"--config.data.data_dir={shared}",
       f"--workdir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
      env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: data.data_dir=") and str(link) in lines[0], lines
  assert (target / "1.0.0" / "precious.txt").is_file()


def test_the_dataset_is_checked_again_under_the_lock_before_it_is_deleted(tmp_path):
  """load_bigram_data alone (as the science sweep calls it) refuses too: no caller skips the check."""
  shared, link, target = _shared_dir_with_link(tmp_path, "dataset")
  with pytest.raises(UsageError, match="is a symbolic link"):
    data_lib.load_bigram_data(smoke_with("data.data_dir", str(shared)), tmp_path / "run")
  assert (target / "1.0.0" / "precious.txt").is_file()
