"""A --workdir the file system cannot hold (a name over its 255-byte limit, a path too long for the run's files under
it) is refused in one line naming --workdir (exit 2) before anything is written, never an OSError from deep inside
the run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT

from tied_embed import util
from tied_embed.util import UsageError


def test_a_workdir_with_a_256_byte_name_is_refused_in_one_line_writing_nothing(tmp_path):
  name = "x" * 256
  result = subprocess.run([sys.executable, str(ROOT / "train.py"), "--config", str(ROOT / "configs/smoke.py"),
                           "--workdir", name], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
  assert result.stderr.startswith(f"error: --workdir={name!r} is not allowed") and "at most 255 bytes" in result.stderr
  assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["x" * 255, "é" * 127 + "x"])  # 255 bytes: the most a name may hold
def test_names_up_to_255_bytes_are_allowed(tmp_path, name):
  util.require_path_fits("--workdir", str(tmp_path / name / "run"))


@pytest.mark.parametrize("path", ["x" * 256, "é" * 128, "runs/" + "é" * 128 + "/run"])  # 256 bytes in one name
def test_a_name_over_255_bytes_is_refused_wherever_it_is(tmp_path, path):
  with pytest.raises(UsageError, match=r"^--workdir=.* every name between slashes is at most 255 bytes.*is 256\)$"):
    util.require_path_fits("--workdir", str(tmp_path / path))


def test_a_path_leaving_no_room_for_the_runs_files_is_refused(tmp_path):
  deep = tmp_path.joinpath(*["d" * 200] * 20)  # 4,000 bytes and more: over 4096 less the 256 kept for the run's
  with pytest.raises(UsageError, match=r"a path of at most 3840 bytes once absolute"):
    util.require_path_fits("--workdir", str(deep))
