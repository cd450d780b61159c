"""The command lines and scripts answer in one line: --help lists the project's own flags and exits 0, the closing
lines paste into a shell, scripts/results.py checks its arguments before any work and names a failed row.

Every subprocess here ends before any training: at --help, or at an argument check.
"""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

TRAIN_FLAGS = ("--config FILE", "--config.<field>=VALUE", "--workdir DIR", "--verbose")


def _python(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                        env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})


def _assert_lists_the_flags(result: subprocess.CompletedProcess, program: str) -> None:
  assert result.returncode == 0, result.stderr[-2000:]
  lines = result.stdout.splitlines()
  for flag in TRAIN_FLAGS:
    (line,) = [line for line in lines if line.strip().startswith(flag + " ")]
    assert len(line.split(flag, 1)[1].strip()) > 10  # a description beside each flag
  (example,) = [line for line in lines if line.startswith("example: ")]
  assert example.startswith(f"example: {program} --config configs/") and "--workdir " in example
  assert "Try --helpfull" not in result.stdout + result.stderr


def test_train_py_help_lists_its_own_flags_with_an_example_and_exits_0(tmp_path):
  for flag in ("--help", "-h"):
    result = _python("train.py", flag)
    _assert_lists_the_flags(result, f"{os.path.relpath(sys.executable, ROOT)} train.py")
  result = _python("train.py", "--config", "configs/smoke.py", "--workdir", str(tmp_path / "run"), "--help")
  assert result.returncode == 0 and not (tmp_path / "run").exists()


def test_the_installed_command_help_lists_its_own_flags(tmp_path):
  """As `tied-embed-train` starts: argv[0] is the script's path, and main() is tied_embed.run.cli:main."""
  script = tmp_path / "bin" / "tied-embed-train"
  result = _python("-c", f"import sys; sys.argv = [{str(script)!r}, '--help']; "
                         "from tied_embed.run.cli import main; main()", cwd=tmp_path)
  _assert_lists_the_flags(result, "bin/tied-embed-train")
