"""Reruns the results table: `make results` (= .venv/bin/python scripts/results.py).

Each run is `.venv/bin/python train.py` with the row's flags in a fresh workdir under runs/results/, timed as a
whole command (imports, dataset generation, compilation, training, evaluation, checkpoints). The final losses are
read back from each run's event files, so the table says what the runs logged. The table, with the machine it
was measured on, is printed and written to runs/results/results.md; with --write-docs it also rewrites the tracked
blocks: the table between the RESULTS markers of docs/results.md, the sample console of `make train` (the default
row's) between the SAMPLE markers of docs/running.md, and the last line it prints between the FINAL_LINE markers of
README.md. `--subword` instead runs the two commands of "Train on your own text" (configs/subword.py on Vim's help
files, tied then untied on the same dataset) and, with --write-docs, rewrites the SUBWORD block of docs/results.md.
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
SAMPLE_START, SAMPLE_END = "<!-- SAMPLE:START (written by scripts/results.py) -->", "<!-- SAMPLE:END -->"
FINAL_START, FINAL_END = "<!-- FINAL_LINE:START (written by scripts/results.py) -->", "<!-- FINAL_LINE:END -->"
SUBWORD_START, SUBWORD_END = "<!-- SUBWORD:START (written by scripts/results.py --subword) -->", "<!-- SUBWORD:END -->"
RESULTS_DIR = ROOT / "runs" / "results"
VIM_DOCS = "/usr/share/vim/vim90/doc"  # Vim 9.0's help files: 152 files, 9.8 MB of English

# (row name, the command's flags besides --workdir)
RUNS = [
    ("planted, tied (default)", ["--config", "configs/default.py"]),
    ("planted, untied", ["--config", "configs/untied.py"]),
    ("directed, tied", ["--config", "configs/directed.py"]),
    ("directed, untied", ["--config", "configs/directed.py", "--config.model.tied=False"]),
    ("text, tied", ["--config", "configs/text.py"]),
    ("text, untied", ["--config", "configs/text.py", "--config.model.tied=False"]),
]

# The two commands of docs/data.md's "Train on your own text" (the untied one reuses the tied one's dataset).
SUBWORD_CONFIG = "configs/subword.py"
SUBWORD_RUNS = [
    ("subword, tied", ["--config", SUBWORD_CONFIG, f"--config.data.text_path={VIM_DOCS}"]),
    ("subword, untied",
     ["--config", SUBWORD_CONFIG, "--config.model.tied=False", f"--config.data.text_path={VIM_DOCS}"]),
]
# The fields of configs/subword.py the subword numbers depend on, named in their block (tests/docs/test_quoted.py
# compares them with the config, so a changed config shows as a stale block).
SUBWORD_FIELDS = ("data.split", "model.vocab_size", "model.d_model", "train.num_steps", "train.batch_size",
                  "train.learning_rate", "data.selection_fraction")


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
  """Trains one row into `workdir` (a fresh one) and reads its final losses; RowFailed if train.py fails. The row
  keeps its console (stderr, then stdout: the result lines) under "console"."""
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
  console = result.stderr.splitlines() + result.stdout.splitlines()
  return {"name": name, "flags": " ".join(flags), "wall": wall, "console": console, **final}


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


def load_average() -> str:
  """The 1-minute load average, for a note beside a wall time (the machine may be shared)."""
  try:
    return f"{os.getloadavg()[0]:.1f}"
  except OSError:
    return "unknown"


SAMPLE_WIDTH = 117  # a console line longer than this is cut, ' ...' after it


def sample(console: list[str], measured_on: str, date: str, load: str) -> str:
  """The SAMPLE block: what a run printed (its lines before the first step line, the first and last step lines, and
  the lines after them but the closing 'Checkpoints in' one), each cut at SAMPLE_WIDTH, under a note naming the
  machine, the date and the load average when the run started (its steps/s and seconds depend on it)."""
  steps = [i for i, line in enumerate(console) if line.startswith("step ")]
  first, last = (steps[0], steps[-1]) if steps else (len(console), len(console))
  shown = console[:first] + console[first:first + 1] + (["..."] if last > first + 1 else [])
  shown += console[last:last + 1] if last > first else []
  shown += [line for line in console[last + 1:] if not line.startswith("Checkpoints in")]
  cut = [line if len(line) <= SAMPLE_WIDTH else line[:SAMPLE_WIDTH - 4].rstrip() + " ..." for line in shown]
  note = f"The console of `make train` (configs/default.py) on {measured_on}; {date}; load average {load} at the start."
  return textwrap.fill(note, width=120, break_on_hyphens=False) + "\n\n```\n" + "\n".join(cut) + "\n```"


def final_line(console: list[str], measured_on: str, date: str) -> str:
  """The FINAL_LINE block: the run's closing result line up to its training time (which depends on the machine's
  load; the sample console has it), and where it was measured."""
  (line,) = [line for line in console if line.startswith("Step ") and ": eval loss " in line]
  return f"`{re.sub(r', [0-9.]+ s of training[.]$', ' ...', line)}` ({measured_on.split(',')[0]}, {date})"


def config_fields(path: str, fields: tuple[str, ...]) -> str:
  """'data.split=by_document, model.vocab_size=8192, ...': the values of `fields` in the config file at `path`."""
  from tied_embed.train.config import get  # noqa: PLC0415
  from tied_embed.train.config_file import load_config_file  # noqa: PLC0415

  config = load_config_file(str(ROOT / path))
  return ", ".join(f"{field}={get(config, field)!r}" for field in fields)


def subword_section(rows: list[dict], measured_on: str, date: str, load: str) -> str:
  """The SUBWORD block: each command's final eval loss against the floor and the count model, and its wall time."""
  note = (f"Measured by `scripts/results.py --subword` on {measured_on}; {date}; load average {load} at the start "
          f"(the machine shared with other jobs, so the wall times are long). {SUBWORD_CONFIG}: "
          f"{config_fields(SUBWORD_CONFIG, SUBWORD_FIELDS)}.")
  lines = ["| run | final eval loss | floor | count-bigram loss | wall |", "|---|---|---|---|---|"]
  for row in rows:
    lines.append(f"| {row['name']} | {row['eval/loss']:.4f} | {row['eval/loss_floor']:.4f} "
                 f"| {row['eval/count_bigram_loss']:.4f} | {row['wall']:.0f} s |")
  return textwrap.fill(note, width=120, break_on_hyphens=False) + "\n\n" + "\n".join(lines)


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
  parser.add_argument("--subword", action="store_true",
                      help=f"run the two subword commands on {VIM_DOCS} instead (several minutes each)")
  parser.add_argument("--write-docs", action="store_true",
                      help="also rewrite the tracked blocks (docs/results.md, docs/running.md, README.md)")
  args = parser.parse_args(argv)
  if args.only and args.write_docs:
    parser.error("--write-docs rewrites the whole table; it takes no --only")
  if args.subword:
    if args.only:
      parser.error("--subword runs both subword commands; it takes no --only")
    _subword(args.write_docs)
    return
  load = load_average()  # as the first row, the default one, starts
  rows = _run_rows(selected_rows(args.only))
  measured_on, date = machine(), time.strftime("%Y-%m-%d")
  text = section(rows, measured_on, date)
  print(text)
  if args.only:
    return
  (RESULTS_DIR / "results.md").write_text("# Results\n\n" + text + "\n")
  print("wrote runs/results/results.md")
  if not args.write_docs:
    return
  console = rows[0]["console"]  # the default row: what `make train` prints
  common.rewrite_block(ROOT / "docs" / "results.md", START, END, f"\n{text}\n")
  console_text = sample(console, measured_on, date, load)
  common.rewrite_block(ROOT / "docs" / "running.md", SAMPLE_START, SAMPLE_END, f"\n{console_text}\n")
  common.rewrite_block(ROOT / "README.md", FINAL_START, FINAL_END, final_line(console, measured_on, date))
  print("wrote docs/results.md's table, docs/running.md's sample console and README.md's final line")


