"""Checks on the workdir before a run does any work in it: that it can be written, that no other run holds it,
that its layout is sound, and that it is this run's: a config that differs from its checkpoints' in more than how
the run is carried out or watched (`tied_embed.train.config.RESUMABLE`) would mix two runs, so it is refused."""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Callable

import jax
import ml_collections

from tied_embed import util
from tied_embed.data import sources
from tied_embed.train import config as config_lib
from tied_embed.util import UsageError

SUBDIRECTORIES = ("checkpoints", "damaged_checkpoints", "data", "report")


def ensure_writable(workdir: str | pathlib.Path) -> pathlib.Path:
  """Creates `workdir` if needed and checks a file can be written in it; UsageError (one line) if not."""
  path = pathlib.Path(workdir)
  try:
    path.mkdir(parents=True, exist_ok=True)
    probe_writable(path)
  except OSError as error:
    reason = error.strerror or type(error).__name__
    raise UsageError(f"--workdir={str(workdir)!r} cannot be written: {reason} ({error.filename or path})") from None
  return path


def probe_writable(directory: pathlib.Path) -> None:
  """OSError unless a file can be created (and deleted) in `directory`; its times are put back, so a run refused
  after this check leaves the workdir as it found it."""
  times = directory.stat()
  with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-check-"):
    pass
  os.utime(directory, ns=(times.st_atime_ns, times.st_mtime_ns))


def exclusive(workdir: pathlib.Path) -> contextlib.AbstractContextManager[Callable[[], None]]:
  """One run per workdir: WORKDIR/.lock, held while inside (by process 0 for all); UsageError naming the holder if
  another run holds it. Yields `record()`, which writes the holder in once the run's checks pass."""
  if jax.process_index() != 0:
    return contextlib.nullcontext(lambda: None)
  return util.exclusive(workdir, f"--workdir={str(workdir)!r}", record_now=False)


def check_layout(workdir: pathlib.Path) -> None:
  """UsageError if a path the run writes as a directory (checkpoints/, ...) is not one or cannot be written: found
  before training, not at the first save. A symbolic link is refused too: through it the run would write (and
  delete old checkpoints) in another run's directory."""
  for name in SUBDIRECTORIES:
    path = workdir / name
    if path.is_symlink():
      raise UsageError(f"{path} is a symbolic link; the run keeps its {name} inside the workdir: replace the link "
                       f"with a directory, or use another --workdir")
    if name != "report" and (link := util.first_link(path)) is not None:  # a step or dataset file from elsewhere
      raise UsageError(f"{link} is a symbolic link (to {os.readlink(link)}); the run keeps its {name} inside the "
                       f"workdir: replace the link with the files themselves, or use another --workdir")
    if path.exists() and not path.is_dir():
      raise UsageError(f"{path} is not a directory; the run keeps its {name} there: move it away")
    if path.is_dir():
      try:
        probe_writable(path)
      except OSError as error:
        raise UsageError(f"{path} cannot be written: {error.strerror or type(error).__name__}") from None


def config_differences(saved: ml_collections.ConfigDict, config: ml_collections.ConfigDict) -> list[str]:
  """The fields outside config_lib.RESUMABLE where `config` differs from `saved`, as 'path: saved → new'. A field
  that does nothing in both is no difference; one `saved` lacks is compared as its default (what runs did before)."""
  new = config_lib.leaf_paths(config)
  added = {**config_lib.defaults(), **{f"data.{name}": value for source in sources.REGISTRY.values()
                                       for name, value in source.field_defaults.items()}}
  old = {**{path: value for path, value in added.items() if path in new}, **config_lib.leaf_paths(saved)}
  ignored = config_lib.RESUMABLE | (config_lib.inactive_paths(saved) & config_lib.inactive_paths(config))
  return [f"{path}: {old.get(path, '<absent>')!r} in the checkpoints, {new.get(path, '<absent>')!r} now"
          for path in sorted(set(old) | set(new))
          if path not in ignored and old.get(path, "<absent>") != new.get(path, "<absent>")]


def check_compatible(saved: ml_collections.ConfigDict, config: ml_collections.ConfigDict, where: str) -> None:
  """UsageError listing every differing field if `config` cannot resume the checkpoints in `where`."""
  if differences := config_differences(saved, config):
    raise UsageError(f"{where} holds checkpoints of a different run ({'; '.join(differences)}); "
                     f"use another --workdir, or the config those checkpoints were made with")
