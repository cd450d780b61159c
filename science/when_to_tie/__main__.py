"""`python -m science.when_to_tie`: the sweep's command line (science/when_to_tie/cli.py)."""

from science.when_to_tie import cli

cli.main()
