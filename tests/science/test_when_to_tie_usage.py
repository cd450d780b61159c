"""science/when_to_tie refuses bad command lines before any work: one line `error: ...`, exit 2, nothing written."""

import subprocess
import sys

import pytest
from helpers import subprocess_env

from science.when_to_tie import cli
from science.when_to_tie import plan as plans


@pytest.mark.parametrize(("flags", "named"), [
    (["--bytes-steps=-5"], "--bytes-steps=-5"),
    (["--subword-steps=0"], "--subword-steps=0"),
    (["--corpora=bytes,words"], "'words'"),
    (["--bytes-steps=many"], "--bytes-steps"),
    (["--convergence-factor=1"], "--convergence-factor=1"),
    (["--convergence-factor=-3"], "--convergence-factor=-3"),
    (["--convergence-factor=two"], "--convergence-factor"),
    (["--add-convergence"], "--add-convergence"),
    (["--recheck-ends"], "--recheck-ends"),
    (["--recount-repeats"], "--recount-repeats"),
    (["--family=bigram,words"], "--family='bigram,words': 'words' is not one of bigram, controls"),
    (["--family="], "--family='': '' is not one of"),
    (["--asymmetry", "--from-json=docs/when_to_tie.json"], "--asymmetry: trains nothing"),
])
def test_bad_flags_are_one_line_errors_before_any_work(tmp_path, capsys, flags, named):
  out = tmp_path / "out"
  with pytest.raises(SystemExit) as exited:
    cli.main([*flags, "--out", str(out)])
  assert exited.value.code == 2
  captured = capsys.readouterr()
  assert captured.out == ""
  (line,) = captured.err.splitlines()
  assert line.startswith("error: ") and named in line
  assert not out.exists()


def test_out_that_is_a_file_is_refused_by_the_script(tmp_path):
  taken = tmp_path / "results.txt"
  taken.write_text("not a directory\n")
  done = subprocess.run([sys.executable, "-m", "science.when_to_tie", "--out", str(taken / "sub")],
                        cwd=plans.REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120,
                        check=False)
  assert done.returncode == 2 and done.stdout == ""
  (line,) = done.stderr.splitlines()
  assert line.startswith("error: --out=") and str(taken) in line and "not a directory" in line
  assert taken.read_text() == "not a directory\n" and sorted(tmp_path.iterdir()) == [taken]


def test_a_sweep_refuses_an_out_holding_another_blocks_report_and_accepts_its_own(tmp_path, capsys):
  out = tmp_path / "out"
  out.mkdir()
  report = out / "when_to_tie.json"
  report.write_text('{"families": ["bigram"], "corpora": {"bytes": {}}}')
  with pytest.raises(SystemExit) as exited:
    cli.main(["--corpora=bytes", "--family=controls", "--out", str(out)])
  assert exited.value.code == 2
  (line,) = capsys.readouterr().err.splitlines()
  assert line.startswith(f"error: --out={out}: it holds the report of --corpora=bytes --family=bigram,"), line
  assert sorted(path.name for path in out.iterdir()) == ["when_to_tie.json"]
  assert cli.other_block(report, ["bytes"], ("bigram",)) == ""  # the same block: a rerun or a resume
  assert cli.other_block(report, ["subword"], ("bigram",)) == "--corpora=bytes --family=bigram"
  assert cli.other_block(out / "absent.json", ["bytes"], ("controls",)) == ""
