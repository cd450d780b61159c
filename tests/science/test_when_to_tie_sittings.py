"""science/when_to_tie's sittings against a hostile user: the record of finished runs and every file a sitting reads
back is checked whole before any work; a record entry is the run that made it (its config, data and schedule); a
stop request is never lost; one sitting per --out; and the command line's failures are one line each."""

import errno
import hashlib
import json
import os
import pathlib
import re
import signal
import threading
import types

import pytest
from helpers import results_script
from test_when_to_tie_plan import _fake_sweep

from science.when_to_tie import cli, sweep
from science.when_to_tie import plan as plans
from tied_embed import util

PUBLISHED = plans.REPO / "docs" / "when_to_tie.json"
QUICK = ["--quick", "--corpora", "bytes", "--no-compile-cache", "--convergence-factor=0"]


@pytest.fixture(autouse=True)
def _no_sweep(monkeypatch):
  """No test here trains a sweep: a check that lets one through fails at once, not minutes later."""
  def started(args):
    raise AssertionError("the sweep started")

  monkeypatch.setattr(cli, "run_sweep", started)


def _refused(capsys, argv, *named, status=2):
  with pytest.raises(SystemExit) as exited:
    cli.main(argv)
  assert exited.value.code == status
  captured = capsys.readouterr()
  (line,) = captured.err.splitlines()
  assert line.startswith("error: ") and "Traceback" not in captured.err, captured.err
  for text in named:
    assert text in line, line
  return line


def _a_run(**changed):
  """A record entry as Sweep.train writes one, with `changed` fields set (None: dropped)."""
  run = {"seed": 0, "draw": 0, "settings": {"learning_rate": 0.1, "weight_decay": 0.0}, "steps_factor": 1,
         "eval_every": 5, "num_steps": 20, "best_step": 10, "end_step": 20, "stopped_early": False,
         "select_loss": 2.0, "eval_loss": 2.1, "gap_percent": 5.0, "loss_rare_inputs": float("nan"),
         "end_eval_loss": 2.2, "end_select_loss": 2.1, "float64_eval_loss": 2.1, "predicts_self": 0.1,
         "predicts_self_rare": 0.0, "param_count": 64, "seconds": 1.5, "cpu_seconds": 2.5}
  run.update(changed)
  return {key: value for key, value in run.items() if value is not None}


KEY = "text-v4/tied-x"


def _write(path: pathlib.Path, content) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  if content == "fifo":
    os.mkfifo(path)
  elif content == "directory":
    path.mkdir()
  elif isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content)


# --- 1. the record and every file a sitting reads back: checked whole, before any work --------------------------


@pytest.mark.parametrize(("content", "named"), [
    ("fifo", "a FIFO, not a regular file"),
    ("directory", "a directory, not a regular file"),
    (b"\x89PNG\r\n\x1a\n\x00\xff", "not JSON"),
    (json.dumps({KEY: _a_run()})[:-7], "not JSON"),  # cut short by a full disk
    (json.dumps([_a_run()]), "expected a JSON object of entries, got a list"),
    (json.dumps({KEY: _a_run(select_loss=None)}), f"entry {KEY!r}: no 'select_loss' field"),
    (json.dumps({KEY: _a_run(eval_loss=float("nan"))}), f"entry {KEY!r}: eval_loss is nan"),
    (json.dumps({KEY: _a_run(eval_loss="2.1")}), f"entry {KEY!r}: eval_loss is '2.1': expected a number"),
    (json.dumps({KEY: _a_run(settings={"learning_rate": -1.0})}), "settings.learning_rate is -1.0"),
    (json.dumps({KEY: ["not", "a", "run"]}), f"entry {KEY!r}: expected a JSON object, got a list"),
])
def test_a_damaged_record_is_refused_naming_the_file_and_entry_before_any_work(tmp_path, capsys, content, named):
  out = tmp_path / "out"
  record = out / sweep.FINISHED
  _write(record, content)
  line = _refused(capsys, [*QUICK, "--out", str(out)], str(record), named)
  assert "record of finished runs" in line
  assert sorted(p.name for p in out.iterdir()) == [sweep.FINISHED]  # nothing trained, locked or published


