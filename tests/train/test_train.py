"""Training: the smoke run's loss falls, its events hold every tag, it resumes; one step matches NumPy by hand."""

from __future__ import annotations

import shutil
import subprocess
import sys
import types

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ROOT
from flax import nnx
from helpers import all_series, event_series, hand_path_gradients

from tied_embed.core import optim
from tied_embed.core.model import build_model
from tied_embed.fast import compilation
from tied_embed.train import evaluation, run_step, trainer

SCALAR_TAGS = (
    "train/loss", "eval/loss", "eval/loss_floor", "eval/gap", "grad/lookup_norm", "grad/projection_norm",
    "grad/total_norm", "grad/cosine", "grad/split_error", "grad/rows_looked_up", "grad/rows_projection_only",
    "train/learning_rate",
)
HISTOGRAM_TAGS = ("provenance/lookup_total", "provenance/projection_total")


def test_event_files_hold_every_scalar_and_histogram_tag(smoke_workdir):
  series = all_series(smoke_workdir)
  assert set(SCALAR_TAGS + HISTOGRAM_TAGS) <= set(series)
  assert sorted(series["train/loss"]) == [10, 20, 30, 40, 50, 60]  # log_every=10
  assert sorted(series["eval/loss"]) == [20, 40, 60]  # eval_every=20


def test_the_logged_learning_rate_is_the_one_the_logged_steps_last_update_used(smoke_run):
  # Logged at `done` = s + 1 steps, the rate of update s: configs/smoke.py's 0.05 peak, 5 warmup steps (0.05 · s / 5),
  # then cosine decay to 0 over the remaining 55 of its 60 steps, by hand
  train = smoke_run.config.train
  assert (train.learning_rate, train.warmup_steps, train.num_steps) == (0.05, 5, 60)
  logged = all_series(smoke_run.workdir)["train/learning_rate"]
  for done, value in logged.items():
    s = done - 1
    expected = 0.05 * s / 5 if s < 5 else 0.05 * 0.5 * (1 + np.cos(np.pi * (s - 5) / 55))
    assert value == pytest.approx(expected, rel=1e-5, abs=1e-9), done
  assert sorted(logged) == [10, 20, 30, 40, 50, 60]


def test_the_console_line_reads_each_number_by_hand():
  from tied_embed.train.metrics import ProgressLine  # noqa: PLC0415

  scalars = {"train/loss": 2.5, "eval/loss": 2.06, "eval/loss_floor": 2.0, "eval/gap": 0.06, "select/loss": 2.1,
             "select/best_step": 40, "grad/lookup_norm": 0.07, "grad/projection_norm": 0.5, "grad/cosine": 0.25,
             "grad/rows_projection_only": 3}
  line = ProgressLine(0, 100).format(50, scalars, 10.0)  # 0.06 / 2.0 = 3.0% of the floor; 50 steps at 10/s: 5 s
  assert line == ("step 50/100 | loss 2.5000 | eval 2.0600 gap 3.0% | select 2.1000 best@40 | grad lookup 0.07 "
                  "proj 0.5 cos 0.25 proj-only rows 3 | 10 steps/s, 5 s left")
  no_floor = {"eval/loss": 0.5, "eval/loss_floor": 0.0, "eval/gap": 0.5}  # a floor of 0: the gap in nats
  expected = "step 50/100 | eval 0.5000 gap 0.5000 | 10 steps/s, 5 s left"
  assert ProgressLine(0, 100).format(50, no_floor, 10.0) == expected


def test_smoke_loss_falls_towards_the_floor(smoke_run):
  series = all_series(smoke_run.workdir)
  eval_losses = [series["eval/loss"][step] for step in (20, 40, 60)]
  assert eval_losses[0] > eval_losses[1] > eval_losses[2]
  # A fresh table scores about log V; training must get well below that and stay above the floor.
  vocab_size = smoke_run.config.model.vocab_size
  assert series["train/loss"][10] > eval_losses[-1]
  assert smoke_run.summary.loss_floor < eval_losses[-1] < 0.5 * np.log(vocab_size)
  for step in (20, 40, 60):
    assert series["eval/gap"][step] == pytest.approx(series["eval/loss"][step] - series["eval/loss_floor"][step])
  # The summary's gap is the last logged eval's, and its relative gap is that gap over the floor.
  floor = series["eval/loss_floor"][60]
  assert smoke_run.summary.gap == pytest.approx(eval_losses[-1] - floor, rel=1e-6)
  assert smoke_run.summary.relative_gap == pytest.approx((eval_losses[-1] - floor) / floor, rel=1e-6)


