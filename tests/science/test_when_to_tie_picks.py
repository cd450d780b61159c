"""The sweep's picks: paired differences (same seed, same data draw) with 95% t-intervals, a model named only where
its interval excludes 0; and the README's picks and margins recomputed from the JSON in plain NumPy float64."""

import json
import math
import re

import numpy as np
import pytest
from helpers import by_hand_interval

from science import common
from science.when_to_tie import plan as plans
from science.when_to_tie import report, stats

# Student's t two-sided 95% quantiles from a printed table (df → t_0.975), independent of scipy.
# t_{0.975, df} from a printed table: df = n - 1 for n paired runs (5 seeds; 5 seeds × 3 draws = 15)
T_TABLE = {1: 12.7062047, 2: 4.30265273, 3: 3.18244631, 4: 2.77644511, 5: 2.57058184, 9: 2.26215716,
           14: 2.14478669}


def _run(seed, loss, draw=None):
  run = {"seed": seed, "eval_loss": loss}
  if draw is not None:
    run["draw"] = draw
  return run


def test_t_interval_of_two_and_of_five_differences_by_hand():
  # [0.01, 0.03]: mean 0.02, sd (ddof 1) 0.01·√2, half-width 12.706 · 0.01·√2 / √2 = 0.127062.
  two = stats.interval([0.01, 0.03])
  assert two.mean == pytest.approx(0.02) and two.n == 2
  assert (two.low, two.high) == pytest.approx((0.02 - 0.127062047, 0.02 + 0.127062047), abs=1e-9)
  assert not two.excludes_zero
  # [1, 2, 3, 4, 5]: mean 3, sd √2.5, half-width 2.776 · √2.5 / √5 = 2.776 / √2.
  five = stats.interval([1, 2, 3, 4, 5])
  half = T_TABLE[4] * math.sqrt(2.5) / math.sqrt(5)
  assert (five.low, five.high) == pytest.approx((3 - half, 3 + half), abs=1e-7)
  assert five.excludes_zero
  assert not stats.interval([0.5]).excludes_zero and math.isnan(stats.interval([0.5]).low)


def test_mean_sd_uses_ddof_1():
  assert stats.mean_sd([_run(0, 1.0), _run(1, 2.0)], "eval_loss") == pytest.approx((1.5, math.sqrt(0.5)))
  assert math.isnan(stats.mean_sd([_run(0, 1.0)], "eval_loss")[1])


def test_differences_pair_runs_by_seed_and_draw_not_by_position():
  a = [_run(1, 2.0, draw=0), _run(0, 1.0, draw=0), _run(0, 5.0, draw=1)]
  b = [_run(0, 1.5, draw=0), _run(0, 5.1, draw=1), _run(1, 2.2, draw=0), _run(2, 9.0, draw=0)]  # seed 2: unpaired
  got = stats.paired(a, b)
  # pairs: (0, 0) 0.5, (0, 1) 0.1, (1, 0) 0.2: seed 1 ran on draw 0 alone, so the spread is the two draws' means'
  # (0.35 and 0.1: sd 0.25/√2, half-width 12.706 · 0.125), about the mean of all three (0.8/3)
  half = T_TABLE[1] * 0.125
  assert got.n == 3 and got.mean == pytest.approx(0.8 / 3)
  assert (got.low, got.high) == pytest.approx((0.8 / 3 - half, 0.8 / 3 + half))


def test_on_several_draws_the_interval_counts_the_draws_spread_and_the_seeds():
  # 2 draws × 3 seeds: differences d[draw][seed] = [[0.1, 0.2, 0.3], [0.3, 0.4, 0.5]]: mean 0.3; draw means 0.2, 0.4
  # (MS_draw = 3 · (0.01 + 0.01) / 1 = 0.06), seed means 0.2, 0.3, 0.4 (MS_seed = 2 · 0.02 / 2 = 0.02);
  # variance (0.06 + 0.02) / 6; dof (0.08)² / (0.06² / 1 + 0.02² / 2) = 0.0064 / 0.0038 = 1.68 → 1
  a = [_run(seed, 1.0, draw=draw) for draw in (0, 1) for seed in (0, 1, 2)]
  b = [_run(seed, 1.0 + 0.1 * (seed + 1) + 0.2 * draw, draw=draw) for draw in (0, 1) for seed in (0, 1, 2)]
  got = stats.paired(a, b)
  half = T_TABLE[1] * math.sqrt(0.08 / 6)
  assert got.n == 6 and got.mean == pytest.approx(0.3)
  assert (got.low, got.high) == pytest.approx((0.3 - half, 0.3 + half))
  # the same six differences as if independent (the draw ignored) give a narrower interval that excludes 0
  assert not got.excludes_zero and stats.interval([0.1, 0.2, 0.3, 0.3, 0.4, 0.5]).excludes_zero


def _entry(first, second, third, count=3.0):
  """One size, "0.1"; each model's eval losses over seeds 0..n-1."""
  runs = {key: {"0.1": [_run(seed, loss) for seed, loss in enumerate(losses)]}
          for key, losses in (("tied", first), ("untied", second), ("tied_w", third))}
  return {"count": {"0.1": {"eval_loss": count, "k": 0.1}}, "runs": runs}


