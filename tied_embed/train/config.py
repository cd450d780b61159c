"""A training config: every field declared once (`FIELDS`: default, allowed values, resumable or not, meaning), and
`validate`, the one check of a whole config (memory included) where a run starts. A source declares and checks its own
data.* fields; a model variant declares its model.* fields beside its class (core/model.py's `declare`), and the rows
here for model.context, model.hidden and their settings are made from those declarations. scripts/config_fields.py
prints the docs' field list."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import os
import pathlib
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np
from flax import traverse_util

from tied_embed.core import model as model_lib
from tied_embed.core.optim import OPTIMIZERS
from tied_embed.data import sources
from tied_embed.data.base import is_int, is_number
from tied_embed.fast.precision import COMPUTE_DTYPES
from tied_embed.train import mesh as mesh_lib
from tied_embed.util import UsageError, is_utf8, require

INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Field:
  """One config field: `check(value)` is True for the values `allowed` describes (None: checked where noted)."""

  path: str  # dotted, e.g. 'train.learning_rate'
  default: Any
  allowed: str  # completes 'expected ...' in the one-line refusal
  check: Callable[[Any], bool] | None
  resumable: bool  # may differ between a checkpoint and the run resuming it
  doc: str
  dataset: bool = False  # part of the dataset's identity (the cache name and the checkpoints' manifest)


FLOAT32_MAX = float(np.finfo(np.float32).max)  # 3.4e38
FLOAT32_SMALLEST = float(np.finfo(np.float32).smallest_subnormal)  # 1.4e-45: half of it rounds to 0
# The float fields the step reads reach it as float32: a value beyond float32 would become inf or 0 there.
IN_FLOAT32 = "within float32 (at most 3.4e38; 0 or at least 1.4e-45)"


def _int_in(low: int, high: int = INT32_MAX) -> Callable[[Any], bool]:
  return lambda v: is_int(v) and low <= v <= high


def in_float32(value: Any) -> bool:
  """Finite, at most FLOAT32_MAX, and 0 or not rounded to 0: a number float32 holds as itself, near enough."""
  return (is_number(value) and math.isfinite(value) and abs(value) <= FLOAT32_MAX
          and (value == 0 or abs(value) >= FLOAT32_SMALLEST))


def _float32_at_least(low: float) -> Callable[[Any], bool]:
  return lambda v: in_float32(v) and v >= low


def _mesh_size(value: Any) -> bool:
  return is_int(value) and (value == -1 or 1 <= value <= INT32_MAX)


_POSITIVE = "an integer in [1, 2**31 - 1]"
MAX_CONTEXT_LENGTH = 65_536  # tokens per window; the memory check bounds what fits well below this


def _setting_field(family: str, setting: model_lib.Setting) -> Field:
  """The config field of a variant's `setting`: its check and refusal text from its type and bounds."""
  readers = " or ".join(name for name, variant in model_lib.VARIANTS[family].items() if setting in variant.settings)
  low, high, doc = setting.low, setting.high, f"{family}={readers}: {setting.doc}"
  if isinstance(setting.default, int):
    top = INT32_MAX if high is None else high
    allowed = f"an integer in [{low}, {'2**31 - 1' if high is None else high}]"
    return Field(f"model.{setting.name}", setting.default, allowed, _int_in(low, top), False, doc)
  if high is None:
    allowed = f"a finite number >= {low:g}{' (0 = off)' if setting.default == 0 == low else ''}, {IN_FLOAT32}"
  else:
    allowed = f"a finite number in [{low:g}, {high:g}{')' if setting.high_open else ']'}"

  def check(value: Any) -> bool:
    below_high = high is None or value < high or (value == high and not setting.high_open)
    return in_float32(value) and value >= low and below_high

  return Field(f"model.{setting.name}", setting.default, allowed, check, False, doc)


def _family_fields(family: str) -> tuple[Field, ...]:
  """model.<family> (which variant) and every setting its variants read, from their declarations."""
  variants = model_lib.VARIANTS[family]
  doc = "between lookup and projection: " + ", ".join(f"{name} ({v.doc})" for name, v in variants.items())
  chosen = Field(f"model.{family}", "none", " | ".join(f'"{name}"' for name in variants),
                 lambda v: isinstance(v, str) and v in variants, False, doc)
  return (chosen, *(_setting_field(family, setting) for setting in model_lib.family_settings(family).values()))
