"""`python -m tied_embed.inspection --workdir W ...`: the inspection command line (`tied_embed.inspection.cli`)."""

from tied_embed.inspection.cli import main

raise SystemExit(main())