@pytest.mark.parametrize(("floor", "relative_gap"), [(2.0, 0.25), (0.0, float("inf"))])
def test_the_summary_states_the_final_gap_and_its_share_of_the_floor(tmp_path, floor, relative_gap):
  run = types.SimpleNamespace(data=types.SimpleNamespace(loss_floor=floor), selection=evaluation.Selection(),
                              param_count=10, state=None, complete=True, workdir=tmp_path)
  summary = trainer.finish(run, trainer._Ended(step=5, stopped_early=False, eval_loss=2.5))
  assert summary.gap == 2.5 - floor and summary.relative_gap == relative_gap  # (2.5 − 2) / 2; no floor: ∞


def test_logged_split_error_is_tiny(smoke_workdir):
  errors = all_series(smoke_workdir)["grad/split_error"]
  assert len(errors) == 6
  assert max(errors.values()) < 1e-5


def test_second_run_resumes_from_latest_checkpoint_and_repeats_the_run(smoke_run, tmp_path):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  workdir = tmp_path / "resumed"
  shutil.copytree(smoke_run.workdir, workdir)
  shutil.rmtree(workdir / "checkpoints" / "60")  # the latest is now 40
  old_events = set(workdir.glob("events.out.tfevents.*"))
  summary = train_and_evaluate(smoke_run.config, workdir)
  (new_events,) = set(workdir.glob("events.out.tfevents.*")) - old_events
  assert sorted(event_series(new_events)["train/loss"]) == [50, 60]
  resumed, uninterrupted = summary.state["model"]["embedding"][...], smoke_run.summary.state["model"]["embedding"][...]
  np.testing.assert_array_equal(np.asarray(resumed), np.asarray(uninterrupted))


@pytest.mark.parametrize("tied", [True, False])
def test_one_sgd_step_matches_hand_gradients(tied):
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  config.model.tied = tied
  config.train.update(optimizer="sgd", learning_rate=0.1, warmup_steps=0, grad_clip_norm=0.0, weight_decay=0.0)
  model = build_model(config)
  graphdef, state = nnx.split(run_step.RunState(model, optim.make_optimizer(config.train)))
  names = ("embedding", "embedding") if tied else ("input_embedding", "output_embedding")
  before = [np.asarray(state["model"][name][...], np.float64) for name in names]
  ids = np.array([0, 3, 3, 7, 31, 2], np.int32)
  next_ids = np.array([1, 4, 4, 0, 5, 2], np.int32)
  lookup, projection = hand_path_gradients(*before, ids, next_ids)

  state, _ = run_step.make_run_step(graphdef, chunk_size=0)(state, jnp.asarray(ids), jnp.asarray(next_ids))

  if tied:
    np.testing.assert_allclose(state["model"]["embedding"][...], before[0] - 0.1 * (lookup + projection), atol=1e-6)
  else:
    np.testing.assert_allclose(state["model"]["input_embedding"][...], before[0] - 0.1 * lookup, atol=1e-6)
    np.testing.assert_allclose(state["model"]["output_embedding"][...], before[1] - 0.1 * projection, atol=1e-6)
  np.testing.assert_allclose(state["lookup_total"][...], np.linalg.norm(lookup, axis=1), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(state["projection_total"][...], np.linalg.norm(projection, axis=1), rtol=1e-5, atol=1e-7)
  tracked = np.asarray(state["tracked_rows"][...])  # a fresh state tracks rows 0..K-1 until the trainer picks
  np.testing.assert_array_equal(tracked, np.arange(min(16, config.model.vocab_size)))
  np.testing.assert_allclose(state["tracked_lookup"][...], lookup[tracked], rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(state["tracked_projection"][...], projection[tracked], rtol=1e-5, atol=1e-7)
  assert int(state["optimizer"]["step"][...]) == 1


@pytest.mark.parametrize(
    ("override", "field"),
    [("--config.train.batch_size=0", "train.batch_size"), ("--config.train.no_such_key=1", "no_such_key")],
)
def test_bad_config_is_one_line_exit_2_and_writes_nothing(tmp_path, override, field):
  workdir = tmp_path / "run"
  result = subprocess.run(
      [sys.executable, "train.py", "--config", "configs/smoke.py", "--workdir", str(workdir), override],
      cwd=ROOT, capture_output=True, text=True, timeout=120,
  )
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0], result.stderr
  assert not workdir.exists()


@pytest.mark.parametrize("chunk_size", [0, 4])
def test_eval_scores_each_token_like_numpy(chunk_size):
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  graphdef, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  ids = np.array([0, 3, 3, 7, 31, 2, 9], np.int32)  # 7 tokens: the last chunk of 4 is short
  next_ids = np.array([1, 4, 4, 0, 5, 2, 30], np.int32)
  table = np.asarray(state["model"]["embedding"][...], np.float64)
  logits = table[ids] @ table.T
  expected = np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(len(ids)), next_ids]

  got = evaluation.make_eval_losses(graphdef, chunk_size)(state, jnp.asarray(ids), jnp.asarray(next_ids))
  np.testing.assert_allclose(got, expected, rtol=1e-5)



