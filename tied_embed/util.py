"""What the whole package shares: the errors the command lines print as one line and an exit status (plain
exceptions, so a notebook can catch them), the directory locks and the whole-file writes."""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import glob
import hashlib
import json
import os
import pathlib
import shlex
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO


class UsageError(Exception):
  """A problem with what the user asked for (a config field, a flag, a workdir), in one line: the field, the value
  given and what is allowed. Command lines print it as `error: <message>` and exit 2, without a traceback."""

  exit_status = 2

  @classmethod
  def bad_value(cls, field: str, value: Any, allowed: str) -> UsageError:
    return cls(f"{field}={value!r} is not allowed: expected {allowed}")


def require(ok: bool, field: str, value: Any, allowed: str) -> None:
  """Raises `UsageError.bad_value(field, value, allowed)` unless `ok`: the one form every check takes."""
  if not ok:
    raise UsageError.bad_value(field, value, allowed)


def first_line(error: BaseException, limit: int = 300) -> str:
  """'TypeName: first line of the message', cut to `limit` characters: how a caught error is named in one line."""
  text = (f"{type(error).__name__}: {error}".strip().splitlines() or [""])[0]
  return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(text: str, keep: str = "") -> str:
  """`text` as a terminal shows it without acting on it: control characters, bidirectional overrides and undecodable
  bytes written as escapes (\\n, \\x1b, \\u202e, \\xNN), except the characters in `keep`."""
  return text if text.isprintable() else "".join(c if c in keep or c.isprintable() else _escaped(c) for c in text)


def _escaped(character: str) -> str:
  if "\udc80" <= character <= "\udcff":  # os.fsdecode's stand-in for an undecodable byte
    return f"\\x{ord(character) - 0xDC00:02x}"
  return repr(character)[1:-1]


# Room left under a directory's path for what the program makes inside it (checkpoints/<step>/<item>/<file>...).
_ROOM_INSIDE = 256


def require_path_fits(field: str, path: str) -> None:
  """UsageError naming `field` unless the file system can hold `path` and the program's files under it: each name
  at most NAME_MAX bytes (255 on most), the whole absolute path at most PATH_MAX less room for those files. Asked
  of the nearest existing folder above it (255 and 4096 where it cannot say), so no OSError comes later instead."""
  absolute = os.path.abspath(path)
  existing = absolute
  while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
    existing = os.path.dirname(existing)
  limits = {}
  for name, fallback in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)):
    try:
      limits[name] = os.pathconf(existing, name)
    except (OSError, ValueError):
      limits[name] = -1
    limits[name] = limits[name] if limits[name] > 0 else fallback  # -1: no limit given
  longest = max(len(os.fsencode(part)) for part in pathlib.PurePath(absolute).parts)
  require(longest <= limits["PC_NAME_MAX"], field, path, f"a path whose every name between slashes is at most "
          f"{limits['PC_NAME_MAX']} bytes, the file system's limit (one here is {longest})")
  require(len(os.fsencode(absolute)) <= limits["PC_PATH_MAX"] - _ROOM_INSIDE, field, path,
          f"a path of at most {limits['PC_PATH_MAX'] - _ROOM_INSIDE} bytes once absolute (the file system's "
          f"{limits['PC_PATH_MAX']}, less room for the files made under it)")


def is_utf8(text: str) -> bool:
  """Whether `text` (a path as Python holds it) is valid UTF-8: no surrogate, os.fsdecode's stand-in for a bad byte."""
  return not any("\ud800" <= character <= "\udfff" for character in text)


_ANSI_C_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def shell_quote(text: str) -> str:
  """`text` as one shell word that pastes back as itself: shlex.quote, or bash's $'...' for control characters."""
  if text.isprintable():
    return shlex.quote(text)

  def escape(character: str) -> str:
    if character in _ANSI_C_ESCAPES or character.isprintable():
      return _ANSI_C_ESCAPES.get(character, character)
    return "".join(f"\\x{byte:02x}" for byte in character.encode("utf-8", "surrogateescape"))

  return "$'" + "".join(map(escape, text)) + "'"


