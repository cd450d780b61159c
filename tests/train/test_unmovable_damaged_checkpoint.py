"""A damaged checkpoint that cannot be moved aside (a directory the user may not rename) stops the run in one line
(exit status 1) naming it and what to do, and leaves it where it was: no copy in damaged_checkpoints/, nothing
deleted. The rename is refused by a stand-in for os.rename, since the suite may run as root, whom permissions do
not stop."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from tied_embed.train import checkpoint
from tied_embed.util import RunStopped


def test_a_damaged_checkpoint_that_cannot_be_moved_is_one_line_and_left_whole(smoke_run, tmp_path, monkeypatch):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir, ignore=shutil.ignore_patterns("report"))
  damaged = checkpoint.checkpoint_dir(workdir) / "60"
  (damaged / "config" / "metadata").write_text("{x")
  before = sorted(str(path.relative_to(damaged)) for path in damaged.rglob("*"))
  real_rename = os.rename

  def rename(source, destination, *args, **kwargs):
    if os.fspath(source) == str(damaged):
      raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(source))
    return real_rename(source, destination, *args, **kwargs)

  monkeypatch.setattr(os, "rename", rename)
  with pytest.raises(RunStopped) as stopped:
    train_and_evaluate(smoke_run.config, workdir)
  message = str(stopped.value)
  assert stopped.value.exit_status == 1 and "\n" not in message
  assert f"checkpoint 60 at {damaged} is damaged" in message and "cannot be moved" in message
  assert "Permission denied" in message
  assert sorted(str(path.relative_to(damaged)) for path in damaged.rglob("*")) == before
  assert not checkpoint.damaged_dir(workdir).exists()
