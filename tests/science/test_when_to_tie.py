"""science/when_to_tie end to end in its --quick form: every model runs, is tuned and scored at its best step,
and the count model, the repeat shares and the self-argmax shares agree with independent computations."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from helpers import subprocess_env

from science.when_to_tie import plan as plans
from science.when_to_tie import report, sweep
from tied_embed.train.config import validate as validate_config


def test_run_configs_are_valid_and_differ_only_where_they_should(tmp_path):
  corpus = plans.corpora(quick=True, subword_corpus="")["bytes"]
  for model in plans.MODELS:
    settings = {"weight_decay": 0.01, "hidden_l2": 0.1}
    config = plans.run_config(corpus, model, 0.03, 1, settings, 40, 10, tmp_path, 0.05)
    validate_config(config)
    assert (config.model.tied, config.seed, config.data.train_fraction) == (model.tied, 1, 0.03)
    assert config.data.selection_fraction == 0.05
    assert config.train.num_steps == 40 and config.train.eval_every == 10
    assert config.train.early_stopping_patience == plans.PATIENCE
    assert config.train.weight_decay == 0.01
    assert config.model.hidden == model.hidden
    assert config.model.hidden_l2 == (0.1 if model.hidden == "linear" else 0.0)


def test_subword_runs_split_by_document_and_tune_on_the_byte_corpus_grids(tmp_path):
  corpora = plans.corpora(quick=True, subword_corpus="")
  splits = {name: plans.run_config(corpus, plans.MODELS[0], 0.1, 0, {}, 40, 10, tmp_path, 0.05).data.split
            for name, corpus in corpora.items()}
  assert splits == {"bytes": "contiguous", "subword": "by_document"}
  subword = plans.corpus_grids(corpora["subword"], plans.GRIDS)
  # one weight decay grid for both corpora, 0 then 3× steps, holding the 1 that {0, 0.3, 3} skipped (issue 72)
  assert subword["weight_decay"] == (0.0, 0.1, 0.3, 1.0) and subword["hidden_l2"] == plans.GRIDS["hidden_l2"]
  assert subword["learning_rate"] == pytest.approx((0.02 / 3, 0.02, 0.06), rel=1e-5)  # configs/subword.py's 0.02
  assert plans.corpus_grids(corpora["bytes"], plans.GRIDS)["weight_decay"] == plans.GRIDS["weight_decay"]
  assert plans.corpus_grids(corpora["subword"], plans.QUICK_GRIDS)["weight_decay"] == (0.0,)


def test_subword_runs_make_ten_passes_at_100_percent_and_count_a_new_best_past_min_delta(tmp_path):
  subword = plans.PLANS["subword"]
  train_pairs_at_100 = 3_012_185  # docs/when_to_tie.json's subword train pairs
  assert plans.schedule(subword, train_pairs_at_100, 1024)[0] == round(10 * train_pairs_at_100 / 1024)  # 29,416
  assert subword.min_delta == 0.005 and plans.PLANS["bytes"].min_delta == 0.0
  corpus = plans.corpora(quick=True, subword_corpus="")["subword"]
  config = plans.run_config(corpus, plans.MODELS[1], 1.0, 0, {}, 40, 10, tmp_path, 0.05, subword.min_delta)
  validate_config(config)
  assert config.train.min_delta == 0.005


def test_a_best_step_in_the_last_percent_of_the_schedule_counts_as_at_the_end():
  assert report.at_the_end({"best_step": 12000, "end_step": 12000})
  assert report.at_the_end({"best_step": 2940, "end_step": 2942})  # the last regular eval, 2 steps before the end
  assert not report.at_the_end({"best_step": 2695, "end_step": 2942})
  # the last 1% of 2942 steps is the last 29 (2942 // 100): a best 29 steps before the end is outside it, 28 inside
  assert not report.at_the_end({"best_step": 2913, "end_step": 2942})
  assert report.at_the_end({"best_step": 2914, "end_step": 2942})
  assert not report.at_the_end({"best_step": 180, "end_step": 200})


def test_the_strongest_count_model_is_chosen_by_its_eval_loss_over_the_draws_not_draw_0s():
  # add-k is ahead on draw 0 (2.0 against 2.1) but behind over the 3 draws (2.2 against 2.1)
  add_k = {"eval_loss": 2.0, "by_draw": {"0": 2.0, "1": 2.3, "2": 2.3}}
  kneser_ney = {"eval_loss": 2.1, "by_draw": {"0": 2.1, "1": 2.1, "2": 2.1}}
  drawn = {"count": {"0.1": add_k}, "kneser_ney": {"0.1": kneser_ney}}
  assert report.baseline(drawn, "0.1") == ("kneser_ney", kneser_ney)
  one_draw = {"count": {"1": {"eval_loss": 2.0}}, "kneser_ney": {"1": {"eval_loss": 2.1}}}
  assert report.baseline(one_draw, "1")[0] == "count"


def test_schedule_is_ten_epochs_and_evals_per_epoch_within_bounds():
  plan = plans.Plan(selection_share=0.1, max_steps=3000, evals_per_epoch=2, max_evals=20)
  assert plans.EPOCHS == 10 and plans.MIN_STEPS == 200 and plans.MIN_EVAL_EVERY == 10
  assert plans.schedule(plan, 102_400, 1024) == (1000, 50)  # 100 batches an epoch: 10 epochs, 2 evals each
  assert plans.schedule(plan, 2_048, 1024) == (200, 10)  # at least 200 steps, 10 steps between evals
  assert plans.schedule(plan, 10_240_000, 1024) == (3000, 150)  # at most 3000 steps and 20 evals


class _StubSweep:
  """Stands in for Sweep.train: a run's select/loss and eval/loss are looked up from its settings."""

  def __init__(self, select_loss, eval_loss):
    self.select_loss, self.eval_loss, self.seeds = select_loss, eval_loss, []

  def train(self, model, fraction, seed, settings):
    self.seeds.append(seed)
    key = tuple(sorted(settings.items()))  # a setting not in the tables (an edge rule's trial) loses: 5.0
    return {"settings": dict(settings), "select_loss": self.select_loss.get(key, 5.0),
            "eval_loss": self.eval_loss.get(key, 5.0), "best_step": 10}


