"""The sweep's bookkeeping, fast, with the trainer stood in: a finished run is found again only on the same dataset
(the record's key identifies it), a run is rescored from its best step's checkpoint (not the last), and a context
model's Kneser-Ney count model is scored at the order chosen on the selection split."""

from __future__ import annotations

import types

import numpy as np
import pytest
from helpers import smoke_with

from science import kneser_ney
from science.when_to_tie import plan as plan_lib
from science.when_to_tie import sweep as sweep_lib
from tied_embed.train import checkpoint, trainer

VOCAB, D_MODEL = 6, 3


def _data(identity: str):
  rng = np.random.default_rng(0)
  ids, next_ids = (rng.integers(0, VOCAB, 60).astype(np.int32) for _ in range(2))
  return types.SimpleNamespace(identity=identity, train_ids=ids, train_next=next_ids, eval_ids=ids[:20],
                               eval_next=next_ids[:20], eval_document_ends=None)


def _tables(step: int) -> tuple[np.ndarray, np.ndarray]:
  """A checkpoint's (lookup, projection) tables, different at every step."""
  rng = np.random.default_rng(step)
  return rng.normal(size=(VOCAB, D_MODEL)), rng.normal(size=(VOCAB, D_MODEL))


class _StandIn:
  """train_and_evaluate and checkpoint.restore stood in: each training recorded, best step 20 of 60."""

  def __init__(self, monkeypatch):
    self.trained, self.restored = [], []
    monkeypatch.setattr(trainer, "train_and_evaluate", self.train)
    monkeypatch.setattr(checkpoint, "restore", self.restore)
    # a real config, so the run's name carries its digest, as a sweep's does
    monkeypatch.setattr(sweep_lib, "run_config", lambda *args, **kwargs: smoke_with("seed", 0))
    monkeypatch.setattr(sweep_lib, "schedule", lambda plan, pairs, batch: (60, 20))

  def train(self, config, workdir):
    workdir.mkdir(parents=True)
    self.trained.append(workdir.name)
    return types.SimpleNamespace(best_step=20, step=60, stopped_early=False, best_select_loss=1.0, best_eval_loss=1.1,
                                 loss_floor=1.0, best_eval={}, eval_loss=1.2, select_loss=1.05, param_count=18)

  def restore(self, workdir, step=None):
    self.restored.append(step)
    lookup, projection = _tables(60 if step is None else step)  # the latest checkpoint is step 60's
    return types.SimpleNamespace(model=types.SimpleNamespace(scoring_tables=lambda: (lookup, projection)))


def _sweep(tmp_path, identity: str) -> sweep_lib.Sweep:
  sweep = sweep_lib.Sweep.__new__(sweep_lib.Sweep)  # its data given, not loaded
  sweep.corpus = types.SimpleNamespace(key="stand", vocab_size=VOCAB)
  sweep.plan = types.SimpleNamespace(min_delta=0.0, selection_share=0.1)
  sweep.keep_runs, sweep.out, sweep.context_length = False, tmp_path, 1
  sweep.data_dir, sweep.runs_dir = tmp_path / "data", tmp_path / "runs"
  sweep.finished_path = tmp_path / sweep_lib.FINISHED
  sweep.finished = sweep_lib.read_finished(sweep.finished_path)
  sweep.resumed, sweep.draws, sweep.batch_size = {}, {0: _data(identity)}, 8
  sweep.data = sweep.draws[0]
  return sweep


def test_a_finished_run_is_taken_from_the_record_only_on_the_same_dataset(tmp_path, monkeypatch):
  stand_in = _StandIn(monkeypatch)
  tied = plan_lib.MODELS[0]
  first = _sweep(tmp_path, "corpus-a").train(tied, 1.0, 0, {"learning_rate": 0.1})
  assert len(stand_in.trained) == 1
  again = _sweep(tmp_path, "corpus-a")  # a resumed sweep reads the record back from --out
  taken = again.train(tied, 1.0, 0, {"learning_rate": 0.1})
  assert taken["float64_eval_loss"] == first["float64_eval_loss"] and taken["seconds"] == first["seconds"]
  assert len(stand_in.trained) == 1 and len(again.resumed) == 1
  other = _sweep(tmp_path, "corpus-b")  # the same run's name on another dataset: trained, not taken
  other.train(tied, 1.0, 0, {"learning_rate": 0.1})
  assert len(stand_in.trained) == 2 and not other.resumed
  assert len(sweep_lib.read_finished(tmp_path / sweep_lib.FINISHED)) == 2


def _numpy_loss(lookup, projection, ids, next_ids) -> float:
  logits = lookup[ids] @ projection.T
  top = logits.max(-1, keepdims=True)
  log_z = top[:, 0] + np.log(np.exp(logits - top).sum(-1))
  return float(np.mean(log_z - logits[np.arange(len(ids)), next_ids]))


