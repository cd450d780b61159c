"""The oneMKL kernel (tied_embed/fast/kernels/gemm.py): its float32 and bfloat16 GEMMs against NumPy float64 (on
bfloat16-rounded operands for bfloat16), the chunked loss through it against the float64 closed form, and the
fallback to XLA's dots where it cannot run.

On a CPU without AMX (bfloat16) or not an Intel one with AVX-512 (float32), or where the kernel is not built, the
kernel's own tests for that dtype are skipped and the fallback tests still run. The bfloat16 GEMM's reference
rounds the operands to bfloat16 exactly as the kernel receives them and sums in float64, so the only difference left
is float32 accumulation: KERNEL_BOUND (1e-5 relative, in the max norm over the output) is float32's, far below
bfloat16's own rounding (2^-9 ≈ 2e-3), so a kernel that rounded its sums or its output to bfloat16 fails.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import numpy_loss_and_grads, random_problem

from tied_embed.fast.chunked_loss import chunked_cross_entropy
from tied_embed.fast.kernels import gemm
from tied_embed.fast.kernels.library import GEMM, GEMM_ONEDNN

KERNEL_BOUND = 1e-5  # float32 accumulation of bfloat16 products (see the module docstring)
BF16_BOUND = 2e-2  # the bfloat16 loss and gradients against float64, as tests/fast/test_precision.py bounds them

needs_kernel = pytest.mark.skipif(
    not gemm.available("bfloat16"), reason=f"bfloat16 kernel not usable: {gemm.unavailable_reason('bfloat16')}")
needs_f32_kernel = pytest.mark.skipif(
    not gemm.available("float32"), reason=f"float32 kernel not usable: {gemm.unavailable_reason('float32')}")
F32_KERNEL_BOUND = 1e-6  # float32 sums of float32 products, against float64: a few ulps of float32 (2^-24 ≈ 6e-8)


def _bf16(array: np.ndarray) -> np.ndarray:
  """`array` rounded to bfloat16 (as the kernel's operands are), back in float64."""
  return np.asarray(jnp.asarray(array).astype(jnp.bfloat16), np.float64)


def _max_relative(actual, expected) -> float:
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  return float(np.abs(actual - expected).max() / np.abs(expected).max())


@needs_kernel
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm_is_the_float64_product_of_the_bfloat16_operands(trans_a, trans_b):
  rng = np.random.default_rng(0)
  m, k, n = 37, 19, 23  # odd sizes: no tile divides them
  a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
  b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
  got = jax.jit(lambda a, b: gemm.gemm(a, b, trans_a=trans_a, trans_b=trans_b, dtype="bfloat16"))(a, b)
  want = (_bf16(a).T if trans_a else _bf16(a)) @ (_bf16(b).T if trans_b else _bf16(b))
  assert got.shape == (m, n) and got.dtype == jnp.float32
  assert _max_relative(got, want) < KERNEL_BOUND
  # and bfloat16 rounding is visible: the float64 product of the unrounded operands is ~1e-3 away
  exact = (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)
  assert _max_relative(got, exact) > 10 * KERNEL_BOUND


@needs_kernel
def test_gemm_accumulates_onto_its_addend():
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((5, 8)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
  addend = rng.standard_normal((5, 3)).astype(np.float32)
  got = jax.jit(lambda a, b, c: gemm.gemm(a, b, add_to=c, dtype="bfloat16"))(a, b, addend)
  assert _max_relative(got, _bf16(a) @ _bf16(b) + addend.astype(np.float64)) < KERNEL_BOUND
  # donated, as the step's loop donates d table: the output is the addend's own buffer, added to in place
  in_place = jax.jit(lambda a, b, c: gemm.gemm(a, b, add_to=c, dtype="bfloat16"), donate_argnums=2)
  got = in_place(a, b, jnp.asarray(addend))
  assert _max_relative(got, _bf16(a) @ _bf16(b) + addend.astype(np.float64)) < KERNEL_BOUND
  assert _max_relative(in_place(a, b, got), 2 * (_bf16(a) @ _bf16(b)) + addend.astype(np.float64)) < KERNEL_BOUND


@needs_kernel
def test_the_bfloat16_chunked_loss_runs_the_kernel_and_stays_within_bfloat16_of_float64():
  x, table, targets = random_problem(48, 120, 16, seed=5)
  ids = np.random.default_rng(6).integers(0, 30, 48).astype(np.int32)
  x = table[ids]  # looked-up rows, as the distinct-rows path requires

  def loss(x, e):
    return chunked_cross_entropy(x, e, targets, 8, row_keys=ids, compute_dtype="bfloat16")

  hlo = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, table).as_text()
  targets_called = sorted(set(re.findall(r'custom_call @(tied_embed_[a-z0-9_]+)', hlo)))
  # the logits on oneDNN, dx on oneMKL, d table added in place on oneMKL
  assert targets_called == ["tied_embed_bf16_gemm", "tied_embed_bf16_gemm_accumulate", "tied_embed_bf16_gemm_onednn"]
  value, grads = jax.value_and_grad(loss, argnums=(0, 1))(x, table)
  reference = numpy_loss_and_grads(x, table, targets)
  errors = [np.linalg.norm(np.asarray(g, np.float64) - w) / np.linalg.norm(w)
            for g, w in zip((value, *grads), reference, strict=True)]
  assert max(errors) < BF16_BOUND, errors


@needs_kernel
@pytest.mark.parametrize("by_token", [False, True])
def test_the_chunked_loss_forms_the_logits_in_the_orientation_its_route_asks_and_stays_in_bounds(monkeypatch, by_token):
  """(V, C) logits, E·xᵀ, or (C, V), x·Eᵀ (oneDNN's faster bfloat16 orientation): the same loss and gradients."""
  monkeypatch.setattr(gemm, "LOGITS_BY_TOKEN", {gemm.route("bfloat16")} if by_token else set())
  x, table, targets = random_problem(40, 120, 16, seed=8)

  def loss(x, e):
    return chunked_cross_entropy(x, e, targets, 8, compute_dtype="bfloat16")

  hlo = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, table).as_text()
  logits = re.findall(r"custom_call @tied_embed_bf16_gemm_onednn\(.*-> tensor<(\d+x\d+)xf32>", hlo)
  assert logits and set(logits) == {"8x120" if by_token else "120x8"}  # C = 8 tokens, V = 120
  value, grads = jax.value_and_grad(loss, argnums=(0, 1))(x, table)
  for got, want in zip((value, *grads), numpy_loss_and_grads(x, table, targets), strict=True):
    assert np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want) < BF16_BOUND


