"""One run per workdir, checkpoints that are verified whole, and a resume that refuses other data.

Each test here reproduces a way a run could silently go wrong on disk or under concurrency: a second run on a
busy workdir, a flipped array or a garbled config in a checkpoint, data that changed between runs, a workdir whose
checkpoints/ is a file, a signal during set-up, and a rerun of a finished run.
"""

from __future__ import annotations

import errno
import os
import pathlib
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np
import pytest
from conftest import ROOT
from flax import nnx
from helpers import smoke_with

from tied_embed import util
from tied_embed.core import optim
from tied_embed.core.model import build_model
from tied_embed.data import bigram as data_lib
from tied_embed.train import checkpoint, nonfinite, run_step, signals
from tied_embed.train.trainer import train_and_evaluate
from tied_embed.util import UsageError


def _tree(directory) -> dict:
  """{relative path: size} of everything under `directory`, the lock file aside."""
  return {str(p.relative_to(directory)): p.stat().st_size for p in directory.rglob("*") if p.name != util.LOCK_NAME}


def _assert_bitwise_equal(state, reference) -> None:
  for got, want in zip(jax.tree.leaves(state), jax.tree.leaves(reference), strict=True):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# One run per workdir.


def test_second_run_on_a_busy_workdir_is_refused_naming_the_holder(smoke_run, tmp_path):
  workdir = tmp_path / "run"
  workdir.mkdir()
  holder = subprocess.Popen(
      [sys.executable, "-c",
       "import sys; from tied_embed import util\n"
       "with util.exclusive(sys.argv[1], 'w'):\n  print('held', flush=True); sys.stdin.read()", str(workdir)],
      cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
  )
  try:
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(UsageError) as refused:
      train_and_evaluate(smoke_run.config, workdir)
    message = str(refused.value)
    assert f"pid {holder.pid}" in message and socket.gethostname() in message and "since 20" in message
    assert "\n" not in message and "in use by another run" in message
    assert _tree(workdir) == {}  # nothing generated, no checkpoints dir, no events
  finally:
    holder.kill()  # SIGKILL: the OS releases the lock, nothing stale is left
    holder.wait()
  assert not util.is_locked(workdir)


def test_a_finished_run_leaves_its_workdir_unlocked(smoke_run):
  assert not util.is_locked(smoke_run.workdir)


# Checkpoints verified whole.


def _two_checkpoints_with_swapped_manifests(config, directory):
  """Checkpoints 7 and 8 of two different states, then 8's manifest replaced by 7's: 8 reads back, but wrong."""
  _, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  saver = checkpoint.Checkpointer(directory, keep=2, config=config)
  saver.save(7, state)
  changed = jax.tree.map(lambda leaf: leaf, state)
  changed["lookup_total"][...] = changed["lookup_total"][...] + 1.0  # one array differs
  saver.save(8, changed)
  saver.close()
  for name in ("metadata",):
    shutil.copy(checkpoint.checkpoint_dir(directory) / "7" / "manifest" / name,
                checkpoint.checkpoint_dir(directory) / "8" / "manifest" / name)
  return state


def test_an_array_that_differs_from_its_fingerprint_is_damaged(smoke_run, tmp_path):
  state = _two_checkpoints_with_swapped_manifests(smoke_run.config, tmp_path)
  restored = checkpoint.restore(tmp_path)  # read-only: skips 8 with a warning, falls back to 7
  assert restored.step == 7
  np.testing.assert_array_equal(restored.provenance["lookup_total"], state["lookup_total"][...])
  with pytest.raises(UsageError, match=r"checkpoint .*/8 is damaged: .*lookup_total"):
    checkpoint.restore(tmp_path, step=8)


def test_fingerprints_are_the_same_on_any_layout_and_see_one_changed_element():
  values = np.random.default_rng(0).standard_normal((32, 8)).astype(np.float32)
  state = nnx.State({"table": nnx.Param(jax.numpy.asarray(values))})
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
  placed = jax.device_put(state, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("model")))
  assert checkpoint.fingerprint(placed) == checkpoint.fingerprint(state)
  for row, column in ((0, 0), (31, 7), (5, 3)):
    changed = values.copy()
    changed[row, column] = np.nextafter(changed[row, column], np.float32(np.inf))  # one ulp
    assert checkpoint.fingerprint(nnx.State({"table": nnx.Param(jax.numpy.asarray(changed))})) != \
        checkpoint.fingerprint(state)
  swapped = values.copy()
  swapped[[0, 1]] = swapped[[1, 0]]  # the same values in another order
  assert checkpoint.fingerprint(nnx.State({"table": nnx.Param(jax.numpy.asarray(swapped))})) != \
      checkpoint.fingerprint(state)


