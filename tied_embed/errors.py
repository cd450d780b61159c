"""The one exception type the command lines turn into a one-line message and exit status 2."""

from __future__ import annotations

from typing import Any


class UsageError(Exception):
  """A problem with what the user asked for: a config field, a flag, a workdir.

  The message is one line: the field, the value given and what is allowed. Command lines print it as
  `error: <message>` on stderr and exit with status 2, without a traceback.
  """

  @classmethod
  def bad_value(cls, field: str, value: Any, allowed: str) -> UsageError:
    """`field=value` is not allowed; `allowed` says what is, e.g. 'an integer > 0'."""
    return cls(f"{field}={value!r} is not allowed: expected {allowed}")
