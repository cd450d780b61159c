"""Reruns the results table: `make results` (= .venv/bin/python scripts/results.py).

Each run is `.venv/bin/python train.py` with the row's flags in a fresh workdir under runs/results/, timed as a
whole command (imports, dataset generation, compilation, training, evaluation, checkpoints). The final losses are
read back from each run's event files, so the table says what the runs logged. The table, with the machine it
was measured on, is printed and written to runs/results/results.md; with --write-docs it also rewrites the tracked
blocks: the table between the RESULTS markers of docs/results.md, the sample console of `make train` (the default
row's) between the SAMPLE markers of docs/running.md, and the last line it prints between the FINAL_LINE markers of
README.md. `--subword` instead runs the two commands of "Train on your own text" (configs/subword.py on Vim's help
files, tied then untied on the same dataset) and, with --write-docs, rewrites the SUBWORD block of docs/results.md.
`--context` runs configs/context_mlp.py and configs/context_transformer_small.py, tied and untied, beside the bigram
model (the same config with model.context=none) on one shared dataset, fits the Kneser-Ney count bigram of that dataset
(its discount chosen on the train pairs' last share, science/kneser_ney.py's held_out_fit) and, with --write-docs,
rewrites the CONTEXT block of docs/results.md and the README's context line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pathlib
import platform
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from science import common  # noqa: E402
from science.when_to_tie import checks  # noqa: E402
from tied_embed.train.metrics import read_scalars  # noqa: E402

START, END = "<!-- RESULTS:START (written by scripts/results.py) -->", "<!-- RESULTS:END -->"
SAMPLE_START, SAMPLE_END = "<!-- SAMPLE:START (written by scripts/results.py) -->", "<!-- SAMPLE:END -->"
FINAL_START, FINAL_END = "<!-- FINAL_LINE:START (written by scripts/results.py) -->", "<!-- FINAL_LINE:END -->"
SUBWORD_START, SUBWORD_END = "<!-- SUBWORD:START (written by scripts/results.py --subword) -->", "<!-- SUBWORD:END -->"
CONTEXT_START, CONTEXT_END = "<!-- CONTEXT:START (written by scripts/results.py --context) -->", "<!-- CONTEXT:END -->"
CONTEXT_LINE_START = "<!-- CONTEXT_LINE:START (written by scripts/results.py --context) -->"
CONTEXT_LINE_END = "<!-- CONTEXT_LINE:END -->"
RESULTS_DIR = ROOT / "runs" / "results"
ROW_RECORD = "row.json"  # in each row's workdir: its name, flags, wall time and final losses (what --reuse reads)
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
# configs/context_mlp.py's data (Vim's help files, V = 8192, windows of 32 tokens, split by whole files) for every
# row, so each scores the same validation pairs; the bigram rows are that config with no context (each position
# scored from its own token alone).
CONTEXT_MLP, CONTEXT_TRANSFORMER = "configs/context_mlp.py", "configs/context_transformer_small.py"
BIGRAM_FLAGS = ["--config", CONTEXT_MLP, "--config.model.context=none", "--config.model.context_k=3"]
CONTEXT_RUNS = [
    ("bigram, tied", BIGRAM_FLAGS),
    ("bigram, untied", [*BIGRAM_FLAGS, "--config.model.tied=False"]),
    ("context MLP, tied", ["--config", CONTEXT_MLP]),
    ("context MLP, untied", ["--config", CONTEXT_MLP, "--config.model.tied=False"]),
    ("context transformer, tied", ["--config", CONTEXT_TRANSFORMER]),
    ("context transformer, untied", ["--config", CONTEXT_TRANSFORMER, "--config.model.tied=False"]),
]
CONTEXT_FIELDS = ("data.context_length", "model.vocab_size", "model.d_model", "train.num_steps", "train.batch_size",
                  "train.learning_rate")

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


class Stops:
  """SIGTERM and SIGINT as requests to stop at the next sync point (before and after each row, before anything is
  written). The handler only notes the signal and passes it on to the row's train.py (which saves and stops), so a
  signal landing inside a callback is never lost and train.py is never left running; a second one stops at once."""

  def __init__(self):
    self.received: int | None = None
    self.child: subprocess.Popen | None = None
    self.finished: list[str] = []  # the rows trained so far
    self.in_progress = ""  # the row whose train.py runs now

  def __enter__(self) -> Stops:
    self.__init__()  # a fresh sitting each time main runs
    self._previous = {signum: signal.signal(signum, self._handle) for signum in (signal.SIGTERM, signal.SIGINT)}
    return self

  def __exit__(self, *exc_info) -> None:
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)

  def _handle(self, signum: int, frame) -> None:
    if self.received is not None:  # asked twice: stop now
      signal.signal(signum, signal.SIG_DFL)
      signal.raise_signal(signum)
      return
    self.received = signum
    self.forward()

  def forward(self) -> None:
    """Passes a received stop on to the row's train.py, if one runs."""
    if self.received is not None and self.child is not None and self.child.poll() is None:
      self.child.send_signal(self.received)

  def sync_point(self) -> None:
    """Where a stop was received: one `error:` line saying which rows finished and which stopped, exit 128 + it."""
    if self.received is None:
      return
    finished = ", ".join(repr(name) for name in self.finished) or "none"
    stopped = f"; row {self.in_progress!r} stopped in {row_workdir(self.in_progress)}" if self.in_progress else ""
    print(f"error: stopped by {signal.Signals(self.received).name}: rows finished: {finished}{stopped}; no table "
          "or doc was written: rerun the same command, which trains every row again (a row is timed as one whole "
          "command, so none resumes)", file=sys.stderr)
    sys.exit(128 + self.received)


