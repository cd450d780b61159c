"""Which kernels a run's step uses, kept in its workdir so that a resume on another set says so.

The kernels match XLA's dots and optax's update up to float rounding, not bit for bit (another order of sums), so a
resume on another kernel set than the checkpoints were written with (a build added or lost, another CPU,
TIED_EMBED_MKL=0) continues correctly but says in one line that it is no longer bitwise (docs/failures.md).
"""

from __future__ import annotations

import json
import logging
import pathlib
from typing import TYPE_CHECKING

import jax

from tied_embed import util
from tied_embed.fast.kernels import fused_adamw, gemm

if TYPE_CHECKING:
  import ml_collections

FILE = "kernels.json"  # in the workdir: {"kernels": kernel_set(...)} of the run that last trained there

log = logging.getLogger(__name__)


def kernel_set(config: ml_collections.ConfigDict, params, devices: int = 1) -> str:
  """The kernels `config`'s step uses here, e.g. "gemm-f32,adamw"; "none" where it runs XLA's own code throughout.

  params: the model's Params (arrays or abstract arrays); devices: how many the state spans (on several none runs:
  XLA cannot partition a custom call). The same choices as tied_embed/fast/choose.py's step makes.
  """
  if devices != 1:
    return "none"
  dtype, table = str(config.model.dtype), (int(config.model.vocab_size), int(config.model.d_model))
  names = []
  if int(config.loss.chunk_size) > 0 and gemm.available(dtype) and gemm.pays_off(table, dtype):
    names.append("gemm-f32" if dtype == "float32" else "gemm-bf16")
  if config.train.optimizer == "adamw" and fused_adamw.available() and fused_adamw.pays_off(params):
    names.append("adamw")
  return ",".join(names) or "none"


def record(workdir: str | pathlib.Path, kernels: str, resuming: bool) -> None:
  """Keeps `kernels` (`kernel_set`'s) in WORKDIR/kernels.json; on a resume from checkpoints written with another set,
  first logs one warning that the run will not be bitwise equal to an uninterrupted one. Process 0 only."""
  if jax.process_index() != 0:
    return
  path = pathlib.Path(workdir) / FILE
  try:
    if path.is_symlink():  # not this workdir's record: read nothing through it
      raise OSError(f"{path} is a symbolic link")
    before = json.loads(path.read_text())["kernels"]
  except (OSError, ValueError, KeyError, TypeError):
    before = None  # a run from before the record, or none yet: nothing to compare
  if resuming and before is not None and before != kernels:
    log.warning("Resuming on kernels %s where the checkpoints were written on %s: the run continues, but not bitwise "
                "equal to an uninterrupted one (docs/failures.md).", kernels, before)
  if before != kernels:  # replaced whole, never written through a link planted in the workdir
    util.write_atomically(path, (json.dumps({"kernels": kernels}) + "\n").encode())
