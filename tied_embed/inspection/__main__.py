"""`python -m tied_embed.inspection --workdir W ...`: the inspection command line (`tied_embed.inspection.cli`)."""

import sys

try:
  from tied_embed.inspection.cli import main
except ModuleNotFoundError as missing:  # a Python without the project's libraries (not the venv `make` builds)
  sys.exit(f"error: {missing.name} is not installed in {sys.executable}: run `make install`, then "
           "`.venv/bin/tied-embed-inspect --workdir ...` (or `make inspect`)")

raise SystemExit(main())
