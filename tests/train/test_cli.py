"""The training command line (tied_embed.train.cli): its console lines, its one-line refusals, its entry points.

Some tests run train.py in a subprocess, as a user does; the flag parser and the signal handlers are also called in
this process, which is quicker and where `make mutate` sees which function each test calls.
"""

from __future__ import annotations

import importlib
import logging
import os
import pathlib
import re
import signal
import subprocess
import sys
import tomllib

import pytest
from conftest import ROOT

from tied_embed import util
from tied_embed.train import cli, metrics
from tied_embed.train.config_file import load_config_file
from tied_embed.util import UsageError

ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]")  # I1201 07:10:30.355921 1396... x.py:306]
EXITING_CONFIG = "import sys\n\n\ndef get_config():\n  sys.exit(0)\n"


def _train(cwd, *args, python_flags=()) -> subprocess.CompletedProcess:
  return subprocess.run(
      [sys.executable, *python_flags, str(ROOT / "train.py"), *args], cwd=cwd, capture_output=True, text=True,
      timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
  )


def test_a_config_file_that_exits_is_a_config_file_error(tmp_path):
  path = tmp_path / "exits.py"
  path.write_text(EXITING_CONFIG)
  with pytest.raises(UsageError, match=r"^--config=.* \(get_config\(\) raised SystemExit: 0\)$"):
    load_config_file(str(path))
  result = _train(tmp_path, "--config", str(path), "--workdir", str(tmp_path / "run"))
  assert result.returncode == 2, result.stderr
  assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: --config=")
  assert "SystemExit" in result.stderr and not (tmp_path / "run").exists()


def test_a_busy_workdir_is_refused_before_tensorflow_is_imported(tmp_path):
  workdir = tmp_path / "run"
  workdir.mkdir()
  with util.exclusive(workdir, "the test"):  # this process holds it; the run is another process
    result = _train(tmp_path, "--config", str(ROOT / "configs" / "smoke.py"), "--workdir", str(workdir),
                    python_flags=("-X", "importtime"))
  imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")]
  (error,) = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
  assert result.returncode == 2, result.stderr[-2000:]
  assert error.startswith(f"error: --workdir={str(workdir)!r} is in use by another run (host ")
  assert f"pid {os.getpid()}" in error
  assert "jax" in imported and "tensorflow" not in imported and "orbax.checkpoint" not in imported
  assert sorted(path.name for path in workdir.iterdir()) == [".lock"]  # nothing written beside the holder's lock


def test_the_console_is_the_projects_own_and_a_rerun_prints_no_training_time(train_py_smoke):
  # train.py --config configs/smoke.py --workdir runs/smoke --config.train.num_steps=20, twice (conftest.py)
  first, rerun = train_py_smoke.first, train_py_smoke.rerun
  assert first.returncode == 0 and rerun.returncode == 0, first.stderr[-2000:] + rerun.stderr[-2000:]
  for result in (first, rerun):
    lines = result.stderr.strip().splitlines()
    assert not [line for line in lines if ABSL_PREFIX.match(line)], result.stderr
    assert not [line for line in lines if "read only" in line], result.stderr  # Orbax opening the checkpoints
    # The optional kernels: the run is the same without them, so without --verbose nothing names them.
    assert not [line for line in lines if "XLA's dots" in line or "optax's update" in line], result.stderr
    venv_bin = pathlib.Path(sys.executable).parent  # tmp_path is outside the checkout: shown absolute
    # The run's result, and only it, on stdout; progress and diagnostics on stderr.
    results = result.stdout.splitlines()
    assert len(results) == 2 and not [line for line in lines if line.startswith(("Step ", "Checkpoints in"))]
    assert results[-1] == (f"Checkpoints in runs/smoke/checkpoints (latest: step 20). Inspect: {venv_bin}/"
                           f"tied-embed-inspect --workdir runs/smoke | Watch: {venv_bin}/tensorboard "
                           "--logdir runs/smoke")
  first_lines = first.stderr.splitlines()
  assert any(line.startswith("step 20/20 | loss ") for line in first_lines), first.stderr
  assert re.fullmatch(r"Step 20: eval loss .*, 256 parameters, \d+\.\d s of training\.", first.stdout.splitlines()[0])
  rerun_lines = rerun.stderr.splitlines()
  assert "The run is already complete at step 20: nothing to train, nothing written." in rerun_lines
  assert re.fullmatch(r"Step 20: eval loss .*, 256 parameters\.", rerun.stdout.splitlines()[0]), rerun.stdout
  assert not any(line.startswith("step ") for line in rerun_lines)


def test_console_lines_mark_warnings_and_errors_only():
  def record(level: int) -> logging.LogRecord:
    return logging.LogRecord("tied_embed.train.trainer", level, __file__, 1, "step %d done", (3,), None)

  formatter = cli.ConsoleFormatter()
  assert formatter.format(record(logging.INFO)) == "step 3 done"
  assert formatter.format(record(logging.WARNING)) == "warning: step 3 done"
  assert formatter.format(record(logging.ERROR)) == "error: step 3 done"


