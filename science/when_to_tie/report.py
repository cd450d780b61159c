"""The sweep's report: the markdown tables, the figure, the README's picks, and the docs they are copied to."""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib
import shutil
from typing import Any

import numpy as np

from science import common
from science.when_to_tie import carry_over, checks, mechanism, tuning
from science.when_to_tie.plan import EDGE_EXTENSIONS, EDGE_RATIO, EPOCHS, MIN_STEPS, REPO
from science.when_to_tie.stats import INTERVAL_NAME, Interval, against, by_draw, draws_mean, mean_sd, paired

COMMAND = "python -m science.when_to_tie"  # how the pages name the command that wrote them
NOTES_START, NOTES_END = "<!-- NOTES (kept by --write-docs) -->", "<!-- /NOTES -->"
README_START, README_END = "<!-- when-to-tie -->", "<!-- /when-to-tie -->"
PICKS_START, PICKS_END = "<!-- picks -->", "<!-- /picks -->"
SUFFIXES = ("json", "md", "png")
# What --from-json needs of a results file before it trains or writes anything (the sweep writes them all).
RESULTS_KEYS = ("models", "grids", "seeds", "seconds", "cpu_seconds", "machine", "patience", "corpora")
CORPUS_KEYS = ("note", "dataset", "vocab_size", "d_model", "plan", "floor", "uniform", "train_pairs", "select_pairs",
               "eval_pairs", "count", "repeats", "tuning", "runs", "seconds", "cpu_seconds")


def ranking(entry: dict[str, Any], fraction: str) -> list[str]:
  """The models at one size, lowest mean best-step eval loss first."""
  return sorted(entry["runs"], key=lambda key: mean_sd(entry["runs"][key][fraction], "eval_loss")[0])


BASELINES = {"count": "add-k", "kneser_ney": "Kneser-Ney"}  # an entry's count-model keys and their names
NGRAM = "ngram:"  # + a context: the key of that context's Kneser-Ney n-gram (an entry's "ngram")


@dataclasses.dataclass(frozen=True)
class Pick:
  """One data size's answer: the model with the lowest mean eval loss (`first`), the next one, their paired
  difference second − first, whether `first` is named (its interval against every other model excludes 0), the
  strongest count model by eval loss and first − that count model."""

  first: str
  second: str
  margin: Interval
  named: bool
  baseline: str  # its key: one of BASELINES, or NGRAM + the context of `first`
  behind: Interval


def context_of(entry: dict[str, Any], model: str) -> str:
  """The context a model of the entry reads ('none': a bigram model)."""
  return entry.get("contexts", {}).get(model, "none")


def baseline_name(entry: dict[str, Any], key: str, fraction: str) -> str:
  """'add-k', 'Kneser-Ney' (the bigrams) or 'Kneser-Ney 4-gram' (a context's n-gram, NGRAM + context)."""
  if key.startswith(NGRAM):
    return f"Kneser-Ney {entry['ngram'][key[len(NGRAM):]][fraction]['order']}-gram"
  return BASELINES[key]


def baseline(entry: dict[str, Any], fraction: str, context: str = "none") -> tuple[str, dict[str, Any]]:
  """The strongest count model of a size that sees no more context than a model reading `context` does, by eval
  loss averaged over the data draws: the bigrams (BASELINES), and for a context model also the Kneser-Ney n-gram of
  its context. → (its key, its numbers)."""
  present = {key: entry[key][fraction] for key in BASELINES if fraction in entry.get(key, {})}
  if fraction in entry.get("ngram", {}).get(context, {}):
    present[NGRAM + context] = entry["ngram"][context][fraction]
  key = min(present, key=lambda key: draws_mean(present[key]))  # over the draws, as the tables compare
  return key, present[key]


def pick(entry: dict[str, Any], fraction: str) -> Pick:
  """The pick at one size from its runs' paired differences (same seed, same draw)."""
  order = ranking(entry, fraction)
  runs = {key: entry["runs"][key][fraction] for key in order}
  first, second = order[:2]
  named = all(paired(runs[first], runs[other]).low > 0 for other in order[1:])
  key, numbers = baseline(entry, fraction, context_of(entry, first))
  return Pick(first, second, paired(runs[first], runs[second]), named, key, against(runs[first], by_draw(numbers)))


def _range(value: Interval) -> str:
  return f"{value.low:.3f} to {value.high:.3f}" if value.n >= 2 else "one seed: no interval"


def pick_text(entry: dict[str, Any], fraction: str, labels: dict[str, str]) -> str:
  """'10% tied + W by 0.077 (0.051 to 0.103)', or '3% tied + W or untied, unresolved (-0.010 to 0.040)' where the
  interval holds 0, then the strongest count model where it is ahead (or its interval holds 0: unresolved)."""
  chosen = pick(entry, fraction)
  size = f"{100 * float(fraction):g}%"
  if chosen.named:
    text = f"{size} {labels[chosen.first]} by {chosen.margin.mean:.3f} ({_range(chosen.margin)})"
  else:
    text = f"{size} {labels[chosen.first]} or {labels[chosen.second]}, unresolved ({_range(chosen.margin)})"
  count = f"the {baseline_name(entry, chosen.baseline, fraction)} count model"
  if chosen.behind.excludes_zero and chosen.behind.mean > 0:
    text += f", {count} {chosen.behind.mean:.3f} ahead ({_range(chosen.behind)})"
  elif not chosen.behind.excludes_zero:
    text += f", against {count} unresolved ({chosen.behind.mean:+.3f}, {_range(chosen.behind)})"
  return text