_MESH = "a positive integer, or -1 for all remaining devices"
EVAL_STRIDE = "-1 (the window length) or an integer in [1, data.context_length]"
_STEPS = "an integer in [0, 2**31 - 1] (optax counts steps in int32)"

FIELDS: tuple[Field, ...] = (
    Field("seed", 0, "an integer in [0, 2**31 - 1] (NumPy's batch order refuses negative seeds; larger ones would give "
          "other initial tables with jax_enable_x64 on)", _int_in(0), False,
          "model initialisation and the order of training batches (batch s depends only on (seed, s))"),
    Field("model.vocab_size", 1024, _POSITIVE, _int_in(1), False,
          "V, rows of the table; must match the source (text: 256 byte values)"),
    Field("model.d_model", 32, _POSITIVE, _int_in(1), False, "D, width of each row"),
    Field("model.tied", True, "True or False", lambda v: isinstance(v, bool), False,
          "one (V, D) table for lookup and projection; False: separate input/output tables"),
    Field("model.dtype", "float32", " | ".join(COMPUTE_DTYPES) + " (the matmuls' compute dtype)",
          lambda v: v in COMPUTE_DTYPES, True, "compute dtype of the loss's matmuls (float32 accumulation; "
          "parameters and optimizer state stay float32)"),
    *_family_fields("hidden"),
    Field("model.output_bias", False, "True or False", lambda v: isinstance(v, bool), False,
          "a learned score b_j of each next token after the projection, logits = h·Eᵀ + b (b (V,), from 0)"),
    *_family_fields("context"),
    Field("data.context_length", 1, f"an integer in [1, {MAX_CONTEXT_LENGTH}]", _int_in(1, MAX_CONTEXT_LENGTH), False,
          "L, tokens per training window: 1 = (current, "
          "next) pairs; L > 1 = windows of L tokens within one document, scored on the next token at each position"),
    Field("data.source", "planted", f"one of {tuple(sorted(sources.REGISTRY))}", None, False,
          "the task (tied_embed/data/sources/); the source checks the data.* fields it reads"),
    Field("data.data_dir", "", "a path ('' = <workdir>/data), a writable directory", None, True,
          "where the dataset is generated and cached ('' = <workdir>/data)"),
    Field("data.train_fraction", 1.0, "a finite number in (0, 1]", lambda v: is_number(v) and 0 < v <= 1, False,
          "the share of the train split the run trains on (of what the selection split leaves)", dataset=True),
    Field("data.selection_fraction", 0.0, "a finite number in [0, 0.5) (0 = no selection split)",
          lambda v: is_number(v) and 0 <= v < 0.5, False, "the last share of the train split, held out as a selection "
          "split: scored at every eval (select/loss), picks the best checkpoint, never trained on", dataset=True),
    Field("data.task_d_model", 32, _POSITIVE, _int_in(1), False, "planted/directed: width of the hidden table e* "
          "that generates the task (model.d_model is the model's)", dataset=True),
    Field("train.num_steps", 3000, _STEPS, _int_in(0), True, "optimizer updates in the whole run"),
    Field("train.batch_size", 1024, _POSITIVE, _int_in(1), False,
          "(current, next) token pairs per step; windows of data.context_length tokens when that is over 1"),
    Field("train.eval_batch_size", 8192, _POSITIVE, _int_in(1), True,
          "pairs per evaluation batch; evaluation covers the whole validation split"),
    Field("train.eval_stride", -1, EVAL_STRIDE, None, True, "with data.context_length L > 1, pairs between the "
          "starts of consecutive evaluation windows of one document: -1 = L, each document tiled from its start (a "
          "pair at position p of its window sees p earlier tokens); S < L = overlapping windows, each scoring its "
          "last S pairs, so every pair past the first L of its document sees at least L - S earlier tokens (S = 1: "
          "L - 1); an eval then computes about L / S times as many positions (eval_batch_size positions a batch)"),
    Field("train.learning_rate", 0.05, f"a finite number > 0, {IN_FLOAT32}", lambda v: in_float32(v) and v > 0,
          False, "peak learning rate, reached after the warmup"),
    Field("train.warmup_steps", 100, _STEPS, _int_in(0), False,
          "linear warmup from 0, then cosine decay to 0 at num_steps"),
    Field("train.optimizer", "adamw", " | ".join(OPTIMIZERS), lambda v: v in OPTIMIZERS, False, "the optimizer"),
    Field("train.weight_decay", 0.0, f"a finite number >= 0 (0 = off), {IN_FLOAT32}", _float32_at_least(0), False,
          "adamw: decoupled decay; adam/sgd: L2 term added to the gradient"),
    Field("train.grad_clip_norm", 1.0, f"a finite number >= 0 (0 = off), {IN_FLOAT32}", _float32_at_least(0),
          False, "clip the gradient's global norm to this; 0 = no clipping"),
    Field("train.lookup_grad_scale", 1.0, f"a finite number >= 0 (1 = the exact gradient), {IN_FLOAT32}",
          _float32_at_least(0), False, "a: the update uses a·g_lookup + b·g_projection"),
    Field("train.projection_grad_scale", 1.0, f"a finite number >= 0 (1 = the exact gradient), {IN_FLOAT32}",
          _float32_at_least(0), False, "b: weights the output-projection path (clipping sees the weighted sum)"),
    Field("train.log_every", 100, _POSITIVE, _int_in(1), True,
          "steps between train/* and grad/* scalars and provenance histograms"),
    Field("train.eval_every", 500, _POSITIVE, _int_in(1), True,
          "steps between evaluations on the validation split (and at the last step)"),
    Field("train.checkpoint_every", 1000, _POSITIVE, _int_in(1), True,
          "steps between checkpoints (and at the last step)"),
    Field("train.keep_checkpoints", 3, _POSITIVE, _int_in(1), True,
          "newest checkpoints kept in <workdir>/checkpoints (with a selection split, also the best one)"),
    Field("train.early_stopping_patience", 0, "an integer in [0, 2**31 - 1] (0 = off)", _int_in(0), True,
          "stop the run after this many evals without a new lowest select/loss (needs data.selection_fraction > 0)"),
    Field("train.min_delta", 0.0, f"a finite number >= 0 (0 = any decrease), {IN_FLOAT32}", _float32_at_least(0),
          False, "nats select/loss must fall below the best so far to count as a new best: picks the best checkpoint "
          "and resets early stopping's count (Flax's EarlyStopping min_delta)"),
    Field("loss.chunk_size", 256, "an integer in [0, 2**31 - 1] (0 = full logits)", _int_in(0), True,
          "tokens per chunk of the loss: at most (chunk_size, V) logits at once; 0 = full (B, V) logits"),
    Field("mesh.data", 1, _MESH, _mesh_size, True,
          "devices the batch is split over; -1 = all the devices model doesn't use"),
    Field("mesh.model", 1, _MESH, _mesh_size, True,
          "devices the table is split over along V; -1 = all the devices data doesn't use"),
)

