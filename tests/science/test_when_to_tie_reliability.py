"""science/when_to_tie against hostile inputs: links under --out are refused before anything is written or deleted
through them, --from-json publishes only values that can be (finite losses, whole steps and seeds, one run per seed
and draw), and SIGTERM stops the sweep in one line whose resume hint is true."""

import copy
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import subprocess_env

from science.when_to_tie import cli, report
from science.when_to_tie import plan as plans

PUBLISHED = plans.REPO / "docs" / "when_to_tie.json"


def _refused(capsys, argv, named):
  with pytest.raises(SystemExit) as exited:
    cli.main(argv)
  assert exited.value.code == 2
  captured = capsys.readouterr()
  (line,) = captured.err.splitlines()
  assert line.startswith("error: ") and named in line, line
  return line


def test_a_page_under_out_that_is_a_link_is_refused_and_its_target_kept(tmp_path, capsys):
  out, elsewhere = tmp_path / "out", tmp_path / "precious.md"
  out.mkdir()
  elsewhere.write_text("mine\n")
  (out / "when_to_tie.md").symlink_to(elsewhere)
  _refused(capsys, ["--from-json", str(PUBLISHED), "--out", str(out)], str(out / "when_to_tie.md"))
  assert elsewhere.read_text() == "mine\n" and sorted(p.name for p in out.iterdir()) == ["when_to_tie.md"]


def test_runs_under_out_that_is_a_link_is_refused_before_anything_is_deleted(tmp_path, capsys):
  out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
  (elsewhere / "bytes").mkdir(parents=True)
  (elsewhere / "bytes" / "keep.txt").write_text("mine\n")
  out.mkdir()
  (out / "runs").symlink_to(elsewhere)
  _refused(capsys, ["--from-json", str(PUBLISHED), "--recheck-ends", "--corpora", "bytes", "--out", str(out)],
           str(out / "runs"))
  assert (elsewhere / "bytes" / "keep.txt").read_text() == "mine\n"


def test_a_link_made_after_the_check_is_replaced_not_written_through(tmp_path):
  results = json.loads(PUBLISHED.read_text())
  elsewhere = tmp_path / "precious.png"
  elsewhere.write_bytes(b"mine")
  (tmp_path / "when_to_tie.png").symlink_to(elsewhere)
  report.write(results, tmp_path)
  assert elsewhere.read_bytes() == b"mine"
  assert not (tmp_path / "when_to_tie.png").is_symlink()
  assert (tmp_path / "when_to_tie.png").read_bytes()[:4] == b"\x89PNG"


def _set(path, value):
  def change(results):
    *parents, last = path
    target = results
    for key in parents:
      target = target[key]
    target[last] = value(target[last]) if callable(value) else value
  return change


@pytest.mark.parametrize(("change", "named"), [
    (_set(("corpora", "bytes", "runs", "tied", "0.01", 0, "eval_loss"), float("nan")), "eval_loss is nan"),
    (_set(("corpora", "bytes", "runs", "untied", "1", 1, "select_loss"), float("inf")), "select_loss is inf"),
    (_set(("corpora", "bytes", "runs", "tied", "0.1", 0, "best_step"), -5), "best_step is -5"),
    (_set(("corpora", "bytes", "runs", "tied_w", "0.1"), []), "holds no run"),
    (_set(("corpora", "bytes", "runs", "tied", "1"), lambda runs: runs + runs[:1]), "twice"),
    (_set(("corpora", "bytes", "runs", "tied", "0.01", 0, "seed"), "zero"), "seed is 'zero'"),
    (_set(("corpora", "bytes", "count", "0.01", "eval_loss"), -1.0), "eval_loss is -1.0"),
    (_set(("corpora", "bytes", "runs", "tied", "1", 0, "predicts_self"), 1.5), "a share in [0, 1]"),
])
def test_from_json_refuses_values_it_cannot_publish(tmp_path, capsys, change, named):
  results = json.loads(PUBLISHED.read_text())
  broken = copy.deepcopy(results)
  change(broken)
  source, out = tmp_path / "results.json", tmp_path / "out"
  source.write_text(json.dumps(broken, allow_nan=True))
  line = _refused(capsys, ["--from-json", str(source), "--out", str(out)], named)
  assert str(source) in line and not out.exists()


def test_sigterm_stops_the_sweep_in_one_line_that_says_how_to_resume(tmp_path):
  out = tmp_path / "out"
  process = subprocess.Popen(
      [sys.executable, "-m", "science.when_to_tie", "--quick", "--corpora", "bytes", "--out", str(out),
       "--no-compile-cache", "--convergence-factor=0"], cwd=plans.REPO, env=subprocess_env(),
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  first = process.stdout.readline()  # "bytes: ...": the sweep's set-up (its dataset) has begun
  assert first.startswith("bytes:"), first
  sent = time.monotonic()
  os.kill(process.pid, signal.SIGTERM)
  try:
    rest, err = process.communicate(timeout=60)
  except subprocess.TimeoutExpired:
    process.kill()
    raise
  took = time.monotonic() - sent
  assert process.returncode == 128 + signal.SIGTERM, err[-2000:]
  (line,) = err.splitlines()
  assert line.startswith("error: stopped by SIGTERM") and "rerun the same command to resume" in line, line
  assert "Traceback" not in rest + err and took < 30, took
