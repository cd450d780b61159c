"""Every config field the run machinery owns, declared once: its default, what it allows, whether a resume may change
it, and what it means.

`FIELDS` is read by the schema check (`config_schema`: the required and known fields), the value checks
(`config_validation`), the resume check (`workdir.config_differences`), the hparams written at the start of a
run (`hparams`) and the field list of the docs (`markdown_table`; `python -m tied_embed.train.config_fields`
prints it). configs/default.py spells the same defaults
out as a readable config; a test keeps the two equal.

The data.* fields only one kind of source reads (data.text_path, data.num_train_pairs, ...) are declared by
their sources (`Source.fields`), which check them, so a new source brings its fields with it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import ml_collections
import numpy as np

from tied_embed.core.model import HIDDEN_MAPS
from tied_embed.core.optim import OPTIMIZERS
from tied_embed.data import sources
from tied_embed.data.sources.base import is_int, is_number
from tied_embed.fast.precision import COMPUTE_DTYPES
from tied_embed.util import require

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
# (data.train_fraction is only ever a Python float: round(fraction · pairs).)
IN_FLOAT32 = "within float32 (at most 3.4e38; 0 or at least 1.4e-45)"


def _int_in(low: int, high: int = INT32_MAX) -> Callable[[Any], bool]:
  return lambda v: is_int(v) and low <= v <= high


def in_float32(value: Any) -> bool:
  """A number float32 holds as itself, near enough: finite, at most FLOAT32_MAX, and 0 or not rounded to 0."""
  return (is_number(value) and math.isfinite(value) and abs(value) <= FLOAT32_MAX
          and (value == 0 or abs(value) >= FLOAT32_SMALLEST))


def _float32_at_least(low: float) -> Callable[[Any], bool]:
  return lambda v: in_float32(v) and v >= low


_POSITIVE = "an integer in [1, 2**31 - 1]"
_MESH = "a positive integer, or -1 for all remaining devices"


def _mesh_size(value: Any) -> bool:
  return is_int(value) and (value == -1 or 1 <= value <= INT32_MAX)


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
          lambda v: v in COMPUTE_DTYPES, True,
          "compute dtype of the loss's matmuls (float32 accumulation; parameters and optimizer state stay float32)"),
    Field("model.hidden", "none", " | ".join(f'"{name}"' for name in HIDDEN_MAPS),
          lambda v: v in HIDDEN_MAPS, False,
          "between lookup and projection: none, or linear: h = E[ids]·W, W (D, D) starting at the identity"),
    Field("model.hidden_l2", 0.0, f"a finite number >= 0 (0 = off), {IN_FLOAT32}", _float32_at_least(0), False,
          "λ: the training loss adds λ·‖W − I‖²_F (model.hidden=linear; the eval loss is the cross-entropy alone)"),
    Field("data.source", "planted", f"one of {tuple(sorted(sources.REGISTRY))}", None, False,
          "the task (tied_embed/data/sources/); the source checks the data.* fields it reads"),
    Field("data.data_dir", "", "a path ('' = <workdir>/data), a writable directory", None, True,
          "where the dataset is generated and cached ('' = <workdir>/data)"),
    Field("data.train_fraction", 1.0, "a finite number in (0, 1]",
          lambda v: is_number(v) and 0 < v <= 1, False,
          "the share of the train split the run trains on (of what the selection split leaves)", dataset=True),
    Field("data.selection_fraction", 0.0, "a finite number in [0, 0.5) (0 = no selection split)",
          lambda v: is_number(v) and 0 <= v < 0.5, False,
          "the last share of the train split, held out as a selection split: scored at every eval (select/loss), "
          "picks the best checkpoint, never trained on", dataset=True),
    Field("data.task_d_model", 32, _POSITIVE, _int_in(1), False,
          "planted/directed: width of the hidden table e* that generates the task (model.d_model is the model's)",
          dataset=True),
    Field("train.num_steps", 3000, "an integer in [0, 2**31 - 1] (optax counts steps in int32)", _int_in(0), True,
          "optimizer updates in the whole run"),
    Field("train.batch_size", 1024, _POSITIVE, _int_in(1), False, "(current, next) token pairs per step"),
    Field("train.eval_batch_size", 8192, _POSITIVE, _int_in(1), True,
          "pairs per evaluation batch; evaluation covers the whole validation split"),
    Field("train.learning_rate", 0.05, f"a finite number > 0, {IN_FLOAT32}", lambda v: in_float32(v) and v > 0,
          False, "peak learning rate, reached after the warmup"),
    Field("train.warmup_steps", 100, "an integer in [0, 2**31 - 1] (optax counts steps in int32)", _int_in(0), False,
          "linear warmup from 0, then cosine decay to 0 at num_steps"),
    Field("train.optimizer", "adamw", " | ".join(OPTIMIZERS), lambda v: v in OPTIMIZERS, False,
          "the optimizer"),
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
    Field("loss.chunk_size", 256, "an integer in [0, 2**31 - 1] (0 = full logits)", _int_in(0), True,
          "tokens per chunk of the loss: at most (chunk_size, V) logits at once; 0 = full (B, V) logits"),
    Field("mesh.data", 1, _MESH, _mesh_size, True,
          "devices the batch is split over; -1 = all the devices model doesn't use"),
    Field("mesh.model", 1, _MESH, _mesh_size, True,
          "devices the table is split over along V; -1 = all the devices data doesn't use"),
)

BY_PATH: dict[str, Field] = {field.path: field for field in FIELDS}
RESUMABLE: frozenset[str] = frozenset(field.path for field in FIELDS if field.resumable)


@dataclasses.dataclass(frozen=True)
class Dependent:
  """A field that does something only where `active(config)`, e.g. model.hidden_l2 only with the hidden map.

  `off`: the value that says 'nothing', which the field must have where it does nothing (model.hidden_l2 = 0);
  None for a field that only some tasks read and has no such value (data.task_d_model): elsewhere it is ignored.
  """

  path: str
  needs: str  # completes 'unless ...' in the refusal
  active: Callable[[Any], bool]
  off: Any = None


# A value given where it does nothing would train as if unset: one with an `off` value is refused there (a λ set
# without the hidden map is a mistake to say, not to train through). Where a field does nothing in a checkpoint's
# config and in the new one, the resume check skips it, so a dead value never blocks a resume (`inactive_paths`).
DEPENDENT: tuple[Dependent, ...] = (
    Dependent("model.hidden_l2", "model.hidden='linear' (λ weights ‖W − I‖²; without the hidden map there is no W)",
              lambda config: config.model.get("hidden", "none") == "linear", off=0),
    Dependent("train.early_stopping_patience", "data.selection_fraction > 0 (early stopping watches select/loss)",
              lambda config: config.data.selection_fraction > 0, off=0),
    Dependent("data.task_d_model", f"data.source is one of {sources.SYNTHETIC_SOURCES}",
              lambda config: config.data.get("source") in sources.SYNTHETIC_SOURCES),
)


def inactive_paths(config: ml_collections.ConfigDict) -> frozenset[str]:
  """The fields that do nothing in `config`: the `DEPENDENT` ones where inactive, and the data.* fields that only
  other sources read."""
  paths = {dependent.path for dependent in DEPENDENT if not dependent.active(config)}
  source = sources.REGISTRY.get(config.data.get("source"))
  if source is not None:
    read = set(source.fields)
    paths |= {f"data.{name}" for other in sources.REGISTRY.values() for name in other.fields if name not in read}
  return frozenset(paths)


def get(config: ml_collections.ConfigDict, path: str) -> Any:
  """The value at dotted `path` of `config`."""
  for key in path.split("."):
    config = config[key]
  return config


def set_unchecked(config: ml_collections.ConfigDict, path: str, value: Any) -> None:
  """Sets dotted `path` of `config` to `value` of any type (ml_collections' type check off): for trying a value."""
  *parents, leaf = path.split(".")
  node = config
  for key in parents:
    node = node[key]
  with node.ignore_type():
    node[leaf] = value


def defaults() -> dict[str, Any]:
  """{path: default} of every field in `FIELDS`."""
  return {field.path: field.default for field in FIELDS}


def as_python_values(config: ml_collections.ConfigDict) -> None:
  """Replaces NumPy scalars anywhere in `config` (np.int64(128), np.float32(0.05), np.bool_) by the Python numbers
  they equal, in place: the checkpoints' JSON and the hparams take only Python's own types."""
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      as_python_values(value)
    elif isinstance(value, np.generic):
      with config.ignore_type():
        config[key] = value.item()


def check_values(config: ml_collections.ConfigDict) -> None:
  """UsageError (field, value, what is allowed) for the first field of `FIELDS` whose value its check refuses, or
  a `DEPENDENT` field not off where it does nothing."""
  for field in FIELDS:
    if field.check is not None:
      value = get(config, field.path)
      require(field.check(value), field.path, value, field.allowed)
  for dependent in DEPENDENT:
    value = get(config, dependent.path)
    require(dependent.off is None or dependent.active(config) or value == dependent.off, dependent.path, value,
            f"{dependent.off!r} (off) unless {dependent.needs}")


def hparams(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """The run's hyperparameters for TensorBoard: every field of `FIELDS`, and the data.* fields its source reads."""
  values = {field.path: get(config, field.path) for field in FIELDS}
  source = sources.get(config.data.source)
  values.update({f"data.{name}": config.data[name] for name in source.fields})
  return values


def markdown_table() -> str:
  """The field list of docs/configs.md: one row per field of `FIELDS`, then the sources' own data.* fields."""
  rows = ["| field | default | allowed | may change on resume | names the dataset | meaning |", "|---" * 6 + "|"]
  for field in FIELDS:
    resumable, dataset = ("yes" if flag else "no" for flag in (field.resumable, field.dataset))
    allowed = field.allowed.replace("|", "\\|")
    rows.append(f"| `{field.path}` | `{field.default!r}` | {allowed} | {resumable} | {dataset} | {field.doc} |")
  source_fields = sorted({f"data.{name}" for source in sources.REGISTRY.values() for name in source.fields})
  rows.append("")
  rows.append("The data sources check their own fields (none may change on resume): "
              + ", ".join(f"`{path}`" for path in source_fields) + ".")
  return "\n".join(rows) + "\n"


if __name__ == "__main__":
  print(markdown_table(), end="")
