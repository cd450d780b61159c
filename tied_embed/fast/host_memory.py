"""Handing the C heap's freed pages back to the OS: XLA's compiler frees its many small allocations when done, but
malloc keeps the pages, so a run would hold the compiler's working memory (70-140 MiB at V=32768) for its life."""

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
