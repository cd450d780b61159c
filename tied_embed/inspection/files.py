"""Writing the report's files, only inside WORKDIR/report/ and never through a symbolic link.

A workdir may come from someone else: a `report` that is a link, or a `report.md` that links elsewhere, must not
make inspection write outside the workdir. Each file is written to a temporary name beside it and renamed over
the old one, which replaces a link instead of writing to its target and never leaves half a file.
"""

from __future__ import annotations

import os
import pathlib
import tempfile


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
  fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(payload)
    os.chmod(temporary, 0o666 & ~_umask())  # as open() would have made it; mkstemp makes it owner-only
    os.replace(temporary, directory / name)
  except BaseException:
    pathlib.Path(temporary).unlink(missing_ok=True)
    raise
  return directory / name


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask
