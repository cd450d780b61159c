"""How the train step is compiled: XLA:CPU's options, and compiling ahead of the first step so that the compiler's
freed memory goes back to the OS (`release_freed`) before any step's temporaries exist."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import jax
from flax import nnx

# XLA:CPU options for the step (measured in benchmarks/README.md):
# - YNNPACK fuses each dot with its elementwise neighbours, so the chunked loss's `d_table + exp @ x` accumulates inside
#   the dot (10-15% faster, one (V, D) buffer fewer), and the reductions, which stop fusing under the dot fusion alone.
# - Copy insertion by region analysis: without it XLA:CPU copied the (V, D) table before updating it in place.
CPU_COMPILER_OPTIONS = {
    "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_REDUCE",
    "xla_cpu_copy_insertion_use_region_analysis": True,
}


def compiler_options() -> dict[str, str | bool] | None:
  """The XLA options the train step is compiled with on this backend: CPU_COMPILER_OPTIONS on CPU, else none."""
  return dict(CPU_COMPILER_OPTIONS) if jax.default_backend() == "cpu" else None


def compile_ahead(train_step: Callable, state: nnx.State, ids: jax.Array, next_ids: jax.Array) -> None:
  """Compiles both variants of `train_step` (plain and log step) for these arguments, which may be abstract (with
  shardings). Call the step with `with_stats` given: jit keys a call that leaves it out apart, and compiles again."""
  for with_stats in (False, True):
    train_step.lower(state, ids, next_ids, with_stats=with_stats).compile()
    release_freed()  # before the next compile, so the two compilers' heaps never add up


def release_freed() -> bool:
  """Returns the C heap's free pages to the OS (glibc's `malloc_trim(0)`); False where the C library has none. XLA's
  compiler frees its many small allocations when done, but malloc keeps the pages, so a run would otherwise hold the
  compiler's working memory (70-140 MiB at V=32768) for its life."""
  try:
    trim = ctypes.CDLL(None).malloc_trim  # the C library the process already runs on
  except (OSError, AttributeError):
    return False
  trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
  return bool(trim(0))
