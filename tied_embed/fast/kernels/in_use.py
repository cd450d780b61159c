"""Which kernels a run's step uses (fast/choose.py's `kernel_set`), kept in its workdir: they match XLA's dots and
optax's update up to float rounding, not bit for bit, so a resume on another kernel set continues but says it is no
longer bitwise."""

from __future__ import annotations

import json
import logging
import pathlib

import jax

from tied_embed import util
from tied_embed import workdir as workdir_lib

log = logging.getLogger(__name__)


def record(workdir: str | pathlib.Path, kernels: str, resuming: bool) -> None:
  """Keeps `kernels` in WORKDIR/kernels.json (process 0), first warning if a resume's checkpoints had another set."""
  if jax.process_index() != 0:
    return
  path = pathlib.Path(workdir) / workdir_lib.KERNELS  # {"kernels": ...} of the run that last trained there
  try:
    if path.is_symlink():  # not this workdir's record: read nothing through it
      raise OSError(f"{path} is a symbolic link")
    before = json.loads(util.read_regular(path, 1 << 16))["kernels"]  # a FIFO there is not waited on
  except (OSError, ValueError, KeyError, TypeError):
    before = None  # a run from before the record, or none yet: nothing to compare
  if resuming and before is not None and before != kernels:
    log.warning("Resuming on kernels %s where the checkpoints were written on %s: the run continues, but not bitwise "
                "equal to an uninterrupted one (docs/failures.md).", kernels, before)
  if before != kernels:  # replaced whole, never written through a link planted in the workdir
    util.write_atomically(path, (json.dumps({"kernels": kernels}) + "\n").encode())
