"""science/when_to_tie's edge rule (tuning.py): a choice at the edge of its grid extends that axis one 3× step and
chooses again, an interior choice does not, the cap marks the cell, a chosen 0 stands only where the value next above
it lost, and each cell records its grid, its choice and whether its best steps are shown converged. A fake trial
runner stands in for training: each setting's selection loss is looked up in a table written by hand."""

import json
import math

import pytest

from science.when_to_tie import plan as plans
from science.when_to_tie import report, sweep, tuning

PUBLISHED = plans.REPO / "docs" / "when_to_tie.json"
LR, WD, L2 = "learning_rate", "weight_decay", "hidden_l2"


class _Runner:
  """run_trial for tuning.search: the selection loss of a setting from `losses` ({(lr, wd[, λ]): loss}), 5.0 for
  one not in it; every setting it ran, in order, in `ran`."""

  def __init__(self, losses, best_step=10, end_step=20, eval_every=5):
    self.losses, self.ran, self.steps = losses, [], (best_step, end_step, eval_every)

  def __call__(self, settings):
    self.ran.append(dict(settings))
    best, end, every = self.steps
    return {"settings": dict(settings), "select_loss": self.losses.get(tuple(settings.values()), 5.0),
            "eval_loss": 9.0, "best_step": best, "end_step": end, "eval_every": every, "seed": plans.TUNE_SEED}


def _cross(rates, decays):
  return [{LR: rate, WD: decay} for rate in rates for decay in decays]


RATES, DECAYS = (0.01, 0.03, 0.1), (0.0, 0.1, 0.3)


def test_the_grids_step_about_3x_between_neighbouring_values_above_0():
  for values in (plans.LEARNING_RATE_FACTORS, *plans.GRIDS.values(),
                 *(grid for grids in plans.CORPUS_GRIDS.values() for grid in grids.values())):
    above = [value for value in values if value > 0]
    assert list(values) == sorted(values) and len(above) >= 3
    # 3× or the 1-3-10 ladder's 10/3 (0.3 to 1)
    assert all(high / low <= 10 / 3 * (1 + 1e-9) for low, high in zip(above, above[1:], strict=False)), values
  assert plans.GRIDS[WD] == (0.0, 0.1, 0.3, 1.0) and plans.GRIDS[L2] == (0.0, 0.001, 0.003, 0.01)
  assert plans.EDGE_RATIO == 3 and plans.EDGE_EXTENSIONS == 3


def test_an_interior_choice_runs_the_first_trials_alone():
  # lr 0.03 and wd 0.1 are both in the middle of their grids: nothing to extend, 3 × 3 = 9 trials
  runner = _Runner({(0.03, 0.1): 1.0, (0.03, 0.0): 2.0, (0.03, 0.3): 2.0, (0.1, 0.1): 2.0, (0.01, 0.1): 2.0})
  cell = tuning.search(runner, _cross(RATES, DECAYS))
  assert cell["chosen"] == {LR: 0.03, WD: 0.1} and len(runner.ran) == 9
  assert cell["grid"] == {LR: [0.01, 0.03, 0.1], WD: [0.0, 0.1, 0.3]}
  assert cell["extensions"] == {} and cell["edges"] == []
  assert tuning.marked(cell, []) == ""


def test_a_choice_at_the_top_edge_extends_upward_and_chooses_again_until_interior():
  # the first 9 trials choose lr 0.1 (the top); the rule runs lr 0.1 × 3 = 0.3 at wd 0.1 (loss 0.5, the new choice,
  # again the top), then 0.3 × 3 = 0.9 (loss 2.0, worse): lr 0.3 is interior, 9 + 2 = 11 trials
  losses = {(0.1, 0.1): 1.0, (0.03, 0.1): 2.0, (0.3, 0.1): 0.5, (0.9, 0.1): 2.0}
  runner = _Runner(losses)
  cell = tuning.search(runner, _cross(RATES, DECAYS))
  assert runner.ran[9:] == [{LR: 0.3, WD: 0.1}, {LR: 0.9, WD: 0.1}]
  assert cell["chosen"] == {LR: 0.3, WD: 0.1} and len(cell["trials"]) == 11
  assert cell["grid"] == {LR: [0.01, 0.03, 0.1, 0.3, 0.9], WD: [0.0, 0.1, 0.3]}
  assert cell["extensions"] == {LR: {"highest": 2}} and cell["edges"] == []


