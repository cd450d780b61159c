"""The tuning search of one cell (a model at a data size): its first trials (plan.trials), then the edge rule, which
extends an axis beyond its grid wherever the choice sits at the grid's edge, so that every choice is interior or the
cell says it is not. Pure: the trials are run by the function it is given (sweep.tune gives Sweep.train on TUNE_SEED),
so the rule is tested without training."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from science.when_to_tie.plan import EDGE_EXTENSIONS, EDGE_RATIO

LOWEST, HIGHEST = "lowest", "highest"
# What a cell keeps of each trial: enough to see its choice and whether its best step came before its last eval
# interval (`in_last_interval`).
TRIAL_KEYS = ("settings", "select_loss", "best_step", "end_step", "eval_every", "eval_loss", "predicts_self")


def beyond(value: float, side: str) -> float:
  """The next value of an axis's ladder past `value` on `side`: × EDGE_RATIO above, ÷ below, to 6 significant digits
  (the precision of a run's name, so an extended value names the run it is)."""
  stepped = value * EDGE_RATIO if side == HIGHEST else value / EDGE_RATIO
  return float(f"{stepped:.6g}")


def grid_of(trials: list[dict[str, Any]]) -> dict[str, list[float]]:
  """{axis: the sorted values tried on it} over `trials` (each with its "settings")."""
  axes = dict.fromkeys(axis for trial in trials for axis in trial["settings"])
  return {axis: sorted({trial["settings"][axis] for trial in trials if axis in trial["settings"]}) for axis in axes}


def edges(chosen: dict[str, float], grid: dict[str, list[float]]) -> dict[str, str]:
  """{axis: LOWEST or HIGHEST} for each searched axis whose chosen value is at that edge of its grid. An axis tried at
  one value is held, not searched (the --quick grids), so it has no edge. A chosen 0 is not at an edge: 0 is "off",
  below which a penalty cannot go, and `zero_probes` makes sure the value next above it was tried and lost."""
  found = {}
  for axis, value in chosen.items():
    values = grid[axis]
    if len(values) < 2:
      continue
    if value == values[-1]:
      found[axis] = HIGHEST
    elif value == values[0] and value != 0:
      found[axis] = LOWEST
  return found


def zero_probes(chosen: dict[str, float], grid: dict[str, list[float]]) -> list[dict[str, float]]:
  """For each axis chosen at 0 ("off"), the choice with that axis at the lowest value above 0 it was tried at: the
  trial that shows "off" beats the next value up at the choice's other settings (where the first trials never paired
  them: tied + W's λ, spread as a Latin square, or a choice an extension moved)."""
  probes = []
  for axis, value in chosen.items():
    above = [v for v in grid[axis] if v > 0]
    if value == 0 and above:
      probes.append({**chosen, axis: above[0]})
  return probes


def in_last_interval(run: dict[str, Any]) -> bool:
  """Whether a run's best step is in its last eval interval: less than one eval_every before its last step, so the
  loss may still have been falling when the schedule ended (not shown converged)."""
  return run["end_step"] - run["best_step"] < run["eval_every"]


def search(run_trial: Callable[[dict[str, float]], dict[str, Any]], first: list[dict[str, float]],
           cap: int = EDGE_EXTENSIONS) -> dict[str, Any]:
  """The cell's tuning: every setting of `first` run (`run_trial(settings)` → a run with "settings" and
  "select_loss"), the lowest select_loss chosen; then, round by round, for each axis whose choice is at an edge of the
  values tried (`edges`), one trial one step beyond it (`beyond`) at the choice's other settings, while that axis has
  been extended fewer than `cap` times on that side, and the `zero_probes` not yet run; the choice made again over
  every trial, until a round has nothing new to run. → {chosen, trials, grid, extensions, edges}: `extensions`
  {axis: {side: times}} where any were made, `edges` [{axis, side, extensions}] for each axis still at an edge
  (its cap reached)."""
  runs = [run_trial(settings) for settings in first]
  extended: dict[str, dict[str, int]] = {}
  while True:
    chosen = dict(min(runs, key=lambda run: run["select_loss"])["settings"])
    grid = grid_of(runs)
    wanted = []
    for axis, side in edges(chosen, grid).items():
      if extended.get(axis, {}).get(side, 0) < cap:
        extended.setdefault(axis, {}).setdefault(side, 0)
        extended[axis][side] += 1
        wanted.append({**chosen, axis: beyond(chosen[axis], side)})
    wanted += zero_probes(chosen, grid)
    tried = [run["settings"] for run in runs]
    new = [settings for n, settings in enumerate(wanted) if settings not in tried and settings not in wanted[:n]]
    if not new:
      break
    runs += [run_trial(settings) for settings in new]
  left = [{"axis": axis, "side": side, "extensions": extended.get(axis, {}).get(side, 0)}
          for axis, side in edges(chosen, grid).items()]
  return {"chosen": chosen, "trials": [{key: run[key] for key in TRIAL_KEYS if key in run} for run in runs],
          "grid": grid, "extensions": extended, "edges": left}


def searched(entry: dict[str, Any]) -> bool:
  """Whether a corpus entry's cells were tuned under the edge rule (each records its grid); an entry from before it
  has its first grid alone, the entry's "grids"."""
  cells = [cell for by_fraction in entry.get("tuning", {}).values() for cell in by_fraction.values()]
  return bool(cells) and all("grid" in cell for cell in cells)


def last_intervals(cell: dict[str, Any], runs: list[dict[str, Any]],
                   shown: frozenset[tuple[int, int]] = frozenset()) -> tuple[bool, list[dict[str, Any]]]:
  """(whether the cell's chosen trial has its best step in its last eval interval, the scored `runs` that do): a
  run whose (seed, draw) is in `shown` was rechecked with more evals (--recheck-ends) and its best step came before
  the end, so it is left out. A cell recorded before trials kept their end step has no verdict on its trial (False)."""
  trial = next((trial for trial in cell.get("trials", []) if trial["settings"] == cell["chosen"]), None)
  trial_last = trial is not None and "end_step" in trial and in_last_interval(trial)
  return trial_last, [run for run in runs if in_last_interval(run) and (run["seed"], run.get("draw", 0)) not in shown]


def shown_converged(cell: dict[str, Any], runs: list[dict[str, Any]]) -> bool:
  """Whether neither the cell's chosen trial nor any of its scored runs has its best step in its last eval interval."""
  trial_last, last = last_intervals(cell, runs)
  return not trial_last and not last


def marked(cell: dict[str, Any], runs: list[dict[str, Any]], shown: frozenset[tuple[int, int]] = frozenset()) -> str:
  """What a cell's record says against its optimum ('' where nothing): 'at the edge after N extensions (axis side,
  ...)' where its choice is still at an edge, and 'not shown converged (...)' where its chosen trial's best step, or
  a scored run's, is in its last eval interval (`last_intervals`)."""
  parts = []
  if cell.get("edges"):
    most = max(edge["extensions"] for edge in cell["edges"])
    sides = ", ".join(f"{edge['axis']} {edge['side']}" for edge in cell["edges"])
    parts.append(f"at the edge after {most} extension{'' if most == 1 else 's'} ({sides})")
  trial_last, last = last_intervals(cell, runs, shown)
  if trial_last or last:
    which = (["the chosen trial's"] if trial_last else []) + ([f"{len(last)} of {len(runs)} scored runs'"]
                                                               if last else [])
    parts.append(f"not shown converged ({' and '.join(which)} best step in the last eval interval)")
  return "; ".join(parts)
