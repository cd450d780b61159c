"""The entrypoint: `tied_io_embed(seed, token_ids, vocab_size, d_model)`.

The NNX contract in docs/entrypoint.md: a fresh `TiedEmbed` per call from `nnx.Rngs(int(seed))`, ids cast to int32, and
the float32 logits `E[ids] @ E.T` flattened to (T * V,) in token-position order.

Speed: a call runs two compiled programs, the initialisation (compiled once per (V, D)) and the forward pass
(once per (V, D, T)). The seed goes in as a dynamic array, so a new seed or new id values reuse both programs,
and a new number of tokens only compiles the cheap forward pass, not the random-number generator.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tied_embed.core.model import TiedEmbed


def _at_least_one(name: str, value) -> int:
  """`int(value)`, or a ValueError naming the argument if that is below 1."""
  size = int(value)
  if size < 1:
    raise ValueError(f"{name}={value!r} is not allowed: expected an integer >= 1 (int({value!r}) = {size})")
  return size


@functools.cache
def _graphdef(vocab_size: int, d_model: int) -> nnx.GraphDef:
  """The static structure of a (V, D) TiedEmbed, found by abstract evaluation (no arrays allocated)."""
  graphdef, _ = nnx.split(nnx.eval_shape(lambda: TiedEmbed(vocab_size, d_model, rngs=nnx.Rngs(0))))
  return graphdef


@functools.partial(jax.jit, static_argnums=(1, 2))
def _fresh_state(seed: jax.Array, vocab_size: int, d_model: int) -> nnx.State:
  """seed () int → the parameters of a new TiedEmbed from `nnx.Rngs(seed)`: {'embedding': (V, D) float32}."""
  return nnx.state(TiedEmbed(vocab_size, d_model, rngs=nnx.Rngs(jax.random.key(seed))))


@functools.partial(jax.jit, static_argnums=(0,))
def _flat_logits(graphdef: nnx.GraphDef, state: nnx.State, token_ids: jax.Array) -> jax.Array:
  """token_ids (T,) any real dtype → (T * V,) float32 logits of the model `merge(graphdef, state)`."""
  return nnx.merge(graphdef, state)(token_ids.astype(jnp.int32)).reshape(-1)


def tied_io_embed(seed, token_ids, vocab_size, d_model) -> jax.Array:
  """Tied input/output embedding logits of a freshly initialised table.

  Args:
    seed: an integer, possibly given as a float (Python, NumPy or a concrete jax scalar). It must be concrete
      (static for a caller's jit); the compiled initialisation takes it as a dynamic array, so a new seed never
      recompiles.
    token_ids: (T,) ids in [0, V), possibly given as floats; may be a traced value under jit.
    vocab_size: V ≥ 1 after `int()`, possibly a float; static under jit.
    d_model: D ≥ 1 after `int()`, possibly a float; static under jit.

  Returns:
    (T * V,) float32: `logits[t * V + v] = E[ids[t]] · E[v]` for `E = normal(rngs.params(), (V, D)) / sqrt(D)`.

  Raises:
    ValueError: `int(vocab_size)` or `int(d_model)` is below 1.
  """
  vocab_size, d_model = _at_least_one("vocab_size", vocab_size), _at_least_one("d_model", d_model)
  # `jax.random.key(python_int)` turns the int into an int64 NumPy scalar, which JAX then narrows to its
  # canonical integer type (int32 unless x64 is on); jit narrows this argument the same way, at call time.
  seed_array = np.int64(int(seed))
  # jit takes NumPy and jax arrays (and tracers) as they are; converting them first would cost a dispatch.
  if not isinstance(token_ids, (np.ndarray, jax.Array)):
    token_ids = np.asarray(token_ids)
  state = _fresh_state(seed_array, vocab_size, d_model)
  return _flat_logits(_graphdef(vocab_size, d_model), state, token_ids)