def test_a_run_is_rescored_from_its_best_steps_checkpoint(tmp_path, monkeypatch):
  stand_in = _StandIn(monkeypatch)
  sweep = _sweep(tmp_path, "corpus-a")
  run = sweep.train(plan_lib.MODELS[0], 1.0, 0, {"learning_rate": 0.1})
  assert stand_in.restored == [20]
  data = sweep.data
  want = _numpy_loss(*_tables(20), data.eval_ids, data.eval_next)
  assert run["float64_eval_loss"] == pytest.approx(want, rel=1e-9)
  assert run["float64_eval_loss"] != pytest.approx(_numpy_loss(*_tables(60), data.eval_ids, data.eval_next))
  assert (run["best_step"], run["end_step"]) == (20, 60)


def _markov_stream(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """A first-order chain over 5 tokens (each token's next drawn from its own row), so longer contexts only overfit."""
  rng = np.random.default_rng(seed)
  rows = np.random.default_rng(99).dirichlet(np.full(5, 0.5), 5)
  tokens = [0]
  for _ in range(count):
    tokens.append(int(rng.choice(5, p=rows[tokens[-1]])))
  tokens = np.asarray(tokens, np.int64)
  return tokens[:-1], tokens[1:]


def test_the_ngram_count_model_is_scored_at_the_order_chosen_on_selection():
  train, selection, evaluation = (_markov_stream(count, seed) + (None,) for count, seed in ((150, 1), (400, 2),
                                                                                           (400, 3)))
  orders = (2, 3, 4)
  numbers = sweep_lib.ngram_reference(train, selection, evaluation, 8, orders, 5)
  assert numbers["order"] < max(orders)  # the precondition: a chosen order below the fitted one
  # a fit of the chosen order alone, scored at its discount, by the n-gram's own `probabilities`
  fit = kneser_ney.NgramCounts.of(*train, numbers["order"], 5)
  for split, name in ((selection, "select_loss"), (evaluation, "eval_loss")):
    want = float(-np.mean(np.log(fit.probabilities(*split, 8, numbers["discount"]))))
    assert numbers[name] == pytest.approx(want, rel=1e-9), name


class _Draws:
  """A sweep of three data draws, each its own pairs: what count_references and ngram_references read of a sweep."""

  corpus = types.SimpleNamespace(vocab_size=5)

  def __init__(self):
    self.data = {}
    for draw in range(3):
      ids, next_ids = _markov_stream(300, 10 + draw)
      select, evaluation = _markov_stream(200, 20 + draw), _markov_stream(200, 30 + draw)
      self.data[draw] = types.SimpleNamespace(
          train_ids=ids, train_next=next_ids, select_ids=select[0], select_next=select[1], eval_ids=evaluation[0],
          eval_next=evaluation[1], train_document_ends=None, select_document_ends=None, eval_document_ends=None)

  def drawn(self, draw):
    return self.data[draw]

  def train_pairs(self, fraction, draw=0):
    data = self.data[draw]
    used = round(fraction * len(data.train_ids))
    return data.train_ids[:used], data.train_next[:used]

  def splits(self, fraction, draw=0):
    data = self.data[draw]
    return ((*self.train_pairs(fraction, draw), None), (data.select_ids, data.select_next, None),
            (data.eval_ids, data.eval_next, None))


def test_each_draws_count_models_are_fitted_on_that_draws_pairs():
  sweep = _Draws()
  add_k, kneser = sweep_lib.count_references(sweep, 0.5, (0, 1, 2))
  for draw in range(3):
    data = sweep.drawn(draw)
    splits = sweep.train_pairs(0.5, draw), (data.select_ids, data.select_next), (data.eval_ids, data.eval_next)
    assert add_k["by_draw"][str(draw)] == sweep_lib.count_reference(*splits, 5)["eval_loss"]
    assert kneser["by_draw"][str(draw)] == sweep_lib.kneser_ney_reference(*splits, 5)["eval_loss"]
  assert len(set(add_k["by_draw"].values())) == len(set(kneser["by_draw"].values())) == 3
  assert add_k["eval_loss"] == add_k["by_draw"]["0"]  # the numbers beside by_draw are draw 0's


def test_each_draws_ngram_is_fitted_on_that_draws_pairs():
  sweep = _Draws()
  model = next(model for model in plan_lib.FAMILIES["mlp"])
  found = sweep_lib.ngram_references(sweep, 0.5, (0, 1, 2), (model,))
  (numbers,) = found.values()
  for draw in range(3):
    want = sweep_lib.ngram_reference(*sweep.splits(0.5, draw), plan_lib.context_length(model),
                                     plan_lib.ngram_orders(model), 5)
    assert numbers["by_draw"][str(draw)] == want["eval_loss"]
  assert len(set(numbers["by_draw"].values())) == 3
