"""Does the bigram's answer carry over to models with context? A context family's block (`--family=mlp` or
`--family=transformer`) paired run against run with the bigram block, as a generated table inside the docs page's
notes.

A context block runs on the bigram block's dataset, seeds and data draws, so its runs pair with the bigram block's at
the same (size, seed, draw), as the controls do (mechanism.py). Tying's cost is tied − untied within each block; what
context does to it is the paired difference of the two costs, run by run: (tied − untied) without context minus
(tied − untied) with it, so a positive number is the part of tying's cost that context takes away."""

from __future__ import annotations

import pathlib
from typing import Any

from science import common
from science.when_to_tie import mechanism, stats, tuning
from science.when_to_tie.stats import INTERVAL_NAME, Interval, mean_sd, paired

CONTEXT_JSON = "when_to_tie_{}.json"  # .format(family): a context block's results beside docs/when_to_tie.json
CONTEXT_START, CONTEXT_END = "<!-- context (generated from when_to_tie*.json) -->", "<!-- /context -->"
CONTEXT_FAMILIES = ("mlp", "transformer")


def cost_change(runs: dict[str, dict[str, list]], family: str, fraction: str, baseline: str = "tied") -> Interval:
  """(`baseline` − untied) − (tied − untied with `family`'s context) per (seed, draw) that all four ran, in eval loss:
  → its interval (positive: context takes that much of tying's cost away). `baseline` "tied" measures it against the
  plain tied bigram, "tied_w" against tied + W, the bigram with a learned map between the table's two uses."""
  losses = {key: {stats.run_key(run): run["eval_loss"] for run in runs[key][fraction]}
            for key in (baseline, "untied", f"tied_{family}", f"untied_{family}")}
  shared = set.intersection(*(set(by_key) for by_key in losses.values()))
  return stats.crossed_interval({both: (losses[baseline][both] - losses["untied"][both])
                                 - (losses[f"tied_{family}"][both] - losses[f"untied_{family}"][both])
                                 for both in shared})


def _rows(family: str) -> tuple[tuple[str, str, str], ...]:
  """(better, worse, what the row says) of the paired table: each row is worse − better (stats.paired)."""
  return (("untied", "tied", "tying's cost without context: tied − untied"),
          (f"untied_{family}", f"tied_{family}", f"tying's cost with the {family}'s context: tied − untied"),
          ("tied_w", "tied", "W's gain without context: tied − (tied + W)"),
          (f"tied_w_{family}", f"tied_{family}", f"W's gain with the {family}'s context: tied − (tied + W)"),
          (f"tied_{family}", "tied", f"the {family}'s context for tied: tied − (tied + {family})"))


def _sizes(fractions: list[str]) -> list[str]:
  return [f"{100 * float(fraction):g}%" for fraction in fractions]


def context_lines(bigram: dict[str, Any], block: dict[str, Any], family: str, corpus: str = "bytes") -> list[str]:
  """The six models' means and the count models per size, the paired rows with their intervals, the change in
  tying's cost, and a sentence that reads them, from the two blocks' results alone: → markdown lines."""
  runs, labels = mechanism.joined_runs(bigram, block, corpus), mechanism.labels_of(bigram, block)
  entry = block["corpora"][corpus]
  fractions = list(bigram["corpora"][corpus]["count"])
  sizes = _sizes(fractions)
  lines = ["| model | " + " | ".join(sizes) + " |", "|---|" + "---|" * len(sizes)]
  for key in ("tied", "untied", "tied_w", f"tied_{family}", f"untied_{family}", f"tied_w_{family}"):
    lines.append(f"| {labels[key]} | "
                 + " | ".join(f"{mean_sd(runs[key][fraction], 'eval_loss')[0]:.4f}" for fraction in fractions) + " |")
  counts = [("Kneser-Ney bigram (count model)", [entry["kneser_ney"][fraction] for fraction in fractions])]
  if family in entry.get("ngram", {}):
    ngrams = [entry["ngram"][family][fraction] for fraction in fractions]
    orders = "/".join(sorted({str(numbers["order"]) for numbers in ngrams}))
    counts.append((f"Kneser-Ney {orders}-gram, the {family}'s context (count model)", ngrams))
  for name, numbers in counts:
    lines.append(f"| {name} | " + " | ".join(f"{stats.draws_mean(each):.4f}" for each in numbers) + " |")
  rows = _rows(family)
  by_size = {fraction: [paired(runs[better][fraction], runs[worse][fraction]) for better, worse, _ in rows]
             for fraction in fractions}
  change = {fraction: cost_change(runs, family, fraction) for fraction in fractions}
  against_w = {fraction: cost_change(runs, family, fraction, "tied_w") for fraction in fractions}
  pairs = sorted({value.n for values in by_size.values() for value in values}, reverse=True)
  lines += ["", f"In nats of eval loss, the paired difference over the runs of the same seed and data draw "
            f"({' or '.join(map(str, pairs))} a size) with its {INTERVAL_NAME}; the first row after these is "
            "the first two rows' difference, run by run (positive: context takes that much of tying's cost away), and "
            "the next the same against tied + W without context, ((tied + W) − untied) − (tied − untied with "
            "context):",
            "", "| paired difference | " + " | ".join(sizes) + " |", "|---|" + "---|" * len(sizes)]
  for index, (_, _, text) in enumerate(rows):
    lines.append(f"| {text} | " + " | ".join(mechanism.cell(by_size[fraction][index]) for fraction in fractions)
                 + " |")
  lines.append(f"| what the {family}'s context changes in tying's cost | "
               + " | ".join(mechanism.cell(change[fraction]) for fraction in fractions) + " |")
  lines.append(f"| what the {family}'s context changes in tying's cost against tied + W | "
               + " | ".join(mechanism.cell(against_w[fraction]) for fraction in fractions) + " |")
  if family in entry.get("ngram", {}):  # each run less the n-gram fitted on its own draw's train pairs
    for key in (f"tied_{family}", f"untied_{family}"):
      behind = [stats.against(runs[key][fraction], stats.by_draw(entry["ngram"][family][fraction]))
                for fraction in fractions]
      lines.append(f"| {labels[key]} − the Kneser-Ney n-gram of its context (positive: the count model is "
                   "better) | " + " | ".join(map(mechanism.cell, behind)) + " |")
  return [*lines, "", _reading(family, sizes, [by_size[fraction] for fraction in fractions],
                               [change[fraction] for fraction in fractions],
                               [against_w[fraction] for fraction in fractions]), *_ends_lines(entry, family, labels)]