def test_a_stopped_runs_damaged_seconds_are_refused_before_any_work(tmp_path, capsys):
  out = tmp_path / "out"
  spent = out / "runs" / "bytes" / "tied-x" / sweep.SPENT
  _write(spent, json.dumps({"seconds": "ten", "cpu_seconds": 1.0}))
  _refused(capsys, [*QUICK, "--out", str(out)], str(spent), "seconds is 'ten': expected a number")
  other = spent.parent.parent / "tied-z" / sweep.SPENT  # sorted after the first: fix the first, meet the second
  _write(other, "fifo")
  spent.write_text(json.dumps({"seconds": 1.0, "cpu_seconds": 1.0}))
  _refused(capsys, [*QUICK, "--out", str(out)], str(other), "a FIFO")
  assert not (out / "when_to_tie.json").exists() and not (out / "data").exists()


def test_a_sweeps_resume_refuses_what_from_json_refuses(tmp_path, capsys):
  """One check of each value: a loss --from-json will not publish is refused in the record too, with the same
  words."""
  results = json.loads(PUBLISHED.read_text())
  run = results["corpora"]["bytes"]["runs"]["tied"]["0.01"][0]
  run["select_loss"] = float("inf")
  source = tmp_path / "results.json"
  source.write_text(json.dumps(results, allow_nan=True))
  published = _refused(capsys, ["--from-json", str(source), "--out", str(tmp_path / "a")], "select_loss is inf")
  out = tmp_path / "b"
  _write(out / sweep.FINISHED, json.dumps({KEY: run}, allow_nan=True))
  resumed = _refused(capsys, [*QUICK, "--out", str(out)], "select_loss is inf")
  assert published.split("select_loss is inf")[1] == resumed.split("select_loss is inf")[1].split(";")[0]


def test_the_committed_sittings_records_read_back_whole():
  for path in sorted((plans.REPO / "science" / "sittings").glob(f"*/{sweep.FINISHED}")):
    assert len(sweep.read_finished(path)) == 186, path


# --- 2. a record entry is the run that made it --------------------------------------------------------------------


def test_an_edited_model_or_schedule_is_another_run_and_another_workdir(tmp_path, monkeypatch):
  calls = []
  made = _fake_sweep(tmp_path, monkeypatch, calls)
  tied = plans.MODELS[0]
  made.train(tied, 1.0, 0, {"weight_decay": 0.1})
  made.train(tied, 1.0, 0, {"weight_decay": 0.1})
  assert len(calls) == 1  # the same run: taken from the record
  for edited in (plans.dataclasses.replace(tied, d_model_factor=0.5),  # its width
                 plans.dataclasses.replace(tied, needs=(("model.output_bias", True),)),  # a family field
                 plans.dataclasses.replace(tied, hidden="symmetric")):  # its hidden map
    made.train(edited, 1.0, 0, {"weight_decay": 0.1})
  assert len(calls) == 4 and len(set(calls)) == 4  # each retrained, in its own workdir
  # the base config's own fields too: another d_model in configs/text.py is another run
  base = made.corpus.base

  class Wider:
    @staticmethod
    def get_config():
      config = base.get_config()
      config.model.d_model *= 2
      return config

  made.corpus = plans.dataclasses.replace(made.corpus, base=Wider)
  made.train(tied, 1.0, 0, {"weight_decay": 0.1})
  # and other data (another --subword-corpus): another run, in another workdir
  made.draws[0] = types.SimpleNamespace(**{**vars(made.data), "identity": "text-v5"})
  made.train(tied, 1.0, 0, {"weight_decay": 0.1})
  assert len(calls) == 6 and len(set(calls)) == 6
  assert len(json.loads((tmp_path / sweep.FINISHED).read_text())) == 6


