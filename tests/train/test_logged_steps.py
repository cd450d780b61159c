"""Every scalar and histogram of the smoke run (configs/smoke.py: 60 steps, log every 10, eval every 20) at the steps
its schedule names, and the values at the last step those of the final state, computed again in NumPy float64."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import all_series

LOG_STEPS = [10, 20, 30, 40, 50, 60]
EVAL_STEPS = [20, 40, 60]


def test_each_tag_is_written_at_its_schedules_steps_and_no_other(smoke_run):
  series = all_series(smoke_run.workdir)
  train = smoke_run.config.train
  assert (train.num_steps, train.log_every, train.eval_every) == (60, 10, 20)
  for tag, by_step in series.items():
    if tag.startswith(("train/loss", "train/learning_rate", "grad/", "provenance/")):
      assert sorted(by_step) == LOG_STEPS, tag
    elif tag.startswith("eval/"):
      assert sorted(by_step) == EVAL_STEPS, tag
    elif tag == "train/steps_per_sec":
      assert sorted(by_step) == LOG_STEPS, tag  # every step that wrote a scalar, here the log steps
  assert {"grad/lookup_norm", "provenance/lookup_total", "eval/loss", "train/steps_per_sec"} <= set(series)


def _numpy_eval_loss(table: np.ndarray, ids: np.ndarray, next_ids: np.ndarray) -> float:
  logits = table[ids] @ table.T
  top = logits.max(-1, keepdims=True)
  log_z = top[:, 0] + np.log(np.exp(logits - top).sum(-1))
  return float(np.mean(log_z - logits[np.arange(len(ids)), next_ids]))


def test_the_last_steps_eval_loss_is_the_final_states_and_the_gap_its_distance_to_the_floor(smoke_run):
  from tied_embed.data import bigram as data  # noqa: PLC0415

  series = all_series(smoke_run.workdir)
  bigrams = data.load_bigram_data(smoke_run.config, smoke_run.workdir)
  table = np.asarray(smoke_run.summary.state["model"]["embedding"][...], np.float64)
  want = _numpy_eval_loss(table, np.asarray(bigrams.eval_ids), np.asarray(bigrams.eval_next))
  assert series["eval/loss"][60] == pytest.approx(want, rel=1e-5)
  for step in EVAL_STEPS:
    assert series["eval/gap"][step] == pytest.approx(series["eval/loss"][step] - bigrams.loss_floor, abs=1e-5)
  assert series["eval/loss"][20] > series["eval/loss"][60]  # an earlier state's loss, not the final one again

