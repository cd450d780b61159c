"""Trains the tied (or untied) bigram embedding a config describes.

  python train.py --config configs/default.py --workdir runs/default
  python train.py --config configs/default.py --workdir runs/default --config.train.learning_rate=0.1

The same as the installed command `tied-embed-train`. Rerunning the same command on a workdir with checkpoints
resumes from the latest one. A bad flag or config value is one line `error: ...` on stderr and exit status 2,
before anything is computed or written. The flags, the console and the error lines are `tied_embed.run.cli`.
"""

from tied_embed.run import cli

if __name__ == "__main__":
  cli.main()
