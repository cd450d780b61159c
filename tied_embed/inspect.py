"""`python -m tied_embed.inspect --workdir W ...`: the inspection command line (see `tied_embed.inspection`)."""

from __future__ import annotations

import sys

from tied_embed.inspection.cli import main, parse_token_items, parse_tokens
from tied_embed.inspection.continuation import continue_prompt
from tied_embed.inspection.run import inspect_run

__all__ = ["continue_prompt", "inspect_run", "main", "parse_token_items", "parse_tokens"]

if __name__ == "__main__":
  sys.exit(main())