BY_PATH: dict[str, Field] = {field.path: field for field in FIELDS}
RESUMABLE: frozenset[str] = frozenset(field.path for field in FIELDS if field.resumable)
REQUIRED_FIELDS: frozenset[str] = frozenset(BY_PATH)


@dataclasses.dataclass(frozen=True)
class Dependent:
  """A field that acts only where `active(config)`; elsewhere it must be at its default (`must_be_off`), or is ignored.

  `off` is the field's own default, read from `FIELDS` (the one place defaults live), or None where it is ignored."""

  path: str
  needs: str  # completes 'unless ...' in the refusal
  active: Callable[[Any], bool]
  must_be_off: bool = True

  @property
  def off(self) -> Any:
    return BY_PATH[self.path].default if self.must_be_off else None


# A value given where it does nothing would train as if unset, so one with an `off` value is refused there. The
# resume check skips a field that does nothing on both sides, so a dead value never blocks a resume.
def _variant_dependents(family: str) -> tuple[Dependent, ...]:
  """A variant setting acts only where the chosen variant of its family reads it; elsewhere it must be its default."""
  dependents = []
  for name, setting in model_lib.family_settings(family).items():
    readers = tuple(variant for variant, v in model_lib.VARIANTS[family].items() if setting in v.settings)
    needs = f"model.{family}=" + " or ".join(repr(reader) for reader in readers)
    dependents.append(Dependent(f"model.{name}", needs,
                                lambda config, family=family, readers=readers: config.model.get(family) in readers))
  return tuple(dependents)


