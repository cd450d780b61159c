"""A refused run leaves the workdir as it found it: every path, its contents and its modification time.

Each refusal here (a rerun with another config, a shorter train.num_steps, a report/ that is a file) is checked
against a snapshot of the whole tree taken before it; train_and_evaluate runs in this process and stops at its
checks, before any data is loaded or anything compiled.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pathlib
import shutil

import pytest
from helpers import smoke_with

from tied_embed import util
from tied_embed import workdir as workdir_lib
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


# The lock file: never written through a link, and a directory it cannot be made in is a usage error.


def test_a_lock_file_that_is_a_link_is_replaced_and_its_target_untouched(tmp_path):
  target = tmp_path / "precious"
  target.write_text('{"host": "elsewhere", "pid": 1, "since": "then"}')
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / ".lock").symlink_to(target)
  assert not util.is_locked(workdir) and util.holder(workdir) == "unknown holder"  # the target is not read
  util.refuse_if_held(workdir, "--workdir")  # a link is replaced, not refused
  with util.exclusive(workdir, "--workdir"):
    assert not (workdir / ".lock").is_symlink() and util.is_locked(workdir)
    assert f'"pid": {os.getpid()}' in (workdir / ".lock").read_text()
  assert target.read_text() == '{"host": "elsewhere", "pid": 1, "since": "then"}'


def test_a_lock_file_that_is_not_a_regular_file_is_refused(tmp_path):
  (tmp_path / ".lock").mkdir()
  with pytest.raises(UsageError, match=r"\.lock is not a regular file"), util.exclusive(tmp_path, "the test"):
    pass


def _read_only(real_open, directory: pathlib.Path):
  """`os.open` as on a read-only mount holding `directory`: opening anything in it to write is EROFS."""
  def fake(path, flags, *args, **kwargs):
    writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
    if writes and pathlib.Path(os.fsdecode(path)).absolute().is_relative_to(directory):
      raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))
    return real_open(path, flags, *args, **kwargs)
  return fake


def test_a_lock_that_cannot_be_created_is_one_line_naming_the_directory(tmp_path, monkeypatch):
  monkeypatch.setattr(os, "open", _read_only(os.open, tmp_path))
  with pytest.raises(UsageError) as refused, util.exclusive(tmp_path, f"--workdir={str(tmp_path)!r}"):
    pass
  assert str(refused.value) == (f"--workdir={str(tmp_path)!r}: {tmp_path} is not writable (Read-only file system): "
                                f"the run keeps its lock there; use a writable directory")


# The workdir as a read-only mount leaves it: `open` and `os.open` refuse every write under it (root could otherwise
# write through a chmod). train.py then runs as usual.
_READ_ONLY_TRAIN = """
import builtins, errno, io, os, pathlib, sys
workdir = pathlib.Path(sys.argv[1]).absolute()
def refused(path, writes):
  if writes and pathlib.Path(os.fsdecode(path)).absolute().is_relative_to(workdir):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))
