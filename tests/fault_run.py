"""train.py with a fault at a chosen step, for tests/train/test_resume_after_faults.py (a helper script, not collected).

  python tests/fault_run.py --kill-at N -- --config configs/smoke.py --workdir W
      SIGKILLs itself as the batch of step N (0-based) is drawn: N steps done, step N not started, and whatever
      save is in flight cut off.
  python tests/fault_run.py --wait-at N -- --config ... --workdir W
      At that same point prints `waiting at step N` and waits until a SIGTERM/SIGINT sent by the test has reached
      the run's own handler, then carries on, so the signal lands at a known step without any race.

Everything else is train.py itself, run as `__main__` with the arguments after `--`.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import runpy
import signal
import sys
import threading

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _wait_for_signal(step: int) -> None:
  """Relays the next SIGTERM/SIGINT to the run's handler (installed before the first step) and returns after it."""
  received = threading.Event()
  handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}

  def relay(signum, frame):
    signal.signal(signum, handlers[signum])
    handlers[signum](signum, frame)
    received.set()

  for signum in handlers:
    signal.signal(signum, relay)
  print(f"waiting at step {step}", flush=True)
  while not received.wait(0.01):
    pass
  for signum, handler in handlers.items():
    signal.signal(signum, handler)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--kill-at", type=int)
  parser.add_argument("--wait-at", type=int)
  args, train_args = parser.parse_known_args()
  sys.path.insert(0, str(ROOT))
  from tied_embed.train import trainer  # noqa: PLC0415

  train_batch = trainer.train_batch

  def faulty_train_batch(bigram_data, seed, step, batch_size):
    if step == args.kill_at:
      os.kill(os.getpid(), signal.SIGKILL)
    if step == args.wait_at:
      _wait_for_signal(step)
    return train_batch(bigram_data, seed, step, batch_size)

  trainer.train_batch = faulty_train_batch
  sys.argv = [str(ROOT / "train.py"), *[arg for arg in train_args if arg != "--"]]
  runpy.run_path(str(ROOT / "train.py"), run_name="__main__")


if __name__ == "__main__":
  main()
