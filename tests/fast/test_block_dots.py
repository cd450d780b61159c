"""fast/block_dots.py: a context model's own products on the GEMM kernel, against XLA's dots and the plain path.

`kernel_dot_general` takes the Linear-shaped float32 products to the kernel and leaves every other product to
`jax.lax.dot_general`; the speed paths of a transformer with its blocks' products on the kernel give the loss and every
gradient of the paths without it (which tests/core compares with the plain path) to float32 rounding, and the model
they were given keeps its own products. Skipped where the float32 kernel does not run (the CPU, the build)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from benchmarks import context_step
from tied_embed.core import paths as plain_paths
from tied_embed.core.model import build_model
from tied_embed.fast import block_dots, choose

needs_f32_kernel = pytest.mark.skipif(not block_dots.available(), reason="float32 kernel not usable here")
BOUND = 2e-5  # float32 sums in another order: relative, in the max norm over each array
TINY = {"model.vocab_size": 64, "model.d_model": 16, "model.layers": 2, "data.context_length": 8,
        "train.batch_size": 4}


def _close(actual, expected, bound=BOUND) -> None:
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  scale = max(float(np.max(np.abs(expected))), 1e-30)
  assert float(np.max(np.abs(actual - expected))) <= bound * scale


@needs_f32_kernel
@pytest.mark.parametrize(("lhs_shape", "rhs_shape", "k"), [((6, 5, 16), (16, 12), 1),  # nnx.Linear
                                                            ((6, 5, 16), (16, 4, 3), 1),  # q/k/v: (D, H, D/H)
                                                            ((6, 5, 4, 3), (4, 3, 16), 2)])  # out: (H, D/H, D)
def test_the_kernels_product_and_its_gradients_are_the_dots(monkeypatch, lhs_shape, rhs_shape, k):
  monkeypatch.setattr(block_dots, "MIN_PRODUCT", 0)
  rng = np.random.default_rng(0)
  lhs, rhs = (jnp.asarray(rng.normal(size=shape).astype(np.float32)) for shape in (lhs_shape, rhs_shape))
  dims = ((tuple(range(len(lhs_shape) - k, len(lhs_shape))), tuple(range(k))), ((), ()))
  cotangent = jnp.asarray(rng.normal(size=lhs_shape[:-k] + rhs_shape[k:]).astype(np.float32))

  def loss(dot_general):
    return lambda a, b: jnp.sum(dot_general(a, b, dims) * cotangent)

  kernel = jax.jit(jax.value_and_grad(loss(block_dots.kernel_dot_general), argnums=(0, 1)))
  assert "tied_embed_f32_gemm" in kernel.lower(lhs, rhs).as_text()  # the kernel, forward and backward
  (value, grads), (expected_value, expected_grads) = kernel(lhs, rhs), jax.value_and_grad(
      loss(jax.lax.dot_general), argnums=(0, 1))(lhs, rhs)
  _close(value, expected_value)
  for grad, expected in zip(grads, expected_grads, strict=True):
    _close(grad, expected)


def test_other_products_stay_xlas_dots():
  """Batch axes (attention's scores), leading contractions and small products are lax.dot_general's own."""
  a, b = jnp.ones((2, 3, 4)), jnp.ones((2, 4, 5))
  batched = (((2,), (1,)), ((0,), (0,)))
  text = jax.jit(lambda a, b: block_dots.kernel_dot_general(a, b, batched)).lower(a, b).as_text()
  assert "tied_embed" not in text
  small = jax.jit(lambda a: block_dots.kernel_dot_general(a, jnp.ones((4, 5)), (((2,), (0,)), ((), ())))).lower(a)
  assert "tied_embed" not in small.as_text()  # 2·3·4·5 multiply-adds: below MIN_PRODUCT
  assert block_dots._trailing_by_leading(jnp.ones((4, 3)), jnp.ones((4, 5)), (((0,), (0,)), ((), ()))) == 0


@needs_f32_kernel
@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_the_speed_paths_with_the_blocks_on_the_kernel_give_the_paths_without(monkeypatch, dropout):
  monkeypatch.setattr(block_dots, "MIN_PRODUCT", 0)
  config = context_step.bench_config(**TINY, **{"model.dropout": dropout})
  model = build_model(config)
  model.train_at(jnp.int32(3))  # with dropout: this step's masks, the same in both
  ids, next_ids = (jnp.asarray(part) for part in context_step.window_batch(config))
  graphdef, state = nnx.split(model)

  def paths(kernel: bool):
    fn = choose.paths_function(chunk_size=8, mkl_kernel=kernel)
    return jax.jit(lambda state, ids, next_ids: fn(nnx.merge(graphdef, state), ids, next_ids))

  assert paths(True).lower(state, ids, next_ids).as_text().count("tied_embed_f32_gemm") > 20  # the blocks' products
  fast, without = paths(True)(state, ids, next_ids), paths(False)(state, ids, next_ids)
  _close(fast.loss, without.loss, 1e-6)
  _close(fast.lookup_rows, without.lookup_rows)
  _close(fast.projection, without.projection)
  # each Param's gradient to BOUND of the largest (the key bias's is ~0 exactly: softmax ignores it, leaving noise)
  largest = max(float(jnp.max(jnp.abs(leaf))) for leaf in jax.tree.leaves(without.hidden))
  for grad, expected in zip(jax.tree.leaves(fast.hidden), jax.tree.leaves(without.hidden), strict=True):
    assert float(jnp.max(jnp.abs(grad - expected))) <= BOUND * largest
  plain = nnx.jit(plain_paths.path_gradients)(model, ids, next_ids)  # and the story's dense paths
  _close(fast.loss, plain.loss, 1e-6)
  _close(fast.projection, plain.projection, 1e-4)


def test_the_model_given_keeps_its_own_products():
  model = build_model(context_step.bench_config(**TINY))
  copy = block_dots.with_kernel_dots(model)
  assert copy.blocks[0].mlp_in.dot_general is block_dots.kernel_dot_general
  assert copy.blocks[0].attention.out.dot_general is block_dots.kernel_dot_general
  assert model.blocks[0].mlp_in.dot_general is not block_dots.kernel_dot_general
  assert model.blocks[0].attention.query.dot_general is not block_dots.kernel_dot_general
  assert copy.blocks[0].mlp_in.kernel[...] is model.blocks[0].mlp_in.kernel[...]  # the same arrays