DEPENDENT: tuple[Dependent, ...] = (
    *_variant_dependents("hidden"),
    *_variant_dependents("context"),
    Dependent("train.early_stopping_patience", "data.selection_fraction > 0 (early stopping watches select/loss)",
              lambda config: config.data.get("selection_fraction", 0.0) > 0),
    Dependent("train.min_delta", "data.selection_fraction > 0 (a new best is judged on select/loss)",
              lambda config: config.data.get("selection_fraction", 0.0) > 0),
    Dependent("data.task_d_model", f"data.source is one of {sources.SYNTHETIC_SOURCES}",
              lambda config: config.data.get("source") in sources.SYNTHETIC_SOURCES, must_be_off=False),
)


def known_fields() -> frozenset[str]:
  return REQUIRED_FIELDS | {f"data.{name}" for source in sources.REGISTRY.values() for name in source.fields}


def leaf_paths(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """Every non-group field of `config` by dotted path: {'model.vocab_size': 1024, ...}."""
  return traverse_util.flatten_dict(config.to_dict(), sep=".")


def defaults() -> dict[str, Any]:
  """Every field's default by dotted path: `FIELDS`', then the data.* fields each source reads (the one place
  defaults live; configs/default.py is these)."""
  return {**{field.path: field.default for field in FIELDS},
          **{f"data.{name}": value for source in sources.REGISTRY.values() for name, value in source.fields.items()}}


def default_config() -> ml_collections.ConfigDict:
  """A config with every field at its default: configs/default.py's, the run `make train` trains."""
  return ml_collections.ConfigDict(traverse_util.unflatten_dict(defaults(), sep="."))


def inactive_paths(config: ml_collections.ConfigDict) -> frozenset[str]:
  """The fields that do nothing in `config`: inactive `DEPENDENT` ones and the data.* fields only other sources read."""
  paths = {dependent.path for dependent in DEPENDENT if not dependent.active(config)}
  source = sources.REGISTRY.get(config.data.get("source"))
  if source is not None:
    paths |= {f"data.{name}" for other in sources.REGISTRY.values() for name in other.fields
              if name not in source.fields}
  return frozenset(paths)


def as_python_values(config: ml_collections.ConfigDict) -> None:
  """NumPy scalars anywhere in `config` become the Python numbers they equal, in place (for JSON and hparams)."""
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      as_python_values(value)
    elif isinstance(value, np.generic):
      with config.ignore_type():
        config[key] = value.item()


def validate(config: Any, num_devices: int | None = None, memory_bytes: int | None = None) -> None:
  """UsageError for the first bad field, mesh (`num_devices`) or memory (`memory_bytes`); NumPy scalars → numbers."""
  if not isinstance(config, ml_collections.ConfigDict):
    raise UsageError.bad_value("config", f"<{type(config).__name__}>", "an ml_collections.ConfigDict")
  as_python_values(config)
  leaves, known = leaf_paths(config), known_fields()
  for path, value in leaves.items():  # a field no one knows is a misspelling: refused with the nearest known name
    if path not in known:
      guess = "".join(f"; did you mean {name}?" for name in difflib.get_close_matches(path, known, n=1))
      raise UsageError.bad_value(path, value, f"a known config field (see configs/default.py){guess}")
  if missing := sorted(REQUIRED_FIELDS - leaves.keys()):
    raise UsageError(f"{missing[0]} is missing from the config: expected every field of configs/default.py")
  for field in FIELDS:
    if field.check is not None and not field.check(value := config[field.path]):
      raise UsageError.bad_value(field.path, value, field.allowed)
  for dependent in DEPENDENT:  # `off` where it does nothing
    value = config[dependent.path]
    if dependent.off is not None and value != dependent.off and not dependent.active(config):
      raise UsageError.bad_value(dependent.path, value, f"{_as_written(dependent.off)} (off) unless {dependent.needs}")
  _check_variants(config)
  _check_eval_stride(config)
  sizes = validate_data(config)  # the data's size, read once: the selection split's check and the memory check's
  check_memory(config, memory_bytes, sizes)
  # V splits over mesh.model and the batch over mesh.data; mesh_lib refuses a mesh the devices can't hold.
  num_devices = jax.device_count() if num_devices is None else num_devices
  data_size, model_size = mesh_lib.mesh_shape(config.mesh, num_devices)
  vocab_size, batch_size = config.model.vocab_size, config.train.batch_size
  require(vocab_size % model_size == 0, "mesh.model", model_size,
          f"a divisor of model.vocab_size={vocab_size} (the table is split along V)")
  require(batch_size % data_size == 0, "mesh.data", data_size,
          f"a divisor of train.batch_size={batch_size} (the batch is split along data)")
  mesh_lib.check_mesh_fits_processes(data_size, model_size, num_devices, jax.process_count())


def _as_written(value: Any) -> str:
  """A default as a person writes it: 0.0 as 0, 3 as 3, 'none' as 'none'."""
  return repr(int(value)) if isinstance(value, float) and value.is_integer() else repr(value)


def _check_variants(config: Any) -> None:
  """Each chosen variant's own check, then windows need a token stream to be cut from."""
  for family in model_lib.VARIANTS:
    variant = model_lib.variant_of(config, family)
    if variant.check is not None and (refused := variant.check(config)) is not None:
      raise UsageError.bad_value(*refused)
  length = config.data.context_length
  require(length == 1 or config.data.get("source") not in sources.SYNTHETIC_SOURCES, "data.context_length", length,
          f"1 with data.source={config.data.get('source')!r} (its pairs are drawn independently: no token stream to "
          "cut windows from)")


def _check_eval_stride(config: Any) -> None:
  """train.eval_stride: -1 (the window length) or an integer in [1, data.context_length]."""
  stride, length = config.train.eval_stride, config.data.context_length
  require(is_int(stride) and (stride == -1 or 1 <= stride <= length), "train.eval_stride", stride,
          EVAL_STRIDE.replace("data.context_length", f"data.context_length={length}"))


def validate_data(config: Any) -> sources.DataSizes:
  """`validate`'s data checks alone (source, data_dir, selection split): UsageError, or → the data's sizes."""
  data, names = config.data, tuple(sorted(sources.REGISTRY))
  require(data.get("source") in names, "data.source", data.get("source"), f"one of {names}")
  sources.get(data.source).validate(config)
  _check_data_dir(data.get("data_dir", ""))
  sizes = sources.sizes(config)
  # The selection split holds round(fraction · N) of the N train pairs: refused where that is no pair. What it leaves
  # to train on is never empty (fraction < 0.5).
  fraction, num_train = data.get("selection_fraction", 0.0), sizes.num_pairs["train"]
  held_out = round(fraction * num_train)
  require(fraction == 0 or held_out >= 1, "data.selection_fraction", fraction, f"0, or a share holding out at least "
          f"1 of the {num_train:,} train pairs (round({fraction!r} · {num_train:,}) = {held_out})")
  return sizes


def _check_data_dir(data_dir: Any) -> None:
  """Unless `data_dir` ('' = inside the workdir) is, or can be made, a writable directory."""
  require(isinstance(data_dir, str), "data.data_dir", data_dir, "a path ('' = <workdir>/data)")
  if not data_dir:
    return
  require(is_utf8(data_dir), "data.data_dir", data_dir, "a path that is valid UTF-8 (array_record takes no other)")
  path = pathlib.Path(data_dir).expanduser().absolute()
  existing = next(p for p in (path, *path.parents) if p.exists() or p == p.parent)
  require(existing != path or path.is_dir(), "data.data_dir", data_dir, "a directory (this is an existing file)")
  require(existing.is_dir(), "data.data_dir", data_dir, f"a path that can be created ({existing} is a file)")
  require(os.access(existing, os.W_OK | os.X_OK), "data.data_dir", data_dir,
          f"a writable directory ({existing} is not writable)")


# Python, JAX, the libraries and the compiled programs: configs/smoke.py, whose arrays are ~1 MB, peaks at 0.9 GiB.
RUNTIME_BYTES = 2**30


class MemoryTerm(NamedTuple):
  """One part of a run's memory: what it is, its bytes, and the config fields it grows with."""

  what: str
  bytes: int
  fields: tuple[str, ...]


def memory_estimate(config: ml_collections.ConfigDict, sizes: sources.DataSizes | None = None) -> list[MemoryTerm]:
  """A valid config's memory on one host as named terms (bytes): the (V, D) tables 6 times (the parameter, two Adam
  moments, the gradient and its two paths); a synthetic task's float64 hidden table; the train logits 3 times; the
  hidden vectors twice; the eval logits twice; 32 bytes per train or validation pair while generating. (V, V) tables
  (computed a few MB at a time) and sharding are not counted. A context model adds its variant's own terms (its
  Params, its activations, a transformer's (B, heads, L, L) attention weights). `sizes`: `sources.sizes(config)` if
  not given."""
  vocab_size, d_model = int(config.model.vocab_size), int(config.model.d_model)
  batch_size, eval_batch_size = int(config.train.batch_size), int(config.train.eval_batch_size)
  chunk_size, num_tables = int(config.loss.chunk_size), 1 if config.model.tied else 2
  sizes = sources.sizes(config) if sizes is None else sizes
  batch_size *= int(config.data.get("context_length", 1))  # tokens per step: B windows of L
  train_rows, eval_rows = (min(chunk_size or rows, rows) for rows in (batch_size, eval_batch_size))
  task_d_model = int(config.data.task_d_model) if config.data.source in sources.SYNTHETIC_SOURCES else 0
  window = ("data.context_length",) if int(config.data.get("context_length", 1)) > 1 else ()
  variants = [model_lib.variant_of(config, family) for family in model_lib.VARIANTS]
  own = [MemoryTerm(*term) for variant in variants if variant.memory is not None for term in variant.memory(config)]
  return [
      MemoryTerm("the (V, D) tables and their optimizer state", vocab_size * d_model * num_tables * 4 * 6,
                 ("model.vocab_size", "model.d_model")),
      MemoryTerm("the task's hidden table e*", vocab_size * task_d_model * 8,
                 ("data.task_d_model", "model.vocab_size")),
      MemoryTerm("the train logits (loss.chunk_size > 0 bounds them)", train_rows * vocab_size * 4 * 3,
                 ("train.batch_size" if train_rows == batch_size else "loss.chunk_size", "model.vocab_size", *window)),
      MemoryTerm("the hidden vectors of a batch", batch_size * d_model * 4 * 2,
                 ("train.batch_size", "model.d_model", *window)),
      MemoryTerm("the eval logits", eval_rows * vocab_size * 4 * 2,
                 ("train.eval_batch_size" if eval_rows == eval_batch_size else "loss.chunk_size", "model.vocab_size")),
      MemoryTerm("the dataset", sum(sizes.num_pairs.values()) * 32, sizes.fields),
      *own,
  ]


def available_memory() -> int:
  """This machine's physical memory in bytes, or its cgroup's memory limit when that is smaller."""
  limits = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
  for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
    with contextlib.suppress(OSError, ValueError), open(path) as f:  # no such cgroup file, or "max"
      limits.append(int(f.read().strip()))
  return min(limits)


def _turned_up(config: ml_collections.ConfigDict, path: str) -> float:
  """How far `path` is set above its default (value / default): the field a person turned up to make a term large."""
  value, default = config[path], defaults().get(path)
  if not is_number(value):
    return 0.0
  return float(value) / float(default) if is_number(default) and default > 0 else float(value)


def check_memory(config: ml_collections.ConfigDict, memory_bytes: int | None = None,
                 sizes: sources.DataSizes | None = None) -> None:
  """`validate`'s memory check: UsageError where the estimate + RUNTIME_BYTES > `memory_bytes` (default: this
  machine's), naming the largest term and, of the fields it grows with, the one set to the largest number."""
  memory_bytes = available_memory() if memory_bytes is None else memory_bytes
  terms = memory_estimate(config, sizes)
  total = RUNTIME_BYTES + sum(term.bytes for term in terms)

  def gib(num_bytes: int) -> str:  # '4.0 GiB'
    return f"{num_bytes / 2**30:,.1f} GiB"

  if total > memory_bytes:
    largest = max(terms, key=lambda term: term.bytes)
    field = max(largest.fields, key=lambda path: _turned_up(config, path))
    raise UsageError.bad_value(field, config[field], f"a config that fits in this machine's {gib(memory_bytes)} "
                               f"of memory: it needs about {gib(total)}, {gib(largest.bytes)} of it for {largest.what}")


def hparams(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """The run's hyperparameters for TensorBoard: every field of `FIELDS`, and the data.* fields its source reads."""
  return {**{field.path: config[field.path] for field in FIELDS},
          **{f"data.{name}": config.data[name] for name in sources.get(config.data.source).fields}}