STOPS = Stops()


def run(name: str, flags: list[str], workdir: pathlib.Path) -> dict:
  """Trains one row into `workdir` (a fresh one) and reads its final losses; RowFailed if train.py fails. The row
  keeps its console (stderr, then stdout: the result lines) under "console". train.py runs in its own session, so a
  terminal's ^C reaches it once, through STOPS."""
  shutil.rmtree(workdir, ignore_errors=True)
  command = [sys.executable, "train.py", *flags, "--workdir", str(workdir)]
  started = time.perf_counter()
  STOPS.in_progress = name
  STOPS.child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
  STOPS.forward()  # a stop received as it started
  stdout, stderr = STOPS.child.communicate()
  wall = time.perf_counter() - started
  result = subprocess.CompletedProcess(command, STOPS.child.returncode, stdout, stderr)
  STOPS.child = None
  STOPS.sync_point()
  STOPS.in_progress = ""
  if result.returncode != 0:
    raise RowFailed(name, result.returncode, result.stderr)
  tags = ("eval/loss", "eval/loss_floor", "eval/count_bigram_loss")
  scalars = read_scalars(workdir, tags)
  final = {tag: float(values[-1]) for tag, (_, values) in scalars.items()}
  console = result.stderr.splitlines() + result.stdout.splitlines()
  row = {"name": name, "flags": " ".join(flags), "wall": wall, **final}
  (workdir / ROW_RECORD).write_text(json.dumps(row, indent=1) + "\n")
  return {**row, "console": console}


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
  from tied_embed.train.config_file import load_config_file  # noqa: PLC0415

  config = load_config_file(str(ROOT / path))
  return ", ".join(f"{field}={config[field]!r}" for field in fields)


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


NGRAM_ORDERS = tuple(range(2, 9))  # the n-grams tried for the transformer's context (its gains flatten by 8)


def kneser_ney_rows(data_dir: pathlib.Path) -> dict[str, dict]:
  """The interpolated Kneser-Ney count models of the context rows' dataset (science/kneser_ney.py), each tuned as the
  trainer's add-k count model is (`count_bigram.count_bigram_loss`): discount (and order) chosen on the last
  HELD_OUT_FRACTION of the train pairs with the rest fitted, then fitted on all of them and scored on the validation
  pairs every row scores, from the context each row's model sees (windows of L): → {"bigram", "mlp", "transformer":
  {"order", "discount", "eval/loss"}}: the bigram, the MLP's order (its k tokens and the next), and the order of
  NGRAM_ORDERS chosen there for the transformer (which sees its whole window)."""
  from science import kneser_ney  # noqa: PLC0415
  from tied_embed.data import bigram as data_lib  # noqa: PLC0415
  from tied_embed.train.config_file import load_config_file  # noqa: PLC0415

  config = load_config_file(str(ROOT / CONTEXT_MLP))
  config.data.data_dir = str(data_dir)
  data = data_lib.load_bigram_data(config, RESULTS_DIR / "context_kneser_ney")
  window = data.context_length
  found = {}
  for key, orders in (("bigram", (2,)), ("mlp", (int(config.model.context_k) + 1,)), ("transformer", NGRAM_ORDERS)):
    counts, discount = kneser_ney.held_out_fit(data.train_ids, data.train_next, data.train_document_ends, orders,
                                               window, data.vocab_size)
    loss = counts.loss(data.eval_ids, data.eval_next, data.eval_document_ends, window, discount)
    found[key] = {"order": counts.order, "discount": discount, "eval/loss": loss}
  return found


