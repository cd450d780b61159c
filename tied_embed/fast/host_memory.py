"""The process's own memory: handing the C heap's freed pages back to the operating system.

XLA's compiler works in many small heap allocations and frees them when it is done, but malloc keeps freed heap
pages for reuse, while the compiled step's temporaries come from fresh pages. Without handing them back, a run
holds the compiler's working memory (about 70-140 MiB for the train step at V=32768) under every step for its
whole life. The trainer compiles its programs first and then calls `release_freed`.
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
