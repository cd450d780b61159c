"""--from-json=a.json,b.json: one family's blocks on different corpora, each swept in a run of its own, published as
one report: both corpora's tables, the merged-in corpus naming its own machine, the times summed; blocks that were
not tuned and scored the same way, or that hold the same corpus, are refused in one line."""

import copy
import json

import pytest

from science.when_to_tie import cli
from science.when_to_tie import plan as plans

PUBLISHED = plans.REPO / "docs" / "when_to_tie.json"


def _blocks(tmp_path, change=None):
  """The published bytes block, and a copy of it as another corpus's block swept elsewhere (→ their paths)."""
  first = json.loads(PUBLISHED.read_text())
  first["corpora"] = {"bytes": first["corpora"]["bytes"]}  # the bytes block alone
  second = copy.deepcopy(first)
  second["corpora"] = {"subword": second["corpora"]["bytes"]}
  second["fractions"] = [0.01, 0.1]
  second["machine"], second["seconds"], second["cpu_seconds"] = "the other box", 600.0, 300.0
  if change:
    change(second)
  paths = [tmp_path / "bytes.json", tmp_path / "subword.json"]
  for path, block in zip(paths, (first, second), strict=True):
    path.write_text(json.dumps(block))
  return first, paths


def test_two_blocks_are_published_as_one_report(tmp_path):
  first, paths = _blocks(tmp_path)
  out = tmp_path / "out"
  merged = cli.main(["--from-json", ",".join(map(str, paths)), "--out", str(out)])
  assert list(merged["corpora"]) == ["bytes", "subword"]
  assert merged["fractions"] == [0.01, 0.1, 1.0]  # the union: the second block ran two of the three sizes
  assert merged["seconds"] == pytest.approx(first["seconds"] + 600.0)
  assert merged["cpu_seconds"] == pytest.approx(first["cpu_seconds"] + 300.0)
  assert "machine" not in merged["corpora"]["bytes"]  # the report's own machine, named at its top
  assert merged["corpora"]["subword"]["machine"] == "the other box"
  page = (out / "when_to_tie.md").read_text()
  assert "on the other box." in page and page.count("| train data | count model (k) |") == 2
  assert list(json.loads((out / "when_to_tie.json").read_text())["corpora"]) == ["bytes", "subword"]


@pytest.mark.parametrize(("change", "said"), [
    (lambda block: block.update(seeds=block["seeds"][:-1]), "'seeds' differs"),
    (lambda block: block["grids"].update(learning_rate=[1.0]), "'grids' differs"),
    (lambda block: block.update(corpora={"bytes": block["corpora"]["subword"]}), "both hold the 'bytes' corpus"),
])
def test_blocks_that_do_not_belong_together_are_refused_in_one_line(tmp_path, capsys, change, said):
  _, paths = _blocks(tmp_path, change)
  out = tmp_path / "out"
  with pytest.raises(SystemExit) as exited:
    cli.main(["--from-json", ",".join(map(str, paths)), "--out", str(out)])
  assert exited.value.code == 2
  (line,) = capsys.readouterr().err.splitlines()
  assert line.startswith(f"error: --from-json={paths[0]},{paths[1]}: ") and said in line, line
  assert not out.exists()


def test_the_count_models_in_the_loss_table_are_averaged_over_the_draws_the_runs_are_averaged_over():
  # At 10% the bytes runs span 3 draws: the count cell is the mean of the 3 draws' count models, and a model's
  # Δ count the mean of each run less its own draw's count model (hand arithmetic in float64).
  from science.when_to_tie import report  # noqa: PLC0415

  results = json.loads(PUBLISHED.read_text())
  entry = results["corpora"]["bytes"]
  count = entry["count"]["0.1"]
  assert len(count["by_draw"]) == 3
  mean = sum(count["by_draw"].values()) / 3
  runs = entry["runs"]["tied"]["0.1"]
  delta = sum(run["eval_loss"] - count["by_draw"][str(run["draw"])] for run in runs) / len(runs)
  row = next(line for line in report.markdown(results, "x.png").splitlines() if line.startswith("| 10% ("))
  assert f"| {mean:.4f} (" in row and f"({delta:+.3f})" in row, row
  assert f"| {count['eval_loss']:.4f} (" not in row  # not draw 0's alone
  kneser_ney = entry["kneser_ney"]["0.1"]  # its own cell: the mean over the draws too, then its discount
  kneser_mean = sum(kneser_ney["by_draw"].values()) / 3
  assert f"| {kneser_mean:.4f} ({kneser_ney['discount']:g}) |" in row, row
  assert f"{kneser_ney['eval_loss']:.4f}" != f"{kneser_mean:.4f}"  # draw 0's alone reads otherwise


def test_the_docs_page_is_what_its_json_and_notes_make():
  # every generated table of docs/when_to_tie.md (the loss tables, the per-model tables with their self-argmax
  # shares, the notes' controls and context tables) as the published JSONs make it
  from science.when_to_tie import report  # noqa: PLC0415

  page = PUBLISHED.with_suffix(".md")
  results = json.loads(PUBLISHED.read_text())
  notes = report.generated_notes(report.kept_notes(page), results, PUBLISHED.parent)
  assert report.markdown(results, "when_to_tie.png", notes) == page.read_text()
