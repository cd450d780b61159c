"""The sweep's statistics: seed means with ddof = 1 standard deviations, and paired differences with 95% t-intervals.

Two models at one data size are compared run against run: the runs with the same seed and the same data draw share
their batches' order and their data, so the difference of their losses cancels what the seed and the draw do to both.
A pick is named only where the interval of that difference excludes 0; elsewhere the two are "≈"."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

CONFIDENCE = 0.95


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


def run_key(run: dict[str, Any]) -> tuple[int, int]:
  """(seed, data draw) of a run: what two runs of different models must share to be paired (draw 0 if unrecorded)."""
  return int(run["seed"]), int(run.get("draw", 0))


def paired(runs_a: list[dict[str, Any]], runs_b: list[dict[str, Any]], key: str = "eval_loss") -> Interval:
  """b − a of `key` over the (seed, draw) pairs both lists ran, in (seed, draw) order."""
  by_a, by_b = {run_key(run): run[key] for run in runs_a}, {run_key(run): run[key] for run in runs_b}
  return interval([by_b[both] - by_a[both] for both in sorted(by_a.keys() & by_b.keys())])


def against(runs: list[dict[str, Any]], reference: dict[int, float], key: str = "eval_loss") -> Interval:
  """run − reference of each run, the reference being a number per data draw (a count model fitted on that draw's
  train pairs): → the interval of their mean."""
  return interval([run[key] - reference[run_key(run)[1]] for run in sorted(runs, key=run_key)])


def by_draw(numbers: dict[str, Any]) -> dict[int, float]:
  """A count model's eval loss per data draw: {draw: loss} ("by_draw" where the sweep drew several, else draw 0)."""
  return {int(draw): loss for draw, loss in numbers.get("by_draw", {"0": numbers["eval_loss"]}).items()}


def draws_mean(numbers: dict[str, Any]) -> float:
  """A count model's eval loss averaged over the data draws it was fitted on (draw 0's alone where one was)."""
  return float(np.mean(list(by_draw(numbers).values())))