_AXES = {"learning_rate": "learning rate", "weight_decay": "weight decay", "hidden_l2": "λ"}


def _place(values: list[float], value: float) -> str:
  """Where `value` sits in its grid: 'lowest' or 'highest' (an edge), else 'middle' (of 3) or 'interior'."""
  if value == values[0]:
    return "lowest"
  if value == values[-1]:
    return "highest"
  return "middle" if len(values) == 3 else "interior"


def _ends_lines(entry: dict[str, Any], family: str, labels: dict[str, str]) -> list[str]:
  """Per context model and size: how many runs had their best step in their last eval interval (still improving when
  the schedule ended) and the settings tuning chose, each placed in its grid (the lowest or highest value: at its
  edge)."""
  fractions = list(entry["count"])
  lines = ["", "Where the runs ended and what tuning chose: the runs whose best step is in their last eval interval "
           "(the last regular eval or the one at the final step: still improving, by more than the plan's min_delta, "
           "when the schedule ended), and each chosen setting's place in its grid"
           + (" (after the edge rule's extensions):" if tuning.searched(entry) else " of 3:"), "",
           "| context model | " + " | ".join(_sizes(fractions)) + " |",
           "|---|" + "---|" * len(fractions)]
  for key in (f"tied_{family}", f"untied_{family}", f"tied_w_{family}"):
    cells = []
    for fraction in fractions:
      runs, chosen = entry["runs"][key][fraction], entry["tuning"][key][fraction]["chosen"]
      last = sum(run["end_step"] - run["best_step"] < run["eval_every"] for run in runs)
      grid = entry["tuning"][key][fraction].get("grid", entry["grids"])  # after the edge rule's extensions
      places = [f"{_AXES[axis]} {value:g} ({_place(list(grid[axis]), value)})" for axis, value in chosen.items()]
      cells.append(f"{last} of {len(runs)} best in the last eval interval; " + ", ".join(places))
    lines.append(f"| {labels[key]} | " + " | ".join(cells) + " |")
  return lines


def _says(value: Interval, positive: str, negative: str) -> str:
  """'positive' or 'negative' where the interval excludes 0 on that side, 'unresolved' where it holds 0."""
  if not value.excludes_zero:
    return "unresolved"
  return positive if value.mean > 0 else negative


def _reading(family: str, sizes: list[str], by_size: list[list[Interval]], change: list[Interval],
             against_w: list[Interval]) -> str:
  """One sentence per size: tying's cost without and with context, and whether context changed it, against the
  plain tied bigram and against tied + W."""
  parts = []
  for size, values, moved, moved_w in zip(sizes, by_size, change, against_w, strict=True):
    without, with_context = values[0], values[1]
    verdict = _says(moved, "context shrinks it", "context widens it")
    verdict_w = _says(moved_w, "context shrinks it", "context widens it")
    parts.append(f"at {size} tying costs {without.mean:+.3f} without context and {with_context.mean:+.3f} with the "
                 f"{family}'s ({verdict}: {moved.mean:+.3f}, {moved.low:.3f} to {moved.high:.3f}; against tied + W "
                 f"without context, {verdict_w}: {moved_w.mean:+.3f}, {moved_w.low:.3f} to {moved_w.high:.3f})")
  return "Tying's cost (positive: untied is better): " + "; ".join(parts) + "."