def test_a_choice_at_the_lowest_learning_rate_extends_downward():
  # lr 0.01 chosen: the rule runs 0.01 / 3 = 0.00333333 (6 significant digits) at wd 0.3, which loses
  runner = _Runner({(0.01, 0.1): 1.0})
  cell = tuning.search(runner, _cross(RATES, DECAYS))
  assert runner.ran[9:] == [{LR: 0.00333333, WD: 0.1}] and cell["chosen"] == {LR: 0.01, WD: 0.1}
  assert cell["extensions"] == {LR: {"lowest": 1}} and cell["edges"] == []


def test_the_cap_marks_a_cell_still_at_the_edge_after_3_extensions():
  # a loss that falls with every higher learning rate: 0.1 → 0.3 → 0.9 → 2.7, then the cap; wd 0.3 is the weight
  # decay's top too: 0.9, which loses, so only the learning rate stays at its edge
  losses = {(0.1, 0.3): 3.0, (0.3, 0.3): 2.0, (0.9, 0.3): 1.0, (2.7, 0.3): 0.0}
  runner = _Runner(losses)
  cell = tuning.search(runner, _cross(RATES, DECAYS))
  assert [s[LR] for s in runner.ran[9:] if s[WD] == 0.3] == [0.3, 0.9, 2.7]
  assert {LR: 0.1, WD: 0.9} in runner.ran[9:] and len(runner.ran) == 9 + 3 + 1
  assert cell["chosen"] == {LR: 2.7, WD: 0.3}
  assert cell["edges"] == [{"axis": LR, "side": "highest", "extensions": 3}]
  assert tuning.marked(cell, []) == "at the edge after 3 extensions (learning_rate highest)"


def test_a_chosen_0_stands_only_where_the_value_next_above_it_lost_at_the_choices_other_settings():
  grids = {LR: RATES, WD: DECAYS, L2: (0.0, 0.001, 0.003)}
  tied_w = plans.MODELS[2]
  first = plans.trials(tied_w, grids)
  # λ index (i + j) mod 3: lr 0.03 (i = 1) at wd 0.1 (j = 1) has λ 0.003 (2), at wd 0 (j = 0) λ 0.001 (1); the
  # choice (0.03, 0, 0.001)'s wd is 0 and (0.03, 0.1, 0.001) never ran: it runs, and loses
  assert first[3] == {LR: 0.03, WD: 0.0, L2: 0.001} and first[4] == {LR: 0.03, WD: 0.1, L2: 0.003}
  runner = _Runner({(0.03, 0.0, 0.001): 1.0})
  cell = tuning.search(runner, first)
  assert runner.ran[9:] == [{LR: 0.03, WD: 0.1, L2: 0.001}] and cell["chosen"] == first[3]
  # where it wins, it is the choice: wd 0.1 is then interior (0 below it, 0.3 above), nothing more runs
  runner = _Runner({(0.03, 0.0, 0.001): 1.0, (0.03, 0.1, 0.001): 0.5})
  cell = tuning.search(runner, first)
  assert cell["chosen"] == {LR: 0.03, WD: 0.1, L2: 0.001} and len(runner.ran) == 10
  # in the learning rate × weight decay cross the value next above 0 ran at every learning rate: no probe
  runner = _Runner({(0.03, 0.0): 1.0})
  cell = tuning.search(runner, _cross(RATES, DECAYS))
  assert cell["chosen"] == {LR: 0.03, WD: 0.0} and len(runner.ran) == 9
  assert cell["edges"] == [] and cell["extensions"] == {}  # 0 is no edge: nothing extended below it