def test_a_stopped_run_resumes_only_under_its_own_schedule(tmp_path, monkeypatch):
  from tied_embed.train import signals, trainer  # noqa: PLC0415

  calls = []
  made = _fake_sweep(tmp_path, monkeypatch, calls)
  finishing = trainer.train_and_evaluate

  def stopped(config, workdir):
    calls.append(workdir.name)
    workdir.mkdir(parents=True)
    (workdir / "checkpoint").write_text(f"step 10 of {config.train.num_steps}")
    raise signals.Preempted(signal.SIGTERM, 10)

  monkeypatch.setattr(trainer, "train_and_evaluate", stopped)
  with pytest.raises(signals.Preempted):
    made.train(plans.MODELS[0], 1.0, 0, {"weight_decay": 0.1})
  (stopped_at,) = calls
  monkeypatch.setattr(trainer, "train_and_evaluate", finishing)
  made.plan = plans.dataclasses.replace(made.plan, max_steps=made.plan.max_steps + 10)  # another --bytes-steps
  made.train(plans.MODELS[0], 1.0, 0, {"weight_decay": 0.1})
  assert calls[1] != stopped_at  # trained afresh elsewhere; the stopped run's checkpoint kept for its own schedule
  assert (made.runs_dir / stopped_at / "checkpoint").read_text() == "step 10 of 20"


NAME = re.compile(r"^(?P<model>[a-z_]+)-.*-f(?P<f>[0-9.]+)-s(?P<seed>\d+)(?:-d\d+)?-n(?P<n>\d+)-e(?P<e>\d+)"
                  r"-m(?P<m>[0-9.]+)-c(?P<digest>[0-9a-f]{12})$")


def test_the_committed_records_are_keyed_by_the_configs_todays_plan_gives_their_runs():
  """Each entry of science/sittings/*/finished_runs.json ends in the SHA-256 of its run's acting config fields as
  today's plan makes them (but where the files lie) and its dataset's identity: so the published sittings still
  resume, and an edit that changes a run's config shows here, not as a silently mixed block."""
  from configs import subword  # noqa: PLC0415
  from tied_embed.train import config as config_lib  # noqa: PLC0415

  corpus = plans.Corpus("subword", subword, "", plans.SUBWORD_VOCAB, "", plans.DRAWN)
  models = {model.key: model for family in plans.FAMILIES.values() for model in family}
  checked = 0
  for path in sorted((plans.REPO / "science" / "sittings").glob(f"*/{sweep.FINISHED}")):
    for key, run in json.loads(path.read_text()).items():
      identity, name = key.split("/")
      parts = NAME.match(name)
      assert parts and (int(parts["n"]), int(parts["e"])) == (run["num_steps"], run["eval_every"]), key
      share = float(identity.rsplit("select", 1)[1])
      config = plans.run_config(corpus, models[parts["model"]], float(parts["f"]), run["seed"], run["settings"],
                                run["num_steps"], run["eval_every"], pathlib.Path("/elsewhere"), share,
                                float(parts["m"]), draw=run["draw"])
      idle = config_lib.inactive_paths(config) | {"data.data_dir", "data.text_path"}  # what does nothing here
      acting = {path: value for path, value in config_lib.leaf_paths(config).items() if path not in idle}
      payload = json.dumps({"config": acting, "dataset": identity}, sort_keys=True)
      digest = hashlib.sha256(payload.encode()).hexdigest()[:12]
      assert parts["digest"] == digest, f"{path}: {key}"
      checked += 1
  assert checked == 3 * 186


# --- 3. a stop request is never lost -----------------------------------------------------------------------------


class _StopsInAFinalizer:
  """An object whose finalizer receives SIGTERM: the handler's Interrupted is raised inside it, where Python can only
  report it as unraisable (and the StopSignals hook drops it)."""

  def __del__(self):
    signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)


def test_a_stop_that_lands_in_a_callback_stops_the_sitting_after_the_run_is_kept(tmp_path, monkeypatch):
  from tied_embed.train import signals, trainer  # noqa: PLC0415

  calls = []
  made = _fake_sweep(tmp_path, monkeypatch, calls)
  finishing = trainer.train_and_evaluate

  def swallowing(config, workdir):
    if not calls:  # the first run: one signal (a second would end the process, as StopSignals means it to)
      _StopsInAFinalizer()  # made and dropped: its finalizer runs here, and swallows the stop
    return finishing(config, workdir)

  monkeypatch.setattr(trainer, "train_and_evaluate", swallowing)
  with signals.StopSignals(interrupting=True), pytest.raises(signals.Interrupted) as stopped:
    made.train(plans.MODELS[0], 1.0, 0, {"weight_decay": 0.1})
    made.train(plans.MODELS[0], 1.0, 1, {"weight_decay": 0.1})  # never started: the sitting stopped
  assert stopped.value.signum == signal.SIGTERM and len(calls) == 1
  assert len(json.loads((tmp_path / sweep.FINISHED).read_text())) == 1  # the finished run kept for the resume