@pytest.mark.parametrize(("chunk_size", "dtype", "rtol"), [(0, "float32", 1e-5), (1, "float32", 1e-5),
                                                    (1, "bfloat16", 2e-2)])
def test_eval_scores_each_position_of_windows_like_numpy(chunk_size, dtype, rtol):
  """Windows (E, L) → (E, L) losses, `chunk_size` windows at a time, in float32 or from bfloat16 operands (within
  their rounding); a model without context scores each position from its own token alone, so each loss is its
  pair's."""
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  graphdef, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  ids = np.array([[0, 3, 3, 7], [31, 2, 9, 9]], np.int32)  # 2 windows of 4
  next_ids = np.array([[1, 4, 4, 0], [5, 2, 30, 31]], np.int32)
  table = np.asarray(state["model"]["embedding"][...], np.float64)
  logits = table[ids] @ table.T  # (2, 4, V)
  expected = np.log(np.exp(logits).sum(axis=-1)) - np.take_along_axis(logits, next_ids[..., None], axis=-1)[..., 0]

  got = evaluation.make_eval_losses(graphdef, chunk_size, dtype)(state, jnp.asarray(ids), jnp.asarray(next_ids))
  assert got.shape == (2, 4) and got.dtype == np.float32
  np.testing.assert_allclose(got, expected, rtol=rtol)

def test_num_steps_below_the_latest_checkpoint_is_refused(smoke_run):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415
  from tied_embed.util import UsageError  # noqa: PLC0415

  config = smoke_run.config.copy_and_resolve_references()
  config.train.num_steps = 30
  with pytest.raises(UsageError, match=r"train.num_steps=30 .*at least 60"):
    train_and_evaluate(config, smoke_run.workdir)


def test_a_run_tracks_the_path_directions_of_its_most_frequent_rows(smoke_run):
  from tied_embed.data import bigram as data  # noqa: PLC0415

  counts = data.load_bigram_data(smoke_run.config, smoke_run.workdir).input_counts
  tracked = np.asarray(smoke_run.summary.state["tracked_rows"][...])
  assert len(tracked) == 16 and len(set(tracked)) == 16
  assert counts[tracked].min() >= np.delete(counts, tracked).max()  # no untracked row is more frequent
  assert np.all(np.linalg.norm(smoke_run.summary.state["tracked_lookup"][...], axis=1) > 0)


def test_a_step_compiled_ahead_runs_without_compiling_again():
  # The trainer compiles first and then hands the compiler's freed heap back to the OS; a step that compiled again
  # at its first call would put the compiler's memory back under every step.
  import jax  # noqa: PLC0415

  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  graphdef, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  step = run_step.make_run_step(graphdef, int(config.loss.chunk_size))
  ids = jnp.arange(64, dtype=jnp.int32) % 32
  compilation.compile_ahead(step, state, ids, ids[::-1])
  compilation.release_freed()  # True on glibc; either way harmless
  compiles = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, _duration, **_: compiles.append(event) if event.endswith("backend_compile_duration") else None
  )
  for with_stats in (False, True, False):
    state, metrics = step(state, ids, ids[::-1], with_stats=with_stats)
  assert np.isfinite(float(metrics["loss"]))
  assert compiles == []
