"""Model selection on the selection split (data.selection_fraction > 0, never trained on), and early stopping.

An eval whose select/loss is below the best so far by more than train.min_delta (0: any decrease) is the new best
step, as Flax's and Keras's early stopping judge an improvement: a run creeping down by less keeps an earlier best.
With train.early_stopping_patience = P > 0 the run stops at the P-th eval after the best without a new best.
`Selection` is saved in every checkpoint's manifest, so a resumed run stops at the same step as one that ran through.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Selection:
  """The best eval so far by select/loss: its step, its select/loss and its eval/* scalars; and the evals since."""

  best_step: int | None = None
  best_select_loss: float | None = None
  best_eval: dict[str, float] = dataclasses.field(default_factory=dict)  # the eval/* scalars logged at the best step
  evals_since_best: int = 0  # evals after the best one, none a new best: early stopping's count

  def record(self, step: int, select_loss: float, eval_scalars: dict[str, float], min_delta: float = 0.0) -> bool:
    """Counts the eval at `step`; → whether it is a new best: the first eval, or a select/loss below the best so far
    by more than `min_delta` (nats; 0: strictly lower)."""
    if self.best_select_loss is None or self.best_select_loss - select_loss > min_delta:
      self.best_step, self.best_select_loss = step, select_loss
      self.best_eval, self.evals_since_best = dict(eval_scalars), 0
      return True
    self.evals_since_best += 1
    return False

  def exhausted(self, patience: int) -> bool:
    """Whether early stopping with `patience` (0 = off) ends the run here: `patience` evals without a new best."""
    return patience > 0 and self.best_step is not None and self.evals_since_best >= patience

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_manifest(cls, manifest: dict[str, Any] | None) -> Selection:
    """The selection a checkpoint's manifest recorded; a fresh one for a checkpoint without (no selection split)."""
    saved = (manifest or {}).get("selection")
    if not saved:
      return cls()
    return cls(best_step=saved["best_step"], best_select_loss=saved["best_select_loss"],
               best_eval=dict(saved["best_eval"]), evals_since_best=int(saved["evals_since_best"]))
