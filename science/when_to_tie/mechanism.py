"""The mechanism, tested: the controls block paired run against run with the bigram block, and the asymmetry budget
of each size's train pairs, as the generated tables inside the docs page's notes.

The controls block (`--family=controls`) runs on the same dataset, seeds and draws as the bigram block, so a run of
one pairs with the run of the other at the same (size, seed, draw): their difference cancels what the seed and the
draw do to both (stats.paired). The asymmetry budget (tied_embed/data/asymmetry.py) of a size's train pairs is
measured on the add-k count model of exactly those pairs, k chosen on the selection split as the sweep chooses it.
Each table sits between its markers inside the notes, rewritten by --write-docs (and by --asymmetry --write-docs)
from the JSON files beside docs/when_to_tie.json; the hand-written notes around them are kept."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np

from science import common
from science.when_to_tie.stats import INTERVAL_NAME, Interval, mean_sd, paired

CONTROLS_JSON, BUDGET_JSON = "when_to_tie_controls.json", "when_to_tie_asymmetry.json"
CONTROLS_START, CONTROLS_END = "<!-- controls (generated from when_to_tie*.json) -->", "<!-- /controls -->"
BUDGET_START, BUDGET_END = "<!-- asymmetry (generated from when_to_tie*.json) -->", "<!-- /asymmetry -->"
# The rows of the means table, in the order the mechanism reads them: tied, then what each control adds to it.
MEANS_ORDER = ("tied", "tied_bias", "tied_sym", "tied_w", "untied_half")
# (better, worse, what the row says): each row's paired difference is worse − better (stats.paired(better, worse)),
# so a positive number is what `better` buys over `worse`, in nats of eval loss.
GAINS = (
    ("tied_bias", "tied", "an output bias over tied: tied − (tied + bias)"),
    ("tied_sym", "tied", "a symmetric S over tied: tied − (tied + S)"),
    ("tied_w", "tied", "the general W over tied, the whole gap: tied − (tied + W)"),
    ("tied_w", "tied_sym", "asymmetry, W over a symmetric S: (tied + S) − (tied + W)"),
    ("untied_half", "tied", "untied at D/2 over tied at D, equal parameters: tied − (untied at D/2)"),
)


def cross_block_problem(bigram: dict[str, Any], controls: dict[str, Any], corpus: str) -> str:
  """Why the two blocks' runs of `corpus` cannot be paired ('' where they can): a block without it, another dataset
  (identity), other sizes, or another add-k count model at a size (so other train pairs)."""
  entries = [block["corpora"].get(corpus) for block in (bigram, controls)]
  if any(entry is None for entry in entries):
    return f"one of the two blocks has no {corpus} runs"
  if entries[0]["dataset"] != entries[1]["dataset"]:
    return f"their {corpus} datasets differ ({entries[0]['dataset']} and {entries[1]['dataset']})"
  if list(entries[0]["count"]) != list(entries[1]["count"]):
    return f"their {corpus} sizes differ ({', '.join(entries[0]['count'])} and {', '.join(entries[1]['count'])})"
  if entries[0]["count"] != entries[1]["count"]:
    return f"their {corpus} count models differ, so their train pairs do"
  return ""


def joined_runs(bigram: dict[str, Any], controls: dict[str, Any], corpus: str) -> dict[str, dict[str, list]]:
  """{model key: {fraction: runs}} of both blocks' `corpus` entries (their model keys are distinct); ValueError where
  `cross_block_problem` finds they cannot be paired."""
  problem = cross_block_problem(bigram, controls, corpus)
  if problem:
    raise ValueError(problem)
  return {**bigram["corpora"][corpus]["runs"], **controls["corpora"][corpus]["runs"]}


def gains(runs: dict[str, dict[str, list]], fraction: str) -> dict[tuple[str, str], Interval]:
  """{(better, worse): the paired interval of worse − better} of each GAINS row at one size (same seed, same draw)."""
  return {(better, worse): paired(runs[better][fraction], runs[worse][fraction]) for better, worse, _ in GAINS}


def labels_of(*blocks: dict[str, Any]) -> dict[str, str]:
  """Model key → its label, 'tied + bias, E·Eᵀ + b' (the label's two-space gap as a comma)."""
  return {model["key"]: model["label"].replace("  ", ", ") for block in blocks for model in block["models"]}


def cell(value: Interval) -> str:
  return f"{value.mean:.3f} ({value.low:.3f} to {value.high:.3f})" if value.n >= 2 else f"{value.mean:.3f} (1 run)"


def _spread(values: list[Interval]) -> str:
  """'0.007–0.020': the smallest and largest mean of the sizes' intervals."""
  return _range_of([value.mean for value in values])


def controls_lines(bigram: dict[str, Any], controls: dict[str, Any], corpus: str = "bytes") -> list[str]:
  """The means of the five models per size, the GAINS rows with their paired intervals, and the sentences that
  read them, from the two blocks' results alone: → markdown lines."""
  runs, labels = joined_runs(bigram, controls, corpus), labels_of(bigram, controls)
  fractions = list(bigram["corpora"][corpus]["count"])
  sizes = [f"{100 * float(fraction):g}%" for fraction in fractions]
  lines = ["| model | " + " | ".join(sizes) + " |", "|---|" + "---|" * len(sizes)]
  for key in MEANS_ORDER:
    block = "bigram" if key in bigram["corpora"][corpus]["runs"] else "controls"
    lines.append(f"| {labels[key]} ({block} block) | "
                 + " | ".join(f"{mean_sd(runs[key][fraction], 'eval_loss')[0]:.4f}" for fraction in fractions) + " |")
  by_size = {fraction: gains(runs, fraction) for fraction in fractions}
  counts = sorted({by_size[fraction][GAINS[0][:2]].n for fraction in fractions}, reverse=True)
  lines += ["", f"What each buys, in nats of eval loss (positive: the first is better), the paired difference over "
            f"the runs of the same seed and data draw in the two blocks ({' or '.join(map(str, counts))} pairs a "
            f"size) with its {INTERVAL_NAME}:", "",
            "| paired difference | " + " | ".join(sizes) + " |", "|---|" + "---|" * len(sizes)]
  for better, worse, text in GAINS:
    lines.append(f"| {text} | " + " | ".join(cell(by_size[fraction][better, worse]) for fraction in fractions) + " |")
  row = {(better, worse): [by_size[fraction][better, worse] for fraction in fractions] for better, worse, _ in GAINS}
  holding = [f"{text.split(':')[0]} at {size}" for better, worse, text in GAINS
             for size, value in zip(sizes, row[better, worse], strict=True) if not value.excludes_zero]
  lines += ["", f"An output bias buys {_spread(row['tied_bias', 'tied'])} nats; a symmetric S buys "
            f"{_spread(row['tied_sym', 'tied'])} of tied's {_spread(row['tied_w', 'tied'])} gap to tied + W; the "
            f"rest, {_spread(row['tied_w', 'tied_sym'])} nats, is what asymmetry buys. At equal parameters, untied "
            f"at D/2 is {_spread(row['untied_half', 'tied'])} nats ahead of tied at D. "
            + ("Every one of these intervals excludes 0." if not holding
               else f"The intervals that hold 0: {'; '.join(holding)}.")]
  return lines


def budget_problem(bigram: dict[str, Any], budget: dict[str, Any], corpus: str) -> str:
  """Why the budget of `corpus` cannot sit beside the sweep's gaps ('' where it can): another dataset, or a size
  of the sweep it did not measure."""
  entry, measured = budget["corpora"].get(corpus), bigram["corpora"].get(corpus)
  if entry is None or measured is None:
    return f"the budget or the sweep has no {corpus} entry"
  if entry["dataset"] != measured["dataset"]:
    return f"the budget's {corpus} dataset is {entry['dataset']}, the sweep's {measured['dataset']}"
  missing = [fraction for fraction in measured["count"] if fraction not in entry["by_fraction"]]
  return f"the budget has no {corpus} size {missing[0]}" if missing else ""


def budget_lines(bigram: dict[str, Any], budget: dict[str, Any], controls: dict[str, Any] | None = None,
                 corpus: str = "bytes") -> list[str]:
  """Per size: the asymmetry budget of the train pairs (`budget`, the --asymmetry JSON; means over its draws) beside
  the measured gaps tied − (tied + W) and, with the controls block, (tied + S) − (tied + W): → markdown lines."""
  problem = budget_problem(bigram, budget, corpus)
  if problem:
    raise ValueError(problem)
  entry, measured = budget["corpora"][corpus], bigram["corpora"][corpus]
  runs = joined_runs(bigram, controls, corpus) if controls is not None else measured["runs"]
  lines = [f"| train data | draws | add-k k | tokens current | antisymmetric share | PSD rank-{entry['d_model']} "
           f"residual share | PSD rank-{entry['d_model']} excess loss (nats) | measured tied − (tied + W) |"
           + (" measured (tied + S) − (tied + W) |" if controls is not None else ""),
           "|---" * (8 + (controls is not None)) + "|"]
  for fraction in measured["count"]:
    numbers = entry["by_fraction"][fraction]
    mean = numbers["mean"]
    ks = sorted({draw["k"] for draw in numbers["by_draw"].values()})
    lines.append(
        f"| {100 * float(fraction):g}% | {len(numbers['by_draw'])} | {', '.join(f'{k:g}' for k in ks)} | "
        f"{mean['tokens']:.0f} | {mean['antisymmetric_share']:.3f} | {mean['psd_rank_residual_share']:.3f} | "
        f"{mean['psd_rank_excess_loss']:.3f} | {cell(paired(runs['tied_w'][fraction], runs['tied'][fraction]))} |"
        + (f" {cell(paired(runs['tied_w'][fraction], runs['tied_sym'][fraction]))} |" if controls is not None else ""))
  means = [entry["by_fraction"][fraction]["mean"] for fraction in measured["count"]]
  gaps = [paired(runs["tied_w"][fraction], runs["tied"][fraction]) for fraction in measured["count"]]
  lines += ["", f"The antisymmetric share is {_range_of([m['antisymmetric_share'] for m in means])} at the "
            f"{len(means)} sizes; the PSD rank-{entry['d_model']} fit's excess loss is "
            f"{_range_of([m['psd_rank_excess_loss'] for m in means])} nats, where tied + W is {_spread(gaps)} nats "
            "ahead of tied."]
  return lines


def _range_of(values: list[float]) -> str:
  return f"{min(values):.3f}–{max(values):.3f}"


def notes_with_tables(notes: str, bigram: dict[str, Any], docs: pathlib.Path) -> str:
  """`notes` with the controls and budget tables between their markers, made from `bigram` (the bigram block's
  results) and the CONTROLS_JSON and BUDGET_JSON beside it in `docs`, for each corpus they share (a heading each
  where there are several); a table whose file is missing, or whose markers are not in the notes, is left as it
  is, and one line says why where the blocks cannot be paired."""
  if not {"tied", "tied_w"} <= {model["key"] for model in bigram["models"]}:
    return notes  # not the bigram block's results: nothing to pair the controls with
  controls, budget = read_json(docs / CONTROLS_JSON), read_json(docs / BUDGET_JSON)
  for start, end, other in ((CONTROLS_START, CONTROLS_END, controls), (BUDGET_START, BUDGET_END, budget)):
    shared = [corpus for corpus in bigram["corpora"] if other is not None and corpus in other["corpora"]]
    if not shared or common.block(notes, start, end) is None:
      continue
    parts = []
    for corpus in shared:
      problem = "" if controls is None else cross_block_problem(bigram, controls, corpus)
      if other is controls:
        lines = [f"No paired differences: {problem}."] if problem else controls_lines(bigram, controls, corpus)
      elif budget_problem(bigram, budget, corpus):
        lines = [f"No asymmetry table: {budget_problem(bigram, budget, corpus)}."]
      else:
        lines = budget_lines(bigram, budget, controls if controls is not None and not problem else None, corpus)
      parts.append("\n".join(([f"**{corpus}**", ""] if len(shared) > 1 else []) + lines))
    notes = common.replace_block(notes, start, end, "\n" + "\n\n".join(parts) + "\n")
  return notes


def read_json(path: pathlib.Path) -> dict[str, Any] | None:
  return json.loads(path.read_text()) if path.is_file() else None


def mean_of_draws(by_draw: dict[str, dict[str, float]]) -> dict[str, float]:
  """{name: the mean over the draws} of the numbers every draw has: {draw: {name: float}} → {name: float}."""
  names = set.intersection(*(set(numbers) for numbers in by_draw.values()))
  return {name: float(np.mean([numbers[name] for numbers in by_draw.values()])) for name in sorted(names)}