def test_paths_inside_the_current_directory_are_shown_relative(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert metrics.shown_path(tmp_path / "runs" / "a") == "runs/a"
  assert metrics.shown_path(pathlib.Path("runs/a")) == "runs/a"
  assert metrics.shown_path(tmp_path) == "."
  outside = tmp_path.parent / "elsewhere"
  assert metrics.shown_path(outside) == str(outside)


def test_an_override_of_no_field_is_named_with_a_suggestion():
  config = load_config_file(str(ROOT / "configs" / "smoke.py"))
  argv = ["train.py", "--config", "configs/smoke.py", "--config.train.num_steps=5", "--config.train.learnig_rate=1"]
  assert cli.unknown_override(config, argv) == "train.learnig_rate is not a config field; did you mean " \
                                               "train.learning_rate?"


def test_the_console_scripts_name_the_command_line_functions():
  scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
  assert set(scripts) == {"tied-embed-train", "tied-embed-inspect"}
  for target in scripts.values():
    module, function = target.split(":")
    assert callable(getattr(importlib.import_module(module), function))
  assert scripts["tied-embed-train"] == "tied_embed.train.cli:main"


def test_a_config_file_imports_its_neighbours_when_started_as_an_installed_script(tmp_path):
  """As `tied-embed-train` runs: sys.path[0] is the script's folder, not the repository nor the current directory."""
  package = tmp_path / "site"
  package.mkdir()
  (package / "tied_embed").symlink_to(ROOT / "tied_embed")
  script = tmp_path / "bin" / "script.py"
  script.parent.mkdir()
  script.write_text(f"import sys\nsys.path.insert(1, {str(package)!r})\n"
                    "from tied_embed.train.config_file import load_config_file\n"
                    "print(load_config_file('configs/smoke.py').model.vocab_size)\n")
  env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
  result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.strip() == "32"


def test_helpfull_prints_the_help_and_every_flag_and_exits_0(tmp_path):
  result = _train(tmp_path, "--helpfull")
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.startswith("usage: ") and "--workdir DIR" in result.stdout and "--helpfull" in result.stdout
  assert result.stderr == ""


def test_helpxml_prints_every_flag_as_xml_and_exits_0(tmp_path):
  result = _train(tmp_path, "--helpxml")
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.startswith("<?xml") and "<name>workdir</name>" in result.stdout and result.stderr == ""


def test_a_config_file_that_raises_keyboard_interrupt_is_one_line_and_exit_130(tmp_path):
  path = tmp_path / "interrupts.py"
  path.write_text("def get_config():\n  raise KeyboardInterrupt\n")
  result = _train(tmp_path, "--config", str(path), "--workdir", str(tmp_path / "run"))
  assert result.returncode == 130, result.stderr[-2000:]
  assert result.stderr == (f"error: --config={str(path)!r}: interrupted (KeyboardInterrupt) while it was read; "
                           f"nothing was written\n")
  assert not (tmp_path / "run").exists()


# train.py whose training only prints its closing line, then gets a SIGINT (as a Ctrl-C just after that line does,
# while the run's arrays are being freed), or returns and gets one while the interpreter shuts down: the run is
# complete, so the command ends with 0 either way.
_SIGINT_AFTER_COMPLETION = """
import atexit, os, pathlib, signal, sys, time
at_exit = sys.argv[2] == "at exit"
sys.argv = ["train.py", "--config", "configs/smoke.py", "--workdir", sys.argv[1]]
from tied_embed.train import cli, metrics, trainer
def interrupt():
  os.kill(os.getpid(), signal.SIGINT)
  time.sleep(5)
def closing_line_then_interrupt(config, workdir, on_complete, **kwargs):
  on_complete()  # what the trainer calls once everything is written
  metrics.closing_lines(pathlib.Path(workdir), 5)
  interrupt()
if at_exit:
  trainer.train_and_evaluate = lambda *args, on_complete, **kwargs: on_complete()
  atexit.register(interrupt)
else:
  trainer.train_and_evaluate = closing_line_then_interrupt
cli.main()
"""


@pytest.mark.parametrize("when", ["after the closing line", "at exit"])
def test_a_signal_after_a_completed_run_ends_it_with_0(tmp_path, when):
  result = subprocess.run([sys.executable, "-c", _SIGINT_AFTER_COMPLETION, str(tmp_path / "run"), when],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  assert "error" not in result.stderr


def test_on_complete_runs_once_everything_is_written_and_before_the_closing_lines(smoke_run, tmp_path, caplog):
  # The command line relies on it: from that call on, a signal ends a completed run with 0.
  import shutil  # noqa: PLC0415

  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir)
  seen_at: list[int] = []
  with caplog.at_level(logging.INFO, logger="tied_embed"):
    train_and_evaluate(smoke_run.config, workdir, on_complete=lambda: seen_at.append(len(caplog.records)))
  assert len(seen_at) == 1
  after = [record.getMessage() for record in caplog.records[seen_at[0]:]]
  assert after[0].startswith(f"Step {smoke_run.config.train.num_steps}: eval loss"), after
  assert any(line.startswith("Checkpoints in") for line in after), after


def test_train_py_in_a_python_without_the_projects_libraries_says_which_command_to_run(tmp_path):
  # -S: this interpreter without its site-packages, so jax (and everything else the project needs) is missing.
  result = subprocess.run([sys.executable, "-S", str(ROOT / "train.py"), "--config", "configs/smoke.py", "--workdir",
                           str(tmp_path / "run")], cwd=tmp_path, capture_output=True, text=True, timeout=60)
  assert result.returncode == 1 and result.stdout == ""
  (line,) = result.stderr.splitlines()
  assert line.startswith("error: ") and " is not installed in " in line and "make install" in line, line
  assert ".venv/bin/python train.py" in line and not (tmp_path / "run").exists()


def test_the_inspection_module_in_a_python_without_the_projects_libraries_says_which_command_to_run(tmp_path):
  # -S drops site-packages; the checkout on sys.path (cwd) lets `-m` find the package, whose import loads nothing.
  result = subprocess.run([sys.executable, "-S", "-m", "tied_embed.inspection", "--workdir", str(tmp_path / "w")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
  assert result.returncode == 1 and result.stdout == ""
  (line,) = result.stderr.splitlines()
  assert line.startswith("error: ") and " is not installed in " in line and "make install" in line, line


@pytest.fixture
def parse(monkeypatch, capsys):
  """cli.parse_flags on `train.py *args` in this process → (exit status, or None where it returned; stdout; stderr).
  Afterwards the flags are as before: ml_collections registers a flag for each override it finds in sys.argv."""
  def run(*args: str) -> tuple[int | None, str, str]:
    argv = ["train.py", *args]
    monkeypatch.setattr(sys, "argv", argv)
    status = None
    try:
      cli.parse_flags(argv)
    except SystemExit as stop:
      status = stop.code
    finally:
      cli.FLAGS.unparse_flags()
      for name in [name for name in cli.FLAGS if name.startswith("config.")]:
        delattr(cli.FLAGS, name)
    out, err = capsys.readouterr()
    return status, out, err
  return run


def test_helpfull_is_the_usage_a_blank_line_then_every_flag(parse):
  status, out, err = parse("--helpfull")
  assert status == 0 and err == ""
  usage, _, rest = out.partition("\n\nEvery flag, the libraries' included:\n")
  assert usage == cli.usage(cli._command("train.py")) and "--workdir" in rest and "--[no]verbose" in rest


@pytest.mark.parametrize("form", ["--config=PATH", "--config PATH"])
def test_a_config_file_interrupted_while_read_is_named_in_either_form(parse, tmp_path, form):
  path = tmp_path / "interrupts.py"
  path.write_text("def get_config():\n  raise KeyboardInterrupt\n")
  status, _, err = parse(*form.replace("PATH", str(path)).split(" "))
  assert status == 130  # 128 + SIGINT, as the shell reports a Ctrl-C
  assert err == (f"error: --config={str(path)!r}: interrupted (KeyboardInterrupt) while it was read; "
                 "nothing was written\n")


def test_an_override_absl_could_not_read_is_the_fields_own_refusal(parse):
  status, _, err = parse(f"--config={ROOT / 'configs' / 'smoke.py'}", "--config.train.num_steps=abc")
  assert status == 2
  assert err == ("error: train.num_steps='abc' is not allowed: expected an integer in [0, 2**31 - 1] "
                 "(optax counts steps in int32)\n")


def test_a_flag_error_with_a_line_break_in_its_value_is_still_one_line(parse):
  status, _, err = parse("--verbose=a\nb")
  assert status == 2
  assert err.startswith("error: flag --verbose=a b: ") and err.count("\n") == 1


def test_after_completion_a_ctrl_c_or_sigterm_ends_the_command_with_0(monkeypatch):
  statuses = []
  monkeypatch.setattr(cli, "_exit_now", statuses.append)
  before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
  try:
    cli._completed()
    for signum in before:
      signal.getsignal(signum)(signum, None)
  finally:
    for signum, handler in before.items():
      signal.signal(signum, handler)
  assert statuses == [0, 0]


def test_an_eval_stride_above_the_window_is_one_line_and_writes_nothing(tmp_path):
  result = _train(tmp_path, "--config", str(ROOT / "configs" / "smoke.py"), "--workdir", str(tmp_path / "run"),
                  "--config.train.eval_stride=2")
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr == ("error: train.eval_stride=2 is not allowed: expected -1 (the window length) or an integer "
                           "in [1, data.context_length=1]\n")
  assert result.stdout == "" and not (tmp_path / "run").exists()
