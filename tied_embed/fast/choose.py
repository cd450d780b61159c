"""The step and evaluation a config asks for: the story's plain paths, or the speed paths that give the same answers.

`loss.chunk_size = 0` with `model.dtype = float32` trains on exactly tied_embed/core (full (B, V) logits, dense
path gradients); any other setting picks the chunked, distinct-row loss (each distinct id's logits once, at most
(chunk, V) at a time, in `model.dtype`) and the sparse lookup path. Either way with tied_embed/fast/compilation.py's
XLA options.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

import jax
from flax import nnx

from tied_embed.core import paths as plain_paths
from tied_embed.core import step as step_lib
from tied_embed.fast import chunked_loss, compilation, gradient_buffer, sparse_paths
from tied_embed.fast.kernels import fused_adamw

if TYPE_CHECKING:
  import ml_collections

log = logging.getLogger(__name__)


def data_shards(state_shardings) -> int:
  """How many ways the batch is split: the `data` axis of the mesh a pytree of NamedShardings lives on (1 if None)."""
  leaves = jax.tree.leaves(state_shardings)
  return int(leaves[0].mesh.shape["data"]) if leaves else 1


def mesh_devices(state_shardings) -> int:
  """How many devices the state lives on: the size of the mesh of a pytree of NamedShardings (1 if None)."""
  leaves = jax.tree.leaves(state_shardings)
  return int(leaves[0].mesh.size) if leaves else 1


def paths_function(chunk_size: int, compute_dtype: str = "float32", shards: int = 1,
                   mkl_kernel: bool = True) -> step_lib.PathsFn:
  """paths_fn(model, ids (B,), next_ids (B,)) for these loss settings; `shards` divides B (data shards).
  `mkl_kernel`: the chunked loss's dots on oneMKL where it runs (tied_embed/fast/kernels); False on a mesh of several
  devices, where XLA cannot partition the kernel's custom call."""
  if chunk_size == 0 and compute_dtype == "float32":  # the story's code alone: full logits, dense paths
    return plain_paths.path_gradients
  if chunk_size and not mkl_kernel:
    log.info("The chunked loss's matmuls run as XLA's dots: the oneMKL kernel runs on one device only.")

  def fast_paths(model, ids: jax.Array, next_ids: jax.Array) -> sparse_paths.PathGradients:
    # The hidden vectors are looked-up rows (times W), equal wherever the ids are, so the chunked loss forms the
    # logits of each distinct id once per data shard: exact, and cheaper by the repeats in the batch.
    if chunk_size == 0:
      loss_fn = functools.partial(chunked_loss.full_cross_entropy, compute_dtype=compute_dtype)
    else:
      def loss_fn(hidden, table, targets):
        return chunked_loss.chunked_cross_entropy(
            hidden, table, targets, chunk_size, row_keys=ids, groups=shards, compute_dtype=compute_dtype,
            mkl_kernel=mkl_kernel,
        )
    return sparse_paths.path_gradients(model, ids, next_ids, loss_fn)

  return fast_paths


SPLIT_CHECK_LOGITS_BYTES = 64 * 2**20  # the plain check's (S, V) float32 logits: at most this (its grad doubles it)


def split_check_tokens(batch_size: int, vocab_size: int, shards: int = 1) -> int | None:
  """None (check the whole batch) if its (B, V) logits fit SPLIT_CHECK_LOGITS_BYTES, else S < B pairs (S % shards 0)."""
  fits = SPLIT_CHECK_LOGITS_BYTES // (4 * vocab_size)
  if batch_size <= fits:
    return None
  return max(fits // shards, 1) * shards


def make_train_step(
    graphdef: nnx.GraphDef, chunk_size: int, state_shardings=None, lookup_grad_scale: float = 1.0,
    projection_grad_scale: float = 1.0, compute_dtype: str = "float32", split_check: int | None = None,
    train_config: ml_collections.ConfigDict | None = None,
) -> step_lib.TrainStep:
  """The train step these settings pick: their paths and update, the XLA options, the gradient in a kept buffer.

  jit(state, ids (B,), next_ids (B,), *, with_stats=False) → (new state, metrics), running
  `tied_embed.core.step.make_train_step`'s step (tied_embed/fast/gradient_buffer.py). `split_check`: the pairs the
  log step's split check uses (`split_check_tokens`; None: the whole batch). `train_config`: the config's `train`
  section; with `optimizer = "adamw"` on one device the update runs AdamW's fused kernel where it pays off
  (tied_embed/fast/kernels), else the optimizer's own update.
  """
  one_device = mesh_devices(state_shardings) == 1
  fused = train_config is not None and train_config.optimizer == "adamw" and one_device
  step_fn = step_lib.make_step_function(
      graphdef,
      paths_function(chunk_size, compute_dtype, data_shards(state_shardings), one_device),
      lookup_grad_scale=lookup_grad_scale, projection_grad_scale=projection_grad_scale,
      split_check_tokens=split_check,
      apply_update=fused_adamw.make_update(train_config) if fused else step_lib.optimizer_update,
  )
  return gradient_buffer.StepWithGradientBuffer(
      graphdef, step_fn, state_shardings=state_shardings, compiler_options=compilation.compiler_options()
  )