def context_section(rows: list[dict], kneser_ney: dict[str, dict], measured_on: str, date: str, load: str) -> str:
  """The CONTEXT block: each row's final eval loss and its margins over the Kneser-Ney count bigram and over the
  Kneser-Ney n-gram of its own context, then the count models and the floor, under a note naming the machine, the
  date, the load and the configs' fields."""
  bigram, mlp, transformer = kneser_ney["bigram"], kneser_ney["mlp"], kneser_ney["transformer"]
  note = (f"Measured by `scripts/results.py --context` on {measured_on}; {date}; load average {load} at the start. "
          f"Every row trains on one dataset, {CONTEXT_MLP}'s ({config_fields(CONTEXT_MLP, CONTEXT_FIELDS)}; Vim's "
          "help files, SentencePiece, split by whole files), and scores the same validation pairs; the bigram rows "
          "are that config with model.context=none. Kneser-Ney: interpolated, counted on the same train documents "
          "and scoring each validation pair from the tokens its model sees (science/kneser_ney.py), its discount "
          f"(bigram {bigram['discount']:g}, {mlp['order']}-gram {mlp['discount']:g}, {transformer['order']}-gram "
          f"{transformer['discount']:g}) chosen as add-k's k is, on the last part of the train pairs; the "
          f"transformer's order too, among {NGRAM_ORDERS[0]}–{NGRAM_ORDERS[-1]}.")
  own = {"bigram": bigram, "context MLP": mlp, "context transformer": transformer}
  lines = ["| run | final eval loss | − Kneser-Ney bigram | − Kneser-Ney of its context | wall |",
           "|---|---|---|---|---|"]
  for row in rows:
    same = own[row["name"].split(",")[0]]
    lines.append(f"| {row['name']} | {row['eval/loss']:.4f} | {row['eval/loss'] - bigram['eval/loss']:+.4f} "
                 f"| {row['eval/loss'] - same['eval/loss']:+.4f} ({same['order']}-gram) | {row['wall']:.0f} s |")
  first = rows[0]
  lines.append(f"| count bigram, Kneser-Ney | {bigram['eval/loss']:.4f} | 0 | | |")
  lines.append(f"| count {mlp['order']}-gram, Kneser-Ney (the MLP's context) | {mlp['eval/loss']:.4f} "
               f"| {mlp['eval/loss'] - bigram['eval/loss']:+.4f} | | |")
  lines.append(f"| count {transformer['order']}-gram, Kneser-Ney (for the transformer's context) "
               f"| {transformer['eval/loss']:.4f} | {transformer['eval/loss'] - bigram['eval/loss']:+.4f} | | |")
  lines.append(f"| count bigram, add-k (`eval/count_bigram_loss`) | {first['eval/count_bigram_loss']:.4f} "
               f"| {first['eval/count_bigram_loss'] - bigram['eval/loss']:+.4f} | | |")
  lines.append(f"| bigram entropy of validation (`eval/loss_floor`, a bigram's floor) | {first['eval/loss_floor']:.4f} "
               "| | | |")
  return textwrap.fill(note, width=120, break_on_hyphens=False) + "\n\n" + "\n".join(lines)


