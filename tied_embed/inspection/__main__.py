"""`python -m tied_embed.inspection --workdir W ...`: the inspection command line (`tied_embed.inspection.cli`)."""

import sys

from tied_embed.inspection.cli import main

sys.exit(main())
