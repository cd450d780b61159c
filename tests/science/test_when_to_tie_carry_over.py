"""Does tying's answer carry over to context? A context block paired with the bigram block run against run, on
hand-made results whose losses are chosen so each interval is known by hand: the table's means, its paired rows, the
change in tying's cost, and the sentence that reads them."""

import copy
import json
import re

import pytest
from helpers import by_hand_interval, markdown_table

from science import common
from science.when_to_tie import carry_over, mechanism, report
from science.when_to_tie import plan as plans

DOCS = plans.REPO / "docs"
_CELL = re.compile(r"^(-?[\d.]+) \((-?[\d.]+) to (-?[\d.]+)\)$")
KEYS = {0: (0, 0), 1: (0, 1), 2: (0, 2)}  # run index → (seed, draw): one seed on each of 3 draws
# eval losses of 3 runs per model at one size: tied − untied without context is 0.3, 0.4, 0.5; with the MLP's
# context 0.1, 0.1, 0.1; so context takes 0.2, 0.3, 0.4 of tying's cost away
LOSSES = {"tied": (2.3, 2.4, 2.5), "untied": (2.0, 2.0, 2.0), "tied_w": (2.1, 2.1, 2.2),
          "tied_mlp": (1.6, 1.7, 1.8), "untied_mlp": (1.5, 1.6, 1.7), "tied_w_mlp": (1.6, 1.6, 1.6)}
COUNT = {"k": 0.03, "eval_loss": 2.2, "select_loss": 2.3, "by_draw": {"0": 2.2, "1": 2.4}}
KNESER_NEY = {"discount": 0.9, "eval_loss": 2.1, "select_loss": 2.2, "by_draw": {"0": 2.1, "1": 2.3}}
NGRAM = {"order": 4, "discount": 0.8, "eval_loss": 1.5, "select_loss": 1.6, "by_draw": {"0": 1.5, "1": 1.9, "2": 1.7}}


# each run's best step and its end (evals every 100 steps): the first run's best in its last eval interval, the others'
# before it
STEPS = ((995, 1000), (800, 1000), (900, 1000))
GRIDS = {"learning_rate": [0.01, 0.03, 0.1], "weight_decay": [0.0, 0.1, 1.0], "hidden_l2": [0.0, 0.001, 0.01]}
CHOSEN = {"learning_rate": 0.1, "weight_decay": 0.1, "hidden_l2": 0.0}


def _block(keys, family=None):
  runs = {key: {"0.1": [{"seed": KEYS[i][0], "draw": KEYS[i][1], "eval_loss": LOSSES[key][i], "best_step": STEPS[i][0],
                         "end_step": STEPS[i][1], "eval_every": 100} for i in range(3)]}
          for key in keys}
  tuning = {key: {"0.1": {"chosen": {axis: value for axis, value in CHOSEN.items()
                                     if axis != "hidden_l2" or key.startswith("tied_w")}}} for key in keys}
  entry = {"dataset": "text-draw0", "count": {"0.1": COUNT}, "kneser_ney": {"0.1": KNESER_NEY}, "runs": runs,
           "tuning": tuning, "grids": GRIDS}
  if family:
    entry["ngram"] = {family: {"0.1": NGRAM}}
  return {"models": [{"key": key, "label": key.replace("_", " ")} for key in keys], "corpora": {"bytes": entry}}


BIGRAM = _block(("tied", "untied", "tied_w"))
MLP = _block(("tied_mlp", "untied_mlp", "tied_w_mlp"), "mlp")


def _by_hand_t(differences):
  """(mean, low, high) of the fixture's 3 runs' differences (KEYS: one seed on each of 3 draws, so the t-interval of
  the 3 draws' values) by hand (helpers.by_hand_interval)."""
  return by_hand_interval({KEYS[index]: value for index, value in enumerate(differences)})