LABELS = {"tied": "T", "untied": "U", "tied_w": "W"}


def test_a_pick_is_named_only_where_its_interval_against_every_other_model_excludes_0():
  # tied leads untied by 0.1 on every seed (sd 0): named; tied_w far behind.
  entry = _entry([1.0, 1.1, 1.2], [1.1, 1.2, 1.3], [2.0, 2.0, 2.0])
  assert report.pick_text(entry, "0.1", LABELS).startswith("10% T by 0.100 (0.100 to 0.100)")
  # tied leads untied on average by 0.1, but one seed reverses: unresolved, with the interval.
  entry = _entry([1.0, 1.0, 1.0], [1.3, 1.1, 0.9], [2.0, 2.0, 2.0])
  diffs = np.array([0.3, 0.1, -0.1])
  half = T_TABLE[2] * diffs.std(ddof=1) / math.sqrt(3)
  assert report.pick_text(entry, "0.1", LABELS).startswith(
      f"10% T or U, unresolved ({0.1 - half:.3f} to {0.1 + half:.3f})")


def test_the_count_model_is_the_strongest_baseline_and_said_where_it_is_ahead():
  entry = _entry([1.0, 1.01, 1.02], [1.1, 1.11, 1.12], [2.0, 2.0, 2.0], count=1.5)
  entry["kneser_ney"] = {"0.1": {"eval_loss": 0.9, "discount": 0.75}}
  # tied − Kneser-Ney: 0.1, 0.11, 0.12 → mean 0.11, sd (ddof 1) 0.01, half-width 4.303 · 0.01 / √3
  half = T_TABLE[2] * 0.01 / math.sqrt(3)
  assert report.pick_text(entry, "0.1", LABELS) == (
      f"10% T by 0.100 (0.100 to 0.100), the Kneser-Ney count model 0.110 ahead ({0.11 - half:.3f} to "
      f"{0.11 + half:.3f})")
  entry["kneser_ney"]["0.1"]["eval_loss"] = 2.0  # add-k (1.5) is the stronger: the model beats it, nothing said
  assert report.pick_text(entry, "0.1", LABELS) == "10% T by 0.100 (0.100 to 0.100)"
  entry["count"]["0.1"]["eval_loss"] = 1.01  # within the interval of tied's runs: unresolved against the count model
  assert report.pick_text(entry, "0.1", LABELS).endswith(
      ", against the add-k count model unresolved (+0.000, -0.025 to 0.025)")


_PICK = re.compile(r"(?P<size>[\d.]+)% (?P<first>.+?) (?:by (?P<margin>-?[\d.]+)|or (?P<second>.+?), unresolved) "
                   r"\((?P<low>-?[\d.]+) to (?P<high>-?[\d.]+)\)")


def _independent_picks(entry, fraction):
  """(first, second, mean, low, high, named) from the JSON in NumPy float64 and the printed t table."""
  losses = {key: {(run["seed"], run.get("draw", 0)): run["eval_loss"] for run in by_fraction[fraction]}
            for key, by_fraction in entry["runs"].items()}
  order = sorted(losses, key=lambda key: np.mean(list(losses[key].values())))

  def paired(a, b):  # 5 seeds on one draw, or 3 draws × 5 seeds crossed (helpers.by_hand_interval)
    return by_hand_interval({k: losses[b][k] - losses[a][k] for k in losses[a].keys() & losses[b].keys()})

  first, second = order[:2]
  named = all(paired(first, other)[1] > 0 for other in order[1:])
  return (first, second, *paired(first, second), named)


def test_the_readme_picks_and_margins_are_recomputed_from_the_json():
  results = json.loads((plans.REPO / "docs" / "when_to_tie.json").read_text())
  labels = {model["key"]: model["label"].split("  ")[0] for model in results["models"]}
  keys = {label: key for key, label in labels.items()}
  block = report.readme_block(results)
  checked = 0
  for corpus, entry in results["corpora"].items():
    line = next(line for line in block.splitlines() if line.startswith(f"- **{corpus}**"))
    for part, fraction in zip(line.split(": ", 1)[1].split("; "), entry["count"], strict=True):
      found = _PICK.match(part)
      assert found and float(found["size"]) == pytest.approx(100 * float(fraction)), part
      first, second, mean, low, high, named = _independent_picks(entry, fraction)
      assert keys[found["first"]] == first and (found["margin"] is not None) == named, part
      assert (float(found["low"]), float(found["high"])) == pytest.approx((low, high), abs=6e-4), part
      if named:
        assert float(found["margin"]) == pytest.approx(mean, abs=6e-4) and low > 0
      else:
        assert keys[found["second"]] == second
      checked += 1
  assert checked == sum(len(entry["count"]) for entry in results["corpora"].values()) >= 3


def test_the_results_page_holds_the_picks_of_the_json():
  results = json.loads((plans.REPO / "docs" / "when_to_tie.json").read_text())
  readme = (plans.REPO / "docs" / "results.md").read_text()
  written = common.block(common.block(readme, report.README_START, report.README_END), report.PICKS_START,
                         report.PICKS_END)
  assert written.strip() == report.readme_block(results).strip()
