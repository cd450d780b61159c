"""What the docs quote is what the code prints: the refusals in docs/configs.md (train.py run with each quoted flag),
the sample console of `make train` in docs/running.md (its lines' shapes against a smoke run's console), the closing
line the README quotes, and the config the subword numbers of docs/results.md were measured with."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest
from conftest import ROOT
from helpers import subprocess_env

from science import common

DOCS = ROOT / "docs"
# `--config.<field>=<value>` → `error: ...` in docs/configs.md; the quoted error may wrap onto the next line.
QUOTED_REFUSAL = re.compile(r"`(--config\.[^`\s]+)` → `(error: [^`]+)`")
NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?%?")


def _results_script():
  spec = importlib.util.spec_from_file_location("scripts.results", ROOT / "scripts" / "results.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _train(tmp_path, *args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, capture_output=True, text=True,
                        timeout=600, env=subprocess_env(PYTHONPATH=str(ROOT)))


def test_the_refusals_quoted_in_configs_md_are_what_train_py_prints(tmp_path):
  text = (DOCS / "configs.md").read_text()
  quoted = [(flag, " ".join(error.split())) for flag, error in QUOTED_REFUSAL.findall(text)]
  assert len(quoted) >= 2, "docs/configs.md quotes no `--config.x=y` → `error: ...` pair"
  for flag, error in quoted:
    result = _train(tmp_path, "--config", "configs/smoke.py", "--workdir", str(tmp_path / "run"), flag)
    assert result.returncode == 2 and result.stderr.splitlines() == [error], (flag, result.stderr[-2000:])
  assert not (tmp_path / "run").exists()


def _shape(line: str) -> str:
  """A console line with its numbers as '#' (and a cut line's ' ...' and half-cut last word dropped)."""
  if line.endswith(" ..."):
    line = line[:-4].rsplit(" ", 1)[0]
  # the parameter table's columns are as wide as their widest number: its rules and padding do not compare
  return re.sub(r" +", " ", re.sub(r"-{2,}", "-", NUMBER.sub("#", line)))


def _sample_lines() -> list[str]:
  block = common.block((DOCS / "running.md").read_text(), _results_script().SAMPLE_START,
                       _results_script().SAMPLE_END)
  assert block is not None and "```" in block, "docs/running.md has no sample console block"
  return block.split("```")[1].strip("\n").splitlines()


def test_the_sample_console_of_make_train_has_the_lines_a_run_prints_in_their_order(train_py_smoke):
  # configs/smoke.py is a planted run as configs/default.py is, so its console has the same lines, other numbers.
  # The run is train.py on configs/smoke.py for 20 steps (conftest.py), which tests/train/test_cli.py checks too.
  result = train_py_smoke.first
  assert result.returncode == 0, result.stderr[-2000:]
  console = result.stderr.splitlines() + [line for line in result.stdout.splitlines()
                                          if not line.startswith("Checkpoints in")]
  sample = _sample_lines()
  gap = sample.index("...")  # the step lines between the first and the last are left out
  steps = [i for i, line in enumerate(console) if line.startswith("step ")]
  head, tail = console[:steps[0] + 1], console[steps[-1]:]
  assert len(sample[:gap]) == len(head) and len(sample[gap + 1:]) == len(tail), (sample, console)
  for quoted, printed in zip(sample[:gap] + sample[gap + 1:], head + tail, strict=True):
    assert _shape(printed).startswith(_shape(quoted)), (quoted, printed)


def test_the_readmes_closing_line_is_the_samples_and_the_results_tables():
  results = _results_script()
  readme = common.block((ROOT / "README.md").read_text(), results.FINAL_START, results.FINAL_END)
  final = re.search(r"`(Step \d+: eval loss (\d+\.\d{4}),[^`]*)`", readme)
  assert final is not None, readme
  sample_final = [line for line in _sample_lines() if line.startswith("Step ")]
  assert len(sample_final) == 1 and _shape(sample_final[0]).startswith(_shape(final.group(1)))
  table = common.block((DOCS / "results.md").read_text(), results.START, results.END)
  (default_row,) = [line for line in table.splitlines() if "`--config configs/default.py`" in line]
  assert default_row.split("|")[3].strip() == final.group(2) == sample_final[0].split()[4].rstrip(",")


def test_the_subword_numbers_were_measured_with_configs_subword_py_as_it_is():
  results = _results_script()
  block = common.block((DOCS / "results.md").read_text(), results.SUBWORD_START, results.SUBWORD_END)
  assert block and "| subword, tied |" in block and "| subword, untied |" in block, block
  stated = " ".join(block.split())
  assert f"{results.SUBWORD_CONFIG}: {results.config_fields(results.SUBWORD_CONFIG, results.SUBWORD_FIELDS)}." \
      in stated, "configs/subword.py changed since its numbers: run scripts/results.py --subword --write-docs"
  # The commands the docs show are the ones measured: each run's flags appear in docs/results.md's commands.
  commands = " ".join((DOCS / "results.md").read_text().split("## Subword text")[1].split("```")[1].split())
  for _, flags in results.SUBWORD_RUNS:
    for flag in flags:
      assert flag in commands, flag


@pytest.mark.parametrize("page", ["README.md", "docs/results.md", "docs/running.md", "docs/performance.md"])
def test_number_blocks_name_their_machine_and_date(page):
  text = (ROOT / page).read_text()
  blocks = re.findall(r"<!-- ([A-Z_]+):START \(([^)]*)\) -->(.*?)<!-- \1:END -->", text, re.S)
  assert blocks, page
  for name, written_by, body in blocks:
    assert re.search(r"written by (scripts|benchmarks|science)/\w+\.py|measured", written_by), (name, written_by)
    assert re.search(r"\d{4}-\d{2}-\d{2}", body), f"{page}'s {name} block names no date"


def test_make_help_lists_every_target_and_is_what_make_alone_ends_with():
  makefile = (ROOT / "Makefile").read_text()
  phony = re.search(r"^\.PHONY: (.*)$", makefile, re.M).group(1).split()
  first_rule = re.search(r"^([\w-]+):(.*)$", makefile, re.M)  # make's default goal: the first rule
  assert first_rule.group(1) == "default" and first_rule.group(2).split() == ["install", "help"]
  listed = subprocess.run(["make", "-s", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout
  named = set(re.findall(r"\bmake ([\w-]+)", listed))
  assert set(phony) - {"default", "help"} <= named, sorted(set(phony) - named)
