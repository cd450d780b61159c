"""The sweep's statistics: seed means with ddof = 1 standard deviations, and paired differences with 95% t-intervals.

Two models at one data size are compared run against run: the runs with the same seed and the same data draw share
their batches' order and their data, so the difference of their losses cancels what the seed and the draw do to both.
A pick is named only where the interval of that difference excludes 0; elsewhere the two are "≈".

Where the runs span several data draws, the differences are not independent: the draw changes the difference itself (the
draws' mean square is up to 2,555 times the residual one in the published blocks, above 5 in 21 of 30), and the same
seeds run on every draw. So the interval is that of a two-way crossed design, draws × seeds: its variance the draws'
mean square plus the seeds' over draws · seeds (a conservative estimate: it drops the residual term that the exact one
subtracts), its degrees of freedom Satterthwaite's, rounded down. A difference that moves from draw to draw is then not
called from the runs of three draws as if they were fifteen independent ones."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

CONFIDENCE = 0.95
# how the docs name the interval crossed_interval makes
INTERVAL_NAME = (f"{100 * CONFIDENCE:g}% t-interval (where the runs span several data draws, that of draws × seeds "
                 "crossed, so the draws' spread counts as well as the seeds')")


def mean_sd(runs: list[dict[str, Any]], key: str) -> tuple[float, float]:
  """The mean and the sample standard deviation (ddof = 1; nan for one run) of `key` over runs (one model, one
  size)."""
  values = np.array([run[key] for run in runs], np.float64)
  return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else math.nan


def t_quantile(dof: int) -> float:
  """The two-sided CONFIDENCE quantile of Student's t with `dof` degrees of freedom (12.706 at 1, 2.776 at 4)."""
  from scipy import stats  # noqa: PLC0415 (scipy comes with jax)

  return float(stats.t.ppf(0.5 + CONFIDENCE / 2, dof))


@dataclasses.dataclass(frozen=True)
class Interval:
  """A mean difference over n paired runs and its CONFIDENCE t-interval [low, high] (nan where n < 2)."""

  mean: float
  low: float
  high: float
  n: int

  @property
  def excludes_zero(self) -> bool:
    return self.n >= 2 and (self.low > 0 or self.high < 0)


def interval(differences) -> Interval:
  """The t-interval of the mean of `differences` (n,): mean ± t(n − 1) · sd(ddof = 1) / √n."""
  values = np.asarray(differences, np.float64)
  if len(values) < 2:
    mean = float(values.mean()) if len(values) else math.nan
    return Interval(mean, math.nan, math.nan, len(values))
  mean = float(values.mean())
  half = t_quantile(len(values) - 1) * float(np.std(values, ddof=1)) / math.sqrt(len(values))
  return Interval(mean, mean - half, mean + half, len(values))


def crossed_interval(differences: dict[tuple[int, int], float]) -> Interval:
  """The interval of the mean of differences keyed by (seed, draw). On one draw, `interval` of them all; where not
  every seed ran on every draw, their mean ± the half-width of the draws' means' interval. On r ≥ 2 draws × c ≥ 2 seeds:
  mean ± t(ν) · √((MS_draw + MS_seed) / (r·c)), ν = (a + b)² / (a²/(r − 1) + b²/(c − 1)) rounded down, a = MS_draw,
  b = MS_seed (the module doc)."""
  seeds, draws = sorted({seed for seed, _ in differences}), sorted({draw for _, draw in differences})
  if len(draws) < 2:
    return interval([differences[key] for key in sorted(differences)])
  if len(seeds) < 2 or len(differences) != len(seeds) * len(draws):  # the spread of the draws' means about the mean
    spread = interval([np.mean([value for (_, d), value in differences.items() if d == draw]) for draw in draws])
    mean, half = float(np.mean(list(differences.values()))), spread.high - spread.mean
    return Interval(mean, mean - half, mean + half, len(differences))
  table = np.array([[differences[seed, draw] for seed in seeds] for draw in draws], np.float64)  # (r, c)
  (r, c), mean = table.shape, float(table.mean())
  by_draw_ms = c * float(np.sum((table.mean(axis=1) - mean) ** 2)) / (r - 1)
  by_seed_ms = r * float(np.sum((table.mean(axis=0) - mean) ** 2)) / (c - 1)
  total = by_draw_ms + by_seed_ms
  if total == 0.0:
    return Interval(mean, mean, mean, r * c)
  dof = math.floor(total ** 2 / (by_draw_ms ** 2 / (r - 1) + by_seed_ms ** 2 / (c - 1)))
  half = t_quantile(dof) * math.sqrt(total / (r * c))
  return Interval(mean, mean - half, mean + half, r * c)


def run_key(run: dict[str, Any]) -> tuple[int, int]:
  """(seed, data draw) of a run: what two runs of different models must share to be paired (draw 0 if unrecorded)."""
  return int(run["seed"]), int(run.get("draw", 0))


def paired(runs_a: list[dict[str, Any]], runs_b: list[dict[str, Any]], key: str = "eval_loss") -> Interval:
  """b − a of `key` over the (seed, draw) pairs both lists ran (crossed_interval)."""
  by_a, by_b = {run_key(run): run[key] for run in runs_a}, {run_key(run): run[key] for run in runs_b}
  return crossed_interval({both: by_b[both] - by_a[both] for both in by_a.keys() & by_b.keys()})


def against(runs: list[dict[str, Any]], reference: dict[int, float], key: str = "eval_loss") -> Interval:
  """run − reference of each run, the reference being a number per data draw (a count model fitted on that draw's
  train pairs): → the interval of their mean (crossed_interval)."""
  return crossed_interval({run_key(run): run[key] - reference[run_key(run)[1]] for run in runs})


def by_draw(numbers: dict[str, Any]) -> dict[int, float]:
  """A count model's eval loss per data draw: {draw: loss} ("by_draw" where the sweep drew several, else draw 0)."""
  return {int(draw): loss for draw, loss in numbers.get("by_draw", {"0": numbers["eval_loss"]}).items()}


def draws_mean(numbers: dict[str, Any]) -> float:
  """A count model's eval loss averaged over the data draws it was fitted on (draw 0's alone where one was)."""
  return float(np.mean(list(by_draw(numbers).values())))
