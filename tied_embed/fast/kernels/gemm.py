"""The chunked loss's matmuls as jax.ffi kernels: float32 on oneMKL (AVX-512), bfloat16 on AMX (oneDNN and oneMKL).

On the chunk's shapes oneMKL's sgemm runs at 300–360 GFLOP/s on 2 AVX-512 Xeon cores, XLA:CPU's dot at 190–240, and XLA
widens bfloat16 to float32 (benchmarks/README.md). No VJP: the chunked loss calls `gemm` inside its own. `available`
is False where the libraries are not built or fail their check, off CPU, with TIED_EMBED_MKL=0, on CPUs not measured."""

from __future__ import annotations

import functools
import logging
import pathlib

import jax
import jax.numpy as jnp

from tied_embed.fast.kernels import library
from tied_embed.fast.kernels.library import GEMM, GEMM_ONEDNN

SWITCH = "TIED_EMBED_MKL"  # "0" turns the kernel off (XLA's dots instead)
TARGETS = {  # dtype → {FFI target name: (library, its handler symbol)}; each library loads only where needed
    "float32": {"tied_embed_f32_gemm": (GEMM, "F32Gemm"),
                "tied_embed_f32_gemm_accumulate": (GEMM, "F32GemmAccumulate")},
    "bfloat16": {"tied_embed_bf16_gemm": (GEMM, "Bf16Gemm"),
                 "tied_embed_bf16_gemm_onednn": (GEMM_ONEDNN, "Bf16Gemm"),
                 "tied_embed_bf16_gemm_accumulate": (GEMM, "Bf16GemmAccumulate")},
}
_PREFIX = {jnp.dtype(jnp.float32): "tied_embed_f32_gemm", jnp.dtype(jnp.bfloat16): "tied_embed_bf16_gemm"}

# float32 takes the kernel for tables of at least this many entries (V·D): below, each call's overhead outweighs the
# faster GEMM (the step at V=2048, D=64: 13.9 ms against XLA's 10.6). bfloat16 takes it at any size.
FLOAT32_MIN_TABLE_SIZE = 2**19

log = logging.getLogger(__name__)


def _cpu_flags(cpuinfo: pathlib.Path) -> set[str]:
  return set((library.cpuinfo_field("flags", cpuinfo) or "").split())


def cpu_has_amx_bf16(cpuinfo: pathlib.Path = pathlib.Path("/proc/cpuinfo")) -> bool:
  """Whether this CPU multiplies bfloat16 on AMX tiles (`amx_bf16` and `amx_tile` among its flags)."""
  return {"amx_bf16", "amx_tile"} <= _cpu_flags(cpuinfo)


def cpu_is_intel_avx512(cpuinfo: pathlib.Path = pathlib.Path("/proc/cpuinfo")) -> bool:
  """Whether this CPU is an Intel one with AVX-512 (`GenuineIntel`, `avx512f`): where float32 on oneMKL was measured."""
  return library.cpuinfo_field("vendor_id", cpuinfo) == "GenuineIntel" and "avx512f" in _cpu_flags(cpuinfo)


@functools.cache
def unavailable_reason(dtype="float32") -> str | None:
  """None where `gemm` runs operands of `dtype` (float32 | bfloat16) here, else the reason in a line (logged once)."""
  dtype = jnp.dtype(dtype)
  if dtype not in _PREFIX:
    raise ValueError(f"dtype={dtype} is not allowed: expected float32 or bfloat16")
  cpu = None
  if dtype == jnp.bfloat16 and not cpu_has_amx_bf16():
    cpu = "this CPU has no AMX bfloat16 unit (amx_bf16)"
  elif dtype == jnp.float32 and not cpu_is_intel_avx512():
    cpu = "this CPU is not an Intel one with AVX-512, where oneMKL's sgemm was measured faster"
  reason = library.switched_off(SWITCH) or cpu or library.register(TARGETS[dtype.name])
  routine = (f"oneMKL's cblas_sgemm, for tables of at least {FLOAT32_MIN_TABLE_SIZE} entries"
             if dtype == jnp.float32 else "oneMKL's cblas_gemm_bf16bf16f32 and (the logits) oneDNN's matmul, on AMX")
  if reason is None:
    log.info("%s matmuls of the chunked loss run on %s (tied_embed/fast/kernels).", dtype, routine)
  else:
    log.info("%s matmuls of the chunked loss run as XLA's dots: %s.", dtype, reason)
  return reason


def available(dtype="float32") -> bool:
  """Whether `gemm` runs operands of `dtype` here (the CPU, the kernel built and loaded, not switched off)."""
  return unavailable_reason(jnp.dtype(dtype).name) is None


def pays_off(table_shape: tuple[int, ...], dtype="float32") -> bool:
  """Whether the chunked loss's dots against a table of this (V, D) shape are faster on the kernel than on XLA's."""
  return jnp.dtype(dtype) == jnp.bfloat16 or table_shape[0] * table_shape[1] >= FLOAT32_MIN_TABLE_SIZE


def gemm(a: jax.Array, b: jax.Array, *, trans_a: bool = False, trans_b: bool = False,
         add_to: jax.Array | None = None, dtype="float32") -> jax.Array:
  """op(a) @ op(b) (+ add_to, an (M, N) float32 addend updated in place) in float32 from operands cast to `dtype`:
  (M, K)·(K, N) → (M, N), op transposing with trans_a / trans_b. RuntimeError where not `available(dtype)`."""
  dtype = jnp.dtype(dtype)
  if not available(dtype):  # also registers the kernel's targets on first use
    raise RuntimeError(f"the oneMKL {dtype} kernel cannot run here: {unavailable_reason(dtype.name)}")
  a, b = a.astype(dtype), b.astype(dtype)
  rows = a.shape[1] if trans_a else a.shape[0]
  cols = b.shape[0] if trans_b else b.shape[1]
  result = jax.ShapeDtypeStruct((rows, cols), jnp.float32)
  # The handler takes matrices only: under vmap (per-token losses, tests/core/test_losses.py) it runs once per element.
  if add_to is None:
    # oneDNN runs bfloat16 a·bᵀ (the logits E·xᵀ) 1.4-2.3x faster than oneMKL; oneMKL runs dx as fast or faster
    # (but at GPT-2's shape) and d table faster (benchmarks/README.md).
    onednn = dtype == jnp.bfloat16 and trans_b and not trans_a
    target = f"{_PREFIX[dtype]}_onednn" if onednn else _PREFIX[dtype]
    return jax.ffi.ffi_call(target, result, vmap_method="sequential")(a, b, trans_a=trans_a, trans_b=trans_b)
  call = jax.ffi.ffi_call(f"{_PREFIX[dtype]}_accumulate", result, input_output_aliases={2: 0}, vmap_method="sequential")
  return call(a, b, add_to.astype(jnp.float32), trans_a=trans_a, trans_b=trans_b)
