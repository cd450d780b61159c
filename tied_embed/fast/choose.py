"""The paths a config's step runs on: `loss.chunk_size = 0` in float32 trains on exactly tied_embed/core; any other
setting picks the speed paths with the same answers (the chunked, distinct-row loss, the sparse lookup path, a context
model's own matmuls on the GEMM kernel), jitted with XLA's options and a kept gradient buffer. `kernel_set` names the
kernels these choices run, by the same predicates."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

import jax
import numpy as np
from flax import nnx

from tied_embed.core import paths as plain_paths
from tied_embed.core import step as step_lib
from tied_embed.fast import block_dots, chunked_loss, compilation, sparse_paths
from tied_embed.fast.kernels import fused_adamw, gemm

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


def takes_speed_paths(chunk_size: int, compute_dtype: str) -> bool:
  """Whether a step with these loss settings runs the speed paths; False: exactly tied_embed/core's code (full
  float32 logits, dense paths)."""
  return chunk_size != 0 or compute_dtype != "float32"


def blocks_on_kernel(model, tokens: int, mkl_kernel: bool) -> bool:
  """Whether the speed paths put a context model's own products on the GEMM kernel (fast/block_dots.py) for a batch
  of `tokens` window rows (B·L): on one device (`mkl_kernel`), where the kernel runs and some product pays off."""
  return mkl_kernel and block_dots.available() and block_dots.takes_any(model, tokens)


def paths_function(chunk_size: int, compute_dtype: str = "float32", shards: int = 1,
                   mkl_kernel: bool = True) -> step_lib.PathsFn:
  """paths_fn(model, ids (B,), next_ids (B,)) for these loss settings; `shards` divides B (data shards).
  `mkl_kernel`: the chunked loss's dots, and a context model's own (fast/block_dots.py), on the GEMM kernel where it
  runs; False on a mesh (XLA cannot partition the call)."""
  if not takes_speed_paths(chunk_size, compute_dtype):
    return plain_paths.path_gradients
  if chunk_size and not mkl_kernel:
    log.info("The chunked loss's matmuls run as XLA's dots: the oneMKL kernel runs on one device only.")

  def fast_paths(model, ids: jax.Array, next_ids: jax.Array) -> sparse_paths.PathGradients:
    # Pairs (B,): each hidden vector is a function of its id alone (the row, times W), equal where the ids are, so
    # each distinct id's logits are formed once a shard. Windows (B, L) carry context: no such promise, every row.
    if chunk_size == 0:
      loss_fn = functools.partial(chunked_loss.full_cross_entropy, compute_dtype=compute_dtype)
    else:
      row_keys = ids if ids.ndim == 1 else None
      loss_fn = functools.partial(chunked_loss.chunked_cross_entropy, chunk_size=chunk_size, row_keys=row_keys,
                                  groups=shards, compute_dtype=compute_dtype, mkl_kernel=mkl_kernel)
    if ids.ndim > 1 and blocks_on_kernel(model, ids.size, mkl_kernel):  # windows (B, L): a context model's own
      model = block_dots.with_kernel_dots(model)
    return sparse_paths.path_gradients(model, ids, next_ids, loss_fn)

  return fast_paths


def kernel_set(config: ml_collections.ConfigDict, model: nnx.Module, devices: int = 1) -> str:
  """The kernels `config`'s step runs, as the paths above and the update pick them, for `model` (its arrays may be
  abstract): e.g. "gemm-f32,blocks,adamw" (gemm.ROUTES), "none". A run keeps it (fast/kernels/in_use.py)."""
  if devices != 1:  # a mesh: XLA cannot partition a custom call
    return "none"
  chunk_size, dtype = int(config.loss.chunk_size), str(config.model.dtype)
  table = (int(config.model.vocab_size), int(config.model.d_model))
  tokens = int(config.train.batch_size) * int(config.data.context_length)
  names = []
  if chunk_size > 0 and gemm.takes(table, dtype):  # the chunked loss's dots
    names.append(gemm.route(dtype))
  windows = int(config.data.context_length) > 1
  if takes_speed_paths(chunk_size, dtype) and windows and blocks_on_kernel(model, tokens, mkl_kernel=True):
    names.append("blocks")
  params = nnx.state(model, nnx.Param)  # as the update reads them: a dropout key is state, not a parameter
  if config.train.optimizer == "adamw" and fused_adamw.takes(params):
    names.append("adamw")
  return ",".join(names) or "none"


SPLIT_CHECK_LOGITS_BYTES = 64 * 2**20  # the plain check's (S, V) float32 logits: at most this (its grad doubles it)


def split_check_tokens(batch_size: int, vocab_size: int, shards: int = 1) -> int | None:
  """None (check the whole batch) if its (B, V) logits fit SPLIT_CHECK_LOGITS_BYTES, else S < B pairs (S % shards 0)."""
  fits = SPLIT_CHECK_LOGITS_BYTES // (4 * vocab_size)
  return None if batch_size <= fits else max(fits // shards, 1) * shards


def model_params(graphdef: nnx.GraphDef, state: nnx.State) -> nnx.State:
  """The model's Params out of a train state's pytree, whatever its leaves (arrays, abstract arrays, shardings)."""
  return nnx.state(nnx.merge(graphdef, state).model, nnx.Param)


class StepWithGradientBuffer:
  """jit(state, ids, next_ids, *, with_stats=False) → (new state, metrics), donating `state`: `step_fn` writing its
  gradient into the buffer the last call returned, since XLA:CPU frees a step's temporaries and faulting the (V, D)
  gradient's pages in again costs ~70 ms a step at GPT-2's shape."""

  def __init__(self, graphdef: nnx.GraphDef, step_fn: step_lib.StepFunction, state_shardings=None):
    self._graphdef = graphdef
    self._buffer = None
    self._compiled: set = set()  # the argument signatures this object has compiled for (see `__call__`)

    def step(state, ids, next_ids, buffer, with_stats=False):
      del buffer  # only its memory is wanted: the new gradient is returned in it
      return step_fn(state, ids, next_ids, with_stats)

    gradients = None if state_shardings is None else model_params(graphdef, state_shardings)
    out_shardings = None if state_shardings is None else (state_shardings, None, gradients)
    # keep_unused: jit would otherwise drop the unread buffer from the program, and with it the donation.
    self._jitted = jax.jit(step, donate_argnums=(0, 3), static_argnames="with_stats", out_shardings=out_shardings,
                           compiler_options=compilation.compiler_options(), keep_unused=True)

  def lower(self, state, ids, next_ids, with_stats: bool = False):
    """The lowered step for these arguments (arrays, or `jax.ShapeDtypeStruct`s for compiling ahead)."""
    return self._jitted.lower(state, ids, next_ids, self._abstract_buffer(state), with_stats=with_stats)

  def _abstract_buffer(self, state) -> nnx.State:
    # Placed as the Params are (abstract: committed): a committed buffer by uncommitted Params recompiles at the call.
    def abstract(param):
      sharding = param.sharding if getattr(param, "committed", True) else None
      return jax.ShapeDtypeStruct(param.shape, param.dtype, sharding=sharding)

    return jax.tree.map(abstract, model_params(self._graphdef, state))

  def _buffer_for(self, state) -> nnx.State:
    # None before the first call; deleted if a call donated it and then failed before returning the new one.
    if self._buffer is None or any(leaf.is_deleted() for leaf in jax.tree.leaves(self._buffer)):
      # Host zeros, transferred: jnp.zeros and jnp.asarray would each compile a program after the trainer compiled
      # ahead. `device_put` with no sharding leaves the buffer uncommitted, as jit places the Params beside it.
      self._buffer = jax.tree.map(lambda buffer: jax.device_put(np.zeros(buffer.shape, buffer.dtype), buffer.sharding),
                                  self._abstract_buffer(state))
    return self._buffer

  def __call__(self, state, ids, next_ids, with_stats: bool = False):
    self._compile_once(state, ids, next_ids, with_stats)
    buffer = self._buffer_for(state)
    new_state, metrics, self._buffer = self._jitted(state, ids, next_ids, buffer, with_stats=with_stats)
    return new_state, metrics

  def _compile_once(self, state, ids, next_ids, with_stats: bool) -> None:
    """Compiles the step for a new signature of these arguments before running it, then hands the compiler's freed
    heap back to the OS: jit compiling inside the call would leave that heap (~90 MiB) held under every step after.
    Before the first call makes the (V, D) gradient buffer, so the two never add up. A signature compiled ahead
    (`compilation.compile_ahead`) comes back from jit's cache without compiling again."""
    def signature(leaf):  # what jit keys a compiled program by: shape, dtype, weak type, and a committed placement
      committed = getattr(leaf, "committed", False)  # a NumPy batch is placed by jit as an uncommitted array is
      return leaf.shape, leaf.dtype, getattr(leaf, "weak_type", False), leaf.sharding if committed else None

    arguments = (state, ids, next_ids)  # the buffer follows from the state's Params
    key = (with_stats, jax.tree.structure(arguments), tuple(signature(leaf) for leaf in jax.tree.leaves(arguments)))
    if key not in self._compiled:
      self.lower(state, ids, next_ids, with_stats).compile()
      compilation.release_freed()
      self._compiled.add(key)