@needs_kernel
@needs_f32_kernel
def test_a_route_in_logits_by_token_turns_its_own_dtypes_logits_only(monkeypatch):
  monkeypatch.setattr(gemm, "FLOAT32_MIN_TABLE_SIZE", 0)  # the float32 kernel at this small size too
  monkeypatch.setattr(gemm, "LOGITS_BY_TOKEN", {gemm.route("bfloat16")})
  x, table, targets = random_problem(40, 120, 16, seed=8)
  hlo = jax.jit(lambda x, e: chunked_cross_entropy(x, e, targets, 8)).lower(x, table).as_text()
  logits = re.findall(r"custom_call @tied_embed_f32_gemm\(.*-> tensor<(\d+x\d+)xf32>", hlo)
  assert logits == ["120x8"]  # float32's logits stay (V, C): only the bfloat16 route is named


def test_only_onednns_bfloat16_route_forms_the_logits_by_token():
  # measured faster there (docs/performance.md); on the other routes x·Eᵀ is unmeasured or no faster
  assert gemm.LOGITS_BY_TOKEN == {"gemm-bf16-onednn"} and gemm.LOGITS_BY_TOKEN <= set(gemm.ROUTES)


def test_the_fallback_keeps_xlas_dots_and_the_same_bounds():
  """mkl_kernel=False (what a mesh, or a CPU without AMX, gets) compiles no custom call and stays in bounds."""
  x, table, targets = random_problem(40, 90, 8, seed=7)

  def loss(x, e):
    return chunked_cross_entropy(x, e, targets, 8, compute_dtype="bfloat16", mkl_kernel=False)

  hlo = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, table).as_text()
  assert "custom_call" not in hlo
  # every dot of the fallback (logits, d table, dx) takes bfloat16 operands to a float32 result, as asked
  dots = re.findall(r"dot_general .*: \(tensor<[\dx]+x(\w+)>, tensor<[\dx]+x(\w+)>\) -> tensor<[\dx]+x(\w+)>", hlo)
  assert len(dots) == 6 and set(dots) == {("bf16", "bf16", "f32")}, dots
  value, grads = jax.value_and_grad(loss, argnums=(0, 1))(x, table)
  reference = numpy_loss_and_grads(x, table, targets)
  for got, want in zip((value, *grads), reference, strict=True):
    assert np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want) < BF16_BOUND


@needs_f32_kernel
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_the_float32_gemm_is_the_float64_product(trans_a, trans_b):
  rng = np.random.default_rng(10)
  m, k, n = 41, 29, 17
  a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
  b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
  addend = rng.standard_normal((m, n)).astype(np.float32)
  product = jax.jit(lambda a, b: gemm.gemm(a, b, trans_a=trans_a, trans_b=trans_b))(a, b)
  added = jax.jit(lambda a, b, c: gemm.gemm(a, b, trans_a=trans_a, trans_b=trans_b, add_to=c))(a, b, addend)
  want = (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)
  assert product.shape == (m, n) and product.dtype == jnp.float32
  assert _max_relative(product, want) < F32_KERNEL_BOUND
  assert _max_relative(added, want + addend) < F32_KERNEL_BOUND
  # a kernel that rounded its operands to bfloat16 would be ~1e-3 off
  assert _max_relative(jax.jit(lambda a, b: gemm.gemm(a, b, trans_a=trans_a, trans_b=trans_b, dtype="bfloat16"))(
      a, b), want) > 100 * F32_KERNEL_BOUND


