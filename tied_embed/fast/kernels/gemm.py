"""The chunked loss's matmuls as jax.ffi kernels on oneMKL and oneDNN, routed by the CPU's instruction sets (`route`).

On the chunk's shapes oneMKL's sgemm runs at 300–360 GFLOP/s on 2 AVX-512 Xeon cores, XLA:CPU's dot at 190–240, and XLA
widens bfloat16 to float32, so a bfloat16 dot costs it a float32 one (benchmarks/README.md). No VJP: the chunked loss
calls `gemm` inside its own. `available` is False where the libraries are not built or fail their check, off CPU,
with TIED_EMBED_MKL=0, on CPUs without a route."""

from __future__ import annotations

import functools
import logging
import pathlib

import jax
import jax.numpy as jnp

from tied_embed.fast.kernels import library
from tied_embed.fast.kernels.library import GEMM, GEMM_ONEDNN

SWITCH = "TIED_EMBED_MKL"  # "0" turns the kernel off (XLA's dots instead)

_ONEMKL_F32 = {"tied_embed_f32_gemm": (GEMM, "F32Gemm"), "tied_embed_f32_gemm_accumulate": (GEMM, "F32GemmAccumulate")}
_AMX_BF16 = {"tied_embed_bf16_gemm": (GEMM, "Bf16Gemm"), "tied_embed_bf16_gemm_onednn": (GEMM_ONEDNN, "Bf16Gemm"),
             "tied_embed_bf16_gemm_accumulate": (GEMM, "Bf16GemmAccumulate")}
# route (as a run's kernels.json records it) → (what runs, {FFI target: (library, handler symbol)}); each library loads
# only where its route is taken. Which CPU takes which: `route`.
ROUTES = {
    "gemm-f32": ("oneMKL's cblas_sgemm", _ONEMKL_F32),
    "gemm-f32-onednn": ("oneDNN's matmul (AVX-512)", {n: (GEMM_ONEDNN, s) for n, (_, s) in _ONEMKL_F32.items()}),
    "gemm-bf16": ("oneMKL's cblas_gemm_bf16bf16f32 and (the logits) oneDNN's matmul, on AMX", _AMX_BF16),
    "gemm-bf16-onednn": ("oneDNN's matmul on avx512_bf16", {n: (GEMM_ONEDNN, s) for n, (_, s) in _AMX_BF16.items()}),
}
LOGITS_BY_TOKEN = {"gemm-bf16-onednn"}  # routes forming the logits x·Eᵀ, (C, V): oneDNN runs it faster on avx512_bf16
_PREFIX = {jnp.dtype(jnp.float32): "tied_embed_f32_gemm", jnp.dtype(jnp.bfloat16): "tied_embed_bf16_gemm"}

# float32 takes the kernel for tables of at least this many entries (V·D): below, each call's overhead outweighs the
# faster GEMM (the step at V=2048, D=64: 13.9 ms against XLA's 10.6). bfloat16 takes it at any size.
FLOAT32_MIN_TABLE_SIZE = 2**19

log = logging.getLogger(__name__)


@functools.cache  # read once per process, not on every trace of the chunked loss
def route(dtype="float32", cpuinfo: pathlib.Path = pathlib.Path("/proc/cpuinfo")) -> str | None:
  """The ROUTES key `dtype`'s dots take on this CPU, by its instruction sets, each the fastest measured on such a CPU
  (docs/performance.md); None: XLA's dot (with AVX2 alone every library ran within 10% of it)."""
  flags = set((library.cpuinfo_field("flags", cpuinfo) or "").split())
  if jnp.dtype(dtype) == jnp.float32:
    intel = library.cpuinfo_field("vendor_id", cpuinfo) == "GenuineIntel"
    return None if "avx512f" not in flags else "gemm-f32" if intel else "gemm-f32-onednn"
  return "gemm-bf16" if {"amx_bf16", "amx_tile"} <= flags else "gemm-bf16-onednn" if "avx512_bf16" in flags else None


@functools.cache
def unavailable_reason(dtype="float32") -> str | None:
  """None where `gemm` runs operands of `dtype` (float32 | bfloat16) here, else the reason in a line (logged once)."""
  dtype = jnp.dtype(dtype)
  if dtype not in _PREFIX:
    raise ValueError(f"dtype={dtype} is not allowed: expected float32 or bfloat16")
  taken = route(dtype)
  cpu = None if taken else ("this CPU has no AVX-512, where no GEMM library was measured faster than XLA's dot"
                            if dtype == jnp.float32 else "this CPU has neither AMX nor avx512_bf16")
  reason = library.switched_off(SWITCH) or cpu or library.register(ROUTES[taken][1])
  size = f", for tables of at least {FLOAT32_MIN_TABLE_SIZE} entries" if dtype == jnp.float32 else ""
  log.info("%s matmuls of the chunked loss run %s.", dtype, f"as XLA's dots: {reason}" if reason else
           f"on {ROUTES[taken][0]}{size} (tied_embed/fast/kernels)")
  return reason


def available(dtype="float32") -> bool:
  """Whether `gemm` runs operands of `dtype` here (the CPU, the kernel built and loaded, not switched off)."""
  return unavailable_reason(jnp.dtype(dtype).name) is None


def pays_off(table_shape: tuple[int, ...], dtype="float32") -> bool:
  """Whether the chunked loss's dots against a table of this (V, D) shape are faster on the kernel than on XLA's."""
  return jnp.dtype(dtype) == jnp.bfloat16 or table_shape[0] * table_shape[1] >= FLOAT32_MIN_TABLE_SIZE


def takes(table_shape: tuple[int, ...], dtype="float32") -> bool:
  """Whether the chunked loss's dots against a (V, D) table of this shape run on the kernel here: it runs, and pays."""
  return available(dtype) and pays_off(table_shape, dtype)


def gemm(a: jax.Array, b: jax.Array, *, trans_a: bool = False, trans_b: bool = False,
         add_to: jax.Array | None = None, dtype="float32") -> jax.Array:
  """op(a) @ op(b) (+ add_to, an (M, N) float32 addend updated in place) in float32 from operands cast to `dtype`:
  (M, K)·(K, N) → (M, N), op transposing with trans_a / trans_b. RuntimeError where not `available(dtype)`."""
  dtype = jnp.dtype(dtype)
  if not available(dtype):  # also registers the kernel's targets on first use
    raise RuntimeError(f"the {dtype} kernel cannot run here: {unavailable_reason(dtype.name)}")
  a, b = a.astype(dtype), b.astype(dtype)
  rows = a.shape[1] if trans_a else a.shape[0]
  cols = b.shape[0] if trans_b else b.shape[1]
  result = jax.ShapeDtypeStruct((rows, cols), jnp.float32)
  # The handler takes matrices only: under vmap (per-token losses, tests/core/test_losses.py) it runs once per element.
  if add_to is None:
    # On AMX oneDNN runs the bfloat16 logits 1.4-2.3x faster than oneMKL, oneMKL the rest (benchmarks/README.md).
    onednn = dtype == jnp.bfloat16 and trans_b and not trans_a
    target = f"{_PREFIX[dtype]}_onednn" if onednn else _PREFIX[dtype]
    return jax.ffi.ffi_call(target, result, vmap_method="sequential")(a, b, trans_a=trans_a, trans_b=trans_b)
  call = jax.ffi.ffi_call(f"{_PREFIX[dtype]}_accumulate", result, input_output_aliases={2: 0}, vmap_method="sequential")
  return call(a, b, add_to.astype(jnp.float32), trans_a=trans_a, trans_b=trans_b)
