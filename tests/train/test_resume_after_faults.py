"""Fault injection: each guarantee of resuming is broken on purpose here, and the run must come through exactly.

The reference for every "exactly" is the shared uninterrupted smoke run (conftest `smoke_run`, configs/smoke.py:
60 steps, logs every 10, evals and checkpoints every 20, keeps 2). Faults that kill the process run train.py in
a subprocess through tests/fault_run.py; the others run in this process.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import optax
import pytest
from conftest import ROOT
from helpers import BAD_VALUES, all_series, event_series, smoke_with

from tied_embed.core import optim
from tied_embed.train import checkpoint, nonfinite, run_step, signals, trainer
from tied_embed.train import mesh as mesh_lib
from tied_embed.train import state as state_lib
from tied_embed.train.trainer import train_and_evaluate
from tied_embed.util import UsageError

SMOKE = ("--config", "configs/smoke.py")


def _run(workdir, *fault, extra=()) -> subprocess.CompletedProcess:
  """train.py on the smoke config (through fault_run.py if a fault is given) in a subprocess."""
  script = ["tests/fault_run.py", *fault, "--"] if fault else ["train.py"]
  return subprocess.run(
      [sys.executable, *script, *SMOKE, "--workdir", str(workdir), *extra],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
  )


def _saved_state(workdir, config, step):
  """The whole train state of checkpoint `step` (model, optimizer, totals) on one device."""
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), mesh_lib.AXES)
  _, target = state_lib.abstract_state(state_lib.state_builder(config), mesh)
  return checkpoint.restore(workdir, step, target=target).state


def _assert_bitwise_equal(state, reference) -> None:
  leaves, reference_leaves = jax.tree.leaves(state), jax.tree.leaves(reference)
  assert len(leaves) == len(reference_leaves)
  for got, want in zip(leaves, reference_leaves, strict=True):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _new_series(workdir, old_events) -> dict[str, dict[int, float]]:
  """{tag: {step: value}} from the event files written since `old_events` was taken."""
  (new,) = set(workdir.glob("events.out.tfevents.*")) - old_events
  return event_series(new)


def _assert_logs_match_after(series, reference, resumed_from: int) -> None:
  """The resumed run logged exactly the reference's train and eval losses at every log step after `resumed_from`."""
  for tag, every in (("train/loss", 10), ("eval/loss", 20)):
    steps = [step for step in range(every, 61, every) if step > resumed_from]
    assert sorted(series[tag]) == steps, tag
    assert [series[tag][s] for s in steps] == [reference[tag][s] for s in steps], tag


def _events(workdir) -> set:
  return set(workdir.glob("events.out.tfevents.*"))


def _assert_events_survive_the_kill(workdir, reference) -> None:
  """What a run SIGKILLed at step 27 logged before the kill reads back with TensorBoard's EventAccumulator: the
  train and eval losses of steps 10 and 20, equal to the uninterrupted run's."""
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: PLC0415
  from tensorboard.util.tensor_util import make_ndarray  # noqa: PLC0415

  events = EventAccumulator(str(workdir)).Reload()
  for tag, steps in (("train/loss", [10, 20]), ("eval/loss", [20])):
    logged = {event.step: float(make_ndarray(event.tensor_proto)) for event in events.Tensors(tag)}
    assert logged == {step: reference[tag][step] for step in steps}, tag


# 1. Exact resume after SIGKILL.


def test_sigkill_between_checkpoints_and_mid_save_resumes_bitwise(smoke_run, tmp_path):
  workdir = tmp_path / "run"
  killed = _run(workdir, "--kill-at", "27")  # between checkpoints 20 and 40, mid log window
  assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
  assert set(checkpoint.available_steps(workdir)) <= {20}  # 20 if its async save finished in time
  _assert_events_survive_the_kill(workdir, all_series(smoke_run.workdir))
  killed = _run(workdir, "--kill-at", "41")  # resumes, then dies as checkpoint 40 is being written
  assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
  resumed_from = max(checkpoint.available_steps(workdir))
  assert resumed_from in (20, 40)  # a save starts only once the previous one is final, so 20 is there

  old_events = _events(workdir)
  finished = _run(workdir)  # the same command, unmodified
  assert finished.returncode == 0, finished.stderr[-2000:]
  assert f"Resuming from the checkpoint at step {resumed_from}." in finished.stderr
  _assert_bitwise_equal(_saved_state(workdir, smoke_run.config, 60), smoke_run.summary.state)
  _assert_logs_match_after(_new_series(workdir, old_events), all_series(smoke_run.workdir), resumed_from)


