"""SIGTERM/SIGINT as a request to stop at the next step boundary, and the exit status a preempted run ends with.

A scheduler's SIGTERM (or a Ctrl-C) must not kill a run mid-step: the handler only records the signal, the
training loop sees it after the step in flight, saves a checkpoint at that step, flushes its logs and raises
`Preempted`. A second signal while the first is being honoured gets the signal's default action at once (a
checkpoint being written then is left unfinalized, which a restart ignores).
"""

from __future__ import annotations

import logging
import signal
import threading
import types

import jax
import numpy as np
from jax.experimental import multihost_utils

from tied_embed.util import RunStopped, drop_unraisable

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(RunStopped):
  """The run stopped early on a signal at step `step`: exit status 128 + signal (143 TERM, 130 INT).

  Once the loop has started, checkpoint `step` was saved first; a signal during set-up stops before step 1 with
  nothing written but what set-up completed (a generated dataset). The shell convention tells a supervisor the
  run did not finish (rerun the same command to resume), unlike 0.
  """

  def __init__(self, signum: int, step: int | None):
    name = signal.Signals(signum).name
    where = "during set-up, before training" if step is None else f"at step {step}"
    super().__init__(f"stopped by {name} {where}: rerun the same command to resume")
    self.signum, self.step, self.exit_status = signum, step, 128 + signum


class Interrupted(BaseException):
  """Raised by the signal handler during set-up. A BaseException, like KeyboardInterrupt, so that the libraries'
  own `except Exception` handlers (a checkpoint read that fails counts as damaged, a failed write is reported as
  such) cannot mistake it for their error; `train_and_evaluate` turns it into `Preempted(signum, None)`."""

  def __init__(self, signum: int):
    super().__init__(signum)
    self.signum = signum


def _is_swallowed_interrupt(unraisable) -> bool:
  """Whether an unraisable exception is an `Interrupted` that a callback swallowed (JAX's gc callback, say).

  Such a callback cannot pass the exception on, so Python hands it to `sys.unraisablehook`; `StopSignals.received`
  holds the signal all the same, and the loop stops on it, so `drop_unraisable` drops it.
  """
  return isinstance(unraisable.exc_value, Interrupted)


class StopSignals:
  """Context manager: while inside, SIGTERM and SIGINT set `received` instead of ending the process.

  While `interrupting` (set-up: checks, dataset generation, compilation), the signal also raises
  `Interrupted(signum)` at once, so a long set-up ends promptly; where something swallows that exception
  (a callback inside JAX), `received` still says so and the loop's first `agreed` stops the run. Outside the main
  thread (where Python cannot install handlers) it does nothing and `received` stays None.
  """

  def __init__(self, *, interrupting: bool = False):
    self.received: int | None = None
    self.interrupting = interrupting
    self._previous: dict[int, object] = {}

  def __enter__(self) -> StopSignals:
    if threading.current_thread() is threading.main_thread():
      self._previous = {signum: signal.signal(signum, self._handle) for signum in SIGNALS}
      drop_unraisable(_is_swallowed_interrupt)
    return self

  def __exit__(self, *exc_info) -> None:
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}

  def agreed(self, sync_point: bool) -> int | None:
    """The signal to stop on after this step, the same on every process; None to go on.

    One process stops at the step after the signal. Several processes decide together, and only at the loop's
    sync points (log, eval and checkpoint steps) where they meet anyway: a signal that reached any of them stops
    them all at the same step, so none waits forever in a save or a collective the others never reach.
    """
    if jax.process_count() == 1:
      return self.received
    if not sync_point:
      return None
    return int(np.max(multihost_utils.process_allgather(np.int32(self.received or 0)))) or None

  def _handle(self, signum: int, frame: types.FrameType | None) -> None:
    if self.received is not None:  # asked twice: stop now
      signal.signal(signum, signal.SIG_DFL)
      signal.raise_signal(signum)
      return
    self.received = signum
    if self.interrupting:
      raise Interrupted(signum)
    log.warning("Received %s: saving a checkpoint after the current step, then stopping.",
                    signal.Signals(signum).name)
