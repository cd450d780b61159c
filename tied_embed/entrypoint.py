"""The entrypoint `tied_io_embed(seed, token_ids, vocab_size, d_model)`, to the NNX contract in docs/entrypoint.md: two
compiled programs, the initialisation (once per (V, D)) and the forward pass (once per (V, D, T)); the seed is a dynamic
array, so a new seed or new ids reuse both."""

from __future__ import annotations

import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tied_embed.core.model import TiedEmbed


def _at_least_one(name: str, value) -> int:
  if (size := int(value)) < 1:
    raise ValueError(f"{name}={value!r} is not allowed: expected an integer >= 1 (int({value!r}) = {size})")
  return size


_FLOAT32_BYTES = 4


@functools.cache
def _memory_bytes() -> int:
  """The memory of the default device: its allocator's limit where it reports one (GPU, TPU), else the host's RAM."""
  limit = (jax.devices()[0].memory_stats() or {}).get("bytes_limit")
  return int(limit) if limit else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _check_fits(vocab_size: int, d_model: int, token_count: int) -> None:
  """ValueError unless the (V, D) float32 table and the (T, V) logits fit in the device's memory: XLA aborts the
  interpreter on a shape whose size overflows its 64-bit arithmetic, so an impossible table never reaches it."""
  needed = _FLOAT32_BYTES * (vocab_size * d_model + token_count * vocab_size)
  if needed > (available := _memory_bytes()):
    raise ValueError(f"vocab_size={vocab_size}, d_model={d_model} is not allowed: the ({vocab_size}, {d_model}) "
                     f"float32 table and the ({token_count}, {vocab_size}) logits need {needed:,} bytes, more than the "
                     f"{available:,} bytes of memory of {jax.devices()[0]}")


@functools.cache
def _graphdef(vocab_size: int, d_model: int) -> nnx.GraphDef:
  """The static structure of a (V, D) TiedEmbed, found by abstract evaluation (no arrays allocated)."""
  return nnx.graphdef(nnx.eval_shape(lambda: TiedEmbed(vocab_size, d_model, rngs=nnx.Rngs(0))))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _fresh_state(seed: jax.Array, vocab_size: int, d_model: int) -> nnx.State:
  """seed () int → the parameters of a new TiedEmbed from `nnx.Rngs(seed)`: {'embedding': (V, D) float32}."""
  return nnx.state(TiedEmbed(vocab_size, d_model, rngs=nnx.Rngs(jax.random.key(seed))))


@functools.partial(jax.jit, static_argnums=(0,))
def _flat_logits(graphdef: nnx.GraphDef, state: nnx.State, token_ids: jax.Array) -> jax.Array:
  """token_ids (T,) any real dtype → (T * V,) float32 logits of the model `merge(graphdef, state)`."""
  return nnx.merge(graphdef, state)(token_ids.astype(jnp.int32)).reshape(-1)


def tied_io_embed(seed, token_ids, vocab_size, d_model) -> jax.Array:
  """(T * V,) float32 logits `logits[t * V + v] = E[ids[t]] · E[v]` of a fresh table `E = normal(rngs.params(), (V, D))
  / sqrt(D)` from `nnx.Rngs(int(seed))`.

  `seed`, V and D are integers, possibly as floats, static under a caller's jit; ValueError if V or D is below 1 after
  `int()`, or if the table and logits exceed the device's memory. `token_ids` (T,): ids in [0, V), floats or traced."""
  vocab_size, d_model = _at_least_one("vocab_size", vocab_size), _at_least_one("d_model", d_model)
  _check_fits(vocab_size, d_model, math.prod(np.shape(token_ids)))
  # `jax.random.key(python_int)` turns the int into an int64 NumPy scalar, which JAX then narrows to its
  # canonical integer type (int32 unless x64 is on); jit narrows this argument the same way, at call time.
  state = _fresh_state(np.int64(int(seed)), vocab_size, d_model)
  # jit takes NumPy and jax arrays (and tracers) as they are; converting them first would cost a dispatch.
  if not isinstance(token_ids, (np.ndarray, jax.Array)):
    token_ids = np.asarray(token_ids)
  return _flat_logits(_graphdef(vocab_size, d_model), state, token_ids)