def test_the_table_pairs_the_blocks_run_by_run_and_reads_the_change_in_tyings_cost():
  lines = carry_over.context_lines(BIGRAM, MLP, "mlp")
  means = markdown_table("\n".join(lines), "| model |")
  paired_rows = markdown_table("\n".join(lines), "| paired difference |")
  for key in LOSSES:
    assert float(means[key.replace("_", " ")][0]) == pytest.approx(sum(LOSSES[key]) / 3, abs=6e-5)
  # count models: the mean over the draws they were fitted on, not draw 0's
  assert float(means["Kneser-Ney bigram (count model)"][0]) == pytest.approx(2.2)
  assert float(means["Kneser-Ney 4-gram, the mlp's context (count model)"][0]) == pytest.approx(1.7)
  rows = {name.split(":")[0]: cells[0] for name, cells in paired_rows.items()}
  expected = {
      "tying's cost without context": _by_hand_t([0.3, 0.4, 0.5]),
      "tying's cost with the mlp's context": (0.1, 0.1, 0.1),  # no spread: the interval is the point
      "W's gain without context": _by_hand_t([0.2, 0.3, 0.3]),
      "W's gain with the mlp's context": _by_hand_t([0.0, 0.1, 0.2]),
      "the mlp's context for tied": (0.7, 0.7, 0.7),
  }
  change = paired_rows["what the mlp's context changes in tying's cost"][0]
  for name, value in expected.items():
    assert tuple(map(float, _CELL.match(rows[name]).groups())) == pytest.approx(value, abs=6e-4), name
  mean, low, high = _by_hand_t([0.2, 0.3, 0.4])
  assert tuple(map(float, _CELL.match(change).groups())) == pytest.approx((mean, low, high), abs=6e-4)
  # each run less the 4-gram of its own draw (draws 0, 1, 2: 1.5, 1.9, 1.7): 1.6 − 1.5, 1.7 − 1.9, 1.8 − 1.7
  cell = paired_rows["tied mlp − the Kneser-Ney n-gram of its context (positive: the count model is better)"][0]
  assert tuple(map(float, _CELL.match(cell).groups())) == pytest.approx(_by_hand_t([0.1, -0.2, 0.1]), abs=6e-4)
  reading = next(line for line in lines if line.startswith("Tying's cost"))
  # against tied + W without context: (tied_w − untied) − 0.1 = 0.0, 0.0, 0.1
  w_mean, w_low, w_high = _by_hand_t([0.0, 0.0, 0.1])
  cell = paired_rows["what the mlp's context changes in tying's cost against tied + W"][0]
  assert tuple(map(float, _CELL.match(cell).groups())) == pytest.approx((w_mean, w_low, w_high), abs=6e-4)
  assert w_low < 0 < w_high
  assert reading == (f"Tying's cost (positive: untied is better): at 10% tying costs +0.400 without context and "
                     f"+0.100 with the mlp's (context shrinks it: +0.300, {low:.3f} to {high:.3f}; against tied + W "
                     f"without context, unresolved: {w_mean:+.3f}, {w_low:.3f} to {w_high:.3f}).")


def test_the_table_says_how_many_runs_were_best_in_their_last_eval_interval_and_where_each_choice_sits():
  ends = markdown_table("\n".join(carry_over.context_lines(BIGRAM, MLP, "mlp")), "| context model |")
  # STEPS: 995 of 1000 is within the 100 steps of one eval interval of the end, 900 and 800 are not
  chosen = "learning rate 0.1 (highest), weight decay 0.1 (middle)"
  assert ends["tied mlp"] == [f"1 of 3 best in the last eval interval; {chosen}"]
  assert ends["untied mlp"] == ends["tied mlp"]
  assert ends["tied w mlp"] == [f"1 of 3 best in the last eval interval; {chosen}, λ 0 (lowest)"]


def test_a_change_whose_interval_holds_zero_is_read_as_unresolved():
  block = copy.deepcopy(MLP)
  for run, loss in zip(block["corpora"]["bytes"]["runs"]["tied_mlp"]["0.1"], (1.8, 2.0, 2.2), strict=True):
    run["eval_loss"] = loss  # tied − untied with context: 0.3, 0.4, 0.5, the same as without: a change of 0 each
  block["corpora"]["bytes"]["runs"]["tied_mlp"]["0.1"][1]["eval_loss"] = 2.1  # one run 0.1 off: changes 0, −0.1, 0
  mean, low, high = _by_hand_t([0.0, -0.1, 0.0])
  assert low < 0 < high
  # against tied + W: (tied_w − untied) 0.1, 0.1, 0.2 less (tied − untied with the MLP) 0.3, 0.5, 0.5
  w_mean, w_low, w_high = _by_hand_t([-0.2, -0.4, -0.3])
  assert w_high < 0
  assert next(line for line in carry_over.context_lines(BIGRAM, block, "mlp") if line.startswith("Tying's")).endswith(
      f"+0.433 with the mlp's (unresolved: {mean:+.3f}, {low:.3f} to {high:.3f}; against tied + W without context, "
      f"context widens it: {w_mean:+.3f}, {w_low:.3f} to {w_high:.3f}).")