def test_training_moves_a_checkpoint_with_a_wrong_array_aside_and_resumes_bitwise(smoke_run, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir)
  # 60's manifest from another state: its arrays read back but no longer match what was saved.
  manifest = checkpoint.checkpoint_dir(workdir) / "60" / "manifest" / "metadata"
  shutil.copy(checkpoint.checkpoint_dir(workdir) / "40" / "manifest" / "metadata", manifest)
  summary = train_and_evaluate(smoke_run.config, workdir)
  assert (checkpoint.damaged_dir(workdir) / "60" / "manifest").is_dir()
  _assert_bitwise_equal(summary.state, smoke_run.summary.state)


def test_a_garbled_config_makes_the_checkpoint_damaged_everywhere(smoke_run, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir)
  (checkpoint.checkpoint_dir(workdir) / "60" / "config" / "metadata").write_text("{x")
  with pytest.raises(UsageError, match=r"checkpoint .*/60 is damaged"):
    checkpoint.restore(workdir, 60, arrays=False)
  assert checkpoint.restore(workdir).step == 40  # read-only fallback
  assert checkpoint.restore(workdir, arrays=False).config.to_dict() == smoke_run.config.to_dict()
  summary = train_and_evaluate(smoke_run.config, workdir)  # training moves it aside and redoes 41..60
  assert (checkpoint.damaged_dir(workdir) / "60").is_dir()
  _assert_bitwise_equal(summary.state, smoke_run.summary.state)


def test_checkpoints_without_a_manifest_count_as_damaged(smoke_run, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir)
  for step in ("40", "60"):
    step_dir = checkpoint.checkpoint_dir(workdir) / step
    shutil.rmtree(step_dir / "manifest")
    (step_dir / "progress").mkdir()  # the item an older layout kept the train-loss window in
  with pytest.raises(UsageError, match=r"no checkpoint in .* reads back \(step 60: .*step 40: .*not starting again"):
    train_and_evaluate(smoke_run.config, workdir)
  with pytest.raises(UsageError, match=r"no checkpoint in .* reads back whole \(checkpoint 60 at .*/60 is damaged"):
    checkpoint.restore(workdir)
  with pytest.raises(UsageError, match=r"no checkpoint in .* reads back whole \(checkpoint 60 at .*/60 is damaged"):
    checkpoint.restore(workdir, arrays=False)  # not even a config reads back


# The data a run trained on.


def test_resume_on_changed_text_is_refused(tmp_path):
  from configs import smoke  # noqa: PLC0415

  corpus = tmp_path / "corpus.txt"
  corpus.write_text("the quick brown fox jumps over the lazy dog. " * 40)
  config = smoke.get_config()
  config.data.source, config.data.text_path, config.model.vocab_size = "text", str(corpus), 256
  config.train.num_steps = 20
  workdir = tmp_path / "run"
  train_and_evaluate(config, workdir)
  corpus.write_text("a different text entirely, with other bigrams in it. " * 40)
  config.train.num_steps = 40
  before = _tree(workdir)
  with pytest.raises(UsageError, match=r"the data changed since checkpoint 20 .*another --workdir"):
    train_and_evaluate(config, workdir)
  assert _tree(workdir) == before


# The workdir's layout, signals during set-up, reruns.


@pytest.mark.parametrize("name", ["checkpoints", "damaged_checkpoints"])
def test_a_file_where_the_run_keeps_a_directory_is_refused_up_front(smoke_run, tmp_path, name):
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / name).write_text("")
  with pytest.raises(UsageError, match=rf"{name} is not a directory"):
    train_and_evaluate(smoke_run.config, workdir)
  assert sorted(_tree(workdir)) == [name]


def test_a_signal_during_set_up_stops_before_the_first_step(smoke_run, tmp_path, monkeypatch):
  def interrupted_while_loading(plan):
    signal.raise_signal(signal.SIGTERM)  # arrives while the dataset is being prepared: stops it there
    raise AssertionError("the dataset was still generated after the signal")

  monkeypatch.setattr(data_lib, "load", interrupted_while_loading)
  workdir = tmp_path / "run"
  with pytest.raises(signals.Preempted) as stopped:
    train_and_evaluate(smoke_run.config, workdir)
  assert stopped.value.exit_status == 143 and stopped.value.step is None
  assert str(stopped.value) == "stopped by SIGTERM during set-up, before training: rerun the same command to resume"
  assert checkpoint.available_steps(workdir) == []
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_rerunning_a_finished_run_changes_nothing(smoke_run, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir)
  before = _tree(workdir)
  summary = train_and_evaluate(smoke_run.config, workdir)
  assert summary.step == 60 and summary.eval_loss == pytest.approx(smoke_run.summary.eval_loss, abs=1e-6)
  assert _tree(workdir) == before  # no second eval point, no new checkpoint


