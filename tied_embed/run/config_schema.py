"""What a training config is: the fields it has, and how a `--config` file becomes one.

`REQUIRED_FIELDS` are the dotted paths every config has (configs/default.py's comments say what each means).
The data.* fields beyond `data.source`, `data.data_dir` and `data.train_fraction` belong to the data sources: each
source lists the ones it reads (`Source.fields`) and checks them itself, so a new source brings its fields with
it. Any other field is a misspelling, refused rather than ignored. This lives in the package, not in configs/,
because the package must not import the configs; a test keeps the two in step.
"""

from __future__ import annotations

import pathlib
import types
from typing import Any

import ml_collections

from tied_embed.data import sources
from tied_embed.run.errors import UsageError, require

REQUIRED_FIELDS = frozenset({
    "seed",
    "model.vocab_size", "model.d_model", "model.tied", "model.dtype",
    "data.source", "data.data_dir", "data.train_fraction",
    "train.num_steps", "train.batch_size", "train.eval_batch_size", "train.learning_rate", "train.warmup_steps",
    "train.optimizer", "train.weight_decay", "train.grad_clip_norm", "train.lookup_grad_scale",
    "train.projection_grad_scale", "train.log_every", "train.eval_every",
    "train.checkpoint_every", "train.keep_checkpoints",
    "loss.chunk_size",
    "mesh.data", "mesh.model",
})


def known_fields() -> frozenset[str]:
  """`REQUIRED_FIELDS` and the data.* fields of every registered source."""
  source_fields = {f"data.{field}" for source in sources.REGISTRY.values() for field in source.fields}
  return REQUIRED_FIELDS | source_fields


def leaf_paths(config: ml_collections.ConfigDict, prefix: str = "") -> dict[str, Any]:
  """Every non-group field of `config` by dotted path: {'model.vocab_size': 1024, ...}."""
  leaves = {}
  for key, value in config.items():
    path = f"{prefix}{key}"
    if isinstance(value, ml_collections.ConfigDict):
      leaves.update(leaf_paths(value, f"{path}."))
    else:
      leaves[path] = value
  return leaves


def unknown_and_missing(config: ml_collections.ConfigDict) -> tuple[dict[str, Any], list[str]]:
  """The fields of `config` that no one knows (path → value), and the required ones it lacks (sorted)."""
  leaves, known = leaf_paths(config), known_fields()
  unknown = {path: value for path, value in leaves.items() if path not in known}
  return unknown, sorted(REQUIRED_FIELDS - leaves.keys())


def load_config_file(path: str) -> ml_collections.ConfigDict:
  """Runs a `--config` file (`file.py` or `file.py:argument`) and returns its `get_config()`, a ConfigDict.

  Any failure (no such file, an exception or syntax error in it, no `get_config`, something other than a
  ConfigDict) is one UsageError on `--config`.
  """
  file_path, colon, argument = path.partition(":")
  expected = "a Python file whose get_config() returns a ConfigDict, e.g. configs/default.py"
  require(bool(file_path), "--config", path, expected)
  try:
    module = types.ModuleType("config_file")
    module.__file__ = file_path
    exec(compile(pathlib.Path(file_path).read_bytes(), file_path, "exec"), module.__dict__)
  except OSError as e:
    raise UsageError.bad_value("--config", path, f"{expected} ({e.strerror or e})") from None
  except SyntaxError as e:
    raise UsageError.bad_value("--config", path, f"{expected} (syntax error at line {e.lineno}: {e.msg})") from None
  except Exception as e:  # whatever a config file raises is the file's fault
    raise UsageError.bad_value("--config", path, f"{expected} (loading it raised {_one_line(e)})") from None
  get_config = getattr(module, "get_config", None)
  require(callable(get_config), "--config", path, f"{expected} (it defines no get_config)")
  try:
    config = get_config(argument) if colon else get_config()
  except Exception as e:
    raise UsageError.bad_value("--config", path, f"{expected} (get_config() raised {_one_line(e)})") from None
  require(isinstance(config, ml_collections.ConfigDict), "--config", path,
          f"{expected} (get_config() returned type {type(config).__name__})")
  return config


def _one_line(error: BaseException) -> str:
  message = str(error).strip().splitlines()
  return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