def test_unfinalized_checkpoint_is_ignored_and_cleaned_up(smoke_run, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir)
  ckpts = checkpoint.checkpoint_dir(workdir)
  # What a kill during the save of step 60 leaves: Orbax's temporary directory, never renamed to 60/.
  (ckpts / "60").rename(ckpts / "60.orbax-checkpoint-tmp")
  (ckpts / "60.orbax-checkpoint-tmp" / "state" / "_METADATA").unlink()
  assert checkpoint.available_steps(workdir) == [40]
  old_events = _events(workdir)

  summary = train_and_evaluate(smoke_run.config, workdir)

  assert not (ckpts / "60.orbax-checkpoint-tmp").exists()
  assert checkpoint.available_steps(workdir) == [40, 60]
  _assert_bitwise_equal(summary.state, smoke_run.summary.state)
  _assert_logs_match_after(_new_series(workdir, old_events), all_series(smoke_run.workdir), 40)


# 2. Preemption.


def test_sigterm_saves_the_current_step_exits_143_and_resumes_bitwise(smoke_run, tmp_path):
  workdir = tmp_path / "run"
  command = [sys.executable, "tests/fault_run.py", "--wait-at", "25", "--", *SMOKE, "--workdir", str(workdir)]
  with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
    for line in run.stdout:  # TFDS narrates on stdout first
      if line.strip() == "waiting at step 25":
        break
    sent = time.monotonic()
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=120)
    exit_seconds = time.monotonic() - sent
  print(f"SIGTERM to exit: {exit_seconds:.2f} s")  # for the README (no timing assertion in tests)
  assert run.returncode == 128 + signal.SIGTERM, stderr[-2000:]
  assert checkpoint.available_steps(workdir) == [20, 26]  # step 25 finished (26 done), then saved
  assert "Stopped at step 26 after saving its checkpoint" in stderr

  old_events = _events(workdir)
  finished = _run(workdir)
  assert finished.returncode == 0, finished.stderr[-2000:]
  _assert_bitwise_equal(_saved_state(workdir, smoke_run.config, 60), smoke_run.summary.state)
  # train/loss at 30 averages steps 21-30: it is right only if the window 21-26 came back from checkpoint 26.
  _assert_logs_match_after(_new_series(workdir, old_events), all_series(smoke_run.workdir), 26)


def test_sigint_saves_the_current_step_and_resumes_bitwise(smoke_run, tmp_path, monkeypatch):
  train_batch = trainer.train_batch

  def interrupted_at_13(data, seed, step, batch_size):
    if step == 13:
      signal.raise_signal(signal.SIGINT)  # Ctrl-C while step 13 is being prepared
    return train_batch(data, seed, step, batch_size)

  workdir = tmp_path / "run"
  handler = signal.getsignal(signal.SIGINT)  # Python's default_int_handler; SIG_IGN in a shell's background job
  with monkeypatch.context() as patch:
    patch.setattr(trainer, "train_batch", interrupted_at_13)
    with pytest.raises(signals.Preempted) as stopped:
      train_and_evaluate(smoke_run.config, workdir)
  assert stopped.value.exit_status == 128 + signal.SIGINT and stopped.value.step == 14
  assert checkpoint.available_steps(workdir) == [14]
  assert signal.getsignal(signal.SIGINT) is handler  # the handlers are put back

  summary = train_and_evaluate(smoke_run.config, workdir)
  _assert_bitwise_equal(summary.state, smoke_run.summary.state)


# 3. Non-finite values.


def test_first_non_finite_step_stops_the_run_without_saving(smoke_run, tmp_path, monkeypatch):
  make_optimizer = optim.make_optimizer

  def poisoned_at_33(train):
    """The real optimizer, whose update turns NaN at step 33 (as it would after an overflow): the table with it."""

    def update(updates, count, params=None):
      nan_at_33 = jax.numpy.where(count == 32, jax.numpy.nan, 0.0)
      return jax.tree.map(lambda u: u + nan_at_33, updates), count + 1

    poison = optax.GradientTransformation(lambda params: jax.numpy.int32(0), update)
    return optax.chain(make_optimizer(train), poison)

  workdir = tmp_path / "run"
  monkeypatch.setattr(optim, "make_optimizer", poisoned_at_33)
  with pytest.raises(nonfinite.NonFinite) as stopped:
    train_and_evaluate(smoke_run.config, workdir)
  message = str(stopped.value)
  assert message.startswith("step 33: ") and "\n" not in message and stopped.value.exit_status == 1
  assert stopped.value.first_bad == 33 and stopped.value.step == 40  # found at the first log step after it
  assert checkpoint.available_steps(workdir) == [20]  # nothing saved at 40 or 60
  restored = checkpoint.restore(workdir)
  assert np.isfinite(restored.model.embedding[...]).all()
  logged = all_series(workdir)
  assert max(logged["train/loss"]) == 30 and max(logged["eval/loss"]) == 20  # no NaN reached the logs


