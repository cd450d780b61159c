"""Checks a training config before any work: every bad value is one UsageError naming its field path.

Cheap and without TensorFlow: the command line runs it before importing the trainer, and nothing is written
until it has passed. It checks the field names (`config_schema`), each value's type and range (`config_fields`),
the data fields (`data_config`), the mesh, and whether the run fits in memory (`memory_estimate`).
"""

from __future__ import annotations

import difflib
import os
from typing import Any, NamedTuple

import jax
import ml_collections

from tied_embed.data import config as data_config
from tied_embed.data import sources
from tied_embed.data.config import is_number
from tied_embed.train import config_fields, config_schema
from tied_embed.train import mesh as mesh_lib
from tied_embed.util import UsageError, require

# Python, JAX, TensorFlow and the compiled programs: configs/smoke.py, whose arrays are ~1 MB, peaks at 0.9 GiB.
RUNTIME_BYTES = 2**30


def validate_config(
    config: ml_collections.ConfigDict, num_devices: int | None = None, memory_bytes: int | None = None
) -> None:
  """Raises UsageError for the first bad field; returns None if the config can be trained as given.

  NumPy scalars in `config` are replaced by the Python numbers they equal (`config_fields.as_python_values`).

  `num_devices` defaults to jax.device_count(), which the mesh must fit; `memory_bytes` to `available_memory()`,
  which `memory_estimate(config)` must not exceed.
  """
  require(isinstance(config, ml_collections.ConfigDict), "config", f"<{type(config).__name__}>",
          "an ml_collections.ConfigDict")
  config_fields.as_python_values(config)
  _check_field_names(config)
  config_fields.check_values(config)
  data_config.validate_data_config(config)
  _check_mesh(config, jax.device_count() if num_devices is None else num_devices)
  check_memory(config, available_memory() if memory_bytes is None else memory_bytes)


def _check_field_names(config: ml_collections.ConfigDict) -> None:
  unknown, missing = config_schema.unknown_and_missing(config)
  if unknown:
    path, value = next(iter(unknown.items()))
    guess = difflib.get_close_matches(path, config_schema.known_fields(), n=1)
    hint = f"; did you mean {guess[0]}?" if guess else ""
    raise UsageError.bad_value(path, value, f"a known config field (see configs/default.py){hint}")
  if missing:
    raise UsageError(f"{missing[0]} is missing from the config: expected every field of configs/default.py")


def _check_mesh(config: ml_collections.ConfigDict, num_devices: int) -> None:
  data_size, model_size = mesh_lib.mesh_shape(config.mesh, num_devices)
  vocab_size, batch_size = config.model.vocab_size, config.train.batch_size
  require(vocab_size % model_size == 0, "mesh.model", model_size,
          f"a divisor of model.vocab_size={vocab_size} (the table is split along V)")
  require(batch_size % data_size == 0, "mesh.data", data_size,
          f"a divisor of train.batch_size={batch_size} (the batch is split along data)")
  mesh_lib.check_mesh_fits_processes(data_size, model_size, num_devices, jax.process_count())


class MemoryTerm(NamedTuple):
  """One part of a run's memory: what it is, its bytes, and the config fields it grows with."""

  what: str
  bytes: int
  fields: tuple[str, ...]


