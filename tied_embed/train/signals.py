"""SIGTERM/SIGINT as a request to stop after the step in flight, saving it first (`Preempted`); a second signal
gets the default action at once (a restart ignores a half-written save)."""

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


class Preempted(RunStopped):
  """Stopped by a signal at step `step` (saved; None: during set-up): exit status 128 + signal, not "finished"."""

  def __init__(self, signum: int, step: int | None):
    where = "during set-up, before training" if step is None else f"at step {step}"
    super().__init__(f"stopped by {signal.Signals(signum).name} {where}: rerun the same command to resume")
    self.signum, self.step, self.exit_status = signum, step, 128 + signum


class Interrupted(BaseException):
  """Raised by the signal handler during set-up; a BaseException, so that the libraries' own `except Exception`
  handlers cannot mistake it for their error. `train_and_evaluate` turns it into `Preempted(signum, None)`."""

  def __init__(self, signum: int):
    super().__init__(signum)
    self.signum = signum


def _is_swallowed_interrupt(unraisable) -> bool:
  """An `Interrupted` a callback swallowed (JAX's gc callback, say): `StopSignals.received` holds it all the same."""
  return isinstance(unraisable.exc_value, Interrupted)


class StopSignals:
  """Inside, SIGTERM and SIGINT set `received` (raise `Interrupted` while `interrupting`); no-op off the main thread."""

  def __init__(self, *, interrupting: bool = False):
    self.received: int | None = None
    self.interrupting, self._previous = interrupting, {}

  def __enter__(self) -> StopSignals:
    if threading.current_thread() is threading.main_thread():
      self._previous = {signum: signal.signal(signum, self._handle) for signum in (signal.SIGTERM, signal.SIGINT)}
      drop_unraisable(_is_swallowed_interrupt)
    return self

  def __exit__(self, *exc_info) -> None:
    replaced, self._previous = self._previous, {}
    for signum, handler in replaced.items():
      signal.signal(signum, handler)
    caller = replaced.get(self.received)  # a stop the run ended before acting on is handed to the StopSignals
    if exc_info[0] is None and isinstance(getattr(caller, "__self__", None), StopSignals):  # around it (a sweep's)
      caller(self.received, None)

  def agreed(self, sync_point: bool) -> int | None:
    """The signal to stop on after this step, the same on every process; None to go on. Several processes decide
    together at the loop's sync points, so none waits forever in a save or a collective the others never reach."""
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
    log.warning("Received %s: saving a checkpoint after the current step, then stopping.", signal.Signals(signum).name)
