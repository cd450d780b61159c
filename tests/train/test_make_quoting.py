"""`make train`, `make inspect` and `make tensorboard` pass CONFIG and WORKDIR (or the folder above it) as one
argument each, whatever they hold: a space, a quote, a semicolon. Run with PY and TENSORBOARD standing in for the
venv's programs (each prints its arguments) and the venv taken as built (`make -o`), so nothing is installed or
trained."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT


@pytest.fixture()
def python(tmp_path):
  """A stand-in for the venv's Python: prints its arguments as JSON."""
  path = tmp_path / "python"
  path.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
  path.chmod(0o755)
  return path


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.parametrize(("target", "expected"), [
    ("train", ["train.py", "--config", "my runs/it's; a \"b\".py", "--workdir", "runs/a b"]),
    ("inspect", ["-m", "tied_embed.inspection", "--workdir", "runs/a b"]),
    ("tensorboard", ["--logdir", "my runs"]),
])
def test_make_passes_config_and_workdir_as_one_argument_each(python, target, expected):
  workdir = "my runs/a b" if target == "tensorboard" else "runs/a b"
  result = subprocess.run(["make", "-s", "--no-print-directory", "-o", ".venv/.installed", target, f"PY={python}",
                           f"TENSORBOARD={python}", f"WORKDIR={workdir}", "CONFIG=my runs/it's; a \"b\".py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr
  assert json.loads(result.stdout) == expected


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_train_without_either_uses_the_defaults(python, monkeypatch):
  monkeypatch.delenv("WORKDIR", raising=False)
  monkeypatch.delenv("CONFIG", raising=False)
  result = subprocess.run(["make", "-s", "--no-print-directory", "-o", ".venv/.installed", "train", f"PY={python}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
  assert json.loads(result.stdout) == ["train.py", "--config", "configs/default.py", "--workdir", "runs/default"]
