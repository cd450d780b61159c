"""A compilation cache whose entries were swapped (each program filed under the other's key) is named in a warning
with how to clear it, and the step is compiled afresh, with the right numbers: never JAX's bare
`AssertionError: (N, M)`. In a subprocess with a cache of its own, so the suite's shared cache is never touched."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT
from helpers import subprocess_env

# Fills the cache with both variants of a toy step (1 output plain, 3 with stats), swaps their files, drops what this
# process keeps in memory so the next compile reads the cache as a new process would, then compiles ahead again.
_SCRIPT = """
import functools, json, logging, pathlib, sys
import jax, jax.numpy as jnp
from jax.experimental.compilation_cache import compilation_cache
from tied_embed.fast import compilation

logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

@functools.partial(jax.jit, static_argnames="with_stats")
def step(state, ids, next_ids, with_stats=False):
  updated = (state + ids.sum() * next_ids.sum(),)
  return updated + (ids.sum(), next_ids.max()) if with_stats else updated

args = (jnp.ones(3), jnp.arange(4), jnp.arange(4))
compilation.compile_ahead(step, *args)
first, second = sorted(pathlib.Path(sys.argv[1]).glob("jit_step-*-cache"))
first.rename(first.with_name("swapping")); second.rename(first); first.with_name("swapping").rename(second)
jax.clear_caches(); compilation_cache.reset_cache()
compilation.compile_ahead(step, *args)
print(json.dumps([[x.tolist() for x in step(*args, with_stats=flag)] for flag in (False, True)]))
"""


def test_swapped_cache_entries_are_named_and_the_step_compiled_afresh(tmp_path):
  cache = tmp_path / "cache"
  env = subprocess_env(JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                       JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1", JAX_COMPILATION_CACHE_MAX_SIZE="-1")
  result = subprocess.run([sys.executable, "-c", _SCRIPT, str(cache)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  assert f"The compilation cache {cache} returned another program" in result.stderr
  assert f"rm -rf {cache}" in result.stderr
  by_hand = 1 + (0 + 1 + 2 + 3) * (0 + 1 + 2 + 3)  # state + sum(ids) * sum(next_ids)
  assert json.loads(result.stdout) == [[[by_hand] * 3], [[by_hand] * 3, 6, 3]]