def memory_estimate(config: ml_collections.ConfigDict) -> list[MemoryTerm]:
  """The memory a run of a valid config needs on one host, as a sum of the terms below (bytes, float32 = 4).

  - tables: V·D·4 per table (1 tied, 2 untied), 6 times: the parameter, two Adam moments, the gradient and its
    lookup and projection parts;
  - a synthetic task's hidden table: V·data.task_d_model·8 (float64; other sources have none);
  - train logits: (B or loss.chunk_size, V) float32, 3 times: the logits, their exponentials and gradient;
  - hidden vectors: (B, D) float32, twice: the looked-up rows and their gradient;
  - eval logits: (eval_batch_size or loss.chunk_size, V) float32, twice: the logits and their exponentials;
  - dataset: 32 bytes per train or validation pair (as the source counts them): while generating, the int32
    pair, a float64 uniform draw and an int64 sort order; then the int32 pair loaded.

  (V, V) tables are not counted: the sources compute them a few MB of rows at a time. `check_memory` adds
  `RUNTIME_BYTES` for the interpreter, the libraries and the compiled programs. All arrays are counted whole on
  this host, as if unsharded: a run split over several hosts needs less.
  """
  vocab_size, d_model = int(config.model.vocab_size), int(config.model.d_model)
  batch_size, eval_batch_size = int(config.train.batch_size), int(config.train.eval_batch_size)
  chunk_size = int(config.loss.chunk_size)
  num_tables = 1 if config.model.tied else 2
  source = sources.get(config.data.source)
  pairs = sum(source.num_pairs(source.settings(config)).values())
  counts = [f"data.{field}" for field in source.fields if field.startswith("num_")]
  pair_fields = tuple(counts or [f"data.{field}" for field in source.fields] or ["data.source"])
  train_rows, eval_rows = (min(chunk_size or rows, rows) for rows in (batch_size, eval_batch_size))
  task_d_model = int(config.data.task_d_model) if config.data.source in sources.SYNTHETIC_SOURCES else 0
  return [
      MemoryTerm("the (V, D) tables and their optimizer state", vocab_size * d_model * num_tables * 4 * 6,
                 ("model.vocab_size", "model.d_model")),
      MemoryTerm("the task's hidden table e*", vocab_size * task_d_model * 8,
                 ("data.task_d_model", "model.vocab_size")),
      MemoryTerm("the train logits (loss.chunk_size > 0 bounds them)", train_rows * vocab_size * 4 * 3,
                 ("train.batch_size" if train_rows == batch_size else "loss.chunk_size", "model.vocab_size")),
      MemoryTerm("the hidden vectors of a batch", batch_size * d_model * 4 * 2, ("train.batch_size", "model.d_model")),
      MemoryTerm("the eval logits", eval_rows * vocab_size * 4 * 2,
                 ("train.eval_batch_size" if eval_rows == eval_batch_size else "loss.chunk_size", "model.vocab_size")),
      MemoryTerm("the dataset", pairs * 32, pair_fields),
  ]


def available_memory() -> int:
  """This machine's physical memory in bytes, or its cgroup's memory limit when that is smaller."""
  limits = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
  for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
    try:
      with open(path) as f:
        limits.append(int(f.read().strip()))
    except (OSError, ValueError):  # no such cgroup file, or "max"
      pass
  return min(limits)


def check_memory(config: ml_collections.ConfigDict, memory_bytes: int) -> None:
  """UsageError if `memory_estimate` + `RUNTIME_BYTES` > `memory_bytes`.

  It names the largest term, and of the fields that term grows with, the one set to the largest number.
  """
  terms = memory_estimate(config)
  total = RUNTIME_BYTES + sum(term.bytes for term in terms)
  if total <= memory_bytes:
    return
  largest = max(terms, key=lambda term: term.bytes)
  field = max(largest.fields, key=lambda path: _as_number(config_fields.get(config, path)))
  raise UsageError.bad_value(
      field, config_fields.get(config, field),
      f"a config that fits in this machine's {_gib(memory_bytes)} of memory: it needs about {_gib(total)}, "
      f"{_gib(largest.bytes)} of it for {largest.what}",
  )


def _as_number(value: Any) -> float:
  return float(value) if is_number(value) else 0.0


def _gib(num_bytes: int) -> str:
  return f"{num_bytes / 2**30:,.1f} GiB"


def unparsed_override(config: ml_collections.ConfigDict, path: str, text: str) -> UsageError:
  """The refusal of `--config.<path>=<text>` where the flag parser could not read `text` as the field's type
  ('abc' for a number, '8.5' for an integer): the field's own one-line message, naming what it allows.

  The field's check says what is allowed; a data.* field of a source is checked by that source, given `text`.
  """
  field = config_fields.BY_PATH.get(path)
  if field is not None:
    return UsageError.bad_value(path, text, field.allowed)
  trial = config.copy_and_resolve_references()
  config_fields.set_unchecked(trial, path, text)
  *parents, leaf = path.split(".")
  owners = [source for source in sources.REGISTRY.values() if leaf in source.fields and parents == ["data"]]
  for source in owners:
    with trial.ignore_type():
      trial.data.source = source.name
    try:
      source.validate(trial)
    except UsageError as error:
      if str(error).startswith(f"{path}="):
        return error
  default = config_fields.get(config, path)
  return UsageError.bad_value(path, text, f"a {type(default).__name__} like its default {default!r}")
