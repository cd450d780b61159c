"""data.selection_fraction and train.early_stopping_patience: the selection split, the best checkpoint, early stopping.

One run (`selected`) overfits on purpose: 300 untied train pairs of the smoke task, 100 held out for selection,
evals every 10 steps, checkpoints every 50 keeping 1, patience 3. Its select/loss falls, then rises, so the
best step comes early and the run stops 3 evals later; every expectation is read back from the run's own event
files or recomputed in NumPy float64 from the restored tables, never taken from the trainer's return value.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT
from helpers import all_series, smoke_with, subprocess_env

from tied_embed.data import bigram as data_lib
from tied_embed.data.sources import text
from tied_embed.inspection.cli import main as inspect_main
from tied_embed.train import checkpoint, metrics, signals, trainer
from tied_embed.train.trainer import train_and_evaluate
from tied_embed.util import UsageError

PATIENCE, EVAL_EVERY = 3, 10


def _overfitting_config(data_dir: pathlib.Path):
  config = smoke_with("data.selection_fraction", 0.25)
  config.model.tied = False
  config.data.update(num_train_pairs=400, data_dir=str(data_dir))
  config.train.update(num_steps=200, learning_rate=0.1, eval_every=EVAL_EVERY, log_every=EVAL_EVERY,
                      checkpoint_every=50, keep_checkpoints=1, early_stopping_patience=PATIENCE)
  return config


@dataclasses.dataclass
class SelectedRun:
  workdir: pathlib.Path
  config: object
  summary: object  # RunSummary
  series: dict[str, dict[int, float]]  # the run's event files, read independently
  log: str  # the run's log lines


@pytest.fixture(scope="module")
def selected(tmp_path_factory) -> SelectedRun:
  root = tmp_path_factory.mktemp("selected")
  config = _overfitting_config(root / "data")
  records: list[str] = []
  handler = logging.Handler()
  handler.emit = lambda record: records.append(record.getMessage())
  logger = logging.getLogger("tied_embed")
  level = logger.level
  logger.addHandler(handler)
  logger.setLevel(logging.INFO)
  try:
    summary = train_and_evaluate(config, root / "run")
  finally:
    logger.removeHandler(handler)
    logger.setLevel(level)
  return SelectedRun(root / "run", config, summary, all_series(root / "run"), "\n".join(records))


def _hand_early_stop(select_losses: dict[int, float], patience: int, min_delta: float = 0.0) -> tuple[int, int]:
  """The contract transcribed (Flax's EarlyStopping): the best eval is the first, or one whose select/loss is below
  the best so far by more than `min_delta` (0: strictly lower), and the run stops at the `patience`-th eval after it
  without one. → (best, stop)."""
  best_step, best, since = None, np.inf, 0
  for step in sorted(select_losses):
    if best - select_losses[step] > min_delta:
      best_step, best, since = step, select_losses[step], 0
    else:
      since += 1
      if since == patience:
        return best_step, step
  return best_step, max(select_losses)


def _numpy_loss(restored: checkpoint.Restored, ids: np.ndarray, next_ids: np.ndarray) -> float:
  """Mean cross-entropy of softmax(E_in[ids] · E_outᵀ) against next_ids in float64, from the restored tables."""
  table_in = np.asarray(restored.model.input_embedding[...], np.float64)
  table_out = np.asarray(restored.model.output_embedding[...], np.float64)
  logits = table_in[ids] @ table_out.T
  top = logits.max(axis=1)
  log_norm = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
  return float(np.mean(log_norm - logits[np.arange(len(ids)), next_ids]))


# The split.


@pytest.mark.parametrize(("num_pairs", "fraction", "expected"), [
    (400, 0.25, 100), (1000, 0.1, 100), (35_999, 0.1, 3600), (10, 0.01, 1), (2, 0.4, 1), (7, 0.0, 0),
])
def test_selection_pairs_by_hand(num_pairs, fraction, expected):
  assert data_lib.selection_pairs(num_pairs, fraction) == expected


def test_the_selection_split_is_the_train_splits_tail_disjoint_from_train_and_eval(tmp_path):
  corpus = tmp_path / "corpus.txt"
  corpus.write_bytes(text.DEFAULT_CORPUS.read_bytes()[:40_000])
  config = smoke_with("data.source", "text")
  config.model.vocab_size = 256
  config.data.update(text_path=str(corpus), data_dir=str(tmp_path / "data"), selection_fraction=0.1,
                     train_fraction=0.5)
  data = data_lib.load_bigram_data(config, tmp_path / "run")
  # Byte pairs of the corpus: the train split is its first 36,000 bytes (35,999 pairs), the eval its last 4,000.
  corpus_bytes = np.frombuffer(corpus.read_bytes(), np.uint8).astype(np.int32)
  num_train, held_out = 36_000 - 1, 3600  # round(0.1 · 35,999)
  used = round(0.5 * (num_train - held_out))  # train_fraction applies to what the selection split leaves
  np.testing.assert_array_equal(data.select_ids, corpus_bytes[num_train - held_out:num_train])
  np.testing.assert_array_equal(data.select_next, corpus_bytes[num_train - held_out + 1:num_train + 1])
  np.testing.assert_array_equal(data.train_ids, corpus_bytes[:used])
  np.testing.assert_array_equal(data.eval_ids, corpus_bytes[36_000:-1])
  # So by position in the corpus: train [0, 16,200), selection [32,399, 35,999), eval [36,000, 39,999).
  np.testing.assert_array_equal(data.input_counts, np.bincount(corpus_bytes[:used], minlength=256))
  name = data_lib.builder_config(config).name
  assert data.identity == data_lib.dataset_identity(config) == f"{name}-select0.1-train0.5"
  again = data_lib.load_bigram_data(config, tmp_path / "run")  # a resume loads the same split from the cache
  np.testing.assert_array_equal(again.select_ids, data.select_ids)
  np.testing.assert_array_equal(again.select_next, data.select_next)


def test_a_run_does_not_resume_on_another_selection_fraction(selected):
  config = _overfitting_config(pathlib.Path(selected.config.data.data_dir))
  config.data.selection_fraction = 0.2
  with pytest.raises(UsageError, match=r"different run \(data.selection_fraction: 0.25 in the checkpoints, 0.2 now\)"):
    train_and_evaluate(config, selected.workdir)


# The best checkpoint.


def test_the_best_checkpoint_has_the_lowest_logged_select_loss_and_outlives_retention(selected):
  select_losses = selected.series["select/loss"]
  assert sorted(select_losses) == list(range(EVAL_EVERY, selected.summary.step + 1, EVAL_EVERY))
  best = min(select_losses, key=lambda step: (select_losses[step], step))
  assert selected.series["select/best_step"][max(select_losses)] == best
  assert selected.summary.best_step == best and checkpoint.restore(selected.workdir, "best", arrays=False).step == best
  assert selected.summary.best_select_loss == pytest.approx(select_losses[best], rel=1e-7)
  # keep_checkpoints=1, five saves (the improvements, the schedule's 50, the stop): the newest and the best stay.
  assert checkpoint.available_steps(selected.workdir) == sorted({best, selected.summary.step})
  assert best < selected.summary.step

  restored = checkpoint.restore(selected.workdir, best)
  data = data_lib.load_existing_bigram_data(selected.config, selected.workdir)
  assert len(data.select_ids) == 100 and len(data.train_ids) == 300
  assert _numpy_loss(restored, data.select_ids, data.select_next) == pytest.approx(select_losses[best], rel=1e-5)
  eval_loss = _numpy_loss(restored, data.eval_ids, data.eval_next)
  assert eval_loss == pytest.approx(selected.series["eval/loss"][best], rel=1e-5)
  assert selected.summary.best_eval_loss == pytest.approx(eval_loss, rel=1e-5)
  assert selected.summary.best_eval["eval/loss_rare_inputs"] == pytest.approx(
      selected.series["eval/loss_rare_inputs"][best], rel=1e-7)
  assert (f"best step {best} by select/loss: select loss {select_losses[best]:.4f}, "
          f"eval loss {selected.series['eval/loss'][best]:.4f}") in selected.log


def test_inspect_step_best_opens_the_best_checkpoint(selected, capsys):
  assert inspect_main(["--workdir", str(selected.workdir), "--step", "best", "--json", "--no-pictures"]) == 0
  report = json.loads(capsys.readouterr().out)
  assert report["step"] == selected.summary.best_step and report["run"]["config"]["selection_fraction"] == 0.25


def test_a_best_checkpoint_whose_metrics_disagree_with_its_manifest_is_refused(selected, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(selected.workdir, workdir)
  newest = selected.summary.step
  metrics = workdir / "checkpoints" / str(newest) / "metrics" / "metrics"
  saved = json.loads(metrics.read_text())
  metrics.write_text(json.dumps({**saved, "select_loss": 0.0}))  # now ranks best, but its manifest says otherwise
  with pytest.raises(UsageError, match=rf"^checkpoint {newest} at .* is damaged: .*'select_loss': 0.0"):
    checkpoint.restore(workdir, "best", arrays=False)


def test_a_garbled_metrics_file_is_a_damaged_checkpoint_and_the_run_comes_through(selected, tmp_path, caplog):
  workdir = tmp_path / "run"
  shutil.copytree(selected.workdir, workdir)
  newest, best = selected.summary.step, selected.summary.best_step
  (workdir / "checkpoints" / str(newest) / "metrics" / "metrics").write_text('{"step": 6')
  with pytest.raises(UsageError, match=rf"^checkpoint {newest} at .* is damaged: JSONDecodeError"):
    checkpoint.restore(workdir, "best", arrays=False)
  with caplog.at_level(logging.WARNING, logger="tied_embed"):
    resumed = train_and_evaluate(selected.config, workdir)  # moves it aside, resumes from the best, stops again
  assert any(record.getMessage().startswith(f"Checkpoint {newest} is damaged (JSONDecodeError")
             for record in caplog.records)
  assert (workdir / "damaged_checkpoints" / str(newest)).is_dir()
  assert (resumed.step, resumed.best_step) == (newest, best)
  for got, want in zip(_leaves(resumed.state), _leaves(selected.summary.state), strict=True):
    np.testing.assert_array_equal(got, want)


def test_a_deleted_best_checkpoint_is_named_not_replaced_by_another(selected, tmp_path, capsys, caplog):
  """Retention kept the best checkpoint; with it deleted by hand, --step best must not show the next best one
  Orbax can rank (the newest, here), and the closing line must not offer --step best."""
  workdir = tmp_path / "run"
  shutil.copytree(selected.workdir, workdir)
  best, newest = selected.summary.best_step, selected.summary.step
  shutil.rmtree(workdir / "checkpoints" / str(best))
  assert inspect_main(["--workdir", str(workdir), "--step", "best", "--json", "--no-pictures"]) == 2
  captured = capsys.readouterr()
  assert captured.out == "" and captured.err.count("\n") == 1
  assert captured.err.startswith(f"error: the best checkpoint by select/loss, step {best} (as checkpoint {newest}'s ")
  assert captured.err.endswith(f"expected one of the saved steps {newest}\n")

  with caplog.at_level(logging.INFO, logger="tied_embed"):
    rerun = train_and_evaluate(selected.config, workdir)  # stopped early: nothing to train
  assert rerun.best_step == best
  (closing,) = [record.getMessage() for record in caplog.records if record.getMessage().startswith("Checkpoints in")]
  assert f"(latest: step {newest}, best: step {best}, its checkpoint is gone)" in closing
  assert "--step best" not in closing


def test_the_closing_line_offers_step_best_only_while_that_checkpoint_is_there(tmp_path, caplog):
  (tmp_path / "checkpoints" / "30").mkdir(parents=True)
  with caplog.at_level(logging.INFO, logger="tied_embed"):
    metrics.closing_lines(tmp_path, 40, best_step=30)
    metrics.closing_lines(tmp_path, 40, best_step=20)
    metrics.closing_lines(tmp_path, 40)
  kept, gone, without = (record.getMessage() for record in caplog.records)
  assert "(latest: step 40, best: step 30, inspect it with --step best)" in kept
  assert "(latest: step 40, best: step 20, its checkpoint is gone)" in gone
  assert "(latest: step 40)" in without


def test_a_best_checkpoint_cut_short_is_named_in_one_clean_line(selected, tmp_path, capsys):
  workdir = tmp_path / "run"
  shutil.copytree(selected.workdir, workdir)
  best = selected.summary.best_step
  # Every data file, the merged index's included: this run's (32, 8) arrays sit near OCDBT's inline limit, so their
  # bytes lie in the per-process files or inline in the merged index, depending on how well each one compresses.
  for data_file in (workdir / "checkpoints" / str(best) / "state").glob("**/d/*"):
    data_file.write_bytes(data_file.read_bytes()[:10])
  assert inspect_main(["--workdir", str(workdir), "--step", "best", "--no-pictures"]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"error: checkpoint {best} at {workdir / 'checkpoints' / str(best)} is damaged: ")
  assert err.count("\n") == 1 and re.search(r"(?i)byte range \[0, \d+\)", err), err  # names the cut read
  assert "pybind" not in err and "TensorStore details" not in err and "tensorstore_spec" not in err


def test_inspect_step_best_without_a_selection_split_is_one_line(tmp_path, capsys):
  config = smoke_with("train.num_steps", 2)
  config.data.data_dir = str(tmp_path / "data")
  train_and_evaluate(config, tmp_path / "run")
  assert inspect_main(["--workdir", str(tmp_path / "run"), "--step", "best", "--no-pictures"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: no checkpoint in ") and "has a select/loss" in err and err.count("\n") == 1


# Early stopping.


def test_early_stopping_stops_patience_evals_after_the_best(selected):
  best, stop = _hand_early_stop(selected.series["select/loss"], PATIENCE)
  assert stop == best + PATIENCE * EVAL_EVERY < selected.config.train.num_steps
  assert selected.summary.step == stop and selected.summary.stopped_early
  assert max(selected.series["train/loss"]) == stop  # nothing trained or logged after the stop
  assert selected.summary.eval_loss == pytest.approx(selected.series["eval/loss"][stop], rel=1e-7)
  stopped = f"Early stopping at step {stop}: {PATIENCE} evals without a lower select/loss than step {best}'s."
  assert stopped in selected.log


def test_a_run_stopped_between_evals_resumes_to_the_same_stop_and_bits(selected, tmp_path, monkeypatch):
  # After the first eval past the best (so the saved count of evals since the best is 1, not 0) and before the
  # stop, at a step with no checkpoint of its own.
  interrupt_at = selected.summary.best_step + EVAL_EVERY + 4
  train_batch = trainer.train_batch

  def interrupted(data, seed, step, batch_size):
    if step == interrupt_at:
      signal.raise_signal(signal.SIGINT)
    return train_batch(data, seed, step, batch_size)

  config = _overfitting_config(pathlib.Path(selected.config.data.data_dir))
  with monkeypatch.context() as patch:
    patch.setattr(trainer, "train_batch", interrupted)
    with pytest.raises(signals.Preempted):
      train_and_evaluate(config, tmp_path / "run")
  assert checkpoint.available_steps(tmp_path / "run") == [selected.summary.best_step, interrupt_at + 1]

  resumed = train_and_evaluate(config, tmp_path / "run")  # the count of evals since the best comes from the manifest
  assert (resumed.step, resumed.best_step, resumed.stopped_early) == (selected.summary.step, selected.summary.best_step,
                                                                       True)
  for got, want in zip(_leaves(resumed.state), _leaves(selected.summary.state), strict=True):
    np.testing.assert_array_equal(got, want)

  events = set((tmp_path / "run").glob("events.out.tfevents.*"))
  rerun = train_and_evaluate(config, tmp_path / "run")  # stopped: nothing to train, nothing written
  assert set((tmp_path / "run").glob("events.out.tfevents.*")) == events
  assert (rerun.step, rerun.best_step, rerun.best_select_loss) == (resumed.step, resumed.best_step,
                                                                   resumed.best_select_loss)
  for got, want in zip(_leaves(rerun.state), _leaves(resumed.state), strict=True):
    np.testing.assert_array_equal(got, want)


def _leaves(state) -> list[np.ndarray]:
  import jax  # noqa: PLC0415

  return [np.asarray(leaf) for leaf in jax.tree.leaves(state)]


# Bad values.


@pytest.mark.parametrize(("path", "value", "allowed"), [
    ("data.selection_fraction", 0.5, "a finite number in [0, 0.5) (0 = no selection split)"),
    ("data.selection_fraction", -0.1, "a finite number in [0, 0.5) (0 = no selection split)"),
    ("data.selection_fraction", float("nan"), "a finite number in [0, 0.5) (0 = no selection split)"),
    ("train.early_stopping_patience", -1, "an integer in [0, 2**31 - 1] (0 = off)"),
    ("train.early_stopping_patience", 2.5, "an integer in [0, 2**31 - 1] (0 = off)"),
    ("train.early_stopping_patience", 3, "0 (off) unless data.selection_fraction > 0 (early stopping watches "
                                         "select/loss)"),
    ("train.min_delta", -0.01, "a finite number >= 0 (0 = any decrease), within float32 (at most 3.4e38; 0 or at "
                               "least 1.4e-45)"),
    ("train.min_delta", 0.01, "0 (off) unless data.selection_fraction > 0 (a new best is judged on select/loss)"),
])
def test_bad_values_are_one_line_before_anything_is_written(tmp_path, path, value, allowed):
  config = smoke_with(path, value)
  config.data.data_dir = str(tmp_path / "data")
  with pytest.raises(UsageError) as refused:
    train_and_evaluate(config, tmp_path / "run")
  assert str(refused.value) == f"{path}={value!r} is not allowed: expected {allowed}"
  assert not any(tmp_path.iterdir())


def test_train_py_refuses_a_patience_without_a_selection_split_with_exit_2(tmp_path):
  result = subprocess.run(
      [sys.executable, str(ROOT / "train.py"), "--config", str(ROOT / "configs" / "smoke.py"), "--workdir",
       str(tmp_path / "run"), "--config.train.early_stopping_patience=2"],
      cwd=tmp_path, capture_output=True, text=True, timeout=300, env=subprocess_env(PYTHONPATH=str(ROOT)),
  )
  assert result.returncode == 2, result.stderr
  assert result.stderr == ("error: train.early_stopping_patience=2 is not allowed: expected 0 (off) unless "
                           "data.selection_fraction > 0 (early stopping watches select/loss)\n")
  assert not any(tmp_path.iterdir())


# train.min_delta: a new best must be lower by more than it.


def test_min_delta_by_hand():
  from tied_embed.train.evaluation import Selection  # noqa: PLC0415

  selection, bests = Selection(), []
  for step, loss in [(1, 5.0), (2, 4.0), (3, 3.9996), (4, 3.9992), (5, 3.9988), (6, 3.5)]:
    if selection.record(step, loss, {"eval/loss": loss}, min_delta=0.001):
      bests.append(step)
  # 3 and 4 are within 0.001 of step 2's 4.0; step 5 is 0.0012 below it, so the creep adds up to a new best.
  assert bests == [1, 2, 5, 6] and selection.best_select_loss == 3.5



def test_a_patience_of_one_ends_the_run_at_the_first_eval_without_a_new_best():
  from tied_embed.train.evaluation import Selection  # noqa: PLC0415

  selection = Selection()
  assert not selection.exhausted(1)  # no eval yet
  assert selection.record(10, 2.0, {"eval/loss": 2.0})
  assert not selection.exhausted(1)
  assert not selection.record(20, 2.5, {"eval/loss": 2.5})
  assert selection.exhausted(1) and not selection.exhausted(2) and not selection.exhausted(0)  # 0: off

def test_with_min_delta_the_best_step_is_the_last_big_enough_drop_and_orbax_keeps_it(tmp_path):
  # A min_delta no drop can reach: the first eval stays the best although later evals are lower, so Orbax's
  # retention (keep 1, plus the best) must keep the trainer's best, not the lowest select/loss.
  config = _overfitting_config(tmp_path / "data")
  config.train.update(min_delta=100.0, early_stopping_patience=2)
  summary = train_and_evaluate(config, tmp_path / "run")
  losses = all_series(tmp_path / "run")["select/loss"]
  best, stop = _hand_early_stop(losses, 2, min_delta=100.0)
  assert (best, stop) == (EVAL_EVERY, 3 * EVAL_EVERY) and min(losses.values()) < losses[best]  # not the argmin
  assert summary.best_step == best and summary.step == stop and summary.stopped_early
  assert checkpoint.available_steps(tmp_path / "run") == [best, stop]
  assert checkpoint.restore(tmp_path / "run", "best", arrays=False).step == best


def test_a_patience_that_runs_out_at_the_last_step_is_a_run_that_finished(tmp_path):
  # min_delta 100: no eval after the first is a new best, so patience 2 runs out at the third eval, here the last
  # step: the run ran its whole schedule, so it did not stop early
  config = _overfitting_config(tmp_path / "data")
  config.train.update(min_delta=100.0, early_stopping_patience=2, num_steps=3 * EVAL_EVERY)
  summary = train_and_evaluate(config, tmp_path / "run")
  assert _hand_early_stop(all_series(tmp_path / "run")["select/loss"], 2, min_delta=100.0)[1] == 3 * EVAL_EVERY
  assert summary.step == 3 * EVAL_EVERY and not summary.stopped_early