def notes_with_context(notes: str, bigram: dict[str, Any], docs: pathlib.Path) -> str:
  """`notes` with the context table between its markers, made from `bigram` (the bigram block's results) and each
  CONTEXT_JSON beside it in `docs`, for each (family, corpus) they share (a heading each); left as it is where no
  context block is there or the markers are not in the notes, one line saying why where the blocks cannot be
  paired."""
  if not {"tied", "untied", "tied_w"} <= {model["key"] for model in bigram["models"]}:
    return notes
  if common.block(notes, CONTEXT_START, CONTEXT_END) is None:
    return notes
  parts = []
  for family in CONTEXT_FAMILIES:
    block = mechanism.read_json(docs / CONTEXT_JSON.format(family))
    for corpus in [corpus for corpus in bigram["corpora"] if block is not None and corpus in block["corpora"]]:
      problem = mechanism.cross_block_problem(bigram, block, corpus)
      lines = [f"No paired differences: {problem}."] if problem else context_lines(bigram, block, family, corpus)
      parts.append("\n".join([f"**{corpus}, {family}** ({CONTEXT_JSON.format(family)})", "", *lines]))
  return common.replace_block(notes, CONTEXT_START, CONTEXT_END, "\n" + "\n\n".join(parts) + "\n") if parts else notes


COST_START, COST_END = "<!-- tying-cost (generated from docs/when_to_tie*.json) -->", "<!-- /tying-cost -->"


def _context_words(block: dict[str, Any], family: str) -> str:
  """'an MLP over the previous 3 tokens' or '1 transformer block over 16 tokens', from the tied model's config."""
  needs = dict(map(tuple, next(m["needs"] for m in block["models"] if m["key"] == f"tied_{family}")))
  if family == "mlp":
    return f"an MLP over the previous {needs['model.context_k']} tokens"
  return f"{needs['model.layers']} transformer block over {needs['data.context_length']} tokens"


def _verdict(value: Interval, with_interval: bool) -> str:
  """Who is ahead, from tied − untied's 95% interval (positive: untied is better): 'untied by 0.031' or 'tied by 0.020'
  where the interval excludes 0, the interval after it with `with_interval`; 'unresolved: 0.118 (-0.059 to 0.296)'
  where it holds 0, always with its interval. An interval that holds 0 is at least as wide as the mean's distance
  from 0, so it calls neither model ahead, nor the two level."""
  interval = f" ({value.low:.3f} to {value.high:.3f})"
  if not value.excludes_zero:
    return f"unresolved: {value.mean:.3f}{interval}"
  return f"{'untied' if value.mean > 0 else 'tied'} by {abs(value.mean):.3f}{interval if with_interval else ''}"


def cost_table(bigram: dict[str, Any], docs: pathlib.Path, with_interval: bool = False) -> list[str]:
  """Tying's cost, tied − untied paired over the same seed and data draw, per corpus and size: without context (the
  bigram block) and with each context block beside it in `docs` that pairs with it (CONTEXT_JSON): → markdown lines
  of one table, each cell who is ahead and by how much, or 'unresolved' where the 95% interval holds 0."""
  fractions = list(next(iter(bigram["corpora"].values()))["count"])
  lines = ["| text | between the table's two uses | " + " | ".join(_sizes(fractions)) + " |",
           "|---|---|" + "---|" * len(fractions)]
  blocks = {family: mechanism.read_json(docs / CONTEXT_JSON.format(family)) for family in CONTEXT_FAMILIES}
  for corpus, entry in bigram["corpora"].items():
    if list(entry["count"]) != fractions:
      raise ValueError(f"the {corpus} block's sizes differ from the first corpus's")
    rows = [("nothing (the bigram model)", entry["runs"]["tied"], entry["runs"]["untied"])]
    for family, block in blocks.items():
      if block is not None and corpus in block["corpora"] and not mechanism.cross_block_problem(bigram, block, corpus):
        runs = block["corpora"][corpus]["runs"]  # same dataset, seeds and draws: paired run by run
        rows.append((_context_words(block, family), runs[f"tied_{family}"], runs[f"untied_{family}"]))
    for words, tied, untied in rows:
      lines.append(f"| {corpus} | {words} | " + " | ".join(
        _verdict(paired(untied[fraction], tied[fraction]), with_interval) for fraction in fractions) + " |")
  return lines


def cost_tables(bigram: dict[str, Any], docs: pathlib.Path) -> dict[pathlib.Path, list[str]]:
  """{page: its cost table}: the README's (who is ahead and by how much) and results.md's (with the intervals), made
  from the bigram block `bigram` and the context blocks in `docs`; {} where `bigram` is not the bigram block."""
  if not {"tied", "untied"} <= {model["key"] for model in bigram["models"]}:
    return {}
  return {docs.parent / "README.md": cost_table(bigram, docs), docs / "results.md": cost_table(bigram, docs, True)}
