"""How the train step is compiled: XLA:CPU's options, the persistent cache, compiling ahead and `release_freed`."""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import pathlib
from collections.abc import Callable

import jax
from flax import nnx

from tied_embed.util import shell_quote

log = logging.getLogger(__name__)

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


CACHE_VARIABLE = "TIED_EMBED_COMPILE_CACHE"  # the directory of compiled programs kept across runs; '' turns it off
CACHE_MIN_COMPILE_SECONDS = 0.3  # programs that compile faster are compiled again: reading them back saves little
CACHE_MAX_BYTES = 2 << 30  # the least recently used programs are dropped beyond this


def cache_compiles() -> pathlib.Path | None:
  """Keeps compiled programs in JAX's persistent cache, so a run with the same shapes, config and JAX reads them back
  (the same program, the same numbers): $TIED_EMBED_COMPILE_CACHE, else $XDG_CACHE_HOME/tied_embed/xla; none where that
  is '' or can't be made, and a cache already set up is left as it is. → the directory, or None."""
  chosen = os.environ.get(CACHE_VARIABLE)
  if chosen == "" or jax.config.jax_compilation_cache_dir:
    return None
  base = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
  directory = pathlib.Path(chosen).expanduser() if chosen else base / "tied_embed" / "xla"
  try:
    directory.mkdir(parents=True, exist_ok=True)
  except OSError:
    return None  # a read-only home: the run compiles as it would without a cache
  jax.config.update("jax_compilation_cache_dir", str(directory))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS)
  if importlib.util.find_spec("filelock") is not None:  # a size limit turns on JAX's file lock, which needs it:
    jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)  # no run reads an entry still being written
  return directory


def compile_ahead(train_step: Callable, state: nnx.State, ids: jax.Array, next_ids: jax.Array) -> None:
  """Compiles both variants of `train_step` (plain and log step) for these arguments, which may be abstract (with
  shardings). Call the step with `with_stats` given: jit keys a call that leaves it out apart, and compiles again."""
  for with_stats in (False, True):
    compile_past_a_bad_cache(lambda: train_step.lower(state, ids, next_ids, with_stats=with_stats).compile())
    release_freed()  # before the next compile, so the two compilers' heaps never add up


def compile_past_a_bad_cache(compile_program: Callable[[], object]) -> object:
  """`compile_program()`; if JAX finds the program read back from the persistent cache is not the one asked for (an
  AssertionError such as `(14, 16)`, its outputs counted: the cache's files swapped or overwritten), warns naming the
  cache and how to clear it, turns the cache off for the rest of this process and compiles it afresh."""
  try:
    return compile_program()
  except AssertionError as error:
    directory = jax.config.jax_compilation_cache_dir
    if not directory or not jax.config.jax_enable_compilation_cache:
      raise
    log.warning("The compilation cache %s returned another program than the one asked for (AssertionError: %s): "
                "compiling without it for the rest of this run. Clear it with `rm -rf %s`, or run with %s='' to use "
                "none.", directory, error, shell_quote(directory), CACHE_VARIABLE)
  from jax.experimental.compilation_cache import compilation_cache  # noqa: PLC0415 (only on this rare path)

  jax.config.update("jax_enable_compilation_cache", False)
  compilation_cache.reset_cache()  # JAX decides once per process whether it reads the cache: asked again
  jax.clear_caches()  # the bad program is also kept in memory, under the computation it was asked for
  return compile_program()


def release_freed() -> bool:
  """Returns the C heap's free pages (the compiler's, 70-140 MiB at V=32768) to the OS; False without malloc_trim."""
  try:
    trim = ctypes.CDLL(None).malloc_trim  # the C library the process already runs on
  except (OSError, AttributeError):
    return False
  trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
  return bool(trim(0))