def test_tuning_gives_every_model_the_same_trials_on_an_unscored_seed_and_chooses_on_the_selection_loss():
  grids = {"learning_rate": (0.01, 0.03, 0.1), "weight_decay": (0.0, 0.1, 1.0), "hidden_l2": (0.0, 0.01, 0.1)}
  per_model = {model.key: plans.trials(model, grids) for model in plans.MODELS}
  assert {len(t) for t in per_model.values()} == {9}  # λ inside tied + W's budget, not on top of it
  for tried in per_model.values():  # the same learning rates × weight decays for every model
    assert [(s["learning_rate"], s["weight_decay"]) for s in tried] == [
        (rate, decay) for rate in grids["learning_rate"] for decay in grids["weight_decay"]]
  # tied + W: λ is a Latin square over them, each value once per learning rate and once per weight decay.
  lambdas = np.array([s["hidden_l2"] for s in per_model["tied_w"]]).reshape(3, 3)
  assert all(sorted(line) == list(grids["hidden_l2"]) for line in (*lambdas, *lambdas.T))
  assert plans.TUNE_SEED not in plans.SEEDS and len(plans.SEEDS) >= 5 and len(plans.LEARNING_RATE_FACTORS) >= 3
  tied_w = next(m for m in plans.MODELS if m.key == "tied_w")
  select = {tuple(sorted(s.items())): 3.0 - 0.1 * n for n, s in enumerate(per_model["tied_w"])}
  select[tuple(sorted(per_model["tied_w"][4].items()))] = 1.0  # the best by selection loss
  evals = {key: 9.0 for key in select}
  evals[tuple(sorted(per_model["tied_w"][0].items()))] = 0.1  # eval prefers another: never consulted
  stub = _StubSweep(select, evals)
  settings, cell = sweep.tune(stub, tied_w, 0.1, grids)
  assert settings == per_model["tied_w"][4] == {"learning_rate": 0.03, "weight_decay": 0.1, "hidden_l2": 0.1}
  # the 9 first trials, then the edge rule's one: λ 0.1 is its grid's highest, so 0.1 × 3 = 0.3 at the choice's
  # learning rate and weight decay, which loses (5.0), so the choice stays and λ is interior
  assert [trial["settings"] for trial in cell["trials"]] == [*per_model["tied_w"], {**settings, "hidden_l2": 0.3}]
  assert stub.seeds == [plans.TUNE_SEED] * 10


def _dense_add_k(train, pairs, vocab_size, k):
  """-mean log((c(i, j) + k) / (c(i) + k V)) of `pairs` under train's counts, from a dense float64 table."""
  counts = np.zeros((vocab_size, vocab_size))
  np.add.at(counts, (train[0], train[1]), 1.0)
  i, j = pairs
  return float(-np.mean(np.log((counts[i, j] + k) / (counts[i].sum(axis=1) + k * vocab_size))))