@pytest.mark.parametrize("poison", [None, np.inf, -np.inf, np.nan, "loss"])
@pytest.mark.parametrize("scale", [1.0, 3e38])  # 3e38: finite values whose sum overflows float32
def test_the_finite_check_is_numpys_on_every_leaf(poison, scale):
  table = np.full((64, 8), scale, np.float32)
  state = {"table": table, "moments": np.ones((8,), np.float32), "step": np.int32(7)}
  loss = np.float32(np.nan if poison == "loss" else 1.5)
  if poison not in (None, "loss"):
    state["table"][3, 5] = poison
  want = bool(np.isfinite(loss) and all(np.isfinite(leaf).all() for leaf in state.values()))
  assert jax.jit(run_step.all_finite)(loss, jax.tree.map(jax.numpy.asarray, state)) == want
  assert want == (poison is None)


def test_cli_divergence_is_one_line_and_exit_1(tmp_path):
  workdir = tmp_path / "run"
  result = _run(workdir, extra=["--config.train.learning_rate=1e30"])
  assert result.returncode == 1
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: step ") and "not finite" in last, result.stderr[-2000:]
  for step in checkpoint.available_steps(workdir):
    assert all(np.isfinite(v).all() for v in checkpoint.restore(workdir, step).provenance.values())


# 4. Config validation before any work.

MORE_BAD_VALUES = [
    ("train.learning_rate", -0.1),
    ("train.batch_size", -4),
    ("model.d_model", -1),
    ("mesh.model", 3),  # one device here, and V=32 isn't a multiple of 3 either
]


@pytest.mark.parametrize(("path", "value"), BAD_VALUES + MORE_BAD_VALUES)
def test_bad_value_stops_before_writing_or_generating_anything(tmp_path, path, value):
  config = smoke_with(path, value)
  config.data.data_dir = str(tmp_path / "data")
  with pytest.raises(UsageError) as raised:
    train_and_evaluate(config, tmp_path / "run")
  message = str(raised.value)
  assert path in message and str(value) in message and "expected" in message and "\n" not in message
  assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()


@pytest.mark.parametrize(("source", "vocab_size", "text_path"), [("text", 32, ""), ("text", 256, "/no/such/file")])
def test_source_specific_values_stop_before_any_work(tmp_path, source, vocab_size, text_path):
  config = smoke_with("data.source", source)
  config.model.vocab_size = vocab_size
  config.data.update(text_path=text_path, data_dir=str(tmp_path / "data"))
  with pytest.raises(UsageError, match="model.vocab_size=32 .*256" if vocab_size == 32 else "data.text_path"):
    train_and_evaluate(config, tmp_path / "run")
  assert not any(tmp_path.iterdir())


# 5. A workdir from an incompatible config.


def _snapshot(directory) -> dict:
  return {str(p.relative_to(directory)): p.stat().st_size for p in directory.rglob("*")}


@pytest.mark.parametrize(
    ("changes", "fields"),
    [
        ({"model.d_model": 16}, ["model.d_model"]),
        ({"model.tied": False}, ["model.tied"]),
        ({"data.source": "directed", "model.vocab_size": 64}, ["data.source", "model.vocab_size"]),
    ],
)
def test_incompatible_workdir_is_refused_listing_the_fields(smoke_run, tmp_path, changes, fields):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir)
  before = _snapshot(workdir)
  config = smoke_run.config.copy_and_resolve_references()
  for path, value in changes.items():
    section, field = path.split(".")
    config[section][field] = value
  with pytest.raises(UsageError) as raised:
    train_and_evaluate(config, workdir)
  message = str(raised.value)
  assert "different run" in message and "\n" not in message
  assert all(f"{field}: " in message for field in fields) and message.count(" now") == len(fields)
  assert _snapshot(workdir) == before


# 6. A damaged latest checkpoint.


