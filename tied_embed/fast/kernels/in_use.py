"""Which kernels a run's step uses, kept in its workdir: they match XLA's dots and optax's update up to float rounding,
not bit for bit, so a resume on another kernel set continues but says it is no longer bitwise."""

from __future__ import annotations

import json
import logging
import pathlib
from typing import TYPE_CHECKING

import jax

from tied_embed import util
from tied_embed import workdir as workdir_lib
from tied_embed.fast.kernels import fused_adamw, gemm

if TYPE_CHECKING:
  import ml_collections


log = logging.getLogger(__name__)


def kernel_set(config: ml_collections.ConfigDict, params, devices: int = 1) -> str:
  """The kernels `config`'s step uses, as fast/choose.py picks them: e.g. "gemm-f32,blocks,adamw" (gemm.ROUTES),
  "none"."""
  if devices != 1:
    return "none"
  dtype, table = str(config.model.dtype), (int(config.model.vocab_size), int(config.model.d_model))
  names = []
  if int(config.loss.chunk_size) > 0 and gemm.available(dtype) and gemm.pays_off(table, dtype):
    names.append(gemm.route(dtype))
  speed_paths = int(config.loss.chunk_size) > 0 or dtype != "float32"  # fast/choose.py's paths_function
  if speed_paths and int(config.data.context_length) > 1 and gemm.available("float32"):
    names.append("blocks")  # a context model's own products on the float32 kernel (fast/block_dots.py)
  if config.train.optimizer == "adamw" and fused_adamw.available() and fused_adamw.pays_off(params):
    names.append("adamw")
  return ",".join(names) or "none"


def record(workdir: str | pathlib.Path, kernels: str, resuming: bool) -> None:
  """Keeps `kernels` in WORKDIR/kernels.json (process 0), first warning if a resume's checkpoints had another set."""
  if jax.process_index() != 0:
    return
  path = pathlib.Path(workdir) / workdir_lib.KERNELS  # {"kernels": kernel_set(...)} of the run that last trained there
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