def test_the_edges_of_a_grid_by_hand():
  grid = {LR: [0.01, 0.03, 0.1], WD: [0.0, 0.1, 0.3], L2: [0.1]}
  assert tuning.edges({LR: 0.03, WD: 0.1, L2: 0.1}, grid) == {}  # L2 held: one value is no search
  assert tuning.edges({LR: 0.1, WD: 0.3, L2: 0.1}, grid) == {LR: "highest", WD: "highest"}
  assert tuning.edges({LR: 0.01, WD: 0.0, L2: 0.1}, grid) == {LR: "lowest"}  # 0 is off: not an edge
  assert tuning.zero_probes({LR: 0.01, WD: 0.0, L2: 0.1}, grid) == [{LR: 0.01, WD: 0.1, L2: 0.1}]
  assert (tuning.beyond(0.1, "highest"), tuning.beyond(0.3, "highest"), tuning.beyond(0.05, "lowest")) == (
      0.3, 0.9, 0.0166667)


def test_the_quick_grids_single_values_are_held_so_the_quick_sweep_runs_one_trial_a_model():
  runner = _Runner({})
  cell = tuning.search(runner, [{LR: 0.05, WD: 0.0, L2: 0.1}])
  assert len(runner.ran) == 1 and cell["edges"] == [] and cell["extensions"] == {}


def test_a_best_step_in_the_last_eval_interval_is_marked_not_shown_converged():
  # evals every 5 steps to step 20: a best at 16 is less than 5 before the end (in the last interval), 15 is not
  assert tuning.in_last_interval({"best_step": 16, "end_step": 20, "eval_every": 5})
  assert not tuning.in_last_interval({"best_step": 15, "end_step": 20, "eval_every": 5})
  assert tuning.in_last_interval({"best_step": 20, "end_step": 20, "eval_every": 5})
  late = tuning.search(_Runner({}, best_step=20), _cross(RATES, DECAYS)[:1])
  early = tuning.search(_Runner({}, best_step=15), _cross(RATES, DECAYS)[:1])
  runs = [{"seed": seed, "draw": 0, "best_step": best, "end_step": 20, "eval_every": 5}
          for seed, best in ((0, 20), (1, 10), (2, 16))]
  assert tuning.marked(early, runs[1:2]) == "" and tuning.shown_converged(early, runs[1:2])
  assert tuning.marked(late, runs[1:2]) == ("not shown converged (the chosen trial's best step in the last eval "
                                            "interval)")
  assert tuning.marked(early, runs) == "not shown converged (2 of 3 scored runs' best step in the last eval interval)"
  assert not tuning.shown_converged(early, runs)
  # seed 0 rechecked with more evals, its best step before the end: one run left
  assert tuning.marked(early, runs, frozenset({(0, 0)})).startswith("not shown converged (1 of 3 scored runs'")


class _Sweep:
  """Stands in for a Sweep: train looks up the selection loss of a setting (`_Runner`), any seed or draw."""

  corpus = plans.corpora(quick=True, subword_corpus="")["bytes"]

  def __init__(self, runner):
    self.runner, self.calls = runner, []

  def train(self, model, fraction, seed, settings, draw=0):
    self.calls.append((seed, draw))
    return {**self.runner(settings), "seed": seed, "draw": draw}