@needs_f32_kernel
def test_the_float32_chunked_loss_runs_the_kernel_and_matches_float64(monkeypatch: pytest.MonkeyPatch):
  monkeypatch.setattr(gemm, "FLOAT32_MIN_TABLE_SIZE", 0)  # the small problem's table, as if it were large
  x, table, targets = random_problem(48, 120, 16, seed=11)
  ids = np.random.default_rng(12).integers(0, 30, 48).astype(np.int32)
  x = table[ids]

  def loss(x, e):
    return chunked_cross_entropy(x, e, targets, 8, row_keys=ids)

  assert "tied_embed_f32_gemm" in jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, table).as_text()
  value, grads = jax.value_and_grad(loss, argnums=(0, 1))(x, table)
  reference = numpy_loss_and_grads(x, table, targets)
  errors = [np.linalg.norm(np.asarray(g, np.float64) - w) / np.linalg.norm(w)
            for g, w in zip((value, *grads), reference, strict=True)]
  assert max(errors) < 1e-5, errors


@needs_f32_kernel
def test_float32_takes_the_kernel_from_the_measured_table_size_on():
  def program(vocab_size: int, d_model: int) -> str:
    table = jax.ShapeDtypeStruct((vocab_size, d_model), jnp.float32)
    x = jax.ShapeDtypeStruct((64, d_model), jnp.float32)
    targets = jax.ShapeDtypeStruct((64,), jnp.int32)
    return jax.jit(jax.grad(lambda x, e, t: chunked_cross_entropy(x, e, t, 16), argnums=(0, 1))).lower(
        x, table, targets).as_text()

  assert gemm.FLOAT32_MIN_TABLE_SIZE == 2**19
  assert "tied_embed_f32_gemm" in program(8192, 64)  # 2^19 entries: the kernel
  assert "custom_call" not in program(8192, 63)  # one column fewer: XLA's dots
  assert not gemm.pays_off((1024, 32)) and gemm.pays_off((1024, 32), "bfloat16")  # bfloat16 at any size


def test_the_float32_fallback_compiles_no_custom_call():
  x, table, targets = random_problem(16, 30, 4, seed=8)
  lowered = jax.jit(jax.grad(lambda x: chunked_cross_entropy(x, table, targets, 4, mkl_kernel=False))).lower(x)
  assert "custom_call" not in lowered.as_text()


@pytest.mark.parametrize(("vendor", "flags", "float32", "bfloat16"), [
    ("AuthenticAMD", "fpu avx2 avx512f avx512_bf16", "gemm-f32-onednn", "gemm-bf16-onednn"),  # Zen 4
    ("AuthenticAMD", "fpu avx2 fma", None, None),  # Zen 3: AVX2 only
    ("GenuineIntel", "avx512f avx512_bf16 amx_bf16 amx_tile", "gemm-f32", "gemm-bf16"),  # Sapphire Rapids
    ("GenuineIntel", "avx512f avx512_bf16 amx_tile", "gemm-f32", "gemm-bf16-onednn"),  # tiles without bf16: no AMX
    ("GenuineIntel", "avx512f avx512bw", "gemm-f32", None),  # Skylake-X: no bfloat16 instructions
    ("GenuineIntel", "fpu avx2 fma", None, None),
])
def test_the_route_follows_the_instruction_sets(tmp_path: pathlib.Path, vendor, flags, float32, bfloat16):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text(f"processor\t: 0\nvendor_id\t: {vendor}\nflags\t\t: {flags}\nprocessor\t: 1\n")
  assert (gemm.route("float32", cpuinfo), gemm.route("bfloat16", cpuinfo)) == (float32, bfloat16)
  assert gemm.route("float32", tmp_path / "absent") is None and gemm.route("bfloat16", tmp_path / "absent") is None


def test_the_route_reads_the_cpus_flags_once_per_process_not_on_every_trace(tmp_path: pathlib.Path, monkeypatch):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: avx512f avx512_bf16\n")
  reads = []
  field = gemm.library.cpuinfo_field
  monkeypatch.setattr(gemm.library, "cpuinfo_field", lambda *args: reads.append(args) or field(*args))
  assert [gemm.route("bfloat16", cpuinfo) for _ in range(3)] == ["gemm-bf16-onednn"] * 3
  assert len(reads) == 1


