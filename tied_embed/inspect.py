"""Open a run from its workdir and report what the table learned.

  python -m tied_embed.inspect --workdir runs/default [--step N] [--tokens 3,17,42] [--top-k 5] [--json]

`inspect_run` is the library call (for notebooks too): it restores a checkpoint with nothing but the workdir,
loads the run's bigram data, reads the loss curves back from the event files, computes the report
(`tied_embed.report`) and draws its pictures into WORKDIR/report/ (`tied_embed.plots`). `main` only parses
flags, calls it and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from typing import Any

import numpy as np
from absl import logging

from tied_embed import report as report_lib
from tied_embed.errors import UsageError
from tied_embed.model import io_tables
from tied_embed.report_text import format_markdown, format_text
from tied_embed.sources import log_softmax

_LOSS_TAGS = ("train/loss", "eval/loss")
_DEFAULT_TOKENS = 3  # without --tokens: the most frequent input tokens
_HEATMAP_MAX_TOKENS = 256  # a bigger vocabulary is drawn as the block of its most frequent current tokens,
_HEATMAP_ZOOM_TOKENS = 128  # this many, as a V x V picture would be a uniform haze at screen resolution


def parse_tokens(text: str) -> list[int]:
  """'3,17,42' → [3, 17, 42]; raises UsageError for anything that isn't a comma-separated list of integers."""
  try:
    return [int(part) for part in text.split(",")]
  except ValueError:
    raise UsageError.bad_value("--tokens", text, "comma-separated integer token ids, e.g. 3,17,42") from None


def inspect_run(
    workdir: str | pathlib.Path,
    step: int | None = None,
    tokens: list[int] | None = None,
    top_k: int = 5,
    pictures: bool = True,
) -> dict[str, Any]:
  """The JSON-ready report of checkpoint `step` (default: the latest) in `workdir`.

  Keys: workdir, step, available_steps, run, scores, parameters, tokens, fit, provenance, and with
  `pictures=True` also pictures ({name: PNG path relative to WORKDIR/report}) and report_md. Raises UsageError,
  before anything is restored or written where it can, for: no checkpoints, a missing step, a token outside
  [0, V), top_k outside [1, V].
  """
  from tied_embed import checkpoint, data  # noqa: PLC0415 (Orbax/TFDS stay out of `import tied_embed`)
  from tied_embed.events import read_scalars, value_at  # noqa: PLC0415

  workdir = pathlib.Path(workdir)
  if top_k < 1:
    raise UsageError.bad_value("--top-k", top_k, "an integer >= 1")
  for token in tokens or []:
    if token < 0:
      raise UsageError.bad_value("--tokens", token, "token ids >= 0")
  steps = checkpoint.available_steps(workdir)
  if not steps:
    raise UsageError(f"--workdir={str(workdir)!r} has no checkpoints (expected {workdir / 'checkpoints'}/<step>/)")
  if step is not None and step not in steps:
    raise UsageError.bad_value("--step", step, f"one of the saved steps {', '.join(map(str, steps))}")
  restored = checkpoint.restore(workdir, step)
  vocab_size = restored.model.vocab_size
  for token in tokens or []:
    if not 0 <= token < vocab_size:
      raise UsageError.bad_value("--tokens", token, f"token ids in [0, {vocab_size})")
  if not 1 <= top_k <= vocab_size:
    raise UsageError.bad_value("--top-k", top_k, f"an integer in [1, {vocab_size}]")

  config = restored.config
  bigrams = data.load_bigram_data(config, str(workdir))
  if tokens is None:
    tokens = [int(i) for i in np.argsort(-bigrams.input_counts, kind="stable")[:_DEFAULT_TOKENS]]
  series = read_scalars(workdir, _LOSS_TAGS)
  eval_loss = value_at(series.get("eval/loss"), restored.step)
  lookup_table, projection_table = (np.asarray(table) for table in io_tables(restored.model))
  report = {
      "workdir": str(workdir),
      "step": restored.step,
      "available_steps": steps,
      "run": {
          "config": _config_summary(config),
          "train_loss": value_at(series.get("train/loss"), restored.step),
          "eval_loss": eval_loss,
          "loss_floor": float(bigrams.loss_floor),
          "gap": None if eval_loss is None else eval_loss["value"] - float(bigrams.loss_floor),
      },
      **report_lib.build_report(
          lookup_table,
          projection_table,
          tied=bool(config.model.tied),
          source=bigrams.source,
          true_log_probs=bigrams.true_log_probs,
          lookup_total=restored.provenance["lookup_total"],
          projection_total=restored.provenance["projection_total"],
          tokens=tokens,
          top_k=top_k,
      ),
  }
  if pictures:
    _draw(report, workdir / "report", lookup_table, projection_table, bigrams, restored.provenance, series)
  return report


