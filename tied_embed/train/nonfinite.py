"""Stopping at a non-finite loss or gradient: the train step records the first bad step
(tied_embed/train/run_step.py), the loop checks it."""

from __future__ import annotations

from typing import Any

from flax import nnx

from tied_embed.train.config import FLOAT32_MAX
from tied_embed.util import RunStopped

_LEARNING_RATE_ADVICE = "Try a lower train.learning_rate or a train.grad_clip_norm."


class NonFinite(RunStopped):
  """The run stopped at a non-finite loss or gradient, saving nothing after it (exit status 1)."""

  def __init__(self, first_bad: int, step: int, last_saved: int | None, advice: str = _LEARNING_RATE_ADVICE):
    saved = "no checkpoint was written" if last_saved is None else f"the last checkpoint, step {last_saved}, is intact"
    super().__init__(f"step {first_bad}: the loss or a gradient is not finite (NaN or Inf); stopped at step {step} "
                     f"without saving, {saved}. {advice}")
    self.first_bad, self.step = first_bad, step


def advice(config: Any | None) -> str:
  """What to change: model.hidden_l2 where λ·‖W − I‖²_F is the suspect, else the learning rate."""
  if config is None or not (l2 := float(config.model.get("hidden_l2", 0.0))):  # no penalty (only W may have one)
    return _LEARNING_RATE_ADVICE
  d_model = int(config.model.d_model)
  overflows = 2 * l2 * d_model * d_model >= FLOAT32_MAX
  overshoots = str(config.train.optimizer) == "sgd" and l2 * float(config.train.learning_rate) >= 1
  if not (overflows or overshoots):
    return _LEARNING_RATE_ADVICE
  why = ("its penalty λ·‖W − I‖² overflows float32" if overflows else
         f"a step of train.learning_rate={float(config.train.learning_rate):g} on its penalty λ·‖W − I‖² overshoots")
  return f"model.hidden_l2={l2:g} is too large ({why}): try a smaller model.hidden_l2."


def check_finite(state: nnx.State, last_saved: int | None, config: Any | None = None) -> None:
  """NonFinite (naming the field to change) if a step so far was not finite; a host sync, so call it where one is."""
  if first_bad := int(state["first_nonfinite_step"][...]):
    raise NonFinite(first_bad, int(state["optimizer"]["step"][...]), last_saved, advice(config))