def context_line(rows: list[dict], kneser_ney: dict[str, dict], measured_on: str, date: str) -> str:
  """The README's takeaway, a list item wrapped at 120 characters: the tied context models' eval loss against the
  stronger count bigram's (Kneser-Ney or add-k, whichever is lower) and against the Kneser-Ney n-gram of each one's
  own context; its headline says which of them both tied context models are below; the untied forms beside them."""
  loss = {row["name"]: row["eval/loss"] for row in rows}
  counts = {"Kneser-Ney": kneser_ney["bigram"]["eval/loss"], "add-k": rows[0]["eval/count_bigram_loss"]}
  strongest = min(counts, key=counts.get)
  count = counts[strongest]
  mlp, transformer = kneser_ney["mlp"], kneser_ney["transformer"]
  beats = all(loss[f"{key}, tied"] < count for key in ("context MLP", "context transformer"))
  beats_own = (loss["context MLP, tied"] < mlp["eval/loss"]
               and loss["context transformer, tied"] < transformer["eval/loss"])
  if beats and beats_own:
    head = "With context between its two uses, a tied table beats the count n-gram of the same context."
  elif beats:
    head = ("With context between its two uses, a tied table beats the strongest count bigram, but not yet the "
            "count n-gram of the same context.")
  else:
    head = "With context between its two uses, a tied table does not yet beat the strongest count bigram."
  text = (f"- **{head}** On Vim's help files a tied MLP over the previous tokens scores {loss['context MLP, tied']:.3f}"
          f" nats and a tied 2-block transformer {loss['context transformer, tied']:.3f} (untied: "
          f"{loss['context MLP, untied']:.3f}, {loss['context transformer, untied']:.3f}) against the {strongest} "
          f"count bigram's {count:.3f}, the Kneser-Ney {mlp['order']}-gram's {mlp['eval/loss']:.3f} (the MLP's "
          f"context) and {transformer['order']}-gram's {transformer['eval/loss']:.3f}, and the tied bigram model's "
          f"{loss['bigram, tied']:.3f} ({measured_on.split(',')[0]}, {date}; "
          "[docs/results.md](docs/results.md#context-models), [docs/models.md](docs/models.md)).")
  return textwrap.fill(text, width=120, subsequent_indent="  ", break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
  """argparse whose errors are one line `error: ...` and exit status 2, like the project's other commands."""

  def error(self, message: str):
    _refuse(message)


def _refuse(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


# The tracked blocks each kind of run rewrites with --write-docs: (file, start marker, end marker).
BLOCKS = {"table": [("docs/results.md", START, END), ("docs/running.md", SAMPLE_START, SAMPLE_END),
                    ("README.md", FINAL_START, FINAL_END)],
          "subword": [("docs/results.md", SUBWORD_START, SUBWORD_END)],
          "context": [("docs/results.md", CONTEXT_START, CONTEXT_END),
                      ("README.md", CONTEXT_LINE_START, CONTEXT_LINE_END)]}


def check_blocks(kind: str) -> None:
  """One `error:` line and exit 2, before any training, where a block `kind` rewrites has lost a marker."""
  for name, start, end in BLOCKS[kind]:
    path = ROOT / name
    if common.block(path.read_text() if path.is_file() else "", start, end) is None:
      _refuse(f"{name} has no {start} ... {end} block for --write-docs to rewrite: restore its markers")


def write_blocks(kind: str, bodies: list[str]) -> None:
  """Each block of `kind` (BLOCKS) set to its body, in order."""
  STOPS.sync_point()  # none is written after a stop
  for (name, start, end), body in zip(BLOCKS[kind], bodies, strict=True):
    common.rewrite_block(ROOT / name, start, end, body)


def check_workdirs(rows: list[tuple[str, list[str]]]) -> None:
  """One `error:` line and exit 2 where a row's workdir cannot be one: it, or a folder above it, is a file, or it is a
  link (a row clears its workdir first, and never through a link it did not make)."""
  for name, _ in rows:
    workdir = row_workdir(name)
    if workdir.is_symlink():
      _refuse(f"{workdir} is a link: row {name!r} trains there; remove the link")
    blocker = next((path for path in (workdir, *workdir.parents) if path.exists() and not path.is_dir()), None)
    if blocker == workdir:
      _refuse(f"{workdir} is a file: row {name!r} trains there; move it away")
    if blocker is not None:
      _refuse(f"{blocker} is a file: row {name!r} trains in {workdir}; move it away")


def row_workdir(name: str) -> pathlib.Path:
  return RESULTS_DIR / re.sub(r"[^a-z]+", "_", name).strip("_")


def selected_rows(only: str | None) -> list[tuple[str, list[str]]]:
  """The rows `--only` picks (all without it), their workdirs checked; one `error:` line and exit 2 if none
  matches or a workdir cannot be one (it, or a folder above it, is a file)."""
  rows = [(name, flags) for name, flags in RUNS if not only or only in name]
  if not rows:
    _refuse(f"--only={only!r} matches no row: expected part of a row name, one of "
            + ", ".join(repr(name) for name, _ in RUNS))
  check_workdirs(rows)
  return rows


def main(argv: list[str] | None = None) -> None:
  parser = _Parser(description=__doc__.splitlines()[0])
  parser.add_argument("--only", help="run only the rows whose name contains this text (nothing is written)")
  parser.add_argument("--subword", action="store_true",
                      help=f"run the two subword commands on {VIM_DOCS} instead (several minutes each)")
  parser.add_argument("--context", action="store_true",
                      help="run the context models, tied and untied, beside the bigram models on Vim's help files")
  parser.add_argument("--reuse", action="store_true",
                      help="with --context: read each row's runs/results/<row>/row.json instead of training again")
  parser.add_argument("--write-docs", action="store_true",
                      help="also rewrite the tracked blocks (docs/results.md, docs/running.md, README.md)")
  args = parser.parse_args(argv)
  if args.only is not None and not args.only.strip():
    parser.error(f"--only={args.only!r}: expected part of a row name (an empty one would pick every row)")
  if args.reuse and not args.context:
    parser.error("--reuse reads the context rows' records; it needs --context")
  if args.only and args.write_docs:
    parser.error("--write-docs rewrites the whole table; it takes no --only")
  if args.subword and args.only:
    parser.error("--subword runs both subword commands; it takes no --only")
  if args.context and args.only:
    parser.error("--context runs every context row; it takes no --only")
  with STOPS:  # from here a stop is taken at the next sync point, in one line
    if args.subword:
      _subword(args.write_docs)
    elif args.context:
      _context(args.write_docs, args.reuse)
    else:
      _table(args)


def _table(args: argparse.Namespace) -> None:
  """The results table's rows (those --only picks), printed; without --only written to runs/results/results.md and,
  with --write-docs, into the tracked blocks."""
  if args.write_docs:
    check_blocks("table")
  load = load_average()  # as the first row, the default one, starts
  rows = _run_rows(selected_rows(args.only))
  measured_on, date = machine(), time.strftime("%Y-%m-%d")
  text = section(rows, measured_on, date)
  print(text)
  if args.only:
    return
  STOPS.sync_point()
  (RESULTS_DIR / "results.md").write_text("# Results\n\n" + text + "\n")
  print("wrote runs/results/results.md")
  if not args.write_docs:
    return
  console = rows[0]["console"]  # the default row: what `make train` prints
  console_text = sample(console, measured_on, date, load)
  write_blocks("table", [f"\n{text}\n", f"\n{console_text}\n", final_line(console, measured_on, date)])
  print("wrote docs/results.md's table, docs/running.md's sample console and README.md's final line")


def _run_rows(rows: list[tuple[str, list[str]]], data_dir: pathlib.Path | None = None) -> list[dict]:
  """Each row trained (with --config.data.data_dir=`data_dir` where given), its line printed; a failed row is one
  `error:` line and train.py's exit status."""
  done = []
  for name, flags in rows:
    STOPS.sync_point()
    extra = [] if data_dir is None else [f"--config.data.data_dir={data_dir}"]
    try:
      done.append(run(name, flags + extra, row_workdir(name)))
    except RowFailed as failed:
      print(f"error: {failed}", file=sys.stderr)
      sys.exit(failed.status)
    STOPS.finished.append(name)
    print(f"{name}: {done[-1]['eval/loss']:.4f} in {done[-1]['wall']:.0f} s", flush=True)
  STOPS.sync_point()
  return done


def _subword(write_docs: bool) -> None:
  """The SUBWORD block: both commands from scratch (the dataset, and its vocabulary, made by the first)."""
  if not pathlib.Path(VIM_DOCS).is_dir():
    _refuse(f"{VIM_DOCS} is not a directory: the subword commands train on Vim 9.0's help files (install vim)")
  data_dir = RESULTS_DIR / "data-vim"
  _check_data_dir(data_dir)
  check_workdirs(SUBWORD_RUNS)
  if write_docs:
    check_blocks("subword")
  shutil.rmtree(data_dir, ignore_errors=True)
  load = load_average()
  rows = _run_rows(SUBWORD_RUNS, data_dir)
  text = subword_section(rows, machine(), time.strftime("%Y-%m-%d"), load)
  print(text)
  if write_docs:
    write_blocks("subword", [f"\n{text}\n"])
    print("wrote docs/results.md's subword block")


def _check_data_dir(data_dir: pathlib.Path) -> None:
  """One `error:` line and exit 2 where the shared data folder, cleared before the rows, is a link or a file."""
  if data_dir.is_symlink() or (data_dir.exists() and not data_dir.is_dir()):
    _refuse(f"{data_dir} is {'a link' if data_dir.is_symlink() else 'a file'}: the rows' dataset is made there; "
            "move it away")


# What a context row's record (ROW_RECORD) holds that the CONTEXT block reads: each a finite number (wall ≥ 0).
ROW_NUMBERS = ("wall", "eval/loss", "eval/loss_floor", "eval/count_bigram_loss")


def read_row(path: pathlib.Path) -> dict:
  """The row record at `path`; one `error:` line naming it and what is wrong, exit 2, where it is not a regular file
  of a JSON object with a name and finite ROW_NUMBERS (a damaged or hand-edited record)."""
  row, problem = checks.read_checked(path, _row_problem)
  if not problem:
    return row
  _refuse(f"{path} is damaged: {problem}; run --context to remake it")


def _row_problem(row: object) -> str:
  """Why `row` is not a context row's record ('' where it is)."""
  if not isinstance(row, dict):
    return f"expected a JSON object, got {checks.json_kind(row)}"
  if not isinstance(row.get("name"), str):
    return "no row name"
  for field in ROW_NUMBERS:
    value = row.get(field)
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or (
        field == "wall" and value < 0):
      return f"{field} is {value!r}: expected a finite number" + (" ≥ 0" if field == "wall" else "")
  return ""


def context_configs_digest() -> str:
  """sha256 of the context rows' config files: --reuse refuses rows recorded on other configs."""
  digest = hashlib.sha256()
  for path in sorted({flags[flags.index("--config") + 1] for _, flags in CONTEXT_RUNS}):
    digest.update((ROOT / path).read_bytes())
  return digest.hexdigest()


def _context(write_docs: bool, reuse: bool = False) -> None:
  """The CONTEXT block and the README's context line: every context row from scratch on one dataset, or with
  `reuse` each row's record from its last run (one `error:` line where a row has none)."""
  if not pathlib.Path(VIM_DOCS).is_dir():
    _refuse(f"{VIM_DOCS} is not a directory: the context configs train on Vim's help files (install vim)")
  data_dir = RESULTS_DIR / "data-vim-windows"
  _check_data_dir(data_dir)
  check_workdirs(CONTEXT_RUNS)
  if write_docs:
    check_blocks("context")
  configs = context_configs_digest()  # of the config files as the rows start (or as --reuse finds them)
  if reuse:
    missing = [name for name, _ in CONTEXT_RUNS if not os.path.lexists(row_workdir(name) / ROW_RECORD)]
    if missing:
      _refuse(f"--reuse: no {ROW_RECORD} for row {missing[0]!r} in {row_workdir(missing[0])}: run --context first")
    rows = [read_row(row_workdir(name) / ROW_RECORD) for name, _ in CONTEXT_RUNS]
    stale = next((row["name"] for row in rows if row.get("configs") != configs), None)
    if stale:
      _refuse(f"--reuse: row {stale!r} ran on other config files than today's (their sha256 differs): run --context")
    load = rows[0].get("load", "unknown")
    date = rows[0].get("date", time.strftime("%Y-%m-%d"))
  else:
    shutil.rmtree(data_dir, ignore_errors=True)
    load, date = load_average(), time.strftime("%Y-%m-%d")
    rows = _run_rows(CONTEXT_RUNS, data_dir)
    for row in rows:  # the block's note, for --reuse
      record = row_workdir(row["name"]) / ROW_RECORD
      record.write_text(json.dumps({**read_row(record), "load": load, "date": date,
                                    "configs": configs}, indent=1) + "\n")
  kneser_ney = kneser_ney_rows(data_dir)
  measured_on = machine()
  text = context_section(rows, kneser_ney, measured_on, date, load)
  line = context_line(rows, kneser_ney, measured_on, date)
  print(text + "\n\n" + line)
  if write_docs:
    write_blocks("context", [f"\n{text}\n", f"\n{line}\n"])
    print("wrote docs/results.md's context block and README.md's context line")


if __name__ == "__main__":
  main()