def test_library_callers_can_catch_a_stopped_run_as_an_exception():
  assert issubclass(signals.Preempted, Exception) and not issubclass(signals.Preempted, SystemExit)
  assert issubclass(nonfinite.NonFinite, Exception) and issubclass(checkpoint.WriteFailed, Exception)
  assert signals.Preempted(signal.SIGINT, 3).exit_status == 130


def _wait_until_it_handles(process: subprocess.Popen, signum: int, timeout_s: float = 120) -> None:
  """Waits until `process` has installed a handler for `signum`: its SigCgt mask in /proc (Linux) has the bit.

  train.py installs its start-up handlers for SIGINT and SIGTERM in its first lines, before the slow imports;
  Python itself catches only SIGINT. Where there is no /proc, returns at once.
  """
  status, deadline = pathlib.Path(f"/proc/{process.pid}/status"), time.monotonic() + timeout_s
  while status.exists() and time.monotonic() < deadline and process.poll() is None:
    caught = next((line.split()[1] for line in status.read_text().splitlines() if line.startswith("SigCgt:")), "0")
    if int(caught, 16) & (1 << (signum - 1)):
      return
    time.sleep(0.005)


@pytest.mark.parametrize("after_seconds", [0.5, 2.0, 3.5])
def test_ctrl_c_soon_after_start_ends_the_command_with_130(tmp_path, after_seconds):
  """Whether it lands in the imports, the set-up or the first steps, the command ends with one line and 130."""
  workdir = tmp_path / "run"
  process = subprocess.Popen(
      [sys.executable, "train.py", "--config", "configs/smoke.py", "--workdir", str(workdir),
       "--config.train.num_steps=100000"],
      cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
  )
  _wait_until_it_handles(process, signal.SIGTERM)  # train.py's first lines have run, however loaded the machine
  time.sleep(after_seconds)
  process.send_signal(signal.SIGINT)
  _, stderr = process.communicate(timeout=300)
  assert process.returncode == 130, stderr[-2000:]
  assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("error: stopped by SIGINT")
  assert not list(workdir.glob("checkpoints/*.orbax-checkpoint-tmp*"))  # nothing half-written


@pytest.mark.parametrize("what", ["dataset", "events"])
def test_a_full_disk_is_one_line_and_exit_1(smoke_run, tmp_path, what):
  """Files capped at 12 KiB (as `ulimit -f 12` does): the dataset or the event file cannot be written whole."""
  data_dir = tmp_path / "data" if what == "dataset" else smoke_run.workdir / "data"  # the latter: already made

  def cap_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (12 * 1024, 12 * 1024))

  result = subprocess.run(
      [sys.executable, "train.py", "--config", "configs/smoke.py", "--workdir", str(tmp_path / "run"),
       f"--config.data.data_dir={data_dir}"],
      cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=cap_file_size,
  )
  assert result.returncode == 1, result.stderr[-2000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and "File too large" in last and "Traceback" not in result.stderr
  assert ("preparing the dataset" in last) == (what == "dataset")


def test_a_checkpoints_directory_that_cannot_be_written_is_refused_before_training(smoke_run, tmp_path, monkeypatch):
  """A read-only checkpoints/ (as on a read-only mount, which root cannot otherwise get here): exit 2 up front."""
  workdir = tmp_path / "run"
  (workdir / "checkpoints").mkdir(parents=True)
  real = tempfile.NamedTemporaryFile

  def read_only_checkpoints(*args, dir=None, **kwargs):  # noqa: A002 (tempfile's own keyword)
    if dir is not None and pathlib.Path(dir).name == "checkpoints":
      raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dir))
    return real(*args, dir=dir, **kwargs)

  monkeypatch.setattr(tempfile, "NamedTemporaryFile", read_only_checkpoints)
  with pytest.raises(UsageError, match=r"checkpoints cannot be written: Read-only file system"):
    train_and_evaluate(smoke_run.config, workdir)
  assert sorted(_tree(workdir)) == ["checkpoints"]  # no data, no events, no checkpoint


