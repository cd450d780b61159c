"""Paths as the terminal shows them: every control character (ESC, DEL, C1, a bidirectional override) and every byte
that is not UTF-8 in a printed path is escaped, so an error line stays one line and leaves the terminal as it was;
a workdir or data dir whose path is not UTF-8 is refused in one line (exit 2) before anything is written."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from helpers import smoke_with

from tied_embed import util
from tied_embed.train import cli
from tied_embed.train import config as config_lib
from tied_embed.util import UsageError

NOT_UTF8 = os.fsdecode(b"run-\xff")  # how Python holds a name with the byte 0xff: 'run-\udcff'


def test_printable_escapes_every_character_a_terminal_acts_on():
  text = "a\x1b[31mb\nc\rd\te\x7ff\x85g\u202eh" + NOT_UTF8
  assert util.printable(text) == "a\\x1b[31mb\\nc\\rd\\te\\x7ff\\x85g\\u202eh" + "run-\\xff"  # written out by hand
  assert util.printable("plain /tmp/é ü") == "plain /tmp/é ü"


def test_console_log_lines_escape_control_characters_but_keep_their_line_breaks():
  record = logging.LogRecord("tied_embed", logging.WARNING, __file__, 1, "bad\x1b[2J path\nnext", None, None)
  assert cli.ConsoleFormatter().format(record) == "warning: bad\\x1b[2J path\nnext"


def _train(*args: str | bytes) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, str(ROOT / "train.py"), "--config", "configs/smoke.py", *args], cwd=ROOT,
                        capture_output=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_an_error_naming_a_workdir_with_an_escape_prints_it_escaped(tmp_path):
  workdir = tmp_path / "run\x1b[31m"
  workdir.mkdir()
  (workdir / "checkpoints").symlink_to(tmp_path)
  result = _train(f"--workdir={workdir}")
  assert result.returncode == 2
  lines = result.stderr.decode().strip().splitlines()
  assert len(lines) == 1 and "is a symbolic link" in lines[0], lines
  assert "\x1b" not in lines[0] and "run\\x1b[31m" in lines[0]


def test_a_workdir_that_is_not_utf8_is_refused_in_one_line_writing_nothing(tmp_path):
  workdir = os.fsencode(tmp_path) + b"/run-\xff"
  result = _train(b"--workdir=" + workdir)
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.decode().strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: --workdir=") and "valid UTF-8" in lines[0], lines
  assert os.listdir(tmp_path) == []


def test_train_and_evaluate_refuses_a_workdir_that_is_not_utf8(tmp_path):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  with pytest.raises(UsageError, match="^--workdir=.*valid UTF-8"):
    train_and_evaluate(smoke_with("seed", 0), tmp_path / NOT_UTF8)
  assert os.listdir(tmp_path) == []


def test_a_data_dir_that_is_not_utf8_is_refused_by_validation(tmp_path):
  with pytest.raises(UsageError, match="^data.data_dir=.*valid UTF-8"):
    config_lib.validate_data(smoke_with("data.data_dir", str(tmp_path / NOT_UTF8)))
