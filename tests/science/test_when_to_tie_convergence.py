"""science/when_to_tie's convergence check (its flags are checked with the others in test_when_to_tie_usage.py):
it reruns each model's chosen settings on seed 0 at the largest size with the steps stretched, and its report says
which criterion is met; and the recheck of the runs whose best step is at the end, with more evals."""

import argparse

import pytest

from science.when_to_tie import cli, report, sweep
from science.when_to_tie import plan as plans


def _run(seed, best, end, select, evaluation, steps=100):
  return {"seed": seed, "num_steps": steps, "eval_every": steps // 10, "best_step": best, "end_step": end,
          "select_loss": select, "eval_loss": evaluation}


class _StretchingSweep:
  """Stands in for Sweep.train: records each call; a stretched run ends at factor × 100 steps with set losses."""

  def __init__(self, long_losses):
    self.long_losses, self.calls = long_losses, []

  def train(self, model, fraction, seed, settings, steps_factor=1):
    self.calls.append((model.key, fraction, seed, dict(settings), steps_factor))
    select, evaluation, best = self.long_losses[model.key]
    return _run(seed, best, 100 * steps_factor, select, evaluation, steps=100 * steps_factor)


def _entry():
  """Two sizes; at 100% tied is behind, untied leads tied_w by 0.01 with seed spreads 0.001 and 0.002."""
  chosen = {"tied": {"weight_decay": 0.1}, "untied": {"weight_decay": 0.0},
            "tied_w": {"weight_decay": 0.0, "hidden_l2": 0.01}}
  return {
      "count": {"0.1": {"eval_loss": 2.5}, "1": {"eval_loss": 2.0}},
      "tuning": {key: {"0.1": {"chosen": {}}, "1": {"chosen": settings}} for key, settings in chosen.items()},
      "runs": {
          "tied": {"0.1": [], "1": [_run(1, 100, 100, 2.6, 2.31), _run(0, 100, 100, 2.6, 2.29)]},
          "untied": {"0.1": [], "1": [_run(0, 100, 100, 2.3, 2.001), _run(1, 90, 100, 2.3, 1.999)]},
          "tied_w": {"0.1": [], "1": [_run(0, 100, 100, 2.3, 2.008), _run(1, 100, 100, 2.3, 2.012)]},
      },
  }


def test_check_reruns_chosen_settings_on_seed_0_at_the_largest_size_with_stretched_steps():
  entry = _entry()
  # Each moves within its seeds' spread (sd: tied 0.01, untied 0.001, tied_w 0.002); tied_w's best is before the
  # end at 3×.
  stub = _StretchingSweep({"tied": (2.59, 2.285, 300), "untied": (2.29, 2.0004, 300), "tied_w": (2.29, 2.009, 270)})
  check = sweep.convergence_check(stub, entry, plans.MODELS, 3)
  assert stub.calls == [("tied", 1.0, 0, {"weight_decay": 0.1}, 3), ("untied", 1.0, 0, {"weight_decay": 0.0}, 3),
                        ("tied_w", 1.0, 0, {"weight_decay": 0.0, "hidden_l2": 0.01}, 3)]
  assert check["fraction"] == "1" and check["factor"] == 3 and check["count_eval_loss"] == 2.0
  tied = check["runs"]["tied"]
  assert tied["base"]["eval_loss"] == 2.29  # the seed-0 run, not the first listed
  assert tied["change_eval"] == pytest.approx(2.285 - 2.29) and tied["change_select"] == pytest.approx(2.59 - 2.6)
  entry["convergence"] = check
  labels = {model.key: model.key for model in plans.MODELS}
  text = "\n".join(report.convergence_lines(entry, labels))
  assert "| tied_w | 100 | 100 / 100 | 2.0080 (+0.008) | 300 | 270 / 300 | 2.0090 (+0.009) | -0.0100 / +0.0010 " \
         "| yes |" in text
  assert "| untied | 100 | 100 / 100 | 2.0010 (+0.001) | 300 | 300 / 300 | 2.0004 (+0.000) |" in text
  # tied and untied end at their last step: not met for them; the largest move is tied's 0.005 nats.
  assert "not met for tied, untied" in text and "at most 0.0050 nats (tied)" in text and "use the 1× runs" in text
  # No move beyond a seed spread and the pick (untied) stays: no sentence.
  assert report.convergence_change(entry, labels) == ""


