"""Writing the report's files, only inside WORKDIR/report/ and never through a symbolic link.

A workdir may come from someone else: a `report` or `report.md` that is a link must not make inspection write
outside it. Each file goes to a temporary name beside it, renamed over the old one (a link is replaced, not
written through, and no half file is left).
"""

from __future__ import annotations

import os
import pathlib

from tied_embed import util
from tied_embed.util import UsageError, one_line


class NotWritten(OSError):
  """The report directory cannot be used; the message says why."""


def report_dir(workdir: str | pathlib.Path) -> pathlib.Path:
  """WORKDIR/report, created if missing; NotWritten if it is a link or not a directory (or cannot be made)."""
  directory = pathlib.Path(workdir) / "report"
  if directory.is_symlink():
    raise NotWritten(f"{directory} is a symbolic link (inspection writes only inside the workdir)")
  try:
    directory.mkdir(exist_ok=True)
  except OSError as error:
    raise NotWritten(f"{directory} cannot be created ({error.strerror or error})") from None
  if not directory.is_dir():
    raise NotWritten(f"{directory} is not a directory")
  return directory


def write_bytes(directory: pathlib.Path, name: str, payload: bytes) -> pathlib.Path:
  """Writes `directory/name` whole, replacing whatever is there (a link is replaced, its target untouched)."""
  return util.write_atomically(directory / name, payload)


# What inspection reads, directly in the workdir: a link among them would show another run's numbers as this one's.
READ_NAMES = ("checkpoints", "data", "report_data.npz")
_EVENT_FILES = "events.out.tfevents.*"


def refuse_links(workdir: str | pathlib.Path) -> None:
  """UsageError (one line) naming the first symbolic link among what inspection reads in `workdir`: checkpoints/ or
  anything in it, data/ or anything in it, report_data.npz, an event file."""
  workdir = pathlib.Path(workdir)
  for path in [workdir / name for name in READ_NAMES] + sorted(workdir.glob(_EVENT_FILES)):
    if (link := util.first_link(path)) is not None:
      raise UsageError(f"{one_line(str(link))} is a symbolic link (to {one_line(os.readlink(link))}); inspection "
                       f"reads only inside --workdir={str(workdir)!r}: put the files themselves there")