def test_each_cell_records_its_grid_choice_and_marks_in_the_json_and_the_report_prints_them():
  grids = {LR: RATES, WD: DECAYS}
  runner = _Runner({(0.1, 0.1): 1.0, (0.3, 0.1): 0.5}, best_step=20)
  cell, runs = sweep.cell_of(_Sweep(runner), plans.MODELS[0], 0.1, grids, (0, 1), (0,))
  assert json.loads(json.dumps(cell)) == cell  # plain JSON: what the results file holds
  assert cell["chosen"] == {LR: 0.3, WD: 0.1} and cell["grid"] == {LR: [0.01, 0.03, 0.1, 0.3, 0.9], WD: list(DECAYS)}
  assert [run["settings"] for run in runs] == [cell["chosen"]] * 2 and cell["shown_converged"] is False
  # into a published results file's bytes corpus, every cell under the rule (tied + W's with λ held at 0), every
  # scored run's best step 10 of 20 (evals every 5) but one of tied's at 1%: 20 of 20
  results = json.loads(PUBLISHED.read_text())
  entry = results["corpora"]["bytes"]
  results["corpora"] = {"bytes": entry}
  held = {**cell, "chosen": {**cell["chosen"], L2: 0.0}, "grid": {**cell["grid"], L2: [0.0]},
          "trials": [{**trial, "settings": {**trial["settings"], L2: 0.0}} for trial in cell["trials"]]}
  for key, by_fraction in entry["tuning"].items():
    for fraction in by_fraction:
      by_fraction[fraction] = held if key == "tied_w" else cell
      for run in entry["runs"][key][fraction]:
        run.update(best_step=10, end_step=20, eval_every=5)
  entry["runs"]["tied"]["0.01"][0].update(best_step=20)
  assert report.results_problem(results) == ""
  lines = report.tuning_lines(entry, {key: key for key in entry["runs"]})
  assert ("- 1% tied: lr {0.01, 0.03, 0.1, [0.3], 0.9} (extended 2 above); wd {0, [0.1], 0.3}; 11 trials: **not "
          "shown converged (the chosen trial's and 1 of 15 scored runs' best step in the last eval "
          "interval)**") in lines
  assert ("- 100% tied_w: lr {0.01, 0.03, 0.1, [0.3], 0.9} (extended 2 above); wd {0, [0.1], 0.3}; λ {[0]}; 11 "
          "trials: **not shown converged (the chosen trial's best step in the last eval interval)**") in lines
  assert len(lines) == 3 + 3 * 3  # a blank, the note, a blank, then one line a cell: 3 models × 3 sizes
  text = report.markdown(results, "when_to_tie.png")
  assert "at most 3 steps per axis and side" in text and "Tuning per cell" in text


def test_the_published_results_predate_the_rule_and_print_as_before():
  results = json.loads(PUBLISHED.read_text())
  assert not any(tuning.searched(entry) for entry in results["corpora"].values())
  text = report.markdown(results, "when_to_tie.png")
  assert "Tuning per cell" not in text and "steps per axis and side" not in text
  assert not math.isnan(results["seconds"])


@pytest.mark.parametrize(("grid", "place"), [([0.0, 0.1, 1.0], "middle"), ([0.0, 0.1, 0.3, 1.0], "interior")])
def test_a_chosen_value_is_placed_in_a_grid_of_any_length(grid, place):
  from science.when_to_tie import carry_over  # noqa: PLC0415

  assert (carry_over._place(grid, 0.0), carry_over._place(grid, 1.0), carry_over._place(grid, 0.1)) == (
      "lowest", "highest", place)


def test_a_resumed_tuning_takes_its_trials_from_the_record_and_trains_only_new_ones(tmp_path, monkeypatch):
  from test_when_to_tie_plan import _fake_sweep  # noqa: PLC0415

  calls = []  # the stand-in trainer's n-th run has select loss 1 + n: the first trial run is the best
  grids = {LR: (0.03, 0.1), WD: (0.0, 0.1)}
  # 4 first trials; (0.03, 0) chosen (loss 2): lr 0.03 is the lowest, so 0.03 / 3 = 0.01 runs (loss 6) and loses
  settings, cell = sweep.tune(_fake_sweep(tmp_path, monkeypatch, calls), plans.MODELS[0], 1.0, grids)
  assert settings == {LR: 0.03, WD: 0.0} and len(calls) == 5 and cell["grid"][LR] == [0.01, 0.03, 0.1]
  # a new process on the same --out: every trial from the record, none trained, the same cell
  again = sweep.tune(_fake_sweep(tmp_path, monkeypatch, calls), plans.MODELS[0], 1.0, grids)
  assert again == (settings, cell) and len(calls) == 5
  # a wider first grid: only its 2 new trials train (losses 7 and 8); the choice stands, now interior
  wider = sweep.tune(_fake_sweep(tmp_path, monkeypatch, calls), plans.MODELS[0], 1.0, {**grids, LR: (0.03, 0.1, 0.3)})
  assert len(calls) == 7 and wider[0] == settings and wider[1]["extensions"] == {LR: {"lowest": 1}}
  assert len(json.loads((tmp_path / sweep.FINISHED).read_text())) == 7