def _run_rows(rows: list[tuple[str, list[str]]], data_dir: pathlib.Path | None = None) -> list[dict]:
  """Each row trained (with --config.data.data_dir=`data_dir` where given), its line printed; a failed row is one
  `error:` line and train.py's exit status."""
  done = []
  for name, flags in rows:
    extra = [] if data_dir is None else [f"--config.data.data_dir={data_dir}"]
    try:
      done.append(run(name, flags + extra, row_workdir(name)))
    except RowFailed as failed:
      print(f"error: {failed}", file=sys.stderr)
      sys.exit(failed.status)
    print(f"{name}: {done[-1]['eval/loss']:.4f} in {done[-1]['wall']:.0f} s", flush=True)
  return done


def _subword(write_docs: bool) -> None:
  """The SUBWORD block: both commands from scratch (the dataset, and its vocabulary, made by the first)."""
  if not pathlib.Path(VIM_DOCS).is_dir():
    _refuse(f"{VIM_DOCS} is not a directory: the subword commands train on Vim 9.0's help files (install vim)")
  data_dir = RESULTS_DIR / "data-vim"
  shutil.rmtree(data_dir, ignore_errors=True)
  load = load_average()
  rows = _run_rows(SUBWORD_RUNS, data_dir)
  text = subword_section(rows, machine(), time.strftime("%Y-%m-%d"), load)
  print(text)
  if write_docs:
    common.rewrite_block(ROOT / "docs" / "results.md", SUBWORD_START, SUBWORD_END, f"\n{text}\n")
    print("wrote docs/results.md's subword block")


if __name__ == "__main__":
  main()