# TensorStore's failed read leaves an asyncio callback for a loop Orbax already closed: noise, not a failure.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_damaged_latest_checkpoint_is_moved_aside_and_the_run_resumes_bitwise(smoke_run, tmp_path, monkeypatch):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir)
  (data_file,) = (checkpoint.checkpoint_dir(workdir) / "60" / "state" / "d").iterdir()
  with open(data_file, "r+b") as f:
    f.truncate(os.path.getsize(data_file) // 2)
  old_events = _events(workdir)
  warnings = []  # absl's handlers vary with what ran before in this process, so caplog can't be relied on
  monkeypatch.setattr(checkpoint.log, "warning", lambda message, *args: warnings.append(message % args))

  summary = train_and_evaluate(smoke_run.config, workdir)

  (warning,) = [w for w in warnings if w.startswith("Checkpoint ")]
  assert warning.startswith("Checkpoint 60 is damaged (") and warning.endswith("; resuming from step 40.")
  assert (checkpoint.damaged_dir(workdir) / "60" / "state").is_dir()
  assert checkpoint.available_steps(workdir) == [40, 60]  # 60 written again, in place of the damaged one
  _assert_bitwise_equal(summary.state, smoke_run.summary.state)
  _assert_bitwise_equal(_saved_state(workdir, smoke_run.config, 60), smoke_run.summary.state)
  _assert_logs_match_after(_new_series(workdir, old_events), all_series(smoke_run.workdir), 40)


def test_no_intact_checkpoint_stops_instead_of_starting_over(smoke_run, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir)
  for step in (40, 60):
    (checkpoint.checkpoint_dir(workdir) / str(step) / "state" / "_METADATA").unlink()
  before = _snapshot(workdir)
  with pytest.raises(UsageError, match=r"no checkpoint in .* reads back \(step 60: .*step 40: .*not starting again"):
    train_and_evaluate(smoke_run.config, workdir)
  assert _snapshot(workdir) == before  # nothing moved, nothing trained


# 7. An unwritable workdir, a failed write.


def test_workdir_that_cannot_be_created_is_exit_2_before_any_work(tmp_path):
  blocker = tmp_path / "a_file"
  blocker.write_text("not a directory")
  result = _run(blocker / "run")
  assert result.returncode == 2
  last = result.stderr.strip().splitlines()[-1]  # after JAX's INFO line about the platforms it found
  assert last.startswith("error: --workdir=") and "cannot be written" in last and "Traceback" not in result.stderr
  assert not (blocker / "run").exists()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Orbax's writer threads, cut off
def test_failed_checkpoint_write_is_one_line_and_nonzero(smoke_run, tmp_path, monkeypatch):
  train_batch = trainer.train_batch
  workdir = tmp_path / "run"

  def checkpoints_replaced_at_30(data, seed, step, batch_size):
    if step == 30:  # the disk 'fails' under the run: checkpoints/ becomes something no save can write into
      checkpoint.checkpoint_dir(workdir).rename(workdir / "gone")
      checkpoint.checkpoint_dir(workdir).write_text("")
    return train_batch(data, seed, step, batch_size)

  monkeypatch.setattr(trainer, "train_batch", checkpoints_replaced_at_30)
  with pytest.raises(checkpoint.WriteFailed) as failed:
    train_and_evaluate(smoke_run.config, workdir)
  message = str(failed.value)
  # Checkpoint 20 may still be in flight at step 30 (saves are asynchronous): then it is the one that fails.
  assert re.match(r"writing checkpoint (20|40) in .*checkpoints failed: ", message) and "\n" not in message


_CUT_OFF_WRITE = """
import asyncio, os, pathlib, sys
import tensorstore as ts
from absl import logging
from configs import smoke
from tied_embed.train import checkpoint, trainer
from tied_embed.train.trainer import train_and_evaluate

workdir = pathlib.Path(sys.argv[1])
train_batch = trainer.train_batch

def checkpoints_replaced_at_30(data, seed, step, batch_size):
  if step == 30:  # checkpoints/ becomes a file: the next save cannot write
    checkpoint.checkpoint_dir(workdir).rename(workdir / "gone")
    checkpoint.checkpoint_dir(workdir).write_text("")
  return train_batch(data, seed, step, batch_size)

trainer.train_batch = checkpoints_replaced_at_30
logging.set_verbosity(logging.FATAL)  # Orbax logs each failed write with its traceback (train.py drops those)
try:
  train_and_evaluate(smoke.get_config(), workdir)
except checkpoint.WriteFailed as failed:
  print(f"error: {failed}", file=sys.stderr, flush=True)

# What a write still in flight when its save gave up does: TensorStore finishes it and calls back into the
# save's event loop, which Orbax has closed by then (timing decides whether a real run has such writes).
promise, in_flight = ts.Promise.new()
loop = asyncio.new_event_loop()

async def save_that_gives_up():
  loop.in_flight = asyncio.ensure_future(in_flight)
  await asyncio.sleep(0)

loop.run_until_complete(save_that_gives_up())
loop.close()
promise.set_result(None)

class Unrelated:
  def __del__(self):
    raise ValueError("an unrelated unraisable exception")

Unrelated()
sys.stderr.flush()
os._exit(0)  # the abandoned task would be reported at exit, which real runs never reach with one pending
"""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_writes_cut_off_by_a_failed_checkpoint_print_no_traceback(tmp_path):
  result = subprocess.run([sys.executable, "-c", _CUT_OFF_WRITE, str(tmp_path / "run")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1 and re.match(r"error: writing checkpoint (20|40) in .*checkpoints failed: ", errors[0])
  assert "Event loop is closed" not in result.stderr
  assert result.stderr.count("Traceback") == 1 and "ValueError: an unrelated unraisable exception" in result.stderr
