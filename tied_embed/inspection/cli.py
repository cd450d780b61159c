"""Open a run from its workdir and report what the table learned.

  python -m tied_embed.inspection --workdir runs/default [--step N|best] [--tokens 3,17,42] [--top-k 5] [--json]
      [--no-pictures]
  python -m tied_embed.inspection --workdir runs/subword --tokens "▁the,' ',42" (a text run: ids or tokens)
  python -m tied_embed.inspection --workdir runs/subword --next "the king" [--generate 20 --temperature 0.8 --seed 0]

`main` only parses flags, calls `inspect_run` and prints: the report on stdout, each warning as one
`warning: ...` line on stderr, and any problem with what was asked as one `error: ...` line (exit status 2)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from typing import Any

from absl import logging

from tied_embed.inspection.inspector import continue_prompt, inspect_run
from tied_embed.inspection.text import format_continuation, format_text
from tied_embed.util import UsageError, printable, require_path_fits

_TOKEN = re.compile(r"-?[0-9]+")  # ASCII digits only: int() would also take '1_0' and other scripts' digits


def parse_token_items(text: str) -> list[int | str]:
  """'3,▁the, x' → [3, '▁the', 'x']: ASCII integers are ids, anything else a token string, resolved against the
  run's vocabulary by `inspect_run`. Spaces around an item are dropped; quote a token to keep them (' ')."""
  parts = [part.strip(" ") for part in text.split(",")]
  items = [int(part) if _TOKEN.fullmatch(part) else part for part in parts]
  if any(item == "" for item in items):
    raise UsageError.bad_value("--tokens", text, "comma-separated integer token ids, e.g. 3,17,42, or tokens")
  return items


def finite_or_null(value: Any) -> Any:
  """`value` (dicts and lists of JSON values) with every NaN or infinite float as None, JSON's null: an event file
  may log one (a diverged run), and strict JSON has no spelling for them."""
  if isinstance(value, float):
    return value if math.isfinite(value) else None
  if isinstance(value, dict):
    return {key: finite_or_null(item) for key, item in value.items()}
  if isinstance(value, (list, tuple)):
    return [finite_or_null(item) for item in value]
  return value


def _ascii_int(text: str) -> int:
  if not _TOKEN.fullmatch(text):
    raise argparse.ArgumentTypeError(f"invalid int value: {text!r}")
  return int(text)


class _Parser(argparse.ArgumentParser):
  """argparse that raises UsageError instead of printing usage and exiting, so every error is one line."""

  def error(self, message: str):
    raise UsageError(message)


def main(argv: list[str] | None = None) -> int:
  """The command line (the module docstring); absl's verbosity is quieted while it runs and restored after."""
  started = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""  # for --help's usage line
  program = "python -m tied_embed.inspection" if started in ("", "__main__.py", "-c") else started
  parser = _Parser(prog=program, description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True, help="the run's workdir (holds checkpoints/ and event files)")
  parser.add_argument("--step", type=lambda text: text if text == "best" else _ascii_int(text), default=None,
                      help="checkpoint step, or best: the lowest select/loss (default: the latest)")
  parser.add_argument("--tokens", default=None, help="comma-separated token ids (default: 3 most frequent)")
  parser.add_argument("--top-k", type=_ascii_int, default=5, help="predicted next tokens shown per token")
  parser.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
  parser.add_argument("--no-pictures", action="store_true", help="write nothing: no PNGs, images or report.md")
  parser.add_argument("--next", default=None, metavar="PROMPT",
                      help="a text run: print the top-k next tokens after PROMPT's last token (no report)")
  parser.add_argument("--generate", type=_ascii_int, default=0, metavar="N",
                      help="with --next: also sample N tokens continuing PROMPT")
  parser.add_argument("--temperature", type=float, default=1.0, help="--generate: softmax temperature (0 = greedy)")
  parser.add_argument("--seed", type=_ascii_int, default=0, help="--generate: seed of the sampling")
  # TensorFlow's notices (should a library load it) and Orbax's read-only ones would bury the report.
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)
  try:
    args = parser.parse_args(argv)
    require_path_fits("--workdir", args.workdir)
    if args.next is None and args.generate:
      raise UsageError.bad_value("--generate", args.generate, "--next PROMPT beside it (the text to continue)")
    if args.next is not None:
      output = continue_prompt(args.workdir, args.next, args.top_k, args.generate, args.temperature, args.seed,
                               args.step)
    else:
      tokens = None if args.tokens is None else parse_token_items(args.tokens)
      output = inspect_run(args.workdir, args.step, tokens, args.top_k, pictures=not args.no_pictures)
  except UsageError as error:
    print(f"error: {printable(str(error))}", file=sys.stderr)
    return 2
  finally:
    logging.set_verbosity(verbosity)
  for warning in output["warnings"]:
    print(f"warning: {printable(warning)}", file=sys.stderr)
  if args.json:
    print(json.dumps(finite_or_null(output), indent=2, allow_nan=False, ensure_ascii=False))
  else:  # a path or a vocabulary piece holding a control character is shown escaped, as the pieces are
    print(printable(format_continuation(output) if args.next is not None else format_text(output), keep="\n"))
  return 0
