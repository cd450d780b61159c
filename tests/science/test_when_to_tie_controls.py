"""The mechanism's numbers on the docs page: the controls block paired with the bigram block run against run (same
size, seed and draw) and the asymmetry budget of the train pairs, recomputed from the JSON files in plain NumPy
float64 and a printed t table, and the budget's own code path on hand-made pairs."""

import json
import re

import numpy as np
import pytest
from helpers import by_hand_interval, markdown_table

from science import common
from science.when_to_tie import budget, cli, mechanism, report
from science.when_to_tie import plan as plans
from tied_embed.data.text import count_bigram

DOCS = plans.REPO / "docs"
# Each row of the page's paired table, by the words before its colon: (better, worse); the row is worse − better.
ROWS = {"an output bias over tied": ("tied_bias", "tied"), "a symmetric S over tied": ("tied_sym", "tied"),
        "the general W over tied, the whole gap": ("tied_w", "tied"),
        "asymmetry, W over a symmetric S": ("tied_w", "tied_sym"),
        "untied at D/2 over tied at D, equal parameters": ("untied_half", "tied")}
_CELL = re.compile(r"^(-?[\d.]+) \((-?[\d.]+) to (-?[\d.]+)\)$")


def _json(name):
  return json.loads((DOCS / name).read_text())


def _losses():
  """{model: {fraction: {(seed, draw): eval loss}}} of both blocks' bytes runs."""
  found = {}
  for name in ("when_to_tie.json", mechanism.CONTROLS_JSON):
    for key, by_fraction in _json(name)["corpora"]["bytes"]["runs"].items():
      found[key] = {fraction: {(run["seed"], run["draw"]): run["eval_loss"] for run in runs}
                    for fraction, runs in by_fraction.items()}
  return found


def _interval(losses, better, worse, fraction):
  """(mean, low, high) of worse − better over the (seed, draw) both ran, by hand (5 seeds on one draw at 100%; 3
  draws × 5 seeds crossed at 1% and 10%: helpers.by_hand_interval)."""
  a, b = losses[better][fraction], losses[worse][fraction]
  assert a.keys() == b.keys()  # every run of one block has its partner in the other
  return by_hand_interval({key: b[key] - a[key] for key in a})


def _page_block(start, end):
  return common.block((DOCS / "when_to_tie.md").read_text(), start, end)


def test_the_page_states_the_cross_block_means_and_paired_intervals_of_the_jsons():
  losses, fractions = _losses(), ["0.01", "0.1", "1"]
  block = _page_block(mechanism.CONTROLS_START, mechanism.CONTROLS_END)
  means = markdown_table(block, "| model |")
  assert len(means) == 5
  for label, cells in means.items():
    key = {"tied E·Eᵀ": "tied", "tied + bias": "tied_bias", "tied + S": "tied_sym", "tied + W": "tied_w",
           "untied at D/2": "untied_half"}[label.split(",")[0].split(" (")[0]]
    for cell, fraction in zip(cells, fractions, strict=True):
      assert float(cell) == pytest.approx(np.mean(list(losses[key][fraction].values())), abs=6e-5), (label, cell)
  rows = markdown_table(block, "| paired difference |")
  assert {name.split(":")[0] for name in rows} == set(ROWS)
  spreads, holding = {}, []
  for name, cells in rows.items():
    better, worse = ROWS[name.split(":")[0]]
    intervals = [_interval(losses, better, worse, fraction) for fraction in fractions]
    for cell, expected, fraction in zip(cells, intervals, fractions, strict=True):
      assert tuple(map(float, _CELL.match(cell).groups())) == pytest.approx(expected, abs=6e-4), (name, cell)
      if expected[1] <= 0 <= expected[2]:
        holding.append(f"{name.split(':')[0]} at {100 * float(fraction):g}%")
    spreads[better, worse] = f"{min(i[0] for i in intervals):.3f}–{max(i[0] for i in intervals):.3f}"
  sentence = block.strip().splitlines()[-1]
  # the crossed intervals at 1% (3 draws): two of the gains hold 0 there; the sentence names them
  assert holding == ["a symmetric S over tied at 1%", "asymmetry, W over a symmetric S at 1%"]
  assert sentence == (
      f"An output bias buys {spreads['tied_bias', 'tied']} nats; a symmetric S buys {spreads['tied_sym', 'tied']} "
      f"of tied's {spreads['tied_w', 'tied']} gap to tied + W; the rest, {spreads['tied_w', 'tied_sym']} nats, is "
      f"what asymmetry buys. At equal parameters, untied at D/2 is {spreads['untied_half', 'tied']} nats ahead of "
      f"tied at D. The intervals that hold 0: {'; '.join(holding)}.")