def shown_path(path: str | pathlib.Path) -> str:
  """`path` as a shell word (`shell_quote`): relative to the current directory inside it ('runs/a'), else absolute."""
  path = pathlib.Path(path).absolute()
  with contextlib.suppress(ValueError):  # outside the current directory: shown absolute
    path = path.relative_to(pathlib.Path.cwd())
  return shell_quote(str(path))


class RunStopped(Exception):
  """A valid run that ended before its last step (a signal, a non-finite loss, a failed write), in a one-line str()."""

  exit_status = 1


_DROPPED_UNRAISABLE: set[Callable[[Any], bool]] = set()


def drop_unraisable(matches: Callable[[Any], bool]) -> None:
  """Stops Python printing tracebacks of the unraisable exceptions `matches(unraisable)` picks out (JAX's gc callback,
  TensorStore calling into a closed loop) beside a one-line outcome; others reach the previous hook."""
  _DROPPED_UNRAISABLE.add(matches)
  if getattr(sys.unraisablehook, "drops_unraisable", False):
    return
  previous = sys.unraisablehook

  def hook(unraisable) -> None:
    if not any(dropped(unraisable) for dropped in _DROPPED_UNRAISABLE):
      previous(unraisable)

  hook.drops_unraisable = True
  sys.unraisablehook = hook


def first_link(path: pathlib.Path) -> pathlib.Path | None:
  """`path` if a symbolic link, else the first link below it (sorted, not followed), else None."""
  if path.is_symlink():
    return path
  for parent, names, files in os.walk(path):  # nothing where `path` is missing or a file
    for name in sorted(names + files):
      if (inside := pathlib.Path(parent, name)).is_symlink():
        return inside
  return None


def file_kind(mode: int) -> str:
  """What a file of `mode` (st_mode) is, in words: 'a regular file', 'a FIFO', 'a directory', 'a symbolic link'..."""
  kinds = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
           (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
           (stat.S_ISSOCK, "a socket"))
  return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_regular(path: str | pathlib.Path, limit: int) -> bytes:
  """The bytes of `path` if it is a regular file of at most `limit` bytes; opened without blocking and checked first, so
  a FIFO, device or directory there is an OSError at once, never a read that waits or never ends."""
  fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
  try:
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
      raise OSError(errno.EINVAL, f"{file_kind(status.st_mode)}, not a regular file", str(path))
    if status.st_size > limit:
      raise OSError(errno.EFBIG, f"{status.st_size:,} bytes, more than the {limit:,} allowed", str(path))
    chunks, left = [], limit + 1  # one byte over the limit tells a file that grew since the fstat
    while left > 0 and (chunk := os.read(fd, min(left, 1 << 24))):
      chunks.append(chunk)
      left -= len(chunk)
    if left <= 0:
      raise OSError(errno.EFBIG, f"more than the {limit:,} bytes allowed", str(path))
    return b"".join(chunks)
  finally:
    os.close(fd)


def irregular_file(directory: str | pathlib.Path) -> str | None:
  """'PATH is KIND, not a regular file' for the first path under `directory` a reader could hang on, else None."""
  for parent, names, files in os.walk(directory):
    names.sort()
    for name in sorted(names + files):
      mode = (path := pathlib.Path(parent, name)).lstat().st_mode
      if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return f"{path} is {file_kind(mode)}, not a regular file"
  return None


def json_sha256(value: Any) -> str:
  """The SHA-256 hex digest of `value` as JSON with sorted keys: the same for equal dicts in any key order."""
  return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


# Exclusive locks on directories (a workdir, a dataset being generated): `fcntl.flock` on `<directory>/.lock`, which
# the OS releases however the holder's process ends (SIGKILL too), so a dead run leaves no stale lock. The .lock is a
# file of the directory's own: one that is a symbolic link or has other names (a hard link, a copy made with
# `cp -al`) is replaced before it is locked, so a lock or a record never reaches another directory through it.
LOCK_NAME = ".lock"
_LOCK_ATTEMPTS = 3  # a .lock linked or replaced by another process between the checks and the flock is opened again