def picks(entry: dict[str, Any], labels: dict[str, str]) -> list[str]:
  """Per data size, the pick and its paired margin with its interval, or "unresolved" where the interval holds 0."""
  return [pick_text(entry, fraction, labels) for fraction in entry["count"]]


INTERVALS_NOTE = (f"Margins: the paired difference in eval loss (nats) between the two best models over the seeds both "
                  f"ran (same seed, same data draw), with its {INTERVAL_NAME}; a model is named only "
                  "where its interval against every other model excludes 0, \"unresolved\" elsewhere. The count "
                  "model is the stronger of add-k and Kneser-Ney (where swept) by eval loss over the data draws.")
CONTEXT_NOTE = (" For a model with context (MLP, transformer) it is the strongest of those and the Kneser-Ney n-gram "
                "of its context.")


def intervals_note(results: dict[str, Any]) -> str:
  """INTERVALS_NOTE, and CONTEXT_NOTE where a corpus has the n-gram of a context."""
  return INTERVALS_NOTE + (CONTEXT_NOTE if any("ngram" in entry for entry in results["corpora"].values()) else "")


def at_the_end(run: dict[str, Any]) -> bool:
  """Whether a run's best step is at the end of its schedule: its last step, or within its last 1% (an eval a few
  steps before a last step that is not a multiple of eval_every, where the cosine learning rate is below 0.03% of
  its peak: a tie decided by noise, not a turn of the loss)."""
  return run["end_step"] - run["best_step"] < max(1, run["end_step"] // 100)


def rechecked_before_the_end(entry: dict[str, Any]) -> set[tuple[str, str, int, int, int]]:
  """(model, fraction, seed, data draw, steps factor) of each run of a corpus whose best step was at the end of its
  schedule and is before it when rechecked with more evals (`recheck_lines`)."""
  return {(checked["model"], checked["fraction"], checked["dense"]["seed"], checked["dense"].get("draw", 0),
           checked.get("steps_factor", 1))
          for checked in entry.get("recheck", {}).get("runs", []) if not at_the_end(checked["dense"])}


def unconverged(results: dict[str, Any]) -> list[str]:
  """Every run whose best step is at the end of its schedule (it may still have been improving when it ended) and
  stays there when rechecked with more evals; each named by its seed, and its data draw where the corpus has
  several."""
  failing = []
  for corpus, entry in results["corpora"].items():
    before = rechecked_before_the_end(entry)
    runs = [(key, fraction, run) for key, by_fraction in entry["runs"].items()
            for fraction, runs in by_fraction.items() for run in runs]
    drawn = len({run.get("draw", 0) for _, _, run in runs}) > 1
    failing += [f"{corpus} {key} {100 * float(fraction):g}% seed {run['seed']}"
                + (f" draw {run.get('draw', 0)}" if drawn else "")
                for key, fraction, run in runs
                if at_the_end(run) and (key, fraction, run["seed"], run.get("draw", 0), 1) not in before]
  return failing


def recheck_lines(entry: dict[str, Any], labels: dict[str, str]) -> list[str]:
  """The table of the runs whose best step was at the end of their schedule, rerun with more evals: where their
  best step is then, and how much the selection loss still fell after it."""
  check = entry["recheck"]
  factor = check["evals_factor"]
  lines = [
      "", f"### Best steps at the end, rechecked with {factor}× the evals", "",
      f"Each run above whose best step is at the end of its schedule, rerun as it was (the same seed, settings, "
      f"steps and batches: the same training) with {factor}× as many evals, and scored at its best step as above. "
      f"Written in {check['seconds'] / 60:.1f} min ({check['cpu_seconds'] / 60:.1f} min CPU).", "",
      "| train data | model | seed | steps between evals | best step / end | select loss at the best step | "
      "after it, to the end | eval loss at the best step | best before the end? |",
      "|---" * 9 + "|",
  ]
  for checked in check["runs"]:
    base, dense = checked["base"], checked["dense"]
    longer = "" if checked.get("steps_factor", 1) == 1 else f" ({checked['steps_factor']}× the steps)"
    lines.append(
        f"| {100 * float(checked['fraction']):g}%{longer} | {labels[checked['model']]} | {dense['seed']} | "
        f"{base['eval_every']} → {dense['eval_every']} | {base['best_step']} → {dense['best_step']} / "
        f"{dense['end_step']} | {base['select_loss']:.4f} → {dense['select_loss']:.4f} | "
        f"{dense['end_select_loss'] - dense['select_loss']:+.4f} | "
        f"{base['eval_loss']:.4f} → {dense['eval_loss']:.4f} | "
        f"{'no' if at_the_end(dense) else 'yes'} |")
  still = [checked for checked in check["runs"] if at_the_end(checked["dense"])]
  if still:
    lines += ["", f"{len(still)} of them still have their best step at the end with {factor}× the evals."]
  else:
    lines += ["", f"With {factor}× the evals every one of them has its best step before the end: what the sweep's "
              "last eval interval gained came earlier in the cosine decay, and after the best step the selection "
              "loss moved by less than min_delta. The tables above keep the sweep's own best steps."]
  return lines



def _settings_text(settings: dict[str, float]) -> str:
  names = {"learning_rate": "lr", "weight_decay": "wd", "hidden_l2": "λ"}
  return ", ".join(f"{names[axis]} {value:g}" for axis, value in settings.items())


def markdown(results: dict[str, Any], png_name: str, notes: str = "") -> str:
  """The sweep's tables: per corpus, best-step loss and distance from the count model per model and data size, the
  chosen regularisers, the best steps and the repeat shares."""
  labels = {model["key"]: model["label"] for model in results["models"]}
  lines = ["# When does tying help?", ""]
  if notes:  # the answer first: the hand-written reading of the tables below
    lines += [NOTES_START, notes.strip("\n"), NOTES_END, ""]
  lines.append(_method(results, labels))
  failing = unconverged(results)
  rechecked = sum(1 for entry in results["corpora"].values() for *_, factor in rechecked_before_the_end(entry)
                  if factor == 1)
  lines += ["", "Best step before the end of the schedule: " + (
      "every run" if not failing else f"all but {len(failing)} runs, whose best step is their last or within the "
      f"last 1% of their steps (still improving when the schedule ended): {'; '.join(failing)}")
      + (f"; {rechecked} more had it at the end at the sweep's evals, and before the end when rechecked with more "
         "evals." if rechecked else ".")]
  for corpus, entry in results["corpora"].items():
    lines += _corpus_lines(corpus, entry, labels)
  lines += ["", f"![best-step eval loss and self-argmax share against train data]({png_name})", ""]
  return "\n".join(lines)


def _method(results: dict[str, Any], labels: dict[str, str]) -> str:
  """The paragraph saying how every run was trained, tuned, seeded and scored."""
  return (
      f"Written by `{COMMAND}` in {results['seconds'] / 60:.1f} min ({results['cpu_seconds'] / 60:.1f} "
      f"min of CPU time) on {results['machine']}. Models: {', '.join(labels.values())}. Every run holds out the "
      "train split's last share as a selection split (never trained on), scores it at every eval, "
      + (f"stops {results['patience']} evals after its lowest selection loss" if results["patience"]
         else "runs its whole schedule (no early stopping)")
      + " and is scored at its best step: the eval with the lowest selection loss" + _min_deltas(results)
      + "; its schedule "
      f"(warmup, then cosine decay to 0) is {EPOCHS} passes over its train pairs, within [{MIN_STEPS}, the corpus's "
      "most steps]. " + _tuning_text(results) + " "
      f"Seeds {', '.join(map(str, results['seeds']))}: mean ± standard deviation (ddof = 1). "
      + intervals_note(results)
      + " The count models count exactly the pairs the models train on: add-k, k chosen on the selection split, and "
      "(where swept) interpolated Kneser-Ney, its discount chosen there too; "
      + ("beside a model with context, the interpolated Kneser-Ney n-gram of its context (science/kneser_ney.py: "
         "the MLP's k + 1, the transformer's best of 2-8), counted within documents and scoring each pair from the "
         "tokens its model sees in its window, its order and discount chosen on the selection split; "
         if any("ngram" in entry for entry in results["corpora"].values()) else "")
      + "Δ count = model − add-k count model (negative: the model beats it). "
      "Rare inputs: validation pairs whose current token is among the least frequent making up the last 10% of the "
      "train occurrences used, or never current in them (`tied_embed/data/frequency.py`). Self-argmax: the share of "
      "validation pairs whose predicted likeliest next token is the current token, from the restored best "
      "checkpoint in NumPy float64; beside it the data's own rate of repeats (next = current), both averaged over the "
      "data draws the runs were scored on.")


def _tuning_text(results: dict[str, Any]) -> str:
  """How each model's settings were chosen: the equal-budget trials on an unscored seed, or (a results file
  without "tune_seed") the coordinate search on seed 0."""
  grids = results["grids"]
  if "tune_seed" not in results:
    return ("Each model's regulariser is chosen per data size on the selection split (seed 0), never on eval: "
            f"weight decay (AdamW, decoupled) from {_values(grids['weight_decay'])} for every model"
            + _own_grids(results, "weight_decay") + ", then for tied + W the penalty λ‖W − I‖² from "
            f"{_values(grids['hidden_l2'])}" + _own_grids(results, "hidden_l2") + ".")
  rates = "; ".join(f"{_values(entry['grids']['learning_rate'])} on {name}"
                    for name, entry in results["corpora"].items())
  # the models that tune λ (tied + W; the controls' tied + S), by the first part of their label
  with_l2 = [model["label"].split("  ")[0] for model in results["models"] if "hidden_l2" in model.get("tuned", ())]
  penalty = "" if not with_l2 else (
      f"; {' and '.join(with_l2)}'s penalty λ‖W − I‖² from {_values(grids['hidden_l2'])} is spread over those same "
      "trials (a Latin square), not searched on top; the weight decay applies to every parameter, W included, so "
      "above 0 it pulls W toward 0 while λ pulls it toward I (the grid's 0 leaves W to λ alone)")
  return (f"Every model gets the same tuning budget per data size: its peak learning rate ({rates}) crossed with "
          f"weight decay (AdamW, decoupled) from {_values(grids['weight_decay'])}"
          + _own_grids(results, "weight_decay") + penalty + ". "
          f"The trials run on seed {results['tune_seed']}, which is never scored, and the setting with the lowest "
          "selection loss at its best step is chosen, never by eval." + _edge_rule_text(results))


def _edge_rule_text(results: dict[str, Any]) -> str:
  """The edge rule in a sentence, where the results' cells were tuned under it ('' for results from before)."""
  if not all(tuning.searched(entry) for entry in results["corpora"].values()):
    return ""
  rule = results.get("edge_rule", {"ratio": EDGE_RATIO, "extensions": EDGE_EXTENSIONS})
  return (f" Then, the same rule for every model: an axis whose choice is the highest value tried, or the lowest "
          f"where that is not 0, is tried one step beyond it (×/÷ {rule['ratio']:g}) at the choice's other settings "
          f"and the choice made again, at most {rule['extensions']} steps per axis and side; a chosen 0 (off) stands "
          "only where the value next above it, at the choice's other settings, was tried and lost.")


def _min_deltas(results: dict[str, Any]) -> str:
  """' (on <corpus>: ...)' for each corpus whose plan counts a new best only past a min_delta, '' where none does."""
  own = [f"{entry['plan']['min_delta']:g} nats on {name}" for name, entry in results["corpora"].items()
         if entry["plan"].get("min_delta")]
  return (" (counting an eval as a new best only where it is more than train.min_delta below the best before it: "
          f"{'; '.join(own)}; so the best step's selection loss is within that of the lowest)") if own else ""


def _values(values) -> str:
  return "{" + ", ".join(f"{v:g}" for v in values) + "}"


def _own_grids(results: dict[str, Any], axis: str) -> str:
  """' (… on <corpus>)' for each corpus tuned on its own grid of `axis` (an entry's "grids"), '' where none is."""
  own = [f"{_values(entry['grids'][axis])} on {name}" for name, entry in results["corpora"].items()
         if list(entry.get("grids", results["grids"])[axis]) != list(results["grids"][axis])]
  return f" ({'; '.join(own)})" if own else ""


def _corpus_lines(corpus: str, entry: dict[str, Any], labels: dict[str, str]) -> list[str]:
  """One corpus's section: its sizes, the loss table against the count model, the per-model table, the picks and
  the convergence check."""
  plan, keys, ngrams = entry["plan"], list(entry["runs"]), entry.get("ngram", {})
  lines = [
      "",
      f"## {corpus}: {entry['note']}",
      "",
      f"V = {entry['vocab_size']}, D = {entry['d_model']}, at most {plan['max_steps']} steps per run, "
      f"{plan['evals_per_epoch']:g} eval{'s' if plan['evals_per_epoch'] != 1 else ''} per pass over the train "
      f"pairs (at least {plan['max_evals']} a run, and one at its last step)"
      + (f", a new best more than {plan['min_delta']:g} nats below the best before it" if plan.get("min_delta") else "")
      + f"; {entry['train_pairs']:,} train pairs at 100% (what the "
      f"{entry['select_pairs']:,} selection pairs, the train split's last {100 * plan['selection_share']:g}%, "
      f"leave), {entry['eval_pairs']:,} validation pairs, floor {entry['floor']:.4f} nats, uniform guess "
      f"log V = {entry['uniform']:.4f}; dataset `{entry['dataset']}`; {entry['seconds'] / 60:.1f} min "
      f"({entry['cpu_seconds'] / 60:.1f} min CPU"
      + (f"; {entry['resumed']['runs']} of its runs timed in an earlier sitting" if "resumed" in entry else "") + ")"
      # a corpus swept in a run of its own, its entry merged into the results of another, names its machine
      + (f" on {entry['machine']}" if "machine" in entry else "") + ".",
      "",
      "Best-step eval loss (nats) and its distance from the count model (each count model is fitted on a draw's "
      "train pairs: the mean over the draws, with draw 0's k or discount; Δ count: the mean of each run less the count "
      "model of its own draw):",
      "",
      "| train data | count model (k) | " + ("Kneser-Ney (discount) | " if "kneser_ney" in entry else "")
      + "".join(f"Kneser-Ney n-gram of the {context}'s context (order, discount) | " for context in ngrams)
      + " | ".join(f"{labels[k]} (Δ count)" for k in keys) + " | pick |",
      "|---" * (3 + len(keys) + ("kneser_ney" in entry) + len(ngrams)) + "|",
  ]
  for fraction, count in entry["count"].items():
    cells = []
    if "kneser_ney" in entry:
      cells.append(f"{draws_mean(entry['kneser_ney'][fraction]):.4f} ({entry['kneser_ney'][fraction]['discount']:g})")
    for numbers in (by_fraction[fraction] for by_fraction in ngrams.values()):
      cells.append(f"{draws_mean(numbers):.4f} ({numbers['order']}, {numbers['discount']:g})")
    for k in keys:
      runs = entry["runs"][k][fraction]
      mean, sd = mean_sd(runs, "eval_loss")
      cells.append(f"{mean:.4f} ± {sd:.4f} ({against(runs, by_draw(count)).mean:+.3f})")
    chosen = pick(entry, fraction)
    named = labels[chosen.first] if chosen.named else f"{labels[chosen.first]} or {labels[chosen.second]}, unresolved"
    lines.append(f"| {100 * float(fraction):g}% ({len_used(entry, fraction):,} pairs) | {draws_mean(count):.4f} "
                 f"({count['k']:g}) | " + " | ".join(cells) + f" | {named} |")
  lines += _per_model_lines(entry, labels)
  if tuning.searched(entry):
    lines += tuning_lines(entry, labels)
  lines += ["", "Pick per data size: " + "; ".join(picks(entry, labels)) + "."]
  if "recheck" in entry:
    lines += recheck_lines(entry, labels)
  if "convergence" in entry:
    lines += convergence_lines(entry, labels)
  return lines


def _per_model_lines(entry: dict[str, Any], labels: dict[str, str]) -> list[str]:
  """The table of each model at each size: its chosen regulariser, best steps, gap, rare-input loss, self-argmax."""
  own = any("count_self" in repeats for repeats in entry["repeats"].values())
  lines = [
      "",
      "Per model: the chosen regulariser, the best step / the step it ended at (per seed), the gap to the floor, "
      "the rare-input loss, and the self-argmax share (all pairs / rare inputs) against the data's repeats"
      + (" and the Kneser-Ney count model's own self-argmax share" if own else "") + ":",
      "",
      "| train data | model | chosen | best / end step | gap % of floor | rare-input loss | self-argmax "
      "| data repeats |" + (" count model's self-argmax |" if own else ""),
      "|---|---|---|---|---|---|---|---|" + ("---|" if own else ""),
  ]
  for fraction, repeats in entry["repeats"].items():
    for k in entry["runs"]:
      runs = entry["runs"][k][fraction]
      steps = ", ".join(f"{run['best_step']}/{run['end_step']}" for run in runs)
      gap, gap_sd = mean_sd(runs, "gap_percent")
      rare = mean_sd(runs, "loss_rare_inputs")[0]
      own, own_rare = mean_sd(runs, "predicts_self")[0], mean_sd(runs, "predicts_self_rare")[0]
      lines.append(
          f"| {100 * float(fraction):g}% | {labels[k]} | {_settings_text(entry['tuning'][k][fraction]['chosen'])} "
          f"| {steps} | {gap:.2f} ± {gap_sd:.2f} | {rare:.4f} | {100 * own:.1f}% / {100 * own_rare:.1f}% | "
          f"{100 * repeats['repeats']:.1f}% / {100 * repeats['repeats_rare']:.1f}% |"
          + (f" {100 * repeats['count_self']:.1f}% / {100 * repeats['count_self_rare']:.1f}% |"
             if "count_self" in repeats else ""))
  return lines


def _grid_text(values: list[float], chosen: float) -> str:
  """'{0.00555556, [0.0166667], 0.05}': the values tried on one axis, the chosen one in brackets."""
  return "{" + ", ".join(f"[{value:g}]" if value == chosen else f"{value:g}" for value in values) + "}"


def tuning_lines(entry: dict[str, Any], labels: dict[str, str]) -> list[str]:
  """One line per cell (a model at a size): each axis's values tried, the first grid and the edge rule's extensions
  beyond it, with the choice in brackets; its trials; and its mark (tuning.marked) or that it has none."""
  names = {"learning_rate": "lr", "weight_decay": "wd", "hidden_l2": "λ"}
  rechecked = rechecked_before_the_end(entry)
  lines = ["", "Tuning per cell: the values tried on each axis (the first grid, and beyond it the edge rule's "
           "extensions, ×/÷ the grid's own step), the chosen one in brackets, and the trials run. A cell is marked "
           "where its choice is still at an edge after the most extensions, or where its chosen trial's best step, "
           "or a scored run's, is in its last eval interval (not shown converged; a run rechecked with more evals "
           "whose best step came before the end counts as shown).", ""]
  for fraction in entry["count"]:
    for key, by_fraction in entry["tuning"].items():
      cell = by_fraction[fraction]
      axes = []
      for axis, values in cell["grid"].items():
        sides = cell.get("extensions", {}).get(axis, {})
        extended = ", ".join(f"{times} {'above' if side == tuning.HIGHEST else 'below'}"
                             for side, times in sides.items() if times)
        axes.append(f"{names[axis]} {_grid_text(values, cell['chosen'][axis])}"
                    + (f" (extended {extended})" if extended else ""))
      shown = frozenset((seed, draw) for model, size, seed, draw, factor in rechecked
                        if (model, size, factor) == (key, fraction, 1))
      mark = tuning.marked(cell, entry["runs"][key][fraction], shown)
      lines.append(f"- {100 * float(fraction):g}% {labels[key]}: {'; '.join(axes)}; {len(cell['trials'])} trials: "
                   + (f"**{mark}**" if mark else "interior, shown converged"))
  return lines


def convergence_lines(entry: dict[str, Any], labels: dict[str, str]) -> list[str]:
  """The convergence check's table and what it shows: the best step before the end of the longer schedule, or how
  far the loss still moved; and whether the longer runs change the pick or the distance from the count model."""
  check = entry["convergence"]
  factor, fraction, count = check["factor"], check["fraction"], check["count_eval_loss"]
  size = f"{100 * float(fraction):g}%"
  lines = [
      "", f"### Convergence at {size}", "",
      f"Each model at its chosen settings, seed 0, rerun with {factor}× the steps (warmup, then cosine decay to 0 "
      f"over the longer run, as many evals) and scored at its best step by the selection loss, as above; the count "
      f"model's eval loss is {count:.4f}. Written in {check['seconds'] / 60:.1f} min "
      f"({check['cpu_seconds'] / 60:.1f} min CPU).", "",
      "| model | 1× steps | 1× best / end step | 1× eval loss (Δ count) | "
      f"{factor}× steps | {factor}× best / end step | {factor}× eval loss (Δ count) | change select / eval | "
      "best before the end? |",
      "|---" * 9 + "|",
  ]
  before = rechecked_before_the_end(entry)
  rechecked = {key for key, run in check["runs"].items()
               if at_the_end(run["long"])
               and (key, fraction, run["long"]["seed"], run["long"].get("draw", 0), factor) in before}
  for key, run in check["runs"].items():
    base, long = run["base"], run["long"]
    verdict = "yes (with more evals)" if key in rechecked else "no" if at_the_end(long) else "yes"
    lines.append(
        f"| {labels[key]} | {base['num_steps']} | {base['best_step']} / {base['end_step']} | "
        f"{base['eval_loss']:.4f} ({base['eval_loss'] - count:+.3f}) | {long['num_steps']} | "
        f"{long['best_step']} / {long['end_step']} | {long['eval_loss']:.4f} ({long['eval_loss'] - count:+.3f}) | "
        f"{run['change_select']:+.4f} / {run['change_eval']:+.4f} | "
        f"{verdict} |")
  still = [labels[key] for key, run in check["runs"].items() if at_the_end(run["long"]) and key not in rechecked]
  most = max(check["runs"], key=lambda key: abs(check["runs"][key]["change_eval"]))
  moved = f"{abs(check['runs'][most]['change_eval']):.4f} nats ({labels[most]})"
  if not still:
    dense = f" ({', '.join(labels[key] for key in rechecked)} when rechecked with more evals)" if rechecked else ""
    verdict = (f"Criterion met: enough steps. At {factor}× every model's best step comes before the end of its "
               f"schedule{dense}, and from 1× to {factor}× the eval loss moved by at most {moved}: the 1× runs are "
               "converged to within that.")
  else:
    verdict = (f"Best step before the end: not met for {', '.join(still)}, whose best step is still at the end at "
               f"{factor}×: still improving. From 1× to {factor}× the eval loss moved by at most {moved}; the 1× "
               "runs are at least that far from converged.")
  worse = [labels[key] for key, run in check["runs"].items() if run["change_select"] > 0]
  if worse:  # the longer run's own best is worse by the split that picks every best step
    verdict += (f" The selection loss, which picks every best step and setting, is higher at {factor}× than at 1× "
                f"for {', '.join(worse)}: by that split the longer schedule is no better.")
  verdict += " The tables above and the ranking use the 1× runs."
  lines += ["", verdict]
  change = convergence_change(entry, labels)
  if change:
    lines += ["", change]
  return lines


def convergence_change(entry: dict[str, Any], labels: dict[str, str]) -> str:
  """One sentence where the convergence check's longer runs change the pick at its size, or move a model's distance
  from the count model by more than that model's seed spread (sd of its 1× runs); '' where they do not."""
  check = entry["convergence"]
  fraction, factor = check["fraction"], check["factor"]
  first = ranking(entry, fraction)[0]
  long_first = min(check["runs"], key=lambda key: check["runs"][key]["long"]["eval_loss"])
  spread = {key: mean_sd(entry["runs"][key][fraction], "eval_loss")[1] for key in check["runs"]}
  moved = [key for key, run in check["runs"].items() if abs(run["change_eval"]) > spread[key]]
  parts = []
  if long_first != first:
    parts.append(f"the pick becomes {labels[long_first]}")
  if moved:
    parts.append("the distance from the count model moves by more than the seeds' spread for "
                 + ", ".join(f"{labels[key]} ({check['runs'][key]['change_eval']:+.3f}, sd {spread[key]:.4f})"
                             for key in moved))
  if not parts:
    return ""
  best = check["runs"][long_first]["long"]["eval_loss"] - check["count_eval_loss"]
  return (f"With {factor}× the steps at {100 * float(fraction):g}% (seed 0): " + "; ".join(parts)
          + f"; {labels[long_first]} ends {best:+.3f} nats from the count model.")


def convergence_readme(entry: dict[str, Any], labels: dict[str, str]) -> str:
  """The README's clause on the convergence check: where the longer runs change the pick, or move the pick's
  distance from the count model by more than its seed spread, that distance at F× ('' otherwise)."""
  check = entry["convergence"]
  fraction, factor = check["fraction"], check["factor"]
  first = ranking(entry, fraction)[0]
  long_first = min(check["runs"], key=lambda key: check["runs"][key]["long"]["eval_loss"])
  moved = abs(check["runs"][first]["change_eval"]) > mean_sd(entry["runs"][first][fraction], "eval_loss")[1]
  if long_first == first and not moved:
    return ""
  distance = check["runs"][long_first]["long"]["eval_loss"] - check["count_eval_loss"]
  side = f"count model {distance:.3f} ahead" if distance > 0 else f"{-distance:.3f} ahead of the count model"
  return (f" (with {factor}× the steps, seed 0: {labels[long_first]}" + (", the pick" if long_first != first else "")
          + f", {side})")


def len_used(entry: dict[str, Any], fraction: str) -> int:
  from tied_embed.data import bigram as data_lib  # noqa: PLC0415

  return data_lib.train_pairs_used(entry["train_pairs"], float(fraction))


def readme_block(results: dict[str, Any]) -> str:
  """The README's first-screen answer: per corpus and data size the model to pick and its paired margin with the
  margin's 95% interval, or "unresolved" where the interval holds 0, and where the strongest count model is ahead."""
  labels = {model["key"]: model["label"].split("  ")[0] for model in results["models"]}
  lines = []
  for corpus, entry in results["corpora"].items():
    sizes = [pick_text(entry, fraction, labels) for fraction in entry["count"]]
    lines.append(f"- **{corpus}** ({entry['note'].split(' (')[0]}, V = {entry['vocab_size']}): " + "; ".join(sizes))
    if "convergence" in entry:
      lines[-1] += convergence_readme(entry, labels)
  lines.append(f"\n{intervals_note(results)}")
  lines.append(f"\nMeasured by `{COMMAND}` in {results['seconds'] / 60:.0f} min "
               f"({results['cpu_seconds'] / 60:.0f} min of CPU time) on {results['machine']}.")
  return "\n".join(lines)


def figure(results: dict[str, Any]):
  """Per corpus: the best-step eval loss against train pairs, one line per model, with the count model and the
  floor; and the self-argmax share with the data's repeat rate."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
  from matplotlib.figure import Figure  # noqa: PLC0415
  from matplotlib.ticker import FuncFormatter  # noqa: PLC0415

  labels = {model["key"]: model["label"] for model in results["models"]}
  names = list(results["corpora"])
  fig = Figure(figsize=(11, 4.2 * len(names)))
  FigureCanvasAgg(fig)
  axes = fig.subplots(len(names), 2, squeeze=False)
  for row, corpus in enumerate(names):
    entry = results["corpora"][corpus]
    fractions = list(entry["count"])
    pairs = [len_used(entry, f) for f in fractions]
    loss_ax, self_ax = axes[row]
    for key, runs in entry["runs"].items():
      means, sds = zip(*(mean_sd(runs[f], "eval_loss") for f in fractions), strict=True)
      loss_ax.errorbar(pairs, means, yerr=sds, marker="o", capsize=3, label=labels[key])
      means, sds = zip(*(mean_sd(runs[f], "predicts_self") for f in fractions), strict=True)
      self_ax.errorbar(pairs, 100 * np.array(means), yerr=100 * np.array(sds), marker="o", capsize=3,
                       label=labels[key])
    loss_ax.plot(pairs, [draws_mean(entry["count"][f]) for f in fractions], "k--", marker="s",
                 label="count bigram (add-k)")
    if "kneser_ney" in entry:
      loss_ax.plot(pairs, [draws_mean(entry["kneser_ney"][f]) for f in fractions], "k-.", marker="^",
                   label="count bigram (Kneser-Ney)")
    for context, by_fraction in entry.get("ngram", {}).items():
      loss_ax.plot(pairs, [draws_mean(by_fraction[f]) for f in fractions], ":", marker="v",
                   label=f"Kneser-Ney n-gram, the {context}'s context")
    loss_ax.axhline(entry["floor"], color="grey", linestyle=":", label="floor (unreachable)")
    self_ax.plot(pairs, [100 * entry["repeats"][f]["repeats"] for f in fractions], "k--",
                 label="data: next = current")
    if all("count_self" in entry["repeats"][f] for f in fractions):
      self_ax.plot(pairs, [100 * entry["repeats"][f]["count_self"] for f in fractions], "k-.",
                   label="count model (Kneser-Ney): its own argmax")
    loss_ax.set_ylabel("best-step eval loss (nats)")
    self_ax.set_ylabel("predicted next = current (% of eval pairs)")
    loss_ax.set_title(f"{corpus}: best-step eval loss")
    self_ax.set_title(f"{corpus}: likeliest next token = the current one")
    for ax in (loss_ax, self_ax):
      ax.set_xscale("log")
      ax.set_xlabel("train pairs used")
      ax.grid(alpha=0.3)
      ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))  # 1,000,000, not 1e+06
      ax.xaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    loss_ax.legend(fontsize=8)
    self_ax.legend(fontsize=8)
  fig.tight_layout()
  return fig




def results_problem(results: Any) -> str:
  """Why `results` is not a sweep's results file ('' where it is): a missing key, a value that cannot be published
  (`checks.values_problem`), or tables that cannot be made."""
  if not isinstance(results, dict):
    return f"expected a JSON object, got {type(results).__name__}"
  missing = [key for key in RESULTS_KEYS if key not in results]
  if missing:
    return f"no {missing[0]!r} key, which the sweep writes"
  if not isinstance(results["corpora"], dict) or not results["corpora"]:
    return "'corpora' holds no corpus"
  for name, entry in results["corpora"].items():
    missing = [key for key in CORPUS_KEYS if not isinstance(entry, dict) or key not in entry]
    if missing:
      return f"its {name!r} corpus has no {missing[0]!r} key"
  try:
    wrong = checks.values_problem(results)
    if wrong:
      return wrong
    markdown(results, "when_to_tie.png")
    readme_block(results)
  except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as error:
    return f"its tables cannot be made ({type(error).__name__}: {error})"
  return ""


def render(results: dict[str, Any], notes: str = "") -> dict[str, str | bytes]:
  """The contents of when_to_tie.{json,md,png}, all made before any is written."""
  png = io.BytesIO()
  figure(results).savefig(png, format="png", dpi=100)
  return {"json": json.dumps(results, indent=1, allow_nan=True), "md": markdown(results, "when_to_tie.png", notes),
          "png": png.getvalue()}


def write(results: dict[str, Any], out: pathlib.Path, notes: str = "") -> list[pathlib.Path]:
  """<out>/when_to_tie.{json,md,png}: → their paths."""
  contents = render(results, notes)
  out.mkdir(parents=True, exist_ok=True)
  paths = [out / f"when_to_tie.{suffix}" for suffix in SUFFIXES]
  from tied_embed import util  # noqa: PLC0415

  for path, suffix in zip(paths, SUFFIXES, strict=True):
    data = contents[suffix]
    util.write_atomically(path, data if isinstance(data, bytes) else data.encode())  # never through a link there
  return paths


def kept_notes(path: pathlib.Path) -> str:
  """The hand-written notes between the NOTES markers of an existing docs page ('' if none)."""
  return common.block(path.read_text() if path.exists() else "", NOTES_START, NOTES_END) or ""


def write_picks(picks_text: str, readme: pathlib.Path) -> None:
  """The picks block inside the README's when-to-tie block set to `picks_text`; a README without both left alone."""
  text = readme.read_text()
  section = common.block(text, README_START, README_END)
  rewritten = None if section is None else common.replace_block(section, PICKS_START, PICKS_END, f"\n{picks_text}\n")
  if rewritten is not None:
    readme.write_text(common.replace_block(text, README_START, README_END, rewritten))


def generated_notes(notes: str, results: dict[str, Any], docs: pathlib.Path) -> str:
  """`notes` with their generated tables (the controls', the asymmetry budget's, the context blocks') remade from
  `results` (the bigram block's) and the JSON files beside it in `docs`."""
  return carry_over.notes_with_context(mechanism.notes_with_tables(notes, results, docs), results, docs)


def publish(results: dict[str, Any], out: pathlib.Path, write_docs: bool) -> list[pathlib.Path]:
  """Writes <out>/when_to_tie.*; with `write_docs` also docs/when_to_tie.* (keeping its notes), the picks in
  docs/results.md and tying's cost with and without context in the README and docs/results.md."""
  docs = REPO / "docs"
  picks_text = readme_block(results)  # made before anything is written, as `write` makes its files
  notes = generated_notes(kept_notes(docs / "when_to_tie.md"), results, docs) if write_docs else ""
  cost_tables = carry_over.cost_tables(results, docs) if write_docs else {}
  paths = write(results, out, notes)
  if write_docs:
    for path in paths:
      if path.resolve() != (docs / path.name).resolve():
        shutil.copyfile(path, docs / path.name)
    write_picks(picks_text, REPO / "docs" / "results.md")
    for page, lines in cost_tables.items():
      common.rewrite_block(page, carry_over.COST_START, carry_over.COST_END, "\n" + "\n".join(lines) + "\n")
  return paths


def write_budget_docs(path: pathlib.Path, docs: pathlib.Path = REPO / "docs") -> None:
  """Copies the asymmetry budget at `path` to docs/ and rewrites the generated tables in docs/when_to_tie.md's notes
  from docs/when_to_tie.json and the files beside it, the rest of the page kept (a page without notes untouched)."""
  if path.resolve() != (docs / path.name).resolve():
    shutil.copyfile(path, docs / path.name)
  page = docs / "when_to_tie.md"
  notes = kept_notes(page)
  if notes and (docs / "when_to_tie.json").is_file():
    results = json.loads((docs / "when_to_tie.json").read_text())
    common.rewrite_block(page, NOTES_START, NOTES_END, generated_notes(notes, results, docs))