def test_each_route_registers_its_own_library():
  assert {library for _, (library, _) in gemm.ROUTES["gemm-bf16-onednn"][1].items()} == {GEMM_ONEDNN}
  assert {library for _, (library, _) in gemm.ROUTES["gemm-f32-onednn"][1].items()} == {GEMM_ONEDNN}
  assert {library for _, (library, _) in gemm.ROUTES["gemm-f32"][1].items()} == {GEMM}
  amx = gemm.ROUTES["gemm-bf16"][1]
  assert amx["tied_embed_bf16_gemm_onednn"][0] == GEMM_ONEDNN and amx["tied_embed_bf16_gemm"][0] == GEMM
  for _, targets in gemm.ROUTES.values():  # every route serves every target name the loss calls for its dtype
    prefix = next(iter(targets)).rsplit("_gemm", 1)[0] + "_gemm"
    assert {prefix, f"{prefix}_accumulate"} <= set(targets)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_switch_turns_the_kernel_off(monkeypatch: pytest.MonkeyPatch, dtype):
  monkeypatch.setattr(gemm, "FLOAT32_MIN_TABLE_SIZE", 0)  # so that only the switch keeps float32 off the kernel
  monkeypatch.setenv(gemm.SWITCH, "0")
  gemm.unavailable_reason.cache_clear()
  try:
    assert not gemm.available(dtype)
    assert gemm.unavailable_reason(dtype) == f"{gemm.SWITCH}=0"
    x, table, targets = random_problem(16, 30, 4, seed=9)
    lowered = jax.jit(jax.grad(
        lambda x: chunked_cross_entropy(x, table, targets, 4, compute_dtype=dtype))).lower(x).as_text()
    assert "custom_call" not in lowered
  finally:
    monkeypatch.delenv(gemm.SWITCH)
    gemm.unavailable_reason.cache_clear()


def _train_step_program(dtype: str = "bfloat16") -> str:
  """The lowered `dtype` train step of configs/smoke.py with the chunked loss, as run_step.make_run_step makes it."""
  from flax import nnx  # noqa: PLC0415
  from helpers import smoke_with  # noqa: PLC0415

  from tied_embed.core import optim  # noqa: PLC0415
  from tied_embed.core.model import build_model  # noqa: PLC0415
  from tied_embed.train import run_step  # noqa: PLC0415

  config = smoke_with("model.dtype", dtype)
  graphdef, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  ids = jnp.zeros((int(config.train.batch_size),), jnp.int32)
  step = run_step.make_run_step(graphdef, 8, compute_dtype=dtype)
  return step.lower(state, ids, ids, with_stats=False).as_text()


@needs_kernel
def test_the_bfloat16_train_step_on_one_device_runs_the_kernel():
  assert "tied_embed_bf16_gemm" in _train_step_program("bfloat16")


@needs_f32_kernel
def test_the_float32_train_step_on_one_device_runs_the_kernel(monkeypatch: pytest.MonkeyPatch):
  monkeypatch.setattr(gemm, "FLOAT32_MIN_TABLE_SIZE", 0)  # the smoke config's table, as if it were large
  assert "tied_embed_f32_gemm" in _train_step_program("float32")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_mesh_of_several_devices_keeps_xlas_dots(monkeypatch: pytest.MonkeyPatch, dtype):
  """XLA cannot partition the kernel's custom call: a step whose state spans several devices must not contain it."""
  from tied_embed.fast import choose  # noqa: PLC0415

  monkeypatch.setattr(gemm, "FLOAT32_MIN_TABLE_SIZE", 0)  # so that only the mesh keeps float32 off the kernel

  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
  one_device = {"table": jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())}
  assert choose.mesh_devices(one_device) == 1 and choose.mesh_devices(None) == 1
  monkeypatch.setattr(choose, "mesh_devices", lambda shardings: 8)  # as if the state spanned a 4x2 mesh
  assert "custom_call" not in _train_step_program(dtype)


@needs_f32_kernel
def test_a_float32_run_loads_only_its_routes_library():
  # oneDNN alone makes 17 MiB resident, which the float32 step's memory (at most PyTorch's) has no room for where
  # oneMKL runs the dots; where oneDNN does, oneMKL (hundreds of MiB mapped) stays out.
  script = (
      "import jax.numpy as jnp, pathlib\n"
      "from tied_embed.fast.kernels import gemm\n"
      "out = gemm.gemm(jnp.ones((4, 3)), jnp.ones((3, 2)))\n"
      "assert float(out[0, 0]) == 3.0\n"
      "maps = pathlib.Path('/proc/self/maps').read_text()\n"
      "print('_gemm.so' in maps, 'libdnnl' in maps, 'libmkl' in maps)\n"
  )
  done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr
  onednn = gemm.route("float32") == "gemm-f32-onednn"
  assert done.stdout.split() == (["False", "True", "False"] if onednn else ["True", "False", "True"])
