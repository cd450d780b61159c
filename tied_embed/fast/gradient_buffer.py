"""The train step with its gradient in a buffer kept from one step to the next: the same step, fewer page faults.

XLA:CPU allocates a step's temporaries at each call and frees them after; above glibc's mmap threshold (32 MiB at
most) the pages go back to the OS and the next step faults them in again. The (V, D) gradient is the largest: at
GPT-2's V=50257, D=768 in float32, 147 MiB, 38,000 page faults and about 70 ms of system time a step
(benchmarks/README.md). Returned from the step and donated back to the next, it is written into the previous step's
buffer instead; the buffer's contents are never read.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tied_embed.core import step as step_lib


def model_params(graphdef: nnx.GraphDef, state: nnx.State) -> nnx.State:
  """The model's Params out of a train state's pytree, whatever its leaves (arrays, abstract arrays, shardings)."""
  return nnx.state(nnx.merge(graphdef, state).model, nnx.Param)


class StepWithGradientBuffer:
  """jit(state, ids (B,), next_ids (B,), *, with_stats=False) → (new state, metrics); donates `state`.

  `step_fn` is `tied_embed.core.step.make_step_function`'s step. Each call donates the buffer the last one returned
  and gets the new gradient back in it; the first makes it (zeros, the Params' shapes and shardings). `lower` lowers
  the same program, for compiling ahead.
  """

  def __init__(
      self, graphdef: nnx.GraphDef, step_fn: step_lib.StepFunction, *, state_shardings=None,
      compiler_options: dict | None = None,
  ):
    self._graphdef = graphdef
    self._buffer = None

    def step(state, ids, next_ids, buffer, with_stats=False):
      del buffer  # only its memory is wanted: the new gradient is returned in it
      return step_fn(state, ids, next_ids, with_stats)

    gradient_shardings = None if state_shardings is None else model_params(graphdef, state_shardings)
    out_shardings = None if state_shardings is None else (state_shardings, None, gradient_shardings)
    # keep_unused: jit would otherwise drop the unread buffer from the program, and with it the donation.
    self._jitted = jax.jit(
        step, donate_argnums=(0, 3), static_argnames="with_stats", out_shardings=out_shardings,
        compiler_options=compiler_options, keep_unused=True,
    )

  def lower(self, state, ids, next_ids, with_stats: bool = False):
    """The lowered step for these arguments (arrays, or `jax.ShapeDtypeStruct`s for compiling ahead)."""
    concrete = all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(state))
    # For a state of arrays, the buffer the calls will donate: an abstract leaf counts as committed, the buffer
    # beside an uncommitted state is not, and jit would compile again at the first call.
    buffer = self._buffer_for(state) if concrete else jax.tree.map(  # the gradients' shapes, dtypes and shardings
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding),
        model_params(self._graphdef, state))
    return self._jitted.lower(state, ids, next_ids, buffer, with_stats=with_stats)

  def _buffer_for(self, state) -> nnx.State:
    # None before the first call; deleted if a call donated it and then failed before returning the new one.
    if self._buffer is None or any(leaf.is_deleted() for leaf in jax.tree.leaves(self._buffer)):
      params = model_params(self._graphdef, state)
      # From host zeros (jnp.zeros would compile a program after the trainer compiled ahead), placed as the
      # Params are: a committed buffer beside an uncommitted state would commit the step's outputs, and jit
      # would compile again for the committed state.
      def zeros_like(param):
        zeros = np.zeros(param.shape, param.dtype)
        return jax.device_put(zeros, param.sharding) if param.committed else jnp.asarray(zeros)

      self._buffer = jax.tree.map(zeros_like, params)
    return self._buffer

  def __call__(self, state, ids, next_ids, with_stats: bool = False):
    buffer = self._buffer_for(state)
    new_state, metrics, self._buffer = self._jitted(state, ids, next_ids, buffer, with_stats=with_stats)
    return new_state, metrics