def test_the_notes_get_the_table_of_each_context_json_beside_the_bigram_block(tmp_path):
  notes = f"before {carry_over.CONTEXT_START}\nold\n{carry_over.CONTEXT_END} after"
  assert carry_over.notes_with_context(notes, BIGRAM, tmp_path) == notes  # no context block there: kept
  (tmp_path / "when_to_tie_mlp.json").write_text(json.dumps(MLP))
  rewritten = carry_over.notes_with_context(notes, BIGRAM, tmp_path)
  assert rewritten.startswith("before ") and rewritten.endswith(" after") and "old" not in rewritten
  assert "**bytes, mlp** (when_to_tie_mlp.json)" in rewritten and "what the mlp's context changes" in rewritten
  other = copy.deepcopy(MLP)
  other["corpora"]["bytes"]["dataset"] += "-other"
  (tmp_path / "when_to_tie_mlp.json").write_text(json.dumps(other))
  assert "No paired differences: their bytes datasets differ" in carry_over.notes_with_context(notes, BIGRAM, tmp_path)
  assert mechanism.cross_block_problem(BIGRAM, MLP, "bytes") == ""


def _docs_losses(names, corpus="bytes"):
  """{model: {fraction: {(seed, draw): eval loss}}} of the `corpus` runs in the docs JSONs `names`."""
  found = {}
  for name in names:
    for key, by_fraction in json.loads((DOCS / name).read_text())["corpora"][corpus]["runs"].items():
      found[key] = {fraction: {(run["seed"], run["draw"]): run["eval_loss"] for run in runs}
                    for fraction, runs in by_fraction.items()}
  return found


# every (corpus, family) block the docs' context JSONs hold: a block merged later is checked without a list to extend
DOCS_BLOCKS = [(corpus, family) for family in ("mlp", "transformer")
               for corpus in json.loads((DOCS / f"when_to_tie_{family}.json").read_text())["corpora"]]


def test_the_docs_hold_the_published_context_blocks():
  assert set(DOCS_BLOCKS) == {(corpus, family) for corpus in ("bytes", "subword") for family in ("mlp", "transformer")}


@pytest.mark.parametrize(("corpus", "family"), DOCS_BLOCKS)
def test_the_page_states_each_context_blocks_paired_table_of_the_jsons(corpus, family):
  losses = _docs_losses(["when_to_tie.json", f"when_to_tie_{family}.json"], corpus)
  page = common.block((DOCS / "when_to_tie.md").read_text(), carry_over.CONTEXT_START, carry_over.CONTEXT_END)
  page = page[page.index(f"**{corpus}, {family}** (when_to_tie_{family}.json)"):]  # this block's tables come first
  rows = {name.split(":")[0]: cells for name, cells in markdown_table(page, "| paired difference |").items()}
  # each row: (worse, better) per (seed, draw), worse − better
  tied, untied, tied_w = f"tied_{family}", f"untied_{family}", f"tied_w_{family}"
  differences = {"tying's cost without context": ("tied", "untied"),
                 f"tying's cost with the {family}'s context": (tied, untied),
                 f"W's gain with the {family}'s context": (tied, tied_w),
                 f"the {family}'s context for tied": ("tied", tied)}
  for index, fraction in enumerate(["0.01", "0.1", "1"]):
    keys = sorted(losses[tied][fraction])
    assert keys == sorted(losses["tied"][fraction])  # every context run has its bigram partner
    by_row = {name: [losses[worse][fraction][key] - losses[better][fraction][key] for key in keys]
              for name, (worse, better) in differences.items()}
    for name, values in by_row.items():
      cell = rows[name][index]
      expected = by_hand_interval(dict(zip(keys, values, strict=True)))  # 3 draws × 5 seeds at 1% and 10%
      assert tuple(map(float, _CELL.match(cell).groups())) == pytest.approx(expected, abs=6e-4), name
    moved = [a - b for a, b in zip(by_row["tying's cost without context"],
                                   by_row[f"tying's cost with the {family}'s context"], strict=True)]
    cell = rows[f"what the {family}'s context changes in tying's cost"][index]
    expected = by_hand_interval(dict(zip(keys, moved, strict=True)))
    assert tuple(map(float, _CELL.match(cell).groups())) == pytest.approx(expected, abs=6e-4), fraction


def test_the_page_holds_the_context_table_the_jsons_make():
  notes = report.kept_notes(DOCS / "when_to_tie.md")
  bigram = json.loads((DOCS / "when_to_tie.json").read_text())
  assert carry_over.notes_with_context(notes, bigram, DOCS) == notes


# (tied, untied) of each row of the pages' cost table, with the words its family's config gives (configs'
# model.context_k=3 for the MLP; data.context_length=16, model.layers=1 for the transformer)
COST_ROWS = {None: ("nothing (the bigram model)", "tied", "untied"),
             "mlp": ("an MLP over the previous 3 tokens", "tied_mlp", "untied_mlp"),
             "transformer": ("1 transformer block over 16 tokens", "tied_transformer", "untied_transformer")}