@pytest.mark.parametrize("where", ["_manager", "_read_state"])
def test_a_signal_inside_checkpoint_code_is_a_stop_not_a_write_failure_or_damage(smoke_run, tmp_path, monkeypatch,
                                                                                 where):
  """Orbax calls are wrapped in `except Exception` (a failed write, a damaged checkpoint): a set-up signal landing
  there must still stop the run, and must not get a good checkpoint moved aside as damaged."""
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir)
  real = getattr(checkpoint, where)

  def signalled(*args, **kwargs):
    signal.raise_signal(signal.SIGTERM)
    return real(*args, **kwargs)

  with monkeypatch.context() as patch, pytest.raises(signals.Preempted) as stopped:
    patch.setattr(checkpoint, where, signalled)
    train_and_evaluate(smoke_run.config, workdir)
  assert stopped.value.exit_status == 143 and stopped.value.step is None
  assert checkpoint.available_steps(workdir) == [40, 60] and not checkpoint.damaged_dir(workdir).exists()


def test_a_failed_write_of_report_data_names_the_file_and_leaves_no_temporary_file(smoke_run, tmp_path):
  """Files capped at 2 KiB: report_data.npz (about 3.6 KB for the smoke run) cannot be written whole."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / ".report_data.npz.killed.tmp").write_bytes(b"what a killed run left")

  def cap_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

  result = subprocess.run(
      [sys.executable, "train.py", "--config", "configs/smoke.py", "--workdir", str(workdir),
       f"--config.data.data_dir={smoke_run.workdir / 'data'}"],  # already made: nothing to write there
      cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=cap_file_size,
  )
  assert result.returncode == 1, result.stderr[-2000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last == f"error: writing {workdir / 'report_data.npz'} failed: File too large"
  assert "Traceback" not in result.stderr
  assert sorted(p.name for p in workdir.glob(".report_data.npz*")) == [] and not (workdir / "report_data.npz").exists()


def test_an_interrupt_a_callback_swallows_prints_no_traceback_and_still_stops(monkeypatch):
  """A signal's Interrupted raised inside a callback Python can't propagate from (JAX's gc callback, at Ctrl-C 3.5 s
  after start) reaches no 'Exception ignored' printer; `received` still holds it; other such errors still do."""
  import gc  # noqa: PLC0415
  import os  # noqa: PLC0415

  from tied_embed.train import signals  # noqa: PLC0415

  gc.collect()  # earlier tests' garbage first: a finalizer of theirs that raises is not this test's to count
  printed = []  # what the hook before StopSignals (Python's printer) would have printed
  monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: printed.append(unraisable.exc_value))

  def interrupted_callback(phase, info):
    if phase == "start":
      os.kill(os.getpid(), signal.SIGINT)  # the handler raises Interrupted here, inside the gc callback

  def failing_callback(phase, info):
    if phase == "start":
      raise ValueError("an unrelated error in a callback")

  with signals.StopSignals(interrupting=True) as signals:
    for callback in (interrupted_callback, failing_callback):
      gc.callbacks.append(callback)
      try:
        gc.collect()
      finally:
        gc.callbacks.remove(callback)
  assert signals.received == signal.SIGINT
  assert [type(error) for error in printed] == [ValueError]


def test_a_stop_a_run_ends_before_acting_on_goes_to_the_handler_it_replaced():
  from tied_embed.train import signals  # noqa: PLC0415

  # a sweep's handler (interrupting), then a run's own, which finishes its last step rather than stop on it
  with pytest.raises(signals.Interrupted), signals.StopSignals(interrupting=True) as sweep:
    with signals.StopSignals() as run:
      signal.raise_signal(signal.SIGTERM)
      assert run.received == signal.SIGTERM and sweep.received is None  # the run's, until it ends
  assert sweep.received == signal.SIGTERM
  # a stop the run acted on (it raised Preempted, after saving) is the caller's through that exception alone
  with pytest.raises(signals.Preempted), signals.StopSignals(interrupting=True) as sweep:
    with signals.StopSignals() as run:
      signal.raise_signal(signal.SIGINT)
      raise signals.Preempted(run.received, 3)
  assert sweep.received is None
  # any other handler before the run (train.py's start-up one, which says "nothing was written"; Python's
  # KeyboardInterrupt; the default action, "ignore" standing in for it) is not called for a run that finished
  called = []
  for signum, other in ((signal.SIGTERM, lambda signum, frame: called.append(signum)),
                        (signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_IGN)):
    before = signal.signal(signum, other)
    try:
      with signals.StopSignals() as run:
        signal.raise_signal(signum)
      assert run.received == signum and signal.getsignal(signum) == other
    finally:
      signal.signal(signum, before)
  assert called == []


# What a non-finite step's message tells the user to change.


def test_a_hidden_l2_whose_penalty_overflows_is_named_instead_of_the_learning_rate(tmp_path):
  config = smoke_with("model.hidden", "linear")
  config.model.hidden_l2 = 3.4e38  # float32 holds it; λ·‖W − I‖² does not
  config.train.num_steps = 5
  with pytest.raises(nonfinite.NonFinite) as stopped:
    train_and_evaluate(config, tmp_path / "run")
  message = str(stopped.value)
  assert message.startswith("step 1: the loss or a gradient is not finite"), message
  assert message.endswith("model.hidden_l2=3.4e+38 is too large (its penalty λ·‖W − I‖² overflows float32): try a "
                          "smaller model.hidden_l2.") and "learning_rate" not in message


def test_the_advice_names_the_learning_rate_when_the_penalty_is_not_the_cause():
  config = smoke_with("model.hidden", "linear")
  config.model.hidden_l2 = 0.25
  assert nonfinite.advice(config) == "Try a lower train.learning_rate or a train.grad_clip_norm."
  assert nonfinite.advice(smoke_with("seed", 0)) == nonfinite.advice(None) == nonfinite.advice(config)
  config.train.optimizer, config.train.learning_rate, config.model.hidden_l2 = "sgd", 0.5, 4.0
  assert nonfinite.advice(config).startswith("model.hidden_l2=4 is too large (a step of train.learning_rate=0.5")


# The best step on a tie.


def test_an_exact_tie_in_select_loss_keeps_the_earlier_step():
  from tied_embed.train.evaluation import Selection  # noqa: PLC0415

  selection = Selection()
  assert selection.record(10, 1.5, {"eval/loss": 2.0})
  assert not selection.record(20, 1.5, {"eval/loss": 1.9})  # as low, not lower: not an improvement
  assert (selection.best_step, selection.best_select_loss, selection.evals_since_best) == (10, 1.5, 1)
  assert selection.best_eval == {"eval/loss": 2.0}
  assert selection.exhausted(1) and not selection.exhausted(2)


def test_each_damaged_copy_of_a_step_is_moved_aside_under_a_name_of_its_own(tmp_path, caplog):
  from tied_embed.train import checkpoint  # noqa: PLC0415

  for copy in range(3):  # step 60 damaged three times, each time a fresh checkpoint
    (checkpoint.checkpoint_dir(tmp_path) / "60" / "manifest").mkdir(parents=True)
    (checkpoint.checkpoint_dir(tmp_path) / "60" / "manifest" / "copy").write_text(str(copy))
    checkpoint._move_to_damaged(tmp_path, 60, ValueError("unreadable"), "it is not restored")
  damaged = checkpoint.damaged_dir(tmp_path)
  assert sorted(path.name for path in damaged.iterdir()) == ["60", "60-2", "60-3"]
  for name, copy in (("60", 0), ("60-2", 1), ("60-3", 2)):  # each the checkpoint folder itself, not one inside
    assert (damaged / name / "manifest" / "copy").read_text() == str(copy)
  assert str(damaged / "60-3") in caplog.text


@pytest.mark.parametrize("process_index", [0, 1])
def test_no_process_moves_a_damaged_checkpoint_before_every_process_has_named_its_destination(
    tmp_path, monkeypatch, process_index):
  # Two processes of one run: each lists the damaged step and names where it goes while the step is still in place;
  # only process 0 moves it, and both wait until it has (else a slower process finds the step gone or names a `-2`).
  step_dir = checkpoint.checkpoint_dir(tmp_path) / "5"
  step_dir.mkdir(parents=True)
  barriers = []
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  monkeypatch.setattr(jax, "process_index", lambda: process_index)
  monkeypatch.setattr(checkpoint.multihost_utils, "sync_global_devices",
                      lambda name: barriers.append((name, step_dir.exists())))
  checkpoint._move_to_damaged(tmp_path, 5, OSError("bad"), "test")
  assert barriers == [("tied_embed: damaged checkpoint 5 named", True),
                      ("tied_embed: damaged checkpoint 5 moved", process_index == 1)]
  assert step_dir.exists() == (process_index == 1)  # the fake barrier lets process 1 run alone: nothing moved
  assert (checkpoint.damaged_dir(tmp_path) / "5").is_dir() == (process_index == 0)
