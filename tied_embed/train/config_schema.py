"""What a training config is: the fields it has, and how a `--config` file becomes one.

`REQUIRED_FIELDS` are the dotted paths every config has: those of `config_fields.FIELDS`. The data.* fields
only some sources read belong to those sources: each lists the ones it reads (`Source.fields`) and checks them
itself, so a new source brings its fields with it. Any other field is a misspelling, refused rather than
ignored.
"""

from __future__ import annotations

import contextlib
import pathlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import ml_collections
from ml_collections.config_dict import config_dict

from tied_embed.data import sources
from tied_embed.train import config_fields
from tied_embed.util import UsageError, require

REQUIRED_FIELDS = frozenset(field.path for field in config_fields.FIELDS)


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

  The folder holding the file's folder is importable while it runs, so `configs/smoke.py` can
  `from configs import default` however the command was started (`python train.py` or the installed
  `tied-embed-train`). Any failure (no such file, an exception, `sys.exit` or syntax error in it, no
  `get_config`, something other than a ConfigDict) is one UsageError on `--config`.
  """
  file_path, colon, argument = path.partition(":")
  expected = "a Python file whose get_config() returns a ConfigDict, e.g. configs/default.py"
  require(bool(file_path), "--config", path, expected)
  importable = str(pathlib.Path(file_path).absolute().parent.parent)
  added = importable not in sys.path
  if added:
    sys.path.insert(0, importable)
  try:
    with _bools_stay_bools():
      return _run_config_file(path, file_path, colon, argument, expected)
  finally:
    if added:
      sys.path.remove(importable)


@contextlib.contextmanager
def _bools_stay_bools() -> Iterator[None]:
  """While a config file runs, True assigned to a float field stays True, for the field's check to refuse by name.

  ml_collections casts an int assigned to a float field to float, and a bool is an int to Python: without this,
  `config.data.train_fraction = True` would silently be 1.0. (An int field keeps a bool as it is already.)
  """
  cast = config_dict._safe_cast

  def keep_bools(value: Any, field_type: type, type_safe: bool = False) -> Any:
    if isinstance(value, bool) and field_type is float:
      return value
    return cast(value, field_type, type_safe)

  config_dict._safe_cast = keep_bools
  try:
    yield
  finally:
    config_dict._safe_cast = cast


def _run_config_file(path: str, file_path: str, colon: str, argument: str, expected: str) -> ml_collections.ConfigDict:
  try:
    module = types.ModuleType("config_file")
    module.__file__ = file_path
    exec(compile(pathlib.Path(file_path).read_bytes(), file_path, "exec"), module.__dict__)
  except OSError as e:
    raise UsageError.bad_value("--config", path, f"{expected} ({e.strerror or e})") from None
  except SyntaxError as e:
    raise UsageError.bad_value("--config", path, f"{expected} (syntax error at line {e.lineno}: {e.msg})") from None
  except (Exception, SystemExit) as e:  # whatever a config file raises (or exits with) is the file's fault
    raise UsageError.bad_value("--config", path, f"{expected} (loading it raised {_one_line(e)})") from None
  get_config = getattr(module, "get_config", None)
  require(callable(get_config), "--config", path, f"{expected} (it defines no get_config)")
  try:
    config = get_config(argument) if colon else get_config()
  except (Exception, SystemExit) as e:
    raise UsageError.bad_value("--config", path, f"{expected} (get_config() raised {_one_line(e)})") from None
  require(isinstance(config, ml_collections.ConfigDict), "--config", path,
          f"{expected} (get_config() returned type {type(config).__name__})")
  return config


def _one_line(error: BaseException) -> str:
  message = str(error).strip().splitlines()
  return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