def test_the_page_states_the_asymmetry_budget_of_the_json_beside_the_measured_gaps():
  losses, budget_json = _losses(), _json(mechanism.BUDGET_JSON)
  entry = budget_json["corpora"]["bytes"]
  assert entry["dataset"] == _json("when_to_tie.json")["corpora"]["bytes"]["dataset"]
  assert budget_json["command"].startswith("python -m science.when_to_tie --asymmetry") and budget_json["machine"]
  rows = markdown_table(_page_block(mechanism.BUDGET_START, mechanism.BUDGET_END), "| train data |")
  assert list(rows) == ["1%", "10%", "100%"]
  for (size, cells), fraction in zip(rows.items(), ["0.01", "0.1", "1"], strict=True):
    draws = list(entry["by_fraction"][fraction]["by_draw"].values())
    assert int(cells[0]) == len(draws) == (1 if fraction == "1" else 3)
    assert float(cells[1]) == draws[0]["k"] == _json("when_to_tie.json")["corpora"]["bytes"]["count"][fraction]["k"]
    for cell, name, places in ((cells[2], "tokens", 0.6), (cells[3], "antisymmetric_share", 6e-4),
                               (cells[4], "psd_rank_residual_share", 6e-4), (cells[5], "psd_rank_excess_loss", 6e-4)):
      assert float(cell) == pytest.approx(np.mean([draw[name] for draw in draws]), abs=places), (size, name)
    for cell, (better, worse) in ((cells[6], ("tied_w", "tied")), (cells[7], ("tied_w", "tied_sym"))):
      expected = _interval(losses, better, worse, fraction)
      assert tuple(map(float, _CELL.match(cell).groups())) == pytest.approx(expected, abs=6e-4), (size, cell)


def test_the_page_holds_the_tables_the_jsons_make():
  notes = report.kept_notes(DOCS / "when_to_tie.md")
  assert mechanism.notes_with_tables(notes, _json("when_to_tie.json"), DOCS) == notes


def test_blocks_of_other_data_are_not_paired(tmp_path):
  bigram, controls = _json("when_to_tie.json"), _json(mechanism.CONTROLS_JSON)
  controls["corpora"]["bytes"]["dataset"] += "-other"
  assert "datasets differ" in mechanism.cross_block_problem(bigram, controls, "bytes")
  (tmp_path / mechanism.CONTROLS_JSON).write_text(json.dumps(controls))
  notes = f"before {mechanism.CONTROLS_START}\nold\n{mechanism.CONTROLS_END} after"
  rewritten = mechanism.notes_with_tables(notes, bigram, tmp_path)
  assert rewritten.startswith("before ") and rewritten.endswith(" after") and "old" not in rewritten
  assert "No paired differences: their bytes datasets differ" in rewritten
  with pytest.raises(ValueError, match="datasets differ"):
    mechanism.joined_runs(bigram, controls, "bytes")


def test_the_add_k_table_of_hand_made_pairs():
  # row 0: counts (0, 2, 0) → (c + ½) / (2 + 3·½); row 1: (1, 0, 0) → / (1 + 3·½); token 2 never current: nan
  table = budget.add_k_log_probs(np.array([0, 0, 1]), np.array([1, 1, 0]), 3, 0.5)
  np.testing.assert_allclose(table[:2], np.log([[0.5 / 3.5, 2.5 / 3.5, 0.5 / 3.5], [1.5 / 2.5, 0.5 / 2.5, 0.5 / 2.5]]))
  assert np.isnan(table[2]).all()