def holder(directory: str | pathlib.Path) -> str:
  """'host H, pid P, since T' of the lock of `directory`, else 'unknown holder' (a linked .lock is not read)."""
  try:
    fd = os.open(pathlib.Path(directory) / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
      record = json.loads(f.read(4096))
    return f"host {record['host']}, pid {record['pid']}, since {record['since']}"
  except (OSError, ValueError, KeyError, TypeError):
    return "unknown holder"


def _directory_id(directory: str | pathlib.Path) -> str:
  """'device:inode' of `directory`: the same after a rename, another for a copy (a directory has no hard links)."""
  status = os.stat(directory)
  return f"{status.st_dev}:{status.st_ino}"


def _held_as_lock_of(fd: int, directory: str | pathlib.Path) -> bool:
  """Whether some process holds the flock of the open .lock `fd` as the lock of `directory`. A file with other names
  can be held as another directory's (the one `cp -al` copied): it is this one's only when its record names this
  directory, or names none (a holder not yet recorded)."""
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    if os.fstat(fd).st_nlink == 1:
      return True
    try:
      recorded = json.loads(os.pread(fd, 4096, 0)).get("directory")
    except (OSError, ValueError, AttributeError):
      recorded = None
    return recorded in (None, _directory_id(directory))
  fcntl.flock(fd, fcntl.LOCK_UN)
  return False


def is_locked(directory: str | pathlib.Path) -> bool:
  """Whether some process holds the lock of `directory` now (a probe: takes and releases it if free). Read-only (it
  answers on a read-only workdir too), never through a link: a .lock that is not a regular file is no lock (False)."""
  try:
    fd = os.open(pathlib.Path(directory) / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
  except OSError:
    return False  # none there, a link, or unreadable: no lock another run of ours could hold
  try:
    return stat.S_ISREG(os.fstat(fd).st_mode) and _held_as_lock_of(fd, directory)
  finally:
    os.close(fd)


def refuse_if_held(directory: str | pathlib.Path, what: str) -> None:
  """The UsageError `exclusive` would raise if another process holds the lock of `directory` now, or if its .lock
  is neither a regular file nor a link; creates nothing. A cheap early check before slow imports; `exclusive` still
  takes the lock."""
  _refuse_odd_lock_file(pathlib.Path(directory) / LOCK_NAME, what)
  if is_locked(directory):
    raise _in_use(directory, what)


def _in_use(directory: str | pathlib.Path, what: str) -> UsageError:
  return UsageError(f"{what} is in use by another run ({holder(directory)}): wait for it to finish, or use another "
                    "directory")


def _refuse_odd_lock_file(path: pathlib.Path, what: str) -> None:
  """UsageError if the .lock `path` exists but is neither a regular file nor a symbolic link (which is replaced)."""
  try:
    mode = path.lstat().st_mode
  except OSError:
    return
  if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
    raise UsageError(f"{printable(str(path))} is not a regular file; {what} keeps its lock file there: remove it, or "
                     f"use another directory")


def _shared(path: pathlib.Path) -> bool:
  """Whether the .lock `path` is a symbolic link or a regular file with other names (hard links)."""
  try:
    status = path.lstat()
  except OSError:
    return False
  return stat.S_ISLNK(status.st_mode) or (stat.S_ISREG(status.st_mode) and status.st_nlink > 1)


def _replace_shared(directory: pathlib.Path, path: pathlib.Path, what: str) -> None:
  """Replaces the .lock `path`, if a link or a file with other names, by an empty file of its own (renamed in: the
  other name keeps its file and record). Runs under a flock on `directory` itself, so concurrent runs replace it once;
  UsageError if it is held as this directory's lock, or where a directory cannot be locked (NFS)."""
  directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
  try:
    try:
      fcntl.flock(directory_fd, fcntl.LOCK_EX)  # held for a rename only: waiting on it is brief
    except OSError:
      raise UsageError(f"{printable(str(path))} is a link or has other names, and {what} cannot replace it safely "
                       f"on this file system: remove it, or use another directory") from None
    if not _shared(path):  # replaced by another run meanwhile
      return
    if not path.is_symlink():
      fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
      try:
        if _held_as_lock_of(fd, directory):
          raise _in_use(directory, what)
      finally:
        os.close(fd)
    write_atomically(path, b"")
  finally:
    os.close(directory_fd)  # releases the flock on the directory


def _open_own_lock(directory: pathlib.Path, what: str) -> int:
  """The fd of `directory`'s .lock (created if needed), a regular file of its own (`_replace_shared`), flock held;
  UsageError if another process holds it, or the directory is not writable."""
  path = directory / LOCK_NAME
  for _ in range(_LOCK_ATTEMPTS):
    _refuse_odd_lock_file(path, what)
    if _shared(path):
      _replace_shared(directory, path, what)
    try:  # read-write, created if needed, never through a link
      fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as error:
      if error.errno == errno.ELOOP:  # made a link since the check above: replaced next time round
        continue
      if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR):
        raise UsageError(f"{what}: {printable(str(directory))} is not writable ({error.strerror or error}): the run "
                         f"keeps its lock there; use a writable directory") from None
      raise
    status = os.fstat(fd)
    if stat.S_ISREG(status.st_mode) and status.st_nlink == 1:
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        os.close(fd)
        raise _in_use(directory, what) from None
      now = path.lstat()
      if (now.st_dev, now.st_ino) == (status.st_dev, status.st_ino):  # not replaced between the open and the flock
        return fd
    os.close(fd)  # something else, linked, or replaced since the checks: looked at again
  raise UsageError(f"{printable(str(path))} keeps being linked or replaced while {what} locks it: stop what does that, "
                   f"or use another directory")


@contextlib.contextmanager
def exclusive(directory: str | pathlib.Path, what: str, *, record_now: bool = True) -> Iterator[Callable[[], None]]:
  """Holds the lock of `directory` (created if needed) while inside; UsageError naming the holder at once if taken.

  `what` names the directory in errors. Yields `record()`, which writes the holder into the file; with
  `record_now=False` the caller calls it once its checks pass (or never): until then a lock file this call created is
  removed on the way out, the directory's times put back, so a refused run changes nothing."""
  directory = pathlib.Path(directory)
  path = directory / LOCK_NAME
  existed = os.path.lexists(path)
  times = None if existed else directory.stat()
  fd = _open_own_lock(directory, what)
  created = None if existed else directory.stat()  # the directory's times with the new lock in it
  recorded = False

  def record() -> None:
    nonlocal recorded
    if recorded or os.fstat(fd).st_nlink > 1:  # once; and never through a name linked to it since (`cp -al`)
      return
    since = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    payload = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": since,
                          "directory": _directory_id(directory)}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, payload, 0)
    recorded = True

  try:
    if record_now:
      record()
    yield record
  finally:
    if not recorded and times is not None:  # still held: no one else can have opened it since
      untouched = directory.stat().st_mtime_ns == created.st_mtime_ns  # nothing else made or removed in it since
      path.unlink(missing_ok=True)
      if untouched:
        os.utime(directory, ns=(times.st_atime_ns, times.st_mtime_ns))
    os.close(fd)  # releases the lock


def write_atomically(path: str | pathlib.Path, payload: bytes | Callable[[BinaryIO], Any], *,
                     remove_stale: bool = False, mode: int = 0o666) -> pathlib.Path:
  """Writes `path` whole or not at all: `payload` (bytes, or `payload(f)` writing a binary file) goes to a temporary
  file beside it, renamed over `path` (replacing a link there, not writing through it).

  The file gets `mode` less the umask, as open() would. `remove_stale`: first removes temporary files a killed writer
  left (for a path no other process writes). On failure the temporary file is removed and the OSError names `path`."""
  path = pathlib.Path(path)
  if remove_stale:
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
      stale.unlink(missing_ok=True)
  temporary = None
  try:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
      if isinstance(payload, (bytes, bytearray, memoryview)):
        f.write(payload)
      else:
        payload(f)
    os.umask(umask := os.umask(0))  # the only way to read it: set, and straight back
    os.chmod(temporary, mode & ~umask)
    os.replace(temporary, path)
  except BaseException as error:
    if temporary is not None:
      pathlib.Path(temporary).unlink(missing_ok=True)
    if isinstance(error, OSError):
      raise OSError(error.errno, error.strerror or str(error), str(path)) from error
    raise
  return path

