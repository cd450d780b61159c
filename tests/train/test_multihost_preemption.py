"""A SIGTERM that reaches only one host of a two-process run stops both, at the same step, with a checkpoint; the
rerun finishes, and the two processes (4 CPU devices each, one 4x2 mesh, through train.py and jax.distributed) end at
the 1-device parameters, with only process 0 logging and each process writing its own shards.

Unless the processes agree on stopping (preemption.StopSignals.agreed), the signalled host would leave the loop
alone and the other would wait forever in the next collective. The signal is delivered through tests/fault_run.py, which
holds process 1 at a chosen step until its handler has the signal, so the step it lands at is known exactly.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

from conftest import ROOT
from helpers import METRICS, assert_close, free_port, subprocess_env

from tied_embed.train import checkpoint
from tied_embed.train.metrics import read_scalars

# A deadlock ends here, with both processes killed. The healthy run takes a few seconds, but two processes
# starting at once on a small loaded machine spend most of a minute in imports alone.
DEADLINE_S = 300
TRAIN = ("--config", "configs/smoke.py", "--config.mesh.data=4", "--config.mesh.model=2")  # 4 devices a host


@contextlib.contextmanager
def _two_hosts(workdir, logs, wait_at: int | None = None) -> Iterator[list[subprocess.Popen]]:
  """Process 0 and 1 of the smoke run on localhost, stderr to logs/<index>.err; process 1 via fault_run.py if waiting.

  Yields the processes and, on leaving, waits for them to exit; a watchdog kills both DEADLINE_S after launch,
  also while the caller waits for process 1's stdout (a pipe when it waits: fault_run.py says there when it does).
  """
  port, processes = free_port(), []
  logs.mkdir()
  for index in range(2):
    fault = index == 1 and wait_at is not None
    script = ["tests/fault_run.py", "--wait-at", str(wait_at), "--"] if fault else ["train.py"]
    with (logs / f"{index}.err").open("w") as stderr:  # the child keeps its own copy of the file
      processes.append(subprocess.Popen(
          [sys.executable, *script, *TRAIN, "--workdir", str(workdir)], cwd=ROOT, text=True,
          stdout=subprocess.PIPE if fault else subprocess.DEVNULL, stderr=stderr,
          env=subprocess_env(XLA_FLAGS="--xla_force_host_platform_device_count=4",
                   JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(index)),
      ))
  watchdog = threading.Timer(DEADLINE_S, lambda: [process.kill() for process in processes])
  watchdog.start()
  try:
    yield processes
    for process in processes:
      process.communicate()  # drains process 1's stdout, so a full pipe cannot hold it up
  finally:
    watchdog.cancel()
    for process in processes:
      process.kill()


def _outcome(processes, logs) -> tuple[list[int], list[str]]:
  """Exit statuses (-9: killed by the watchdog) and whole stderr of the finished `processes`."""
  return [process.returncode for process in processes], [(logs / f"{i}.err").read_text() for i in range(2)]


def _tails(errors: list[str]) -> list[str]:
  return [error[-2000:] for error in errors]


def test_sigterm_to_one_host_stops_both_at_its_next_sync_step_and_the_rerun_finishes_like_1_device(
    smoke_run, tmp_path):
  workdir, logs = tmp_path / "two_hosts", tmp_path / "stopped"
  with _two_hosts(workdir, logs, wait_at=25) as processes:
    for line in processes[1].stdout:  # TFDS may narrate here first; EOF if the run dies or the watchdog fires
      if line.strip() == "waiting at step 25":
        processes[1].send_signal(signal.SIGTERM)  # to process 1 only
        break
  codes, errors = _outcome(processes, logs)
  # Step 25 (0-based) is in flight when process 1 gets the signal; 30 is the next log step, where they meet.
  assert codes == [128 + signal.SIGTERM] * 2, (codes, _tails(errors))
  assert all("Stopped at step 30 after saving its checkpoint" in e for e in errors), _tails(errors)
  assert checkpoint.available_steps(workdir) == [20, 30]
  assert len(list(workdir.glob("events.out.tfevents.*"))) == 1  # process 0 alone logs
  assert {p.name for p in (checkpoint.checkpoint_dir(workdir) / "30" / "state").glob("ocdbt.process_*")} == {
      "ocdbt.process_0", "ocdbt.process_1"}  # both hosts saved their shards of step 30

  logs = tmp_path / "rerun"
  with _two_hosts(workdir, logs) as processes:  # the same command again, no signal
    pass
  codes, errors = _outcome(processes, logs)
  assert codes == [0, 0], _tails(errors)
  assert all("Resuming from the checkpoint at step 30." in e for e in errors), _tails(errors)
  assert len(list(workdir.glob("events.out.tfevents.*"))) == 2  # process 0's file of each run, none of process 1's
  assert {p.name for p in (checkpoint.checkpoint_dir(workdir) / "60" / "state").glob("ocdbt.process_*")} == {
      "ocdbt.process_0", "ocdbt.process_1"}  # each process wrote its own shards
  restored = checkpoint.restore(workdir)
  assert restored.step == 60
  assert_close(restored.model.embedding[...], smoke_run.summary.state["model"]["embedding"][...])
  for name in ("lookup_total", "projection_total"):
    assert_close(restored.provenance[name], smoke_run.summary.state[name][...])
  got, want = read_scalars(workdir, METRICS), read_scalars(smoke_run.workdir, METRICS)  # both runs' logs together
  for tag in METRICS:
    assert got[tag][0].tolist() == want[tag][0].tolist(), tag
    assert_close(got[tag][1], want[tag][1])
