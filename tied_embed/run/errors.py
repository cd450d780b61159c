"""The exceptions the command lines turn into one line on stderr and an exit status, and the one check helper.

`UsageError` is what the user asked for being wrong (exit 2). `RunStopped` and its subclasses end a run that was
valid (a signal, a non-finite loss, a failed write); each carries the exit status the command line ends with.
All are plain exceptions, so a notebook or library calling `train_and_evaluate` can catch them.
"""

from __future__ import annotations

import shlex
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
