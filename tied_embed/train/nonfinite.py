"""Stopping at a non-finite loss or gradient: the train step records the first bad step, the loop checks it."""

from __future__ import annotations

from flax import nnx

from tied_embed.util import RunStopped


class NonFinite(RunStopped):
  """The run stopped at a non-finite loss or gradient, saving nothing after it (exit status 1)."""

  def __init__(self, first_bad: int, step: int, last_saved: int | None):
    saved = "no checkpoint was written"
    if last_saved is not None:
      saved = f"the last checkpoint, step {last_saved}, is intact"
    super().__init__(
        f"step {first_bad}: the loss or a gradient is not finite (NaN or Inf); stopped at step {step} "
        f"without saving, {saved}. Try a lower train.learning_rate or a train.grad_clip_norm."
    )
    self.first_bad, self.step = first_bad, step


def check_finite(state: nnx.State, last_saved: int | None) -> None:
  """Raises NonFinite if any step so far was not finite (a host sync: call it where the loop syncs anyway)."""
  first_bad = int(state["first_nonfinite_step"][...])
  if first_bad:
    raise NonFinite(first_bad, int(state["optimizer"]["step"][...]), last_saved)
