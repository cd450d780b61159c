"""The exceptions the command lines turn into one line on stderr and an exit status, and the one check helper.

`UsageError` is what the user asked for being wrong (exit 2). `RunStopped` and its subclasses end a run that was
valid (a signal, a non-finite loss, a failed write); each carries the exit status the command line ends with.
All are plain exceptions, so a notebook or library calling `train_and_evaluate` can catch them.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import pathlib
import shlex
import socket
from collections.abc import Callable, Iterator
from typing import Any


class UsageError(Exception):
  """A problem with what the user asked for: a config field, a flag, a workdir.

  The message is one line: the field, the value given and what is allowed. Command lines print it as
  `error: <message>` on stderr and exit with status 2, without a traceback.
  """

  exit_status = 2

  @classmethod
  def bad_value(cls, field: str, value: Any, allowed: str) -> UsageError:
    """`field=value` is not allowed; `allowed` says what is, e.g. 'an integer > 0'."""
    return cls(f"{field}={value!r} is not allowed: expected {allowed}")


def require(ok: bool, field: str, value: Any, allowed: str) -> None:
  """Raises `UsageError.bad_value(field, value, allowed)` unless `ok`: the one form every check takes."""
  if not ok:
    raise UsageError.bad_value(field, value, allowed)


def first_line(error: BaseException, limit: int = 300) -> str:
  """'TypeName: first line of the message', cut to `limit` characters: how a caught error is named in one line."""
  text = (f"{type(error).__name__}: {error}".strip().splitlines() or [""])[0]
  return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: str) -> str:
  """`text` with its line breaks written as \\n and \\r, so that an error naming a path that holds one stays one
  line."""
  return text.replace("\r", "\\r").replace("\n", "\\n")


_ANSI_C_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def shell_quote(text: str) -> str:
  """`text` as a shell word that pastes back as itself, on one line: shlex.quote, or bash's $'...' (as `printf %q`
  writes it) for text holding a control character such as a newline."""
  if text.isprintable():
    return shlex.quote(text)

  def escape(character: str) -> str:
    if character in _ANSI_C_ESCAPES:
      return _ANSI_C_ESCAPES[character]
    if character.isprintable():
      return character
    return "".join(f"\\x{byte:02x}" for byte in character.encode("utf-8", "surrogateescape"))

  return "$'" + "".join(map(escape, text)) + "'"


class RunStopped(Exception):
  """A run that ended before its last step: `exit_status` for the command line, `str()` its one-line message."""

  exit_status = 1


# Exclusive locks on directories (a workdir, a dataset being generated), held through `fcntl.flock`.
#
# The lock is an open file descriptor on `<directory>/.lock`; the operating system releases it when the holder's
# process ends in any way (SIGKILL included), so a dead run never leaves a stale lock behind. The file records who
# holds it (host, pid, since when) so that a second run can name the holder in its one-line error.

LOCK_NAME = ".lock"


def holder(directory: str | pathlib.Path) -> str:
  """Who holds (or last held) the lock of `directory`, as 'host H, pid P, since T'; 'unknown' if unreadable."""
  try:
    record = json.loads((pathlib.Path(directory) / LOCK_NAME).read_text())
    return f"host {record['host']}, pid {record['pid']}, since {record['since']}"
  except (OSError, ValueError, KeyError, TypeError):
    return "unknown holder"


def is_locked(directory: str | pathlib.Path) -> bool:
  """Whether some process holds the lock of `directory` now (a probe: takes and releases it if free)."""
  path = pathlib.Path(directory) / LOCK_NAME
  if not path.exists():
    return False
  with path.open("a") as f:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      return True
    fcntl.flock(f, fcntl.LOCK_UN)
  return False


def refuse_if_held(directory: str | pathlib.Path, what: str) -> None:
  """The UsageError `exclusive` would raise if another process holds the lock of `directory` now; creates nothing.

  A cheap early check (the command line makes it before its slow imports); `exclusive` still takes the lock.
  """
  if is_locked(directory):
    raise _in_use(directory, what)


def _in_use(directory: str | pathlib.Path, what: str) -> UsageError:
  return UsageError(
      f"{what} is in use by another run ({holder(directory)}): wait for it to finish, or use another directory"
  )


@contextlib.contextmanager
def exclusive(
    directory: str | pathlib.Path, what: str, *, record_now: bool = True
) -> Iterator[Callable[[], None]]:
  """Holds the lock of `directory` (created if needed) while inside; UsageError naming the holder if it is taken.

  `what` names the directory in the error, e.g. '--workdir=runs/default'. Waits for nothing: a second run is
  refused at once rather than queued behind the first. Yields `record()`, which writes who holds the lock into
  the file. With `record_now=False` the caller calls it once its own checks have passed: if the body raises
  before that, the lock file is left as it was found, or removed (the directory's times put back) if this call
  created it, so that a refused run changes nothing.
  """
  directory = pathlib.Path(directory)
  path = directory / LOCK_NAME
  existed = path.exists()
  times = None if existed else directory.stat()
  f = path.open("a+")
  locked = recorded = False

  def record() -> None:
    nonlocal recorded
    since = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": since}))
    f.flush()
    recorded = True

  try:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      raise _in_use(directory, what) from None
    locked = True
    if record_now:
      record()
    yield record
  except BaseException:
    if locked and not recorded and times is not None:  # still held: no one else can have opened it since
      path.unlink(missing_ok=True)
      os.utime(directory, ns=(times.st_atime_ns, times.st_mtime_ns))
    raise
  finally:
    f.close()  # releases the lock
