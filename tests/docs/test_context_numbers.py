"""The context models' numbers: docs/results.md's CONTEXT block was measured with the configs as they are, and the
README's context line quotes that block's numbers, and says "beats" only where both tied context models are below
the stronger of its two count bigrams (Kneser-Ney, add-k) there, and "beats the count n-gram of the same context" only
where each is below the Kneser-Ney n-gram of its own context."""

from __future__ import annotations

import importlib.util
import re

from conftest import ROOT

from science import common


def _results_script():
  spec = importlib.util.spec_from_file_location("scripts.results", ROOT / "scripts" / "results.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _rows(block: str) -> dict[str, float]:
  """{run name: eval loss} of the block's table."""
  found = re.findall(r"^\| ([^|]+?) \| (\d+\.\d{4}) \|", block, re.M)
  return {name: float(loss) for name, loss in found}


def test_the_context_block_was_measured_with_the_configs_as_they_are():
  results = _results_script()
  block = common.block((ROOT / "docs" / "results.md").read_text(), results.CONTEXT_START, results.CONTEXT_END)
  assert block, "docs/results.md has no CONTEXT block: run scripts/results.py --context --write-docs"
  stated = " ".join(block.split())
  assert f"({results.config_fields(results.CONTEXT_MLP, results.CONTEXT_FIELDS)};" in stated, \
      "configs/context_mlp.py changed since its numbers: run scripts/results.py --context --write-docs"
  rows = _rows(block)
  assert {name for name, _ in results.CONTEXT_RUNS} | {"count bigram, Kneser-Ney"} <= set(rows), rows
  assert any(re.fullmatch(r"count \d+-gram, Kneser-Ney \(the MLP's context\)", name) for name in rows), rows
  assert any(re.fullmatch(r"count \d+-gram, Kneser-Ney \(for the transformer's context\)", name) for name in rows), rows


def test_the_readme_quotes_the_context_block():
  results = _results_script()
  block = common.block((ROOT / "docs" / "results.md").read_text(), results.CONTEXT_START, results.CONTEXT_END)
  line = " ".join(common.block((ROOT / "README.md").read_text(), results.CONTEXT_LINE_START,
                               results.CONTEXT_LINE_END).split())
  rows = _rows(block)
  for name in ("context MLP, tied", "context transformer, tied", "context MLP, untied", "context transformer, untied",
               "bigram, tied"):
    assert f"{rows[name]:.3f}" in line, (name, rows[name], line)
  add_k = next(loss for name, loss in rows.items() if name.startswith("count bigram, add-k"))
  count = min(rows["count bigram, Kneser-Ney"], add_k)  # the strongest count bigram
  assert f"{count:.3f}" in line, (count, line)
  beats = rows["context MLP, tied"] < count and rows["context transformer, tied"] < count
  assert ("a tied table beats the strongest count bigram" in line
          or "a tied table beats the count n-gram of the same context" in line) == beats, line
  mlp_ngram = next(loss for name, loss in rows.items() if name.endswith("(the MLP's context)"))
  transformer_ngram = next(loss for name, loss in rows.items() if name.endswith("(for the transformer's context)"))
  for loss in (mlp_ngram, transformer_ngram):
    assert f"{loss:.3f}" in line, (loss, line)
  beats_own = rows["context MLP, tied"] < mlp_ngram and rows["context transformer, tied"] < transformer_ngram
  assert ("a tied table beats the count n-gram of the same context" in line) == (beats and beats_own), line
  assert ("but not yet the count n-gram of the same context" in line) == (beats and not beats_own), line
