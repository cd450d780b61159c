"""Trains the tied (or untied) bigram embedding a config describes.

  python train.py --config configs/default.py --workdir runs/default
  python train.py --config configs/default.py --workdir runs/default --config.train.learning_rate=0.1

The same as the installed command `tied-embed-train`. Rerunning the same command on a workdir with checkpoints
resumes from the latest one. A bad flag or config value is one line `error: ...` on stderr and exit status 2,
before anything is computed or written. The flags, the console and the error lines are `tied_embed.train.cli`.
"""

import signal

# Ctrl-C or SIGTERM while the libraries load waits until the command line's own handler is in place (it ends the
# command at once, in one line); landing inside an import, it would print a traceback instead.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})

try:
  from tied_embed.train import cli
except ModuleNotFoundError as missing:  # a Python without the project's libraries (not the venv `make` builds)
  import sys

  sys.exit(f"error: {missing.name} is not installed in {sys.executable}: run `make install`, then "
           f"`.venv/bin/python train.py ...` (or `make train`)")

if __name__ == "__main__":
  cli.main()