real_os_open, real_open = os.open, io.open
def os_open(path, flags, *args, **kwargs):
  refused(path, flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
  return real_os_open(path, flags, *args, **kwargs)
def open_(file, mode="r", *args, **kwargs):
  if not isinstance(file, int):
    refused(file, any(c in mode for c in "wax+"))
  return real_open(file, mode, *args, **kwargs)
os.open, builtins.open, io.open = os_open, open_, open_
sys.argv = ["train.py", "--config", "configs/smoke.py", "--workdir", str(workdir)]
from tied_embed.train import cli
cli.main()
"""


def test_a_finished_workdir_on_a_read_only_mount_is_one_line_and_exit_2(tmp_path):
  import subprocess  # noqa: PLC0415
  import sys  # noqa: PLC0415

  from conftest import ROOT  # noqa: PLC0415

  workdir = tmp_path / "run"
  (workdir / "checkpoints").mkdir(parents=True)
  (workdir / ".lock").write_text('{"host": "h", "pid": 1, "since": "then"}')  # a finished run's
  result = subprocess.run([sys.executable, "-c", _READ_ONLY_TRAIN, str(workdir)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
  assert result.stderr.startswith(f"error: --workdir={str(workdir)!r} cannot be written: Read-only file system")


def test_rerunning_a_finished_run_leaves_its_lock_file_as_it_was(rerun_workdir, smoke_run):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  lock = rerun_workdir / ".lock"
  recorded, status = lock.read_bytes(), lock.stat()
  assert train_and_evaluate(smoke_run.config, rerun_workdir).step == 60  # nothing to train, nothing written
  assert lock.read_bytes() == recorded and lock.stat().st_mtime_ns == status.st_mtime_ns
  assert not util.is_locked(rerun_workdir)


@pytest.mark.parametrize("name", ["checkpoints", "data"])
def test_a_workdir_whose_subdirectory_is_a_link_is_refused(tmp_path, name):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  elsewhere = tmp_path / "other_run" / name
  elsewhere.mkdir(parents=True)
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / name).symlink_to(elsewhere)
  with pytest.raises(UsageError, match=rf"/run/{name} is a symbolic link; the run keeps its {name} inside"):
    train_and_evaluate(smoke_with("train.num_steps", 5), workdir)
  assert list(elsewhere.iterdir()) == [] and sorted(p.name for p in workdir.iterdir()) == [name]


@pytest.mark.parametrize("inside", ["checkpoints/5", "data/bigram/1.0.0/pairs.npy"])
def test_a_link_planted_inside_checkpoints_or_data_is_refused(tmp_path, inside):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  elsewhere = tmp_path / "other_run" / "target"
  elsewhere.mkdir(parents=True)
  workdir = tmp_path / "run"
  link = workdir / inside
  link.parent.mkdir(parents=True)
  link.symlink_to(elsewhere)
  with pytest.raises(UsageError, match=rf"/run/{inside} is a symbolic link \(to .*/other_run/target\); the run "
                     rf"keeps its {inside.split('/')[0]} inside the workdir"):
    train_and_evaluate(smoke_with("train.num_steps", 5), workdir)
  assert list(elsewhere.iterdir()) == [] and link.is_symlink()
  assert sorted(p.name for p in workdir.iterdir()) == [inside.split("/")[0]]


# The kernels' files: the workdir's kernels.json and a build's library are replaced whole, never written through a
# link planted where the writer works.


def test_the_kernel_set_record_is_not_written_through_links(tmp_path):
  from tied_embed.fast.kernels import in_use  # noqa: PLC0415

  outside = tmp_path / "outside"
  outside.write_text('{"kernels": "gemm-f32"}')
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / f".{workdir_lib.KERNELS}.partial").symlink_to(outside)  # where a writer could put its temporary file
  (workdir / workdir_lib.KERNELS).symlink_to(outside)  # its content is not this workdir's record: not read either
  in_use.record(workdir, "none", resuming=True)
  assert outside.read_text() == '{"kernels": "gemm-f32"}'
  record = workdir / workdir_lib.KERNELS
  assert not record.is_symlink() and record.read_text() == '{"kernels": "none"}\n'


def test_a_kernel_build_writes_its_library_whole_and_never_through_a_link(tmp_path, monkeypatch):
  from tied_embed.fast.kernels import build, library  # noqa: PLC0415

  outside = tmp_path / "outside"
  outside.write_bytes(b"precious")
  output = tmp_path / library.ADAMW.file
  output.with_suffix(".so.partial").symlink_to(outside)
  compiler = ["/bin/sh", "-c", 'printf "the library" > "$1"', "sh", str(output)]  # writes the path it is given
  monkeypatch.setattr(build, "command", lambda kernel, path: list(compiler))
  assert build.build(library.ADAMW, output) is None
  assert outside.read_bytes() == b"precious" and output.read_bytes() == b"the library"
  assert output.stat().st_mode & 0o111  # the linker's mode: executable as g++ leaves a library
  assert json.loads(library.record_path(output).read_text())["size"] == len(b"the library")
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
      ["outside", output.name, output.with_suffix(".so.partial").name, library.record_path(output).name])
