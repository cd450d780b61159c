"""The inspection command line answers whatever it is given: `--json` prints valid JSON whatever the event files
logged (a NaN or infinite loss, from a diverged run, is null), and a --workdir the file system cannot hold is one
line naming it (exit 2), not an OSError. On a copy of the session's smoke run, in this process."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from tied_embed.inspection.cli import finite_or_null, main
from tied_embed.train.events import EventWriter


@pytest.fixture()
def run_copy(smoke_workdir, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_workdir, workdir, ignore=shutil.ignore_patterns("report"))
  return workdir


def test_non_finite_event_values_are_null_in_valid_json(run_copy, smoke_run, capsys):
  step = int(smoke_run.config.train.num_steps)  # the checkpoint shown
  writer = EventWriter(run_copy)
  writer.write_scalars(step, {"train/loss": math.nan, "eval/loss": math.inf})
  writer.close()
  assert main(["--workdir", str(run_copy), "--json", "--no-pictures"]) == 0
  report = json.loads(capsys.readouterr().out, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
  assert report["step"] == step
  assert report["run"]["train_loss"] == {"step": step, "value": None}
  assert report["run"]["eval_loss"] == {"step": step, "value": None}


def test_finite_or_null_keeps_every_other_value():
  value = {"a": [1.5, -math.inf, (math.nan, 2)], "b": "nan", "c": None, "d": True, "e": 3}
  assert finite_or_null(value) == {"a": [1.5, None, [None, 2]], "b": "nan", "c": None, "d": True, "e": 3}


def test_a_workdir_with_a_256_byte_name_is_one_line_naming_it(tmp_path, capsys):
  assert main(["--workdir", str(tmp_path / ("x" * 256))]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: --workdir=") and "at most 255 bytes" in err and err.count("\n") == 1


def test_help_is_the_usage_then_what_the_command_does(capsys):
  with pytest.raises(SystemExit) as ended:
    main(["--help"])
  assert ended.value.code == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].startswith("usage: ") and "--workdir WORKDIR" in "\n".join(lines)
  assert "Open a run from its workdir and report what the table learned." in lines  # the module docstring's first line
