"""Open a run from its workdir and report what the table learned.

  python -m tied_embed.inspect --workdir runs/default [--step N] [--tokens 3,17,42] [--top-k 5] [--json]
      [--no-pictures]

`main` only parses flags, calls `inspect_run` and prints: the report on stdout, each warning as one
`warning: ...` line on stderr, and any problem with what was asked as one `error: ...` line (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from absl import logging

from tied_embed.errors import UsageError
from tied_embed.inspection.run import inspect_run
from tied_embed.inspection.text import format_text

_TOKEN = re.compile(r"-?[0-9]+")  # ASCII digits only: int() would also take '1_0' and other scripts' digits


def parse_tokens(text: str) -> list[int]:
  """'3,17,42' → [3, 17, 42]; raises UsageError for anything that isn't a comma-separated list of integers."""
  parts = [part.strip(" ") for part in text.split(",")]
  if not all(_TOKEN.fullmatch(part) for part in parts):
    raise UsageError.bad_value("--tokens", text, "comma-separated integer token ids, e.g. 3,17,42")
  return [int(part) for part in parts]


def _ascii_int(text: str) -> int:
  if not _TOKEN.fullmatch(text):
    raise argparse.ArgumentTypeError(f"invalid int value: {text!r}")
  return int(text)


class _Parser(argparse.ArgumentParser):
  """argparse that raises UsageError instead of printing usage and exiting, so every error is one line."""

  def error(self, message: str):
    raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
  parser = _Parser(prog="python -m tied_embed.inspect", description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True, help="the run's workdir (holds checkpoints/ and event files)")
  parser.add_argument("--step", type=_ascii_int, default=None, help="checkpoint step (default: the latest)")
  parser.add_argument("--tokens", default=None, help="comma-separated token ids (default: 3 most frequent)")
  parser.add_argument("--top-k", type=_ascii_int, default=5, help="predicted next tokens shown per token")
  parser.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
  parser.add_argument("--no-pictures", action="store_true", help="write nothing: no PNGs, images or report.md")
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
    report = inspect_run(args.workdir, args.step, tokens, args.top_k, pictures=not args.no_pictures)
  except UsageError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  for warning in report["warnings"]:
    print(f"warning: {warning}", file=sys.stderr)
  print(json.dumps(report, indent=2, allow_nan=False, ensure_ascii=False) if args.json else format_text(report))
  return 0
