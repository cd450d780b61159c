"""A directory's .lock is its own file: one with other names (a hard link, a workdir copied with `cp -al`) or a
symbolic link is replaced by a fresh file before it is locked, never truncated or written in place, so the other
name's file and record stay as they were and a copy gets a lock of its own. The directory a lock was taken for stays
exclusive however many names its .lock has."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tied_embed import util
from tied_embed.util import UsageError

FOREIGN = '{"host": "elsewhere", "pid": 1, "since": "then"}'


def _record(directory) -> dict:
  return json.loads((directory / util.LOCK_NAME).read_text())


def test_a_hard_linked_lock_is_replaced_and_the_other_name_keeps_its_file(tmp_path):
  precious = tmp_path / "precious"
  precious.write_text(FOREIGN)
  workdir = tmp_path / "run"
  workdir.mkdir()
  os.link(precious, workdir / util.LOCK_NAME)
  with util.exclusive(workdir, "--workdir"):
    assert _record(workdir)["pid"] == os.getpid()
    assert not os.path.samefile(precious, workdir / util.LOCK_NAME)
  assert precious.read_text() == FOREIGN and precious.stat().st_nlink == 1


def test_a_workdir_copied_with_cp_al_while_held_gets_its_own_lock(tmp_path):
  original, copy = tmp_path / "run", tmp_path / "copy"
  original.mkdir()
  with util.exclusive(original, "--workdir"):
    held = (original / util.LOCK_NAME).read_text()
    subprocess.run(["cp", "-al", str(original), str(copy)], check=True)
    assert (copy / util.LOCK_NAME).stat().st_nlink == 2  # the copy's .lock is the original's file
    assert not util.is_locked(copy)  # held as the original's lock only
    util.refuse_if_held(copy, "--workdir")
    with util.exclusive(copy, "--workdir"):
      assert util.is_locked(copy) and util.is_locked(original)
      assert not os.path.samefile(original / util.LOCK_NAME, copy / util.LOCK_NAME)
    assert (original / util.LOCK_NAME).read_text() == held  # not written through the copy's name
    with pytest.raises(UsageError, match="in use by another run"), util.exclusive(original, "--workdir"):
      pass


def test_the_holder_stays_exclusive_when_its_lock_gets_another_name(tmp_path):
  workdir = tmp_path / "run"
  workdir.mkdir()
  with util.exclusive(workdir, "--workdir"):
    os.link(workdir / util.LOCK_NAME, tmp_path / "other_name")
    assert util.is_locked(workdir)
    with pytest.raises(UsageError, match="in use by another run"):
      util.refuse_if_held(workdir, "--workdir")
    with pytest.raises(UsageError, match="in use by another run"), util.exclusive(workdir, "--workdir"):
      pass


def test_the_holder_is_not_recorded_through_a_name_linked_after_the_lock_was_taken(tmp_path):
  workdir = tmp_path / "run"
  workdir.mkdir()
  with util.exclusive(workdir, "--workdir", record_now=False) as record:
    os.link(workdir / util.LOCK_NAME, tmp_path / "other_name")
    record()
  assert (tmp_path / "other_name").read_text() == ""