def test_a_changed_pick_or_distance_beyond_the_seed_spread_is_said():
  entry = _entry()
  # tied_w drops to 1.98 at 3×: ahead of untied's 1.9995, and 0.028 beyond its seed spread (2.008, 2.012: sd with
  # ddof 1 is 0.004 / √2 = 0.0028).
  stub = _StretchingSweep({"tied": (2.6, 2.29, 300), "untied": (2.3, 2.0005, 300), "tied_w": (2.2, 1.98, 240)})
  entry["convergence"] = sweep.convergence_check(stub, entry, plans.MODELS, 3)
  labels = {"tied": "T", "untied": "U", "tied_w": "W"}
  assert report.convergence_change(entry, labels) == (
      "With 3× the steps at 100% (seed 0): the pick becomes W; the distance from the count model moves by more than "
      "the seeds' spread for W (-0.028, sd 0.0028); W ends -0.020 nats from the count model.")
  assert report.convergence_lines(entry, labels)[-1] == report.convergence_change(entry, labels)


def test_readme_clause_names_the_pick_and_its_distance_only_when_the_check_changes_them():
  entry = _entry()
  labels = {"tied": "T", "untied": "U", "tied_w": "W"}
  # The pick (untied, 2.000 mean) moves by 0.0006 < its sd 0.001: nothing.
  entry["convergence"] = sweep.convergence_check(
      _StretchingSweep({"tied": (2.6, 2.2, 300), "untied": (2.3, 2.0004, 300), "tied_w": (2.3, 2.008, 300)}),
      entry, plans.MODELS, 3)
  assert report.convergence_readme(entry, labels) == ""
  # untied moves by 0.0110 > 0.001 and passes the count model (2.0): 0.010 ahead of it.
  entry["convergence"] = sweep.convergence_check(
      _StretchingSweep({"tied": (2.6, 2.3, 300), "untied": (2.3, 1.99, 300), "tied_w": (2.3, 2.008, 300)}),
      entry, plans.MODELS, 3)
  assert report.convergence_readme(entry, labels) == (
      " (with 3× the steps, seed 0: U, 0.010 ahead of the count model)")


class _DenseEvalSweep:
  """Stands in for Sweep.train: records each call; a run with `evals_factor` evals that often, its best step set."""

  def __init__(self, dense_best):
    self.dense_best, self.calls, self.draws = dense_best, [], []

  def train(self, model, fraction, seed, settings, steps_factor=1, evals_factor=1, draw=0):
    self.calls.append((model.key, fraction, seed, dict(settings), steps_factor, evals_factor))
    self.draws.append(draw)
    end = 100 * steps_factor
    best = self.dense_best.get((model.key, draw)) or self.dense_best[model.key]  # a draw's own, else the model's
    run = {**_run(seed, best * steps_factor, end, 2.29, 2.005, steps=end), "settings": dict(settings),
           "steps_factor": steps_factor, "end_select_loss": 2.289, "draw": draw}
    run["eval_every"] //= evals_factor
    return run