def test_the_stop_line_says_what_finished_and_what_resumes(tmp_path):
  from tied_embed.train import signals  # noqa: PLC0415

  sweep.write_json(tmp_path / sweep.FINISHED, {f"{KEY}{i}": _a_run() for i in range(3)})
  stop = signals.Preempted(signal.SIGTERM, 40)
  stop.run_in_progress = tmp_path / "runs" / "bytes" / "tied-y"
  line = cli.stopped_line(stop, tmp_path)
  assert line == (f"stopped by SIGTERM: 3 finished runs kept in {tmp_path / sweep.FINISHED}; the run in progress, "
                  f"{tmp_path / 'runs' / 'bytes' / 'tied-y'}, resumes from its checkpoint (step 40): rerun the same "
                  "command to resume")
  assert cli.stopped_line(signals.Interrupted(signal.SIGINT), tmp_path).startswith("stopped by SIGINT: 3 finished")


# --- 4. one sitting per --out -------------------------------------------------------------------------------------


def test_a_second_sitting_on_the_same_out_is_refused_naming_the_first(tmp_path, capsys):
  out = tmp_path / "out"
  out.mkdir()
  with util.exclusive(out, "the first sitting"):  # held as a sitting holds it, by this process
    _refused(capsys, [*QUICK, "--out", str(out)], f"pid {os.getpid()}", "in use by another run")
    _refused(capsys, ["--from-json", str(PUBLISHED), "--out", str(out)], f"pid {os.getpid()}")
  assert sorted(p.name for p in out.iterdir()) == [util.LOCK_NAME]  # the first's lock alone: nothing written


def test_a_sitting_holds_its_out_while_it_works(tmp_path, monkeypatch):
  out = tmp_path / "out"
  held = []
  monkeypatch.setattr(cli.report, "publish", lambda results, where, docs: held.append(util.is_locked(where)) or [])
  cli.main(["--from-json", str(PUBLISHED), "--out", str(out)])
  assert held == [True] and not util.is_locked(out)


# --- 8. the command line's failures, each one line ------------------------------------------------------------------


def test_an_empty_out_is_refused_rather_than_writing_into_the_current_directory(tmp_path, capsys, monkeypatch):
  monkeypatch.chdir(tmp_path)
  _refused(capsys, ["--from-json", str(PUBLISHED), "--out", ""], "--out=''", "current directory")
  assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("make", "named"), [
    (lambda path: path.mkdir(), "a directory, not a regular file"),
    (lambda path: os.mkfifo(path), "a FIFO, not a regular file"),
    (None, "a character device, not a regular file"),
])
def test_from_json_says_what_is_there_where_no_file_is(tmp_path, capsys, make, named):
  path = tmp_path / "results.json"
  if make is None:
    path = pathlib.Path("/dev/null")
  else:
    make(path)
  _refused(capsys, ["--from-json", str(path), "--out", str(tmp_path / "out")], f"--from-json={path}: {named}")


