"""What the sweep's command line checks before it writes: the values a results file publishes (`values_problem`),
the files a sitting reads back (`read_json`, `entries_problem`: its record of finished runs, a stopped run's seconds),
both with one check of each value (`first_value_problem`), and the links under --out it must not write or delete
through (`link_problem`)."""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

# Losses that may be nan: a size whose validation pairs have no rare input has no rare-input loss or share.
MAY_BE_NAN = ("loss_rare_inputs", "predicts_self_rare", "repeats_rare", "count_self_rare")
SHARES = ("predicts_self", "predicts_self_rare", "repeats", "repeats_rare", "rare_pair_share", "count_self",
          "count_self_rare")
STEPS = ("best_step", "end_step", "num_steps", "eval_every", "steps_factor", "param_count")
SETTINGS = ("learning_rate", "weight_decay", "hidden_l2")  # a run's tuned settings: each a finite number ≥ 0
# What sweep.Sweep.train records of every finished run: a record entry without one of them was not written by it.
RUN_FIELDS = ("seed", "draw", "settings", "steps_factor", "eval_every", "num_steps", "best_step", "end_step",
              "stopped_early", "select_loss", "eval_loss", "gap_percent", "loss_rare_inputs", "end_eval_loss",
              "end_select_loss", "float64_eval_loss", "predicts_self", "predicts_self_rare", "param_count", "seconds",
              "cpu_seconds")
# The most bytes a file the sweep reads back may hold: its largest, a block's results, is a few MB.
JSON_LIMIT = 256 << 20


def _walk(value: Any, where: str) -> Iterator[tuple[str, str, Any]]:
  """(path, key, value) of every key of every dict inside `value`."""
  if isinstance(value, dict):
    for key, inner in value.items():
      yield where, str(key), inner
      yield from _walk(inner, f"{where}.{key}" if where else str(key))
  elif isinstance(value, list):
    for index, inner in enumerate(value):
      yield from _walk(inner, f"{where}[{index}]")


def _number(value: Any) -> bool:
  return isinstance(value, int | float) and not isinstance(value, bool)


def _value_problem(key: str, value: Any) -> str:
  """Why one published value is wrong ('' where it is fine)."""
  if key in ("seed", "draw") or key in STEPS:
    return "" if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else "a whole number ≥ 0"
  if key == "stopped_early":
    return "" if isinstance(value, bool) else "true or false"
  if isinstance(value, dict | list):  # a table of them ("repeats": {size: shares}): its values are walked too
    return ""
  if key == "gap_percent":  # below 0 where a context model beats the bigram floor
    return "" if _number(value) and math.isfinite(value) else "a finite number"
  if (key.endswith("loss") or key in SHARES or key in SETTINGS
      or key in ("floor", "uniform", "seconds", "cpu_seconds")):
    if not _number(value):
      return "a number"
    if math.isnan(value) and key in MAY_BE_NAN:
      return ""
    if not math.isfinite(value) or value < 0:
      return "a finite number ≥ 0"
    if key in SHARES and value > 1:
      return "a share in [0, 1]"
  return ""


def first_value_problem(value: Any, where: str) -> str:
  """The first loss, share, time, step, seed or setting inside `value` (at `where`) that is not a finite number in
  its range, as '<where>.<key> is <value>: expected ...' ('' where none is): the one check of each value that
  --from-json and a resumed sitting share."""
  for inside, key, inner in _walk(value, where):
    wrong = _value_problem(key, inner)
    if wrong:
      return f"{inside + '.' if inside else ''}{key} is {inner!r}: expected {wrong}"
  return ""


def values_problem(results: dict[str, Any]) -> str:
  """Why a results file's values cannot be published ('' where they can): a loss, share, time, step or seed that is
  not a finite number in its range, a size with no runs, or two runs of one model with the same seed and draw."""
  wrong = first_value_problem(results["corpora"], "corpora")
  if wrong:
    return wrong
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


def json_kind(value: Any) -> str:
  """What a JSON value is, in words: 'an object', 'a list', 'a string', 'a number', 'true or false', 'null'."""
  kinds = ((dict, "an object"), (list, "a list"), (str, "a string"), (bool, "true or false"),
           ((int, float), "a number"))
  return next((name for kind, name in kinds if isinstance(value, kind)), "null")


def read_checked(path: pathlib.Path, problem_of: Callable[[Any], str]) -> tuple[Any, str]:
  """(the JSON value at `path`, '') where `read_json` reads it and `problem_of` finds nothing wrong with it; else
  (None, what is wrong), one line without the path, for the caller's refusal."""
  try:
    value = read_json(path)
  except ValueError as error:
    return None, str(error)
  problem = problem_of(value)
  return (None, problem) if problem else (value, "")


def read_json(path: pathlib.Path) -> Any:
  """The JSON value in the regular file at `path`; ValueError, its message one line without the path, where there is
  none (missing, a FIFO, a device or a directory: never a read that waits), it is over JSON_LIMIT, or not JSON."""
  from tied_embed import util  # noqa: PLC0415

  try:
    payload = util.read_regular(path, JSON_LIMIT)
  except OSError as error:
    raise ValueError(error.strerror or type(error).__name__) from None
  try:
    return json.loads(payload)
  except ValueError as error:  # JSONDecodeError and UnicodeDecodeError (binary, or cut inside a character)
    raise ValueError(f"not JSON ({' '.join(str(error).split())})") from None


def entries_problem(record: Any, fields: tuple[str, ...]) -> str:
  """Why `record` ({key: entry}) is not a file of entries each holding `fields`, every value in its range ('' where it
  is): the first wrong entry named by its key."""
  if not isinstance(record, dict):
    return f"expected a JSON object of entries, got {json_kind(record)}"
  for key, entry in record.items():
    problem = entry_problem(entry, fields)
    if problem:
      return f"entry {key!r}: {problem}"
  return ""


def entry_problem(entry: Any, fields: tuple[str, ...]) -> str:
  """Why `entry` is not a JSON object holding `fields`, every value in its range ('' where it is)."""
  if not isinstance(entry, dict):
    return f"expected a JSON object, got {json_kind(entry)}"
  missing = next((field for field in fields if field not in entry), None)
  if missing is not None:
    return f"no {missing!r} field"
  return first_value_problem(entry, "")


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
