"""The process's own memory: handing the C heap's freed pages back to the operating system.

XLA's compiler frees its many small heap allocations when done, but malloc keeps the pages for reuse while the
step's temporaries come from fresh ones: a run would hold the compiler's working memory (about 70-140 MiB at
V=32768) for its whole life. The trainer compiles its programs first, then calls `release_freed`.
"""

from __future__ import annotations

import ctypes


def release_freed() -> bool:
  """Returns the heap's free pages to the OS (glibc's `malloc_trim(0)`); False where the C library has none."""
  try:
    trim = ctypes.CDLL(None).malloc_trim  # the C library the process already runs on
  except (OSError, AttributeError):
    return False
  trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
  return bool(trim(0))
