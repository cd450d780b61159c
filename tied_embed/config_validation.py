"""Checks a training config before any work: every bad value is one UsageError naming its field path."""

from __future__ import annotations

import math

import jax
import ml_collections

from tied_embed import data_config, mesh
from tied_embed.errors import UsageError
from tied_embed.optim import OPTIMIZERS


def _require(config: ml_collections.ConfigDict, path: str, ok, allowed: str) -> None:
  value = config
  for key in path.split("."):
    value = value[key]
  if not ok(value):
    raise UsageError.bad_value(path, value, allowed)


def validate_config(config: ml_collections.ConfigDict, num_devices: int | None = None) -> None:
  """Raises UsageError for the first bad field; returns None if the config can be trained as given.

  `num_devices` defaults to jax.device_count(), which the mesh must fit.
  """
  positive = lambda v: data_config.is_int(v) and v > 0  # noqa: E731
  _require(config, "seed", data_config.is_int, "an integer")
  _require(config, "model.vocab_size", positive, "an integer > 0")
  _require(config, "model.d_model", positive, "an integer > 0")
  _require(config, "train.batch_size", positive, "an integer > 0")
  _require(config, "train.eval_batch_size", positive, "an integer > 0")
  _require(config, "train.num_steps", lambda v: data_config.is_int(v) and v >= 0, "an integer >= 0")
  _require(config, "train.warmup_steps", lambda v: data_config.is_int(v) and v >= 0, "an integer >= 0")
  _require(
      config, "train.learning_rate", lambda v: data_config.is_number(v) and math.isfinite(v) and v > 0,
      "a finite number > 0",
  )
  for field in ("weight_decay", "grad_clip_norm"):
    _require(
        config, f"train.{field}", lambda v: data_config.is_number(v) and math.isfinite(v) and v >= 0,
        "a finite number >= 0 (0 = off)",
    )
  _require(config, "train.optimizer", lambda v: v in OPTIMIZERS, " | ".join(OPTIMIZERS))
  for field in ("log_every", "eval_every", "checkpoint_every", "keep_checkpoints"):
    _require(config, f"train.{field}", positive, "an integer > 0")
  _require(config, "loss.chunk_size", lambda v: data_config.is_int(v) and v >= 0, "an integer >= 0 (0 = full logits)")
  data_config.validate_data_config(config)
  num_devices = jax.device_count() if num_devices is None else num_devices
  data_size, model_size = mesh.mesh_shape(config.mesh, num_devices)
  vocab_size, batch_size = config.model.vocab_size, config.train.batch_size
  if vocab_size % model_size:
    raise UsageError.bad_value(
        "mesh.model", model_size, f"a divisor of model.vocab_size={vocab_size} (the table is split along V)"
    )
  if batch_size % data_size:
    raise UsageError.bad_value(
        "mesh.data", data_size, f"a divisor of train.batch_size={batch_size} (the batch is split along data)"
    )
  mesh.check_mesh_fits_processes(data_size, model_size, num_devices, jax.process_count())
