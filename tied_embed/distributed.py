"""Starting several processes (hosts) as one run: `jax.distributed.initialize` when the environment says so.

One process per host, each driving its local devices; together they form one global mesh. How each process
contributes its share of the data is in `tied_embed.multihost_data`. This module stays free of TensorFlow, so
`train.py` can start up and validate the config before any heavy import.
"""

from __future__ import annotations

import os

import jax

from tied_embed.errors import UsageError

# The environment variables that describe a run of several processes started by hand (see the README).
COORDINATOR, NUM_PROCESSES, PROCESS_ID = "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"
# The task counts of launchers whose environment jax.distributed.initialize() reads by itself (Slurm, Open MPI).
_LAUNCHER_SIZES = ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")


def _env_int(environ: dict[str, str], name: str, default: int | None = None) -> int:
  """The integer in environment variable `name` (`default` if unset); UsageError if it isn't one."""
  text = environ.get(name)
  if text is None and default is not None:
    return default
  try:
    return int(text)
  except (TypeError, ValueError):
    raise UsageError(f"{name}={text!r} is not allowed: expected an integer") from None


def initialize_from_environment(environ: dict[str, str] | None = None) -> bool:
  """Joins the other processes if the environment describes several; returns whether it did.

  JAX_COORDINATOR_ADDRESS=host:port, JAX_NUM_PROCESSES=n > 1 and JAX_PROCESS_ID=i name them explicitly; under
  Slurm or Open MPI with more than one task, JAX reads its launcher's variables itself. A single process (the
  default) starts nothing, so one-host runs need no coordinator. Must run before anything touches a device.
  """
  environ = os.environ if environ is None else environ
  num_processes = _env_int(environ, NUM_PROCESSES, default=1)
  if num_processes > 1:
    process_id = _env_int(environ, PROCESS_ID, default=-1)
    if not environ.get(COORDINATOR) or not 0 <= process_id < num_processes:
      raise UsageError(
          f"{NUM_PROCESSES}={num_processes} needs {COORDINATOR}=host:port (process 0's address) and "
          f"{PROCESS_ID} in 0..{num_processes - 1}"
      )
    jax.distributed.initialize(
        coordinator_address=environ[COORDINATOR], num_processes=num_processes, process_id=process_id
    )
    return True
  if any(_env_int(environ, size, default=1) > 1 for size in _LAUNCHER_SIZES):
    jax.distributed.initialize()
    return True
  return False
