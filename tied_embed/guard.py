"""The train step wrapped with the run's device-side tally: the train-loss running sum and the first bad step.

The tally is a dict of device scalars updated inside the same jitted call as the step, so keeping it costs no
host round trip per step; the loop reads it only where it syncs anyway (log steps, evals, saves):
  step        int32, the run's step after the last update (s + 1 after training on batch s);
  loss_sum    float32, sum of the train losses since the last log step;
  loss_count  int32, how many losses that sum holds;
  first_bad   int32, the first step whose loss or gradient was not finite; 0 while there was none.
A gradient that is not finite anywhere makes its row norm, and so the provenance totals, non-finite; and an
update with one makes the parameters non-finite. So checking the loss and every float of the new state finds
the first bad step exactly, and a state that passes is safe to save.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

Tally = dict[str, jax.Array]
TrainStep = Callable[[nnx.State, jax.Array, jax.Array], tuple[nnx.State, jax.Array]]


class NonFinite(SystemExit):
  """The run stopped at a non-finite loss or gradient: one line `error: ...` on stderr and exit status 1."""

  def __init__(self, first_bad: int, step: int, last_saved: int | None):
    saved = "no checkpoint was written"
    if last_saved is not None:
      saved = f"the last checkpoint, step {last_saved}, is intact"
    super().__init__(
        f"error: step {first_bad}: the loss or a gradient is not finite (NaN or Inf); stopped at step {step} "
        f"without saving, {saved}. Try a lower train.learning_rate or a train.grad_clip_norm."
    )
    self.first_bad, self.step = first_bad, step


def new_tally(step: int, loss_sum: float = 0.0, loss_count: int = 0) -> Tally:
  """A tally at `step`, with the train-loss window restored from a checkpoint (or empty)."""
  return {
      "step": jnp.int32(step),
      "loss_sum": jnp.float32(loss_sum),
      "loss_count": jnp.int32(loss_count),
      "first_bad": jnp.int32(0),
  }


def all_finite(loss: jax.Array, state: nnx.State) -> jax.Array:
  """Whether `loss` and every float array of `state` are finite: scalar bool."""
  floats = [leaf for leaf in jax.tree.leaves(state) if jnp.issubdtype(leaf.dtype, jnp.floating)]
  return jnp.all(jnp.stack([jnp.isfinite(loss)] + [jnp.isfinite(leaf).all() for leaf in floats]))


def guarded_step(train_step: TrainStep, state_shardings=None) -> Callable[..., tuple[nnx.State, Tally]]:
  """jit(state, tally, ids (B,), next_ids (B,)) → (new state, new tally): `train_step` plus the tally update.

  Donates the state and the tally.
  """

  def step(state: nnx.State, tally: Tally, ids: jax.Array, next_ids: jax.Array) -> tuple[nnx.State, Tally]:
    state, loss = train_step(state, ids, next_ids)
    done = tally["step"] + 1
    first_bad = tally["first_bad"]
    return state, {
        "step": done,
        "loss_sum": tally["loss_sum"] + loss,
        "loss_count": tally["loss_count"] + 1,
        "first_bad": jnp.where((first_bad == 0) & ~all_finite(loss, state), done, first_bad),
    }

  out_shardings = (state_shardings, None) if state_shardings is not None else None
  return jax.jit(step, donate_argnums=(0, 1), out_shardings=out_shardings)


def check(tally: Tally, last_saved: int | None) -> None:
  """Raises NonFinite if any step so far was not finite (a host sync: call it where the loop syncs anyway)."""
  first_bad = int(tally["first_bad"])
  if first_bad:
    raise NonFinite(first_bad, int(tally["step"]), last_saved)


def train_loss(tally: Tally) -> tuple[float, Tally]:
  """The mean train loss of the window the tally holds, and the tally with the window emptied."""
  loss = float(tally["loss_sum"] / tally["loss_count"])
  empty = {"loss_sum": jnp.zeros_like(tally["loss_sum"]), "loss_count": jnp.zeros_like(tally["loss_count"])}
  return loss, {**tally, **empty}