def test_recheck_reruns_the_runs_whose_best_step_is_at_the_end_with_more_evals_and_counts_the_result(monkeypatch):
  wd = {"weight_decay": 0.1}
  entry = {"runs": {
      "tied": {"1": [{**_run(0, 60, 100, 2.6, 2.3), "settings": wd}]},  # before the end: not rechecked
      "untied": {"1": [{**_run(0, 100, 100, 2.3, 2.0), "settings": wd}]},
      "tied_w": {"1": [{**_run(0, 70, 100, 2.3, 2.0), "settings": wd},
                       {**_run(1, 100, 100, 2.3, 2.0), "settings": wd}]},
  }}
  # The convergence check's 3× runs: untied's best step at the end of its 300 steps, tied's before it.
  long = {key: {**_run(0, best, 300, 2.3, 2.0, steps=300), "settings": wd, "steps_factor": 3}
          for key, best in (("tied", 200), ("untied", 300))}
  entry["convergence"] = {"fraction": "1", "factor": 3, "count_eval_loss": 1.9, "seconds": 60, "cpu_seconds": 90,
                          "runs": {key: {"base": entry["runs"][key]["1"][0], "long": run, "change_select": -0.01,
                                         "change_eval": -0.001} for key, run in long.items()}}
  entry["count"] = {"1": {"eval_loss": 1.9}}
  results = {"corpora": {"subword": entry}}
  assert report.unconverged(results) == ["subword untied 100% seed 0", "subword tied_w 100% seed 1"]
  stub = _DenseEvalSweep({"untied": 80, "tied_w": 100})  # with more evals untied's best comes before the end
  monkeypatch.setattr(cli, "_existing_sweeps", lambda results, args: iter([("subword", entry, stub)]))
  cli.recheck_ends(results, argparse.Namespace())
  evals = plans.RECHECK_EVALS
  assert stub.calls == [("untied", 1.0, 0, wd, 1, evals), ("tied_w", 1.0, 1, wd, 1, evals),
                        ("untied", 1.0, 0, wd, 3, evals)]  # the longer run as long as it was
  check = entry["recheck"]
  assert check["evals_factor"] == plans.RECHECK_EVALS == 4
  assert [(c["model"], c["steps_factor"], c["base"]["best_step"], c["dense"]["best_step"]) for c in check["runs"]] == [
      ("untied", 1, 100, 80), ("tied_w", 1, 100, 100), ("untied", 3, 300, 240)]
  assert report.unconverged(results) == ["subword tied_w 100% seed 1"]  # untied's recheck puts it before the end
  convergence = "\n".join(report.convergence_lines(entry, {"tied": "T", "untied": "U", "tied_w": "W"}))
  assert "| yes (with more evals) |" in convergence and "Criterion met" in convergence
  assert "(U when rechecked with more evals)" in convergence
  text = "\n".join(report.recheck_lines(entry, {"tied": "T", "untied": "U", "tied_w": "W"}))
  assert "| 100% | U | 0 | 10 → 2 | 100 → 80 / 100 | 2.3000 → 2.2900 | -0.0010 | 2.0000 → 2.0050 | yes |" in text
  assert "| 100% | W | 1 | 10 → 2 | 100 → 100 / 100 |" in text
  assert "| 100% (3× the steps) | U | 0 | 30 → 7 | 300 → 240 / 300 |" in text
  assert text.endswith("| yes |\n\n1 of them still have their best step at the end with 4× the evals.")


def test_a_recheck_reruns_each_run_on_its_own_data_draw_and_counts_it_for_that_draw_alone(monkeypatch):
  wd = {"weight_decay": 0.1}
  # seed 0 ran on draws 0 and 2, both with their best step at the end; rechecked, draw 2's comes before it
  entry = {"runs": {"untied": {"0.1": [{**_run(0, 100, 100, 2.3, 2.0), "settings": wd, "draw": draw}
                                       for draw in (0, 2)]}}}
  results = {"corpora": {"subword": entry}}
  assert report.unconverged(results) == ["subword untied 10% seed 0 draw 0", "subword untied 10% seed 0 draw 2"]
  stub = _DenseEvalSweep({("untied", 0): 100, ("untied", 2): 80})
  monkeypatch.setattr(cli, "_existing_sweeps", lambda results, args: iter([("subword", entry, stub)]))
  cli.recheck_ends(results, argparse.Namespace())
  assert stub.draws == [0, 2]  # each rerun on the draw it was trained on
  assert report.unconverged(results) == ["subword untied 10% seed 0 draw 0"]  # draw 2's recheck is not draw 0's
