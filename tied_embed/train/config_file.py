"""What the command line reads into a config: a `--config` file, run with its bools kept as bools, and the refusal
of a `--config.<field>=<value>` the flag parser could not read as the field's type. Loading checks no field."""

from __future__ import annotations

import contextlib
import pathlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import ml_collections

from tied_embed.data import sources
from tied_embed.train import config as config_lib
from tied_embed.util import UsageError, require

_EXPECTED = "a Python file whose get_config() returns a ConfigDict, e.g. configs/default.py"


def load_config_file(path: str) -> ml_collections.ConfigDict:
  """Runs a `--config` file (`file.py` or `file.py:argument`) and returns its `get_config()`, a ConfigDict. The
  folder above the file's is importable meanwhile (for `from configs import default`); any failure is a UsageError."""
  file_path, colon, argument = path.partition(":")
  require(bool(file_path), "--config", path, _EXPECTED)
  importable = str(pathlib.Path(file_path).absolute().parent.parent)
  added = importable not in sys.path
  if added:
    sys.path.insert(0, importable)
  try:
    with _bools_kept() as kept:
      config = _run_config_file(path, file_path, argument if colon else None)
    kept()
    return config
  finally:
    if added:
      sys.path.remove(importable)


@contextlib.contextmanager
def _bools_kept() -> Iterator[Any]:
  """While a config file runs, notes values set on float fields; `keep()` puts back the bools ml_collections cast."""
  assigned: dict[tuple[int, str], tuple[ml_collections.ConfigDict, str, Any]] = {}
  setitem = ml_collections.ConfigDict.__setitem__.__code__

  def watch(frame: types.FrameType, event: str, _: Any) -> None:
    if event == "call" and frame.f_code is setitem:
      node, key, value = (frame.f_locals.get(name) for name in ("self", "key", "value"))
      if isinstance(key, str) and type(node.get(key)) is float:
        assigned[id(node), key] = (node, key, value)

  def keep() -> None:
    for node, key, value in assigned.values():
      if isinstance(value, bool) and node.get(key) == value:  # a bool the cast made a float: the field holds it
        with node.unlocked():
          del node[key]
          node[key] = value  # a new field: not cast

  previous = sys.getprofile()
  sys.setprofile(watch)
  try:
    yield keep
  finally:
    sys.setprofile(previous)


def set_unchecked(config: ml_collections.ConfigDict, path: str, value: Any) -> None:
  """Sets dotted `path` of `config` to `value` of any type (ml_collections' type check off)."""
  *parents, leaf = path.split(".")
  node = config[".".join(parents)] if parents else config
  with node.ignore_type():
    node[leaf] = value


def unparsed_override(config: ml_collections.ConfigDict, path: str, text: str) -> UsageError:
  """The refusal of `--config.<path>=<text>` the flag parser could not read as the field's type ('abc' for a
  number): the field's own one-line message; a source's data.* field is checked by that source, given `text`."""
  if (field := config_lib.BY_PATH.get(path)) is not None:
    return UsageError.bad_value(path, text, field.allowed)
  trial = config.copy_and_resolve_references()
  set_unchecked(trial, path, text)
  *parents, leaf = path.split(".")
  for source in (source for source in sources.REGISTRY.values() if leaf in source.fields and parents == ["data"]):
    with trial.ignore_type():
      trial.data.source = source.name
    try:
      source.validate(trial)
    except UsageError as error:
      if str(error).startswith(f"{path}="):
        return error
  default = config[path]
  return UsageError.bad_value(path, text, f"a {type(default).__name__} like its default {default!r}")


def _run_config_file(path: str, file_path: str, argument: str | None) -> ml_collections.ConfigDict:
  try:
    module = types.ModuleType("config_file")
    module.__file__ = file_path
    exec(compile(pathlib.Path(file_path).read_bytes(), file_path, "exec"), module.__dict__)
  except OSError as e:
    raise UsageError.bad_value("--config", path, f"{_EXPECTED} ({e.strerror or e})") from None
  except SyntaxError as e:
    raise UsageError.bad_value("--config", path, f"{_EXPECTED} (syntax error at line {e.lineno}: {e.msg})") from None
  except (Exception, SystemExit) as e:  # whatever a config file raises (or exits with) is the file's fault
    raise UsageError.bad_value("--config", path, f"{_EXPECTED} (loading it raised {_one_line(e)})") from None
  get_config = getattr(module, "get_config", None)
  require(callable(get_config), "--config", path, f"{_EXPECTED} (it defines no get_config)")
  try:
    config = get_config() if argument is None else get_config(argument)
  except (Exception, SystemExit) as e:
    raise UsageError.bad_value("--config", path, f"{_EXPECTED} (get_config() raised {_one_line(e)})") from None
  require(isinstance(config, ml_collections.ConfigDict), "--config", path,
          f"{_EXPECTED} (get_config() returned type {type(config).__name__})")
  return config


def _one_line(error: BaseException) -> str:
  message = str(error).strip().splitlines()
  return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
