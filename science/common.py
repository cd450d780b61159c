"""What the science sweeps, scripts/results.py and benchmarks/run.py share: the CPU they measured on, and the
generated blocks of the Markdown pages they rewrite (`<!-- name -->…<!-- /name -->` style markers)."""

from __future__ import annotations

import pathlib
import platform

CPUINFO = pathlib.Path("/proc/cpuinfo")


def cpu(cpuinfo: pathlib.Path = CPUINFO) -> tuple[str, set[str]]:
  """(model name, flags) of the first processor in /proc/cpuinfo; the platform's processor name and no flags where
  the file cannot be read (another OS) or names no model (some ARM kernels)."""
  fallback = platform.processor() or "an unknown CPU"
  try:
    lines = cpuinfo.read_text().splitlines()
  except OSError:
    return fallback, set()
  fields: dict[str, str] = {}
  for line in lines:
    key, _, value = line.partition(":")
    fields.setdefault(key.strip(), value.strip())  # the first processor's; every core lists the same
  return fields.get("model name") or fallback, set(fields.get("flags", "").split())


def block(text: str, start: str, end: str) -> str | None:
  """What lies between the first `start` marker of `text` and the first `end` after it; None where either is
  missing."""
  if start not in text:
    return None
  rest = text.split(start, 1)[1]
  return rest.split(end, 1)[0] if end in rest else None


def replace_block(text: str, start: str, end: str, body: str) -> str | None:
  """`text` with `body` between its markers (as `block` finds them), the markers and all around them kept; None
  where a marker is missing."""
  if block(text, start, end) is None:
    return None
  before, rest = text.split(start, 1)
  return f"{before}{start}{body}{end}{rest.split(end, 1)[1]}"


def rewrite_block(path: pathlib.Path, start: str, end: str, body: str) -> bool:
  """Puts `body` between the markers of the file at `path`: → whether it did (False, the file untouched, where the
  file or a marker is missing)."""
  text = path.read_text() if path.exists() else ""
  replaced = replace_block(text, start, end, body)
  if replaced is None:
    return False
  path.write_text(replaced)
  return True
