"""How the train step is compiled: XLA:CPU's options for it, and compiling it ahead of the first step, so that the
compiler's freed memory goes back to the OS (tied_embed/fast/host_memory.py) before any step's temporaries exist."""

from __future__ import annotations

from collections.abc import Callable

import jax
from flax import nnx

from tied_embed.fast import host_memory

# XLA:CPU options for the step (benchmarks/README.md has the measurements):
# - YNNPACK takes each dot with its elementwise neighbours, so the chunked loss's `d_table + exp @ x` accumulates
#   inside the dot instead of writing a (V, D) product and adding it in a second pass (10-15% faster, one (V, D)
#   buffer fewer); with the dot fusion alone, reductions stop fusing their inputs (each sum of squares wrote a (V, D)
#   temporary), so YNNPACK takes the reductions too. XNNPACK's and oneDNN's dot fusions
#   (xla_cpu_experimental_{xnn,onednn}_fusion_type) compile to XLA's own dot in this jaxlib: 5-9% more CPU time at
#   V=8192 and V=32768, the same at GPT-2's V=50257, D=768 ("XLA:CPU's dot options").
# - Copy insertion by region analysis: without it XLA:CPU copied the (V, D) table before updating it in place.
CPU_COMPILER_OPTIONS = {
    "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_REDUCE",
    "xla_cpu_copy_insertion_use_region_analysis": True,
}


def compiler_options() -> dict[str, str | bool] | None:
  """The XLA options the train step is compiled with on this backend: CPU_COMPILER_OPTIONS on CPU, else none."""
  return dict(CPU_COMPILER_OPTIONS) if jax.default_backend() == "cpu" else None


def compile_ahead(train_step: Callable, state: nnx.State, ids: jax.Array, next_ids: jax.Array) -> None:
  """Compiles both variants of `train_step` (plain and log step) for these arguments; jit reuses them when called.

  The arguments may be abstract (`jax.ShapeDtypeStruct`s with shardings), so the trainer compiles before the state
  exists; jit reuses the programs for arrays of the same shapes, dtypes and shardings placed on the mesh (committed,
  as an abstract leaf's sharding counts). Each compile's freed memory goes back to the OS
  (`host_memory.release_freed`). Call the step with `with_stats` given, as the trainer does: jit keys a call that
  leaves it out apart, and would compile again.
  """
  for with_stats in (False, True):
    train_step.lower(state, ids, next_ids, with_stats=with_stats).compile()
    host_memory.release_freed()  # before the next compile, so the two compilers' heaps never add up
