"""Inspection never shows numbers that belong to another run, and every value its checks accept gives an answer.

A report_data.npz copied from another run of the same V, or one holding NaN, is named in a warning and the
dataset is read instead; a temperature however small samples; the header names the hidden map and its λ.
All on copies of the session's smoke run (configs/smoke.py), in this process.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import smoke_with

from tied_embed import workdir as workdir_lib
from tied_embed.data import bigram
from tied_embed.data import record as record_lib


@pytest.fixture()
def run_copy(smoke_workdir, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_workdir, workdir, ignore=shutil.ignore_patterns("report"))
  return workdir


def _rewrite_record(workdir, **changes) -> None:
  path = workdir / workdir_lib.REPORT_DATA
  with np.load(path) as saved:
    arrays = {key: saved[key] for key in saved.files}
  arrays.update({key: np.array(value) for key, value in changes.items()})
  np.savez_compressed(path, **arrays)


def test_a_report_data_file_of_another_run_with_the_same_v_is_not_shown(run_copy, smoke_run):
  """What `cp other_run/report_data.npz` leaves: the same V, another task (data.task_d_model=100), its floor."""
  from tied_embed.inspection.inspector import inspect_run  # noqa: PLC0415

  other = bigram.dataset_identity(smoke_with("data.task_d_model", 100))
  assert other != bigram.dataset_identity(smoke_run.config)
  _rewrite_record(run_copy, identity=other, loss_floor=0.2086)
  report = inspect_run(run_copy, pictures=False)
  (warning,) = [w for w in report["warnings"] if "report_data.npz" in w]
  assert "another run's" in warning and other in warning and warning.endswith("using the dataset")
  assert report["run"]["loss_floor"] == pytest.approx(smoke_run.summary.loss_floor, rel=1e-6)
  assert report["run"]["gap"] == pytest.approx(report["run"]["eval_loss"]["value"] - smoke_run.summary.loss_floor)


def test_the_runs_own_report_data_file_is_used_without_a_warning(run_copy, smoke_run):
  from tied_embed.inspection.inspector import inspect_run  # noqa: PLC0415

  (run_copy / "data").rename(run_copy / "data_moved")  # the dataset is not there: the file alone must serve
  report = inspect_run(run_copy, pictures=False)
  assert not [w for w in report["warnings"] if "report_data.npz" in w]
  assert report["run"]["loss_floor"] == pytest.approx(smoke_run.summary.loss_floor, rel=1e-6)


@pytest.mark.parametrize("floor", [float("nan"), float("inf"), -1.0])
def test_a_report_data_file_with_a_floor_no_run_writes_is_damaged_and_json_stays_valid(run_copy, smoke_run, floor,
                                                                                        capsys):
  from tied_embed.inspection.cli import main  # noqa: PLC0415

  _rewrite_record(run_copy, loss_floor=floor)
  assert main(["--workdir", str(run_copy), "--json", "--no-pictures"]) == 0
  captured = capsys.readouterr()
  report = json.loads(captured.out, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
  assert report["run"]["loss_floor"] == pytest.approx(smoke_run.summary.loss_floor, rel=1e-6)
  (warning,) = [line for line in captured.err.splitlines() if "report_data.npz" in line]
  assert warning.startswith("warning: ") and "cannot be read" in warning and "loss_floor" in warning


def test_nan_in_the_record_arrays_is_damage_too(run_copy):
  path = run_copy / workdir_lib.REPORT_DATA
  with np.load(path) as saved:
    table_key = next(key for key in saved.files if key.startswith("record.") and saved[key].dtype.kind == "f")
    table = saved[table_key].copy()
  table.flat[3] = np.nan
  _rewrite_record(run_copy, **{table_key: table})
  with pytest.raises(ValueError, match="not finite"):
    record_lib.read(run_copy)


@pytest.mark.parametrize("temperature", [1e-320, 5e-324, 1e-300])
def test_a_temperature_however_small_samples_the_likeliest_tokens(temperature):
  from tied_embed.inspection.report import sample_after  # noqa: PLC0415

  rng = np.random.default_rng(0)
  lookup, projection = rng.standard_normal((16, 4)), rng.standard_normal((16, 4))
  want, token = [], 3
  for _ in range(12):  # the T → 0 limit: the argmax of each row, computed here in float64
    token = int(np.argmax(lookup[token] @ projection.T))
    want.append(token)
  bigram_scores = lambda tokens: lookup[tokens[-1]] @ projection.T  # noqa: E731 (a run on pairs: the last token's row)
  assert sample_after(bigram_scores, [3], 12, temperature, seed=0) == want


def test_a_huge_temperature_samples_too():
  from tied_embed.inspection.report import sample_after  # noqa: PLC0415

  rng = np.random.default_rng(1)
  lookup, projection = rng.standard_normal((16, 4)), rng.standard_normal((16, 4))
  drawn = sample_after(lambda tokens: lookup[tokens[-1]] @ projection.T, [0], 200, 1e300, seed=0)
  assert len(drawn) == 200 and len(set(drawn)) > 8  # as good as uniform over 16 tokens


def test_the_header_names_the_hidden_map_its_lambda_and_counts_w(smoke_workdir):
  from tied_embed.inspection import report as report_lib  # noqa: PLC0415
  from tied_embed.inspection.inspector import _config_summary, inspect_run  # noqa: PLC0415
  from tied_embed.inspection.text import format_text  # noqa: PLC0415

  config = smoke_with("model.hidden", "linear")
  config.model.hidden_l2 = 0.25
  report = inspect_run(smoke_workdir, pictures=False)
  report["run"]["config"] = _config_summary(config)
  report["parameters"] = report_lib.parameter_summary(32, 8, True, 8 * 8)
  lines = format_text(report, pictures_line=False).splitlines()
  (config_line,) = [line for line in lines if line.startswith("config ")]
  assert " tied hidden=linear λ=0.25 " in config_line
  (params,) = [line for line in lines if line.startswith("params ")]
  assert f"tied V·D + D² = {32 * 8 + 8 * 8:,} vs untied 2·V·D + D² = {2 * 32 * 8 + 8 * 8:,}" in params
  report["own_score_name"] = "S_ii"  # as build_report names it where S is more than the tables
  tokens = [line for line in format_text(report, pictures_line=False).splitlines() if line.startswith("token ")]
  assert tokens and all(" own score S_ii = " in line for line in tokens)
  plain = format_text(inspect_run(smoke_workdir, pictures=False), pictures_line=False)
  assert "hidden=" not in plain and "D²" not in plain and "tied V·D = 256 vs untied 2·V·D = 512" in plain


# Inspection reads only inside its workdir: a link among what it reads is refused, naming the link.


@pytest.mark.parametrize("name", ["checkpoints", "data", "report_data.npz"])
def test_a_symlink_to_another_runs_files_is_refused_in_one_line(run_copy, tmp_path, capsys, name):
  from tied_embed.inspection.cli import main  # noqa: PLC0415

  other = tmp_path / "other_run"
  other.mkdir()
  (run_copy / name).rename(other / name)  # the same run's files, so only the link itself can be refused
  (run_copy / name).symlink_to(other / name)
  assert main(["--workdir", str(run_copy), "--no-pictures"]) == 2
  captured = capsys.readouterr()
  assert captured.out == ""
  assert captured.err == (f"error: {run_copy / name} is a symbolic link (to {other / name}); inspection reads only "
                          f"inside --workdir={str(run_copy)!r}: put the files themselves there\n")
  assert main(["--workdir", str(run_copy), "--next", "the"]) == 2  # --next opens the run the same way


@pytest.mark.parametrize("inside", ["checkpoints", "data"])
def test_a_link_deep_inside_checkpoints_or_data_is_refused_in_one_line(run_copy, tmp_path, capsys, inside):
  from tied_embed.inspection.cli import main  # noqa: PLC0415

  # The deepest file there, as a link to a copy of itself elsewhere: only the link can be refused.
  deepest = max((path for path in (run_copy / inside).rglob("*") if path.is_file()), key=lambda p: len(p.parts))
  assert len(deepest.relative_to(run_copy).parts) >= 3
  other = tmp_path / "elsewhere"
  other.write_bytes(deepest.read_bytes())
  deepest.unlink()
  deepest.symlink_to(other)
  assert main(["--workdir", str(run_copy), "--no-pictures"]) == 2
  captured = capsys.readouterr()
  assert captured.out == ""
  assert captured.err == (f"error: {deepest} is a symbolic link (to {other}); inspection reads only "
                          f"inside --workdir={str(run_copy)!r}: put the files themselves there\n")


# What is printed to the terminal: the training text's control bytes are shown, never sent.


def test_control_characters_in_sampled_text_and_labels_are_printed_escaped(monkeypatch, capsys):
  from tied_embed.inspection import cli  # noqa: PLC0415

  result = {
      "workdir": "W", "step": 5, "prompt": "the ", "warnings": [],
      "prompt_tokens": [{"id": 116, "label": "t"}, {"id": 27, "label": "\x1b"}],
      "next": [{"id": 7, "label": "\x07", "prob": 0.5}, {"id": 13, "label": "\r", "prob": 0.25}],
      "generated": [{"id": 27, "label": "\x1b"}] * 4, "temperature": 1e308, "seed": 0,
      "text": "the \x1b[2J\x07\rover\nline two\x9b\u202e",
  }
  asked = []
  monkeypatch.setattr(cli, "continue_prompt", lambda *args: asked.append(args) or result)
  assert cli.main(["--workdir", "W", "--next", "the ", "--generate", "4", "--temperature=1e308", "--seed", "5",
                   "--step", "20", "--top-k", "3"]) == 0
  assert asked == [("W", "the ", 3, 4, 1e308, 5, 20)]  # every flag reaches the continuation
  out = capsys.readouterr().out
  assert all(c.isprintable() or c == "\n" for c in out), repr(out)
  assert "  the \\x1b[2J\\x07\\rover\n  line two\\x9b\\u202e\n" in out  # line breaks kept, indented
  assert "after \\x1b (id 27):" in out and "\\x07" in out and "\\r" in out


def test_printable_escapes_what_a_terminal_acts_on_and_keeps_the_rest():
  from tied_embed.util import printable  # noqa: PLC0415

  assert printable("▁the king’s λ·‖W − I‖²") == "▁the king’s λ·‖W − I‖²"
  assert printable("a\x1b[31mb\x7f\tc\n") == "a\\x1b[31mb\\x7f\\tc\\n"
  assert printable("a\nb\r", keep="\n") == "a\nb\\r"
