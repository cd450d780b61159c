"""fast/choose.py's `kernel_set`, the kernels a run records (WORKDIR/kernels.json): it names what the step's paths run,
no more and no less. The kernels are stood in for by jnp's dots, available everywhere and counted as a step's paths
are traced, so each case runs without the kernels' build; what pays off is the kernels' own rule throughout."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import smoke
from tied_embed.core.model import build_model
from tied_embed.fast import block_dots, choose
from tied_embed.fast.kernels import fused_adamw, gemm

ROUTES = {"float32": "gemm-f32", "bfloat16": "gemm-bf16"}


@pytest.fixture
def traced(monkeypatch):
  """Every kernel runs here (fused AdamW aside); returns the set of kernels that tracing a step's paths called: the
  chunked loss's route (gemm.ROUTES) and "blocks" (a context model's own products, fast/block_dots.py)."""
  called = set()

  def loss_gemm(a, b, *, trans_a=False, trans_b=False, add_to=None, dtype="float32"):
    called.add(ROUTES[jnp.dtype(dtype).name])
    a, b = (a.T if trans_a else a), (b.T if trans_b else b)
    product = jnp.dot(a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)
    return product if add_to is None else add_to + product

  def block_product(lhs, rhs, k):
    called.add("blocks")
    return jnp.tensordot(lhs, rhs, k)

  monkeypatch.setattr(gemm, "available", lambda dtype="float32": True)
  monkeypatch.setattr(gemm, "route", ROUTES.get)
  monkeypatch.setattr(gemm, "gemm", loss_gemm)
  monkeypatch.setattr(block_dots, "_gemm_product", block_product)
  monkeypatch.setattr(fused_adamw, "available", lambda: False)
  return called


def _config(chunk_size=8, dtype="float32", context="none", length=1, d_model=8, vocab_size=32):
  config = smoke.get_config()
  config.loss.chunk_size, config.model.dtype, config.model.context = chunk_size, dtype, context
  config.data.context_length, config.model.d_model, config.model.vocab_size = length, d_model, vocab_size
  return config


def _trace_paths(config, devices: int) -> None:
  """Traces the paths run_step gives `config`'s step on `devices` (shapes only, nothing computed)."""
  graphdef, state = nnx.split(build_model(config))
  paths = choose.paths_function(int(config.loss.chunk_size), str(config.model.dtype), mkl_kernel=devices == 1)
  length, batch = int(config.data.context_length), int(config.train.batch_size)
  ids = np.zeros((batch, length) if length > 1 else (batch,), np.int32)
  jax.eval_shape(lambda state: paths(nnx.merge(graphdef, state), ids, ids), state)


@pytest.mark.parametrize(("settings", "devices", "expected"), [
    ({}, 1, "none"),  # a small float32 table: the chunked loss keeps XLA's dots
    ({"vocab_size": 8192, "d_model": 64}, 1, "gemm-f32"),  # V·D = 2^19: the kernel pays off
    ({"dtype": "bfloat16"}, 1, "gemm-bf16"),  # bfloat16 takes the kernel at any size
    ({"context": "mlp", "length": 4, "d_model": 64}, 1, "blocks"),
    ({"context": "mlp", "length": 4}, 1, "none"),  # a tiny context model: every product is below MIN_PRODUCT
    ({"context": "conv", "length": 4, "d_model": 64}, 1, "none"),  # a convolution, no Linear layer
    ({"context": "transformer", "length": 4, "d_model": 64}, 1, "blocks"),
    ({"context": "mlp", "length": 4, "d_model": 64, "chunk_size": 0}, 1, "none"),  # the story's code alone
    ({"context": "mlp", "length": 4, "d_model": 64, "chunk_size": 0, "dtype": "bfloat16"}, 1, "blocks"),
    ({"context": "mlp", "length": 4, "d_model": 64, "dtype": "bfloat16"}, 8, "none"),  # a mesh: XLA's dots
])
def test_the_recorded_kernel_set_is_what_the_traced_paths_call(traced, settings, devices, expected):
  config = _config(**settings)
  _trace_paths(config, devices)
  recorded = choose.kernel_set(config, nnx.eval_shape(lambda: build_model(config)), devices)
  assert (recorded, ",".join(sorted(traced)) or "none") == (expected, expected)


def test_the_kernel_set_names_what_the_step_runs(monkeypatch):
  config = _config(context="mlp", d_model=64)
  config.train.optimizer = "adamw"
  model = nnx.eval_shape(lambda: build_model(config))  # abstract, as a run's set-up has it
  monkeypatch.setattr(gemm, "available", lambda dtype="float32": True)
  monkeypatch.setattr(gemm, "pays_off", lambda shape, dtype="float32": True)
  monkeypatch.setattr(gemm, "route", ROUTES.get)
  monkeypatch.setattr(block_dots, "available", lambda: True)
  monkeypatch.setattr(fused_adamw, "available", lambda: True)
  monkeypatch.setattr(fused_adamw, "pays_off", lambda params: True)
  assert choose.kernel_set(config, model) == "gemm-f32,adamw"
  assert choose.kernel_set(config, model, devices=8) == "none"  # a mesh: no custom calls
  config.data.context_length = 4  # windows: a context model's own products go to the kernel as well
  assert choose.kernel_set(config, model) == "gemm-f32,blocks,adamw"
  config.loss.chunk_size = 0
  assert choose.kernel_set(config, model) == "adamw"  # the plain paths: XLA's dots throughout
  config.loss.chunk_size, config.data.context_length = 8, 1
  config.model.dtype = "bfloat16"
  assert choose.kernel_set(config, model) == "gemm-bf16,adamw"
  config.loss.chunk_size = 0
  monkeypatch.setattr(fused_adamw, "available", lambda: False)
  assert choose.kernel_set(config, model) == "none"


def test_fused_adamw_is_judged_on_the_params_alone(monkeypatch):
  """A dropout key (uint32) is the model's state, not a parameter: as the update, the record weighs the Params alone."""
  config = _config(context="transformer", length=4, d_model=128, vocab_size=4096)
  config.model.dropout, config.train.optimizer = 0.25, "adamw"
  model = nnx.eval_shape(lambda: build_model(config))
  monkeypatch.setattr(fused_adamw, "available", lambda: True)
  assert "adamw" in choose.kernel_set(config, model).split(",")
