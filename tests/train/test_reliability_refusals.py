"""A refused run leaves the workdir as it found it: every path, its contents and its modification time.

Each refusal here (a rerun with another config, a shorter train.num_steps, a report/ that is a file) is checked
against a snapshot of the whole tree taken before it; train_and_evaluate runs in this process and stops at its
checks, before any data is loaded or anything compiled.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil

import pytest
from helpers import smoke_with

from tied_embed import util
from tied_embed.util import UsageError


def _snapshot(root: pathlib.Path) -> dict[str, tuple]:
  """{relative path: (kind, mtime in ns, sha256 of a file's bytes)} of `root` and everything under it."""
  tree = {}
  for directory, names, files in os.walk(root):
    for path in (pathlib.Path(directory), *(pathlib.Path(directory) / name for name in names + files)):
      status = path.lstat()
      digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else None
      kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
      tree[str(path.relative_to(root))] = (kind, status.st_mtime_ns, digest)
  return tree


@pytest.fixture()
def rerun_workdir(smoke_run, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir, ignore=shutil.ignore_patterns("report"))
  assert (workdir / ".lock").is_file()  # the finished run's, naming it as the last holder
  return workdir


@pytest.mark.parametrize(("path", "value", "reason"), [
    ("seed", 1, "holds checkpoints of a different run (seed: 0 in the checkpoints, 1 now)"),
    ("train.num_steps", 30, "train.num_steps=30 is not allowed: expected at least 60, the latest checkpoint"),
])
def test_a_refused_rerun_leaves_the_workdir_as_it_found_it(rerun_workdir, path, value, reason):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  before = _snapshot(rerun_workdir)
  with pytest.raises(UsageError, match=reason.replace("(", r"\(").replace(")", r"\)")):
    train_and_evaluate(smoke_with(path, value), rerun_workdir)
  assert _snapshot(rerun_workdir) == before


def test_a_refusal_for_a_report_file_leaves_no_lock_behind(tmp_path):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "report").write_text("a file where inspection's report/ goes")
  os.utime(workdir, ns=(10**18, 10**18))  # a time a new write could not give it
  before = _snapshot(workdir)
  with pytest.raises(UsageError, match="report is not a directory"):
    train_and_evaluate(smoke_with("seed", 0), workdir)
  assert _snapshot(workdir) == before
  assert sorted(p.name for p in workdir.iterdir()) == ["report"]


def test_the_lock_is_held_before_the_holder_is_recorded(tmp_path):
  with util.exclusive(tmp_path, "the test", record_now=False) as record:
    assert util.is_locked(tmp_path)  # a second run is refused even before the record is written
    assert (tmp_path / ".lock").read_text() == ""
    record()
    assert f'"pid": {os.getpid()}' in (tmp_path / ".lock").read_text()
  assert not util.is_locked(tmp_path)


def test_a_lock_file_an_unrecorded_refusal_created_is_removed(tmp_path):
  os.utime(tmp_path, ns=(10**18, 10**18))
  with pytest.raises(UsageError), util.exclusive(tmp_path, "the test", record_now=False):
    raise UsageError("refused by a check")
  assert not (tmp_path / ".lock").exists() and tmp_path.stat().st_mtime_ns == 10**18
  (tmp_path / ".lock").write_text('{"host": "h", "pid": 1, "since": "then"}')
  with pytest.raises(UsageError), util.exclusive(tmp_path, "the test", record_now=False):
    raise UsageError("refused by a check")
  assert (tmp_path / ".lock").read_text() == '{"host": "h", "pid": 1, "since": "then"}'  # as it was found