def _draw(
    report: dict[str, Any],
    report_dir: pathlib.Path,
    lookup_table: np.ndarray,
    projection_table: np.ndarray,
    bigrams: Any,
    provenance: dict[str, np.ndarray],
    series: dict[str, tuple[np.ndarray, np.ndarray]],
) -> None:
  """Write the PNGs, the TensorBoard images and report.md; record their paths in `report`."""
  from tied_embed import plots  # noqa: PLC0415 (CLU/TensorFlow only when drawing)

  true_name = "empirical" if bigrams.source == "text" else "true"
  heatmap_ids = None
  if len(bigrams.input_counts) > _HEATMAP_MAX_TOKENS:
    heatmap_ids = np.sort(np.argsort(-bigrams.input_counts, kind="stable")[:_HEATMAP_ZOOM_TOKENS])
  learned = log_softmax(report_lib.score_matrix(lookup_table, projection_table))
  figures = {
      "heatmaps": plots.heatmaps_figure(learned, bigrams.true_log_probs, true_name, heatmap_ids),
      "loss_curves": plots.loss_curves_figure(series, float(bigrams.loss_floor), report["step"]),
      "provenance": plots.provenance_figure(
          provenance["lookup_total"], provenance["projection_total"], bigrams.input_counts
      ),
  }
  report["pictures"] = plots.write_pictures(report_dir, figures, report["step"])
  report["report_md"] = str(report_dir / "report.md")
  (report_dir / "report.md").write_text(format_markdown(report))


def _config_summary(config: Any) -> dict[str, Any]:
  """The config fields the report's header shows."""
  return {
      "seed": int(config.seed),
      "source": str(config.data.source),
      "vocab_size": int(config.model.vocab_size),
      "d_model": int(config.model.d_model),
      "tied": bool(config.model.tied),
      "optimizer": str(config.train.optimizer),
      "learning_rate": float(config.train.learning_rate),
      "batch_size": int(config.train.batch_size),
      "num_steps": int(config.train.num_steps),
  }


class _Parser(argparse.ArgumentParser):
  """argparse that raises UsageError instead of printing usage and exiting, so every error is one line."""

  def error(self, message: str):
    raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
  parser = _Parser(prog="python -m tied_embed.inspect", description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True, help="the run's workdir (holds checkpoints/ and event files)")
  parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
  parser.add_argument("--tokens", default=None, help="comma-separated token ids (default: 3 most frequent)")
  parser.add_argument("--top-k", type=int, default=5, help="predicted next tokens shown per token")
  parser.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
  return parser


def main(argv: list[str] | None = None) -> int:
  """CLI: parse flags, run `inspect_run`, print text or JSON; a UsageError → `error: ...` on stderr, status 2."""
  # TensorFlow (under TFDS and the TensorBoard writer) and Orbax's read-only notices would bury the report.
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
  logging.set_verbosity(logging.ERROR)
  try:
    args = _parser().parse_args(argv)
    tokens = None if args.tokens is None else parse_tokens(args.tokens)
    report = inspect_run(args.workdir, args.step, tokens, args.top_k)
  except UsageError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  print(json.dumps(report, indent=2, allow_nan=False, ensure_ascii=False) if args.json else format_text(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