def test_a_full_disk_under_out_is_one_line_and_exit_1(tmp_path, capsys, monkeypatch):
  def full(path, payload, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", str(path))

  monkeypatch.setattr(util, "write_atomically", full)
  out = tmp_path / "out"
  _refused(capsys, ["--from-json", str(PUBLISHED), "--out", str(out)], str(out / "when_to_tie."),
           "No space left on device", status=1)


def test_the_projects_own_errors_are_one_line(tmp_path, capsys, monkeypatch):
  from tied_embed.train import checkpoint  # noqa: PLC0415

  def damaged(*args, **kwargs):
    raise checkpoint.Damaged("checkpoint 20 does not read back: its manifest disagrees")

  monkeypatch.setattr(cli.report, "publish", damaged)
  _refused(capsys, ["--from-json", str(PUBLISHED), "--out", str(tmp_path / "a")], "Damaged: checkpoint 20",
           status=1)

  def refused(*args, **kwargs):  # the trainer's own refusal, as a run inside the sweep meets it
    raise util.UsageError("train.batch_size=4096 is not allowed: expected at most 1024")

  monkeypatch.setattr(cli.report, "publish", refused)
  _refused(capsys, ["--from-json", str(PUBLISHED), "--out", str(tmp_path / "b")], "train.batch_size=4096")


# --- scripts/results.py -------------------------------------------------------------------------------------------


def _results_script(monkeypatch, tmp_path, root=None):
  return results_script(monkeypatch, tmp_path, **({} if root is None else {"ROOT": root}))


def _script_refusal(module, capsys, *argv, status=2):
  with pytest.raises(SystemExit) as exited:
    module.main(list(argv))
  captured = capsys.readouterr()
  assert exited.value.code == status and captured.err.count("\n") == 1, captured
  assert captured.err.startswith("error: ")
  return captured.err


def test_results_only_empty_is_refused(monkeypatch, tmp_path, capsys):
  root = tmp_path / "root"
  root.mkdir()
  (root / "train.py").write_text("raise SystemExit(3)\n")  # were a row started: it fails at once, status 3
  module = _results_script(monkeypatch, tmp_path, root)
  monkeypatch.setattr(module, "RUNS", [("never, started", ["--config", "x"])])
  for empty in ("", "  "):
    assert f"--only={empty!r}" in _script_refusal(module, capsys, "--only", empty)
  assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(("content", "named"), [
    ("{\"name\": \"bigram, tied\", \"wall\": 3.0, \"eval/loss\": NaN", "not JSON"),
    (json.dumps(["bigram, tied"]), "expected a JSON object, got a list"),
    (json.dumps({"name": "bigram, tied", "wall": 3.0, "eval/loss": "low", "eval/loss_floor": 1.0,
                 "eval/count_bigram_loss": 2.0}), "eval/loss is 'low': expected a finite number"),
    ("fifo", "a FIFO, not a regular file"),
])
def test_results_reuse_names_a_damaged_row_record(monkeypatch, tmp_path, capsys, content, named):
  module = _results_script(monkeypatch, tmp_path)
  monkeypatch.setattr(module, "VIM_DOCS", str(tmp_path))
  for name, _ in module.CONTEXT_RUNS:
    _write(module.row_workdir(name) / module.ROW_RECORD, content)
  message = _script_refusal(module, capsys, "--context", "--reuse")
  assert str(module.row_workdir(module.CONTEXT_RUNS[0][0]) / module.ROW_RECORD) in message and named in message


FAKE_TRAIN = '''
import os, pathlib, signal, sys, time
workdir = pathlib.Path(sys.argv[sys.argv.index("--workdir") + 1])
def stop(signum, frame):
  (workdir / "stopped").write_text(str(signum))
  sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
workdir.mkdir(parents=True)
(workdir / "started").write_text(str(os.getpid()))
time.sleep(20)  # never reached where the stop is passed on
'''


def test_results_passes_a_stop_on_to_the_rows_train_py_and_says_so_in_one_line(monkeypatch, tmp_path, capsys):
  root = tmp_path / "root"
  root.mkdir()
  (root / "train.py").write_text(FAKE_TRAIN)
  module = _results_script(monkeypatch, tmp_path, root)
  monkeypatch.setattr(module, "RUNS", [("slow, tied", ["--config", "x"]), ("slow, untied", ["--config", "y"])])
  started = module.row_workdir("slow, tied") / "started"

  def stop_once_started():
    while not started.exists() or not started.read_text():
      threading.Event().wait(0.05)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # no handler: the stop would end pytest itself
      os.kill(int(started.read_text()), signal.SIGKILL)  # so end the row instead, and let the assertions fail
      return
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)  # as kill(1) would, to the main thread

  sender = threading.Thread(target=stop_once_started, daemon=True)
  sender.start()
  message = _script_refusal(module, capsys, status=128 + signal.SIGTERM)
  sender.join(timeout=60)
  assert message.startswith("error: stopped by SIGTERM: rows finished: none; row 'slow, tied' stopped in ")
  assert (module.row_workdir("slow, tied") / "stopped").read_text() == str(int(signal.SIGTERM))  # passed on
  assert not module.row_workdir("slow, untied").exists()  # the next row never started
  assert getattr(signal.getsignal(signal.SIGTERM), "__self__", None) is not module.STOPS  # the handlers put back
