"""The tutorial notebook: docs/tutorial.md (the reviewed jupytext source) runs headless, every cell, and
docs/tutorial.ipynb (generated from it) holds the same cells.

The packages come from requirements-notebook.txt, which `make test` installs; without them these tests fail (an
ImportError) rather than skip, so a suite that claims to cover the tutorial always ran it.
"""

from __future__ import annotations

import os
import time

import jupytext
import nbclient
import nbformat
from conftest import ROOT

SOURCE = ROOT / "docs" / "tutorial.md"
PAIRED = ROOT / "docs" / "tutorial.ipynb"
# The whole notebook runs in about 40 s on an idle 2-core machine (a short training run dominates; the test records
# its time). A cell still running after BUDGET_S is stopped as hung; TUTORIAL_BUDGET_S raises it on a slower machine.
BUDGET_S = float(os.environ.get("TUTORIAL_BUDGET_S", "90"))


def _cells(notebook: nbformat.NotebookNode) -> list[tuple[str, str]]:
  return [(cell.cell_type, cell.source) for cell in notebook.cells]


def test_the_ipynb_is_the_markdown_source_paired():
  source, paired = jupytext.read(SOURCE), jupytext.read(PAIRED)
  assert _cells(paired) == _cells(source), (
      "docs/tutorial.ipynb is out of date: run `.venv/bin/jupytext --sync docs/tutorial.md`")
  assert paired.metadata.get("jupytext", {}).get("formats") == "md,ipynb"


def test_every_cell_runs_from_docs(record_property, tmp_path, monkeypatch):
  # From docs/, as `jupyter notebook docs/tutorial.ipynb` would run it: the notebook finds the repository root
  # itself (make notebook-run runs it from the root). The kernel inherits this process's environment, the session's
  # compilation cache included, and TMPDIR: the tutorial's run (in a temporary folder, for the reader to inspect)
  # goes to this test's folder, which pytest removes.
  monkeypatch.setenv("TMPDIR", str(tmp_path))
  notebook = jupytext.read(SOURCE)
  client = nbclient.NotebookClient(
      notebook, timeout=int(BUDGET_S), kernel_name="python3", resources={"metadata": {"path": str(ROOT / "docs")}})
  start = time.perf_counter()
  client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
  seconds = time.perf_counter() - start
  record_property("tutorial_seconds", round(seconds, 1))
  print(f"docs/tutorial.md ran in {seconds:.1f} s")

  outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
  assert not [output for output in outputs if output.output_type == "error"]
  images = [output for output in outputs if "image/png" in output.get("data", {})]
  assert len(images) == 2, "expected the provenance picture and the when-to-tie plot"


def test_make_notebook_opens_the_paired_notebook_in_jupyter_from_exact_pins():
  import subprocess  # noqa: PLC0415

  outer_make = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")  # under `make test`: no "make[1]: Entering directory" lines
  env = {key: value for key, value in os.environ.items() if key not in outer_make}
  plan = subprocess.run(["make", "--no-print-directory", "-n", "-W", "requirements-jupyter.txt", "notebook"],
                        cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
  assert plan[-1] == ".venv/bin/jupyter notebook docs/tutorial.ipynb"
  assert ".venv/bin/python -m pip install --quiet -r requirements-jupyter.txt" in plan
  pins = [line for line in (ROOT / "requirements-jupyter.txt").read_text().splitlines()
          if line and not line.startswith("#")]
  assert "notebook==7.6.5" in pins and all("==" in pin for pin in pins)