def test_quick_sweep_writes_tables_and_plot(tmp_path):
  from configs import text  # noqa: PLC0415
  from tied_embed.data import bigram as data_lib  # noqa: PLC0415
  from tied_embed.data.text.count_bigram import K_GRID  # noqa: PLC0415
  from tied_embed.train import checkpoint  # noqa: PLC0415

  env = subprocess_env()
  for name in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS"):  # the script must quieten TensorFlow itself
    env.pop(name, None)
  done = subprocess.run(
      [sys.executable, "-m", "science.when_to_tie", "--quick", "--corpora", "bytes", "--out", str(tmp_path),
       "--no-compile-cache", "--keep-runs", "--convergence-factor=0"],  # the check: ~20 s more; its own tests
      cwd=plans.REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "oneDNN" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
  assert "wall time" in done.stdout and "CPU time" in done.stdout
  results = json.loads((tmp_path / "when_to_tie.json").read_text())
  entry = results["corpora"]["bytes"]
  assert list(entry["runs"]) == ["tied", "untied", "tied_w"]

  # The splits: the last 10% of the train split selects (QUICK_PLAN), 10% of the rest trains.
  assert plans.QUICK_PLAN.selection_share == 0.1
  total = entry["train_pairs"] + entry["select_pairs"]
  assert entry["select_pairs"] == round(0.1 * total)
  used = round(0.1 * entry["train_pairs"])

  # The data, read back as the sweep's runs read it; the count model recomputed densely in float64.
  config = text.get_config()
  config.data.data_dir = str(tmp_path / "data" / "bytes")
  config.data.selection_fraction = 0.1
  data = data_lib.load_existing_bigram_data(config, tmp_path / "unused")
  assert len(data.train_ids) == entry["train_pairs"] and len(data.select_ids) == entry["select_pairs"]
  train = (data.train_ids[:used], data.train_next[:used])
  select, evaluation = (data.select_ids, data.select_next), (data.eval_ids, data.eval_next)
  by_k = {k: _dense_add_k(train, select, 256, k) for k in K_GRID}
  k = min(by_k, key=by_k.get)
  count = entry["count"]["0.1"]
  assert count["k"] == k
  assert count["select_loss"] == pytest.approx(by_k[k], rel=1e-12)
  assert count["eval_loss"] == pytest.approx(_dense_add_k(train, evaluation, 256, k), rel=1e-12)
  assert entry["repeats"]["0.1"]["repeats"] == pytest.approx(np.mean(data.eval_ids == data.eval_next), rel=1e-12)
  assert entry["uniform"] == pytest.approx(math.log(256))

  params = {"tied": 256 * 32, "untied": 2 * 256 * 32, "tied_w": 256 * 32 + 32**2}
  for key, by_fraction in entry["runs"].items():
    (run,) = by_fraction["0.1"]  # one seed
    assert run["param_count"] == params[key]
    assert 0 < run["best_step"] <= run["end_step"] <= run["num_steps"] == plans.QUICK_PLAN.max_steps
    assert run["best_step"] % run["eval_every"] == 0 or run["best_step"] == run["end_step"]
    assert run["gap_percent"] == pytest.approx(100 * (run["eval_loss"] - entry["floor"]) / entry["floor"])
    # The restored best checkpoint, rescored in float64, is the step the trainer scored as best.
    assert run["float64_eval_loss"] == pytest.approx(run["eval_loss"], rel=1e-5)
    # Its likeliest next token, from the model's own forward pass over every token.
    workdir = (tmp_path / "runs" / "bytes").glob(f"{key}-*-s0-n*")  # then its schedule and config digest
    trial = next(w for w in workdir if "-".join(f"{a}={v:g}" for a, v in sorted(run["settings"].items())) in w.name)
    model = checkpoint.restore(trial, step=run["best_step"]).model
    logits = np.asarray(model(np.arange(256, dtype=np.int32)))
    self_margin = logits[np.arange(256), np.arange(256)] - np.where(np.eye(256, dtype=bool), -np.inf, logits).max(1)
    surely, maybe = self_margin[data.eval_ids] > 1e-4, self_margin[data.eval_ids] > -1e-4  # float32 near-ties
    assert np.mean(surely) - 1e-12 <= run["predicts_self"] <= np.mean(maybe) + 1e-12
  assert entry["tuning"]["tied_w"]["0.1"]["chosen"] == {"learning_rate": 0.05, "weight_decay": 0.0, "hidden_l2": 0.1}
  # docs/results.md's picks are rewritten between their markers, the text around them kept; so are the docs' notes.
  readme = tmp_path / "results.md"
  readme.write_text("intro\n<!-- when-to-tie -->\nhand text <!-- picks -->old<!-- /picks --> more\n"
                    "<!-- /when-to-tie -->\nrest\n")
  report.write_picks(report.readme_block(results), readme)
  rewritten = readme.read_text()
  assert rewritten.startswith("intro\n<!-- when-to-tie -->\nhand text <!-- picks -->\n- **bytes**")
  assert "10% untied" in rewritten or "10% tied" in rewritten
  assert "old" not in rewritten and rewritten.endswith("<!-- /picks --> more\n<!-- /when-to-tie -->\nrest\n")
  page = tmp_path / "page.md"
  page.write_text(report.markdown(results, "x.png", notes="\nWhat the numbers show.\n"))
  assert report.kept_notes(page) == "\nWhat the numbers show.\n"
  markdown = (tmp_path / "when_to_tie.md").read_text()
  assert "| 10% (" in markdown and "when_to_tie.png" in markdown and "count model" in markdown
  assert "convergence" not in entry and "Convergence at" not in markdown  # --convergence-factor=0: no check
  assert (tmp_path / "when_to_tie.png").read_bytes()[:4] == b"\x89PNG"