_VERDICT = re.compile(r"^(?:(untied|tied) by|(unresolved):) (-?[\d.]+)(?: \((-?[\d.]+) to (-?[\d.]+)\))?$")


def _by_hand_verdict(differences):
  """(who is ahead or 'unresolved', the number shown, low, high) of tied − untied keyed by (seed, draw), by hand."""
  mean, low, high = by_hand_interval(differences)
  if low > 0 or high < 0:
    return ("untied" if mean > 0 else "tied"), abs(mean), low, high
  return "unresolved", mean, low, high


@pytest.mark.parametrize(("page", "with_interval"), [("README.md", False), ("docs/results.md", True)])
def test_the_readme_and_results_state_tyings_cost_with_and_without_context_from_the_jsons(page, with_interval):
  text = common.block((plans.REPO / page).read_text(), carry_over.COST_START, carry_over.COST_END)
  lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| text |")]
  table = {tuple(cell.strip() for cell in line.strip("|").split("|")[:2]): line.strip("|").split("|")[2:]
           for line in lines}
  expected_rows = [(corpus, COST_ROWS[None][0]) for corpus in ("bytes", "subword")]
  expected_rows += [(corpus, COST_ROWS[family][0]) for corpus, family in DOCS_BLOCKS]
  assert sorted(table) == sorted(expected_rows)  # every block the JSONs hold, no other
  for family in (None, "mlp", "transformer"):
    words, tied, untied = COST_ROWS[family]
    for corpus in [corpus for corpus, known in table if known == words]:
      losses = _docs_losses(["when_to_tie.json"] + ([f"when_to_tie_{family}.json"] if family else []), corpus)
      for index, fraction in enumerate(["0.01", "0.1", "1"]):
        by_hand = _by_hand_verdict({key: losses[tied][fraction][key] - losses[untied][fraction][key]
                                    for key in losses[tied][fraction]})
        found = _VERDICT.match(table[corpus, words][index].strip()).groups()
        assert (found[0] or found[1]) == by_hand[0], (corpus, words, fraction)
        shown = [float(value) for value in found[2:] if value is not None]
        assert len(shown) == (3 if with_interval or by_hand[0] == "unresolved" else 1)
        assert shown == pytest.approx(by_hand[1:len(shown) + 1], abs=6e-4), (corpus, words, fraction)


def test_the_pages_hold_the_cost_tables_the_jsons_make():
  bigram = json.loads((DOCS / "when_to_tie.json").read_text())
  for page, lines in carry_over.cost_tables(bigram, DOCS).items():
    assert common.block(page.read_text(), carry_over.COST_START, carry_over.COST_END) == "\n" + "\n".join(lines) + "\n"


def test_the_cost_table_names_who_is_ahead_or_unresolved_by_the_interval(tmp_path):
  block = copy.deepcopy(MLP)
  block["models"] = [{**model, "needs": [["model.context_k", 3]]} for model in block["models"]]
  # with the MLP at 10% tied − untied is 0.1 each run; then tied 0.2 lower (tied ahead), then one run off (unresolved)
  (tmp_path / "when_to_tie_mlp.json").write_text(json.dumps(block))
  lines = carry_over.cost_table(BIGRAM, tmp_path, with_interval=True)
  mean, low, high = _by_hand_t([0.3, 0.4, 0.5])
  assert lines[2] == f"| bytes | nothing (the bigram model) | untied by {mean:.3f} ({low:.3f} to {high:.3f}) |"
  assert lines[3] == "| bytes | an MLP over the previous 3 tokens | untied by 0.100 (0.100 to 0.100) |"
  for loss_shift, cell in ((0.2, "tied by 0.100"), (None, None)):
    if loss_shift is None:  # one run off: tied − untied 0.1, −0.1, 0.1 holds 0
      losses = (1.6, 1.5, 1.8)
      mean, low, high = _by_hand_t([0.1, -0.1, 0.1])
      cell = f"unresolved: {mean:.3f} ({low:.3f} to {high:.3f})"
    else:
      losses = tuple(loss - loss_shift for loss in LOSSES["tied_mlp"])
    for run, loss in zip(block["corpora"]["bytes"]["runs"]["tied_mlp"]["0.1"], losses, strict=True):
      run["eval_loss"] = loss
    (tmp_path / "when_to_tie_mlp.json").write_text(json.dumps(block))
    assert carry_over.cost_table(BIGRAM, tmp_path)[3] == f"| bytes | an MLP over the previous 3 tokens | {cell} |"
  assert carry_over.cost_tables(MLP, tmp_path) == {}  # a context block alone makes no cost table
