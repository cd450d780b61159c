"""What the sweep's command line checks before it writes: the values a results file publishes (`values_problem`)
and the links under --out it must not write or delete through (`link_problem`)."""

from __future__ import annotations

import math
import pathlib
from collections.abc import Iterator
from typing import Any

# Losses that may be nan: a size whose validation pairs have no rare input has no rare-input loss or share.
MAY_BE_NAN = ("loss_rare_inputs", "predicts_self_rare", "repeats_rare", "count_self_rare")
SHARES = ("predicts_self", "predicts_self_rare", "repeats", "repeats_rare", "rare_pair_share", "count_self",
          "count_self_rare")
STEPS = ("best_step", "end_step", "num_steps", "eval_every", "steps_factor")


def _walk(value: Any, where: str) -> Iterator[tuple[str, str, Any]]:
  """(path, key, value) of every key of every dict inside `value`."""
  if isinstance(value, dict):
    for key, inner in value.items():
      yield where, str(key), inner
      yield from _walk(inner, f"{where}.{key}")
  elif isinstance(value, list):
    for index, inner in enumerate(value):
      yield from _walk(inner, f"{where}[{index}]")


def _number(value: Any) -> bool:
  return isinstance(value, int | float) and not isinstance(value, bool)


def _value_problem(key: str, value: Any) -> str:
  """Why one published value is wrong ('' where it is fine)."""
  if key in ("seed", "draw") or key in STEPS:
    return "" if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else "a whole number ≥ 0"
  if isinstance(value, dict | list):  # a table of them ("repeats": {size: shares}): its values are walked too
    return ""
  if key.endswith("loss") or key in SHARES or key in ("floor", "uniform", "seconds", "cpu_seconds"):
    if not _number(value):
      return "a number"
    if math.isnan(value) and key in MAY_BE_NAN:
      return ""
    if not math.isfinite(value) or value < 0:
      return "a finite number ≥ 0"
    if key in SHARES and value > 1:
      return "a share in [0, 1]"
  return ""


def values_problem(results: dict[str, Any]) -> str:
  """Why a results file's values cannot be published ('' where they can): a loss, share, time, step or seed that is
  not a finite number in its range, a size with no runs, or two runs of one model with the same seed and draw."""
  for where, key, value in _walk(results["corpora"], "corpora"):
    wrong = _value_problem(key, value)
    if wrong:
      return f"{where}.{key} is {value!r}: expected {wrong}"
  for corpus, entry in results["corpora"].items():
    for model, by_fraction in entry["runs"].items():
      for fraction, runs in by_fraction.items():
        where = f"corpora.{corpus}.runs.{model}.{fraction}"
        if not isinstance(runs, list) or not runs:
          return f"{where} holds no run"
        keys = [(run.get("seed"), run.get("draw", 0)) for run in runs if isinstance(run, dict)]
        twice = next((key for key in keys if keys.count(key) > 1), None)
        if twice is not None:
          return f"{where} holds seed {twice[0]} (draw {twice[1]}) twice"
  return ""


def link_problem(out: pathlib.Path, paths: list[pathlib.Path]) -> str:
  """The first of `paths` (each under `out`) that is a symbolic link or lies below one inside `out` ('' where none
  does): the sweep writes and deletes only files and folders it made, never through a link it did not make."""
  for path in paths:
    for step in (path, *path.parents):
      if step == out or out not in step.parents:
        break
      if step.is_symlink():
        return f"{step} is a link: the sweep writes and deletes only what it made under --out (remove the link or " \
               "give another --out)"
  return ""
