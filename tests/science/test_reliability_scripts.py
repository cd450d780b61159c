"""The command lines and scripts answer in one line: --help lists the project's own flags and exits 0, the closing
lines paste into a shell, scripts/results.py checks its arguments before any work and names a failed row.

Every subprocess here ends before any training: at --help, or at an argument check.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
from conftest import ROOT
from helpers import results_script

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


def _shown(path: str) -> pathlib.Path:
  """`path` as the help shows it, run from ROOT: relative inside ROOT, else absolute (a venv beside a worktree, or
  `make mutate`'s copy of the project in mutants/)."""
  path = pathlib.Path(path).absolute()
  return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def test_train_py_help_lists_its_own_flags_with_an_example_and_exits_0(tmp_path):
  for flag in ("--help", "-h"):
    result = _python("train.py", flag)
    _assert_lists_the_flags(result, f"{_shown(sys.executable)} train.py")
  result = _python("train.py", "--config", "configs/smoke.py", "--workdir", str(tmp_path / "run"), "--help")
  assert result.returncode == 0 and not (tmp_path / "run").exists()


def test_the_installed_command_help_lists_its_own_flags(tmp_path):
  """As `tied-embed-train` starts: argv[0] is the script's path, and main() is tied_embed.train.cli:main."""
  script = tmp_path / "bin" / "tied-embed-train"
  result = _python("-c", f"import sys; sys.argv = [{str(script)!r}, '--help']; "
                         "from tied_embed.train.cli import main; main()", cwd=tmp_path)
  _assert_lists_the_flags(result, "bin/tied-embed-train")


def test_shell_quote_pastes_back_as_the_same_text_on_one_line():
  from tied_embed.util import shell_quote  # noqa: PLC0415

  for text in ("runs/a b", "runs/it's", "a\nb", "tab\there", "back\\slash $HOME `x`", "ctrl\x01", "plain", "é"):
    quoted = shell_quote(text)
    assert "\n" not in quoted
    echoed = subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True, timeout=30).stdout
    assert echoed == text.encode(), (text, quoted)


def test_the_closing_commands_paste_into_a_shell_as_they_are(tmp_path, monkeypatch, caplog):
  """The commands of the closing line run from the checkout without the venv active, and the workdir they name
  (a space and a newline in it) is the run's."""
  import logging  # noqa: PLC0415

  from tied_embed.train import metrics  # noqa: PLC0415

  monkeypatch.chdir(ROOT)
  workdir = tmp_path / "my run\nsecond"
  with caplog.at_level(logging.INFO, logger="tied_embed"):
    metrics.closing_lines(workdir, 20)
  (line,) = [record.getMessage() for record in caplog.records]
  assert "\n" not in line
  inspect_part, watch_part = line.split(" Inspect: ", 1)[1].split(" | Watch: ")
  command, quoted_workdir = inspect_part.split(" --workdir ")
  assert not command.startswith("python ")  # `python` may not be on PATH, or not this venv's
  assert subprocess.run(["bash", "-c", f"printf %s {quoted_workdir}"], capture_output=True).stdout == \
      str(workdir).encode()
  assert watch_part.endswith(f" --logdir {quoted_workdir}")
  env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
  env["PATH"] = "/usr/bin:/bin"
  pasted = subprocess.run(["bash", "-c", f"{command} --help"], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=300)
  assert pasted.returncode == 0 and "--workdir" in pasted.stdout, pasted.stderr[-2000:]


def test_an_error_naming_a_path_with_a_newline_stays_one_line(tmp_path):
  workdir = tmp_path / "a\nb"
  workdir.mkdir()
  (workdir / "checkpoints").write_text("a file where the checkpoints go")
  result = _python("train.py", "--config", "configs/smoke.py", "--workdir", str(workdir))
  assert result.returncode == 2
  assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
  assert "checkpoints is not a directory" in result.stderr


# scripts/results.py


def _results_script(monkeypatch, tmp_path, runs=None):
  return results_script(monkeypatch, tmp_path, **({} if runs is None else {"RUNS": runs}))


def _refusal(module, capsys, *argv: str) -> tuple[int, str]:
  import pytest  # noqa: PLC0415

  with pytest.raises(SystemExit) as exited:
    module.main(list(argv))
  captured = capsys.readouterr()
  assert captured.out == "" and captured.err.count("\n") == 1 and captured.err.startswith("error: "), captured
  return exited.value.code, captured.err


def test_results_only_matching_no_row_is_refused(monkeypatch, tmp_path, capsys):
  module = _results_script(monkeypatch, tmp_path)
  status, message = _refusal(module, capsys, "--only", "no such row")
  assert status == 2 and message.startswith("error: --only='no such row' matches no row")
  assert "'text, tied'" in message


