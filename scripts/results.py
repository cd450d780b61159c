"""Reruns the README's results table: `make results` (= .venv/bin/python scripts/results.py).

Each run is `.venv/bin/python train.py` with the row's flags in a fresh workdir under runs/results/, timed as a
whole command (imports, dataset generation, compilation, training, evaluation, checkpoints). The final losses are
read back from each run's event files, so the table says what the runs logged. The table, with the machine it
was measured on, is printed and written to runs/results/results.md; with --write-docs it also replaces the text
between the RESULTS markers in README.md and rewrites docs/results.md, the tracked copies.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from science import common  # noqa: E402
from tied_embed.train.metrics import read_scalars  # noqa: E402

START, END = "<!-- RESULTS:START (written by scripts/results.py) -->", "<!-- RESULTS:END -->"
RESULTS_DIR = ROOT / "runs" / "results"

# (row name, the command's flags besides --workdir)
RUNS = [
    ("planted, tied (default)", ["--config", "configs/default.py"]),
    ("planted, untied", ["--config", "configs/untied.py"]),
    ("directed, tied", ["--config", "configs/directed.py"]),
    ("directed, untied", ["--config", "configs/directed.py", "--config.model.tied=False"]),
    ("text, tied", ["--config", "configs/text.py"]),
    ("text, untied", ["--config", "configs/text.py", "--config.model.tied=False"]),
]


def machine() -> str:
  """'AMD EPYC 7B13, 2 cores, AVX2 AVX-512F ...' from /proc/cpuinfo, plus memory, Python and JAX versions."""
  import jax  # noqa: PLC0415

  model, flags = common.cpu()
  wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
  memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
  return (
      f"{model}, {os.cpu_count()} cores, "
      f"vector extensions: {' '.join(f for f in wanted if f in flags) or 'none of ' + ', '.join(wanted)}; "
      f"{memory:.0f} GiB; Python {platform.python_version()}, jax {jax.__version__}"
  )


class RowFailed(Exception):
  """A row's train.py ended with an error: its exit status, and its message naming the row and train.py's line."""

  def __init__(self, name: str, status: int, stderr: str):
    lines = stderr.strip().splitlines()
    said = next((line for line in reversed(lines) if line.startswith("error: ")), lines[-1] if lines else "")
    super().__init__(f"row {name!r} failed (train.py exit status {status}): {said.removeprefix('error: ')}")
    self.status = status


def run(name: str, flags: list[str], workdir: pathlib.Path) -> dict:
  """Trains one row into `workdir` (a fresh one) and reads its final losses; RowFailed if train.py fails."""
  shutil.rmtree(workdir, ignore_errors=True)
  command = [sys.executable, "train.py", *flags, "--workdir", str(workdir)]
  started = time.perf_counter()
  result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
  wall = time.perf_counter() - started
  if result.returncode != 0:
    raise RowFailed(name, result.returncode, result.stderr)
  tags = ("eval/loss", "eval/loss_floor", "eval/count_bigram_loss")
  scalars = read_scalars(workdir, tags)
  final = {tag: float(values[-1]) for tag, (_, values) in scalars.items()}
  return {"name": name, "flags": " ".join(flags), "wall": wall, **final}


def table(rows: list[dict]) -> str:
  lines = [
      "| run | flags of `train.py` | final eval loss | floor | gap / floor | count-bigram loss | wall |",
      "|---|---|---|---|---|---|---|",
  ]
  for row in rows:
    loss, floor = row["eval/loss"], row["eval/loss_floor"]
    count = f"{row['eval/count_bigram_loss']:.4f}" if "eval/count_bigram_loss" in row else "—"
    lines.append(
        f"| {row['name']} | `{row['flags']}` | {loss:.4f} | {floor:.4f} | {100 * (loss - floor) / floor:.2f}% "
        f"| {count} | {row['wall']:.0f} s |"
    )
  return "\n".join(lines)


def section(rows: list[dict], measured_on: str, date: str) -> str:
  """The table under a note of the machine and the date, wrapped at 120 characters."""
  note = (
      f"Measured by `make results` on: {measured_on}; {date}. Each row trained into runs/results/; wall time is the "
      "whole command and depends on the machine and its load; the losses are deterministic on a given machine and "
      "JAX version."
  )
  return textwrap.fill(note, width=120, break_on_hyphens=False) + "\n\n" + table(rows)


class _Parser(argparse.ArgumentParser):
  """argparse whose errors are one line `error: ...` and exit status 2, like the project's other commands."""

  def error(self, message: str):
    _refuse(message)


def _refuse(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def row_workdir(name: str) -> pathlib.Path:
  return RESULTS_DIR / re.sub(r"[^a-z]+", "_", name).strip("_")


def selected_rows(only: str | None) -> list[tuple[str, list[str]]]:
  """The rows `--only` picks (all without it), their workdirs checked; one `error:` line and exit 2 if none
  matches or a workdir cannot be one (it, or a folder above it, is a file)."""
  rows = [(name, flags) for name, flags in RUNS if not only or only in name]
  if not rows:
    _refuse(f"--only={only!r} matches no row: expected part of a row name, one of "
            + ", ".join(repr(name) for name, _ in RUNS))
  for name, _ in rows:
    workdir = row_workdir(name)
    blocker = next((path for path in (workdir, *workdir.parents) if path.exists() and not path.is_dir()), None)
    if blocker == workdir:
      _refuse(f"{workdir} is a file: row {name!r} trains there; move it away")
    if blocker is not None:
      _refuse(f"{blocker} is a file: row {name!r} trains in {workdir}; move it away")
  return rows


def main(argv: list[str] | None = None) -> None:
  parser = _Parser(description=__doc__.splitlines()[0])
  parser.add_argument("--only", help="run only the rows whose name contains this text (nothing is written)")
  parser.add_argument("--write-docs", action="store_true", help="also rewrite README.md's table and docs/results.md")
  args = parser.parse_args(argv)
  if args.only and args.write_docs:
    parser.error("--write-docs rewrites the whole table; it takes no --only")
  rows = []
  for name, flags in selected_rows(args.only):
    try:
      rows.append(run(name, flags, row_workdir(name)))
    except RowFailed as failed:
      print(f"error: {failed}", file=sys.stderr)
      sys.exit(failed.status)
    print(f"{name}: {rows[-1]['eval/loss']:.4f} in {rows[-1]['wall']:.0f} s", flush=True)
  text = section(rows, machine(), time.strftime("%Y-%m-%d"))
  print(text)
  if args.only:
    return
  (RESULTS_DIR / "results.md").write_text("# Results\n\n" + text + "\n")
  print("wrote runs/results/results.md")
  if not args.write_docs:
    return
  (ROOT / "docs" / "results.md").write_text("# Results\n\n" + text + "\n")
  common.rewrite_block(ROOT / "README.md", START, END, f"\n{text}\n")
  print("wrote docs/results.md and README.md's results table")


if __name__ == "__main__":
  main()