def _pairs(counts):
  """The pairs (ids, next ids) with count(i, j) = counts[i][j]."""
  ids, next_ids = zip(*((i, j) for i, row in enumerate(counts) for j, n in enumerate(row) for _ in range(n)),
                      strict=True)
  return np.array(ids), np.array(next_ids)


def test_the_budget_of_symmetric_pairs_is_0_and_of_a_directed_cycle_three_quarters():
  # Symmetric counts with equal row totals: a symmetric table (α·I + β·11ᵀ), no share, and a width-3 tied table fits
  # it exactly.
  symmetric = budget.pairs_budget(*_pairs([[2, 1, 1], [1, 2, 1], [1, 1, 2]]), 3, 0.1, 3)
  assert symmetric["antisymmetric_share"] == pytest.approx(0.0, abs=1e-12)
  assert symmetric["psd_rank_excess_loss"] == pytest.approx(0.0, abs=1e-9) and symmetric["pairs"] == 12
  # 0 → 1 → 2 → 0, n times each: log P = c + (log(n + k) − log k)·P for the cycle's permutation P, whatever n, k.
  # Doubly centred, (a − b)(P − 11ᵀ/3): ‖·‖² = 2(a − b)², of which the antisymmetric (a − b)(P − Pᵀ)/2 is 1.5(a − b)².
  # Token 3 is only ever next: it has no row and is left out, row and column.
  cycle = budget.pairs_budget(*_pairs([[0, 5, 0, 1], [0, 0, 5, 0], [5, 0, 0, 0]]), 4, 0.03, 2)
  assert cycle["tokens"] == 3 and cycle["k"] == 0.03 and cycle["antisymmetric_share"] == pytest.approx(0.75)
  assert cycle["psd_rank_excess_loss"] > 0.1  # no symmetric table predicts a cycle's direction


def test_the_asymmetry_command_measures_each_size_and_draw_it_is_given(tmp_path, capsys):
  out = tmp_path / "out"
  results = cli.main(["--asymmetry", "--quick", "--corpora=bytes", "--out", str(out)])
  assert json.loads((out / mechanism.BUDGET_JSON).read_text()) == results
  assert results["command"] == f"python -m science.when_to_tie --asymmetry --quick --corpora=bytes --out {out}"
  assert " cores" in results["machine"] and results["seconds"] > 0
  entry = results["corpora"]["bytes"]
  (draw,) = entry["by_fraction"]["0.1"]["by_draw"].values()  # --quick: 10%, one draw
  assert draw["k"] in count_bigram.K_GRID
  assert 0 < draw["antisymmetric_share"] < draw["psd_rank_residual_share"] < 1 and draw["tokens"] <= 256
  assert entry["by_fraction"]["0.1"]["mean"] == draw and entry["d_model"] == 32
  assert "wrote" in capsys.readouterr().out
  # beside a sweep of another dataset, the docs' table says so in one line instead of pairing them
  docs = tmp_path / "docs"
  docs.mkdir()
  (docs / "when_to_tie.json").write_text((DOCS / "when_to_tie.json").read_text())
  (docs / "when_to_tie.md").write_text(f"x\n{report.NOTES_START}\nkept {mechanism.BUDGET_START}\n{mechanism.BUDGET_END}"
                                       f" kept\n{report.NOTES_END}\ny\n")
  report.write_budget_docs(out / mechanism.BUDGET_JSON, docs)
  page = (docs / "when_to_tie.md").read_text()
  assert page.startswith(f"x\n{report.NOTES_START}\nkept ") and page.endswith(f" kept\n{report.NOTES_END}\ny\n")
  assert "No asymmetry table: the budget's bytes dataset is text-v256-" in page
  assert (docs / mechanism.BUDGET_JSON).read_text() == (out / mechanism.BUDGET_JSON).read_text()
