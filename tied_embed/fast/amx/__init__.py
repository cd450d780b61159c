"""bfloat16 matmuls on the CPU's matrix units (AMX): a jax.ffi kernel calling oneMKL's bfloat16 GEMM.

XLA:CPU (jaxlib 0.10.2) widens the operands of every bfloat16 dot to float32 before it runs (its operand upcaster
and bf16 float normalization, in every dot library it has), so `model.dtype = "bfloat16"` written in JAX runs at
float32 speed. `gemm` instead hands bfloat16 operands to `cblas_gemm_bf16bf16f32` (oneMKL, requirements.txt), which
multiplies them on AMX tiles with float32 accumulation: the same arithmetic as XLA's bfloat16 dot (operands rounded
to bfloat16, products summed in float32), at bfloat16 speed. The chunked loss calls it for its three dots
(tied_embed/fast/chunked_loss.py), inside its custom VJP, so nothing differentiates through it.

The kernel (bf16_gemm.cc) is compiled by `make install` (`python -m tied_embed.fast.amx.build`). `available()` is
False, and the loss takes XLA's dots, on any CPU without AMX bfloat16 (`amx_bf16` in /proc/cpuinfo), on other
backends, where the build failed, or with TIED_EMBED_BF16_KERNEL=0 in the environment.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import pathlib

import jax
import jax.numpy as jnp

LIBRARY = pathlib.Path(__file__).with_name("_bf16_gemm.so")
SWITCH = "TIED_EMBED_BF16_KERNEL"  # "0" turns the kernel off (XLA's bfloat16 dots instead)
_TARGETS = {"tied_embed_bf16_gemm": "Bf16Gemm", "tied_embed_bf16_gemm_accumulate": "Bf16GemmAccumulate"}

log = logging.getLogger(__name__)


def cpu_has_amx_bf16(cpuinfo: pathlib.Path = pathlib.Path("/proc/cpuinfo")) -> bool:
  """Whether this CPU multiplies bfloat16 on AMX tiles (`amx_bf16` and `amx_tile` among its flags)."""
  try:
    text = cpuinfo.read_text()
  except OSError:
    return False
  flags = next((line.partition(":")[2].split() for line in text.splitlines() if line.startswith("flags")), [])
  return {"amx_bf16", "amx_tile"} <= set(flags)


@functools.cache
def _register() -> str | None:
  """Loads the kernel and registers its FFI targets once; None on success, else why not (one line)."""
  if not LIBRARY.exists():
    return f"{LIBRARY.name} is not built (make install builds it)"
  # MKL's OpenMP threads otherwise spin 200 ms after each call, on the cores XLA's own threads need next.
  os.environ.setdefault("KMP_BLOCKTIME", "0")
  try:
    library = ctypes.cdll.LoadLibrary(str(LIBRARY))
  except OSError as error:
    return f"{LIBRARY.name} does not load: {error}"
  for target, symbol in _TARGETS.items():
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(library, symbol)), platform="cpu")
  return None


@functools.cache
def unavailable_reason() -> str | None:
  """None where `gemm` can run here, else the reason in a line (logged once, at info level)."""
  if os.environ.get(SWITCH, "1") == "0":
    reason = f"{SWITCH}=0"
  elif jax.default_backend() != "cpu":
    reason = f"the backend is {jax.default_backend()}, not the CPU"
  elif not cpu_has_amx_bf16():
    reason = "this CPU has no AMX bfloat16 unit (amx_bf16)"
  else:
    reason = _register()
  if reason is None:
    log.info("bfloat16 matmuls run on AMX (oneMKL's cblas_gemm_bf16bf16f32, tied_embed/fast/amx).")
  else:
    log.info("bfloat16 matmuls run as XLA's dots (widened to float32): %s.", reason)
  return reason


def available() -> bool:
  """Whether `gemm` runs here: a CPU with AMX bfloat16, the kernel built and loaded, not switched off."""
  return unavailable_reason() is None


def gemm(a: jax.Array, b: jax.Array, *, trans_a: bool = False, trans_b: bool = False,
         add_to: jax.Array | None = None) -> jax.Array:
  """op(a) @ op(b) (+ add_to), float32, from bfloat16 operands: (M, K)·(K, N) → (M, N); op transposes if asked.

  a: (M, K), or (K, M) with trans_a; b: (K, N), or (N, K) with trans_b; both cast to bfloat16. add_to: an
  optional (M, N) float32 addend, updated in place (the output aliases it). RuntimeError where not `available()`.
  """
  if not available():  # also registers the kernel's targets on first use
    raise RuntimeError(f"the AMX bfloat16 kernel cannot run here: {unavailable_reason()}")
  a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
  rows = a.shape[1] if trans_a else a.shape[0]
  cols = b.shape[0] if trans_b else b.shape[1]
  result = jax.ShapeDtypeStruct((rows, cols), jnp.float32)
  if add_to is None:
    return jax.ffi.ffi_call("tied_embed_bf16_gemm", result)(a, b, trans_a=trans_a, trans_b=trans_b)
  call = jax.ffi.ffi_call("tied_embed_bf16_gemm_accumulate", result, input_output_aliases={2: 0})
  return call(a, b, add_to.astype(jnp.float32), trans_a=trans_a, trans_b=trans_b)