def test_results_checks_every_rows_workdir_before_training_any(monkeypatch, tmp_path, capsys):
  module = _results_script(monkeypatch, tmp_path)
  (tmp_path / "results").mkdir()
  (tmp_path / "results" / "text_tied").write_text("a file where the row's run directory goes")
  status, message = _refusal(module, capsys, "--only", "text, tied")
  assert status == 2
  assert message == f"error: {tmp_path / 'results' / 'text_tied'} is a file: row 'text, tied' trains there; " \
                    "move it away\n"
  assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["text_tied"]  # nothing trained
  assert _refusal(module, capsys, "--bogus")[0] == 2


def test_a_failed_row_is_named_with_the_trainers_own_line(monkeypatch, tmp_path, capsys):
  runs = [("smoke, refused", ["--config", "configs/smoke.py", "--config.model.vocab_size=0"])]
  module = _results_script(monkeypatch, tmp_path, runs)
  status, message = _refusal(module, capsys, "--only", "smoke")
  assert status == 2  # train.py's own status
  assert message == ("error: row 'smoke, refused' failed (train.py exit status 2): model.vocab_size=0 is not "
                     "allowed: expected an integer in [1, 2**31 - 1]\n")


def test_a_rows_workdir_that_is_a_link_is_refused_before_training(monkeypatch, tmp_path, capsys):
  module = _results_script(monkeypatch, tmp_path)
  (tmp_path / "elsewhere").mkdir()
  (tmp_path / "results").mkdir()
  (tmp_path / "results" / "text_tied").symlink_to(tmp_path / "elsewhere")
  status, message = _refusal(module, capsys, "--only", "text, tied")
  assert status == 2 and message == (f"error: {tmp_path / 'results' / 'text_tied'} is a link: row 'text, tied' "
                                     "trains there; remove the link\n")
  assert list((tmp_path / "elsewhere").iterdir()) == []  # nothing trained through it


def test_write_docs_with_a_block_whose_markers_are_gone_is_refused_before_training(monkeypatch, tmp_path, capsys):
  module = _results_script(monkeypatch, tmp_path)
  page = tmp_path / "results.md"
  page.write_text("a page without its RESULTS markers\n")
  monkeypatch.setitem(module.BLOCKS, "table", [(str(page), module.START, module.END)])
  status, message = _refusal(module, capsys, "--write-docs")
  assert status == 2 and message.startswith(f"error: {page} has no {module.START} ... {module.END} block")
  assert not (tmp_path / "results").exists()  # no row ran


def test_reuse_refuses_rows_recorded_on_other_config_files(monkeypatch, tmp_path, capsys):
  module = _results_script(monkeypatch, tmp_path)
  if not pathlib.Path(module.VIM_DOCS).is_dir():
    pytest.skip("the context rows need Vim's help files")
  for name, _ in module.CONTEXT_RUNS:  # each row's record, as --context leaves it, but on other configs
    module.row_workdir(name).mkdir(parents=True)
    record = {"name": name, "flags": "", "wall": 60.0, "eval/loss": 5.0, "eval/loss_floor": 4.0,
              "eval/count_bigram_loss": 5.5, "configs": "0" * 64}
    (module.row_workdir(name) / module.ROW_RECORD).write_text(json.dumps(record))
  status, message = _refusal(module, capsys, "--context", "--reuse")
  assert status == 2 and "ran on other config files than today's" in message


# python -m science.when_to_tie --from-json


def test_from_json_refuses_a_file_that_is_not_a_sweeps_results_in_one_line_writing_nothing(tmp_path, capsys):
  from science.when_to_tie import cli  # noqa: PLC0415

  for index, (name, text, said) in enumerate((("garbage.json", "this is not JSON {", "not JSON"),
                                              ("other.json", '{"a": 1}', "not the sweep's results: no 'models' key"),
                                              ("list.json", "[1, 2]", "expected a JSON object"),
                                              ("binary.json", "\udcff\udcfe", "not JSON"))):
    path, out = tmp_path / name, tmp_path / f"out_{name}"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    if index == 0:  # the command as a user runs it; the other files through its main() in this process
      result = _python("-m", "science.when_to_tie", "--from-json", str(path), "--out", str(out))
      code, stdout, stderr = result.returncode, result.stdout, result.stderr
    else:
      with pytest.raises(SystemExit) as exited:
        cli.main(["--from-json", str(path), "--out", str(out)])
      (code, (stdout, stderr)) = exited.value.code, capsys.readouterr()
    assert code == 2 and stdout == "", (name, stderr[-2000:])
    (line,) = stderr.splitlines()
    assert line.startswith(f"error: --from-json={path}: ") and said in line, line
    assert not out.exists()
