"""The ('data', 'model') mesh, where each array lives on it, and how several processes (one per host) run as one.

The batch is split along `data`, 'vocab' (tables, moments, provenance totals) along `model`; a V that `model` doesn't
divide is refused, not padded. Each process computes the same global batch and places the rows its devices hold, so only
the gradient sum crosses hosts. Free of TensorFlow, for `train.py` before any heavy import."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tied_embed.util import UsageError, require

T = TypeVar("T")

AXES = ("data", "model")
# Logical axis name → mesh axis (None: replicated). The one place the vocabulary-parallel layout is decided.
LOGICAL_AXIS_RULES = {"vocab": "model", "embed": None}


def mesh_shape(mesh_config: ml_collections.ConfigDict, num_devices: int) -> tuple[int, int]:
  """(data, model) sizes of a checked mesh config for `num_devices`; one may be -1: all the remaining devices."""
  sizes = {axis: int(mesh_config[axis]) for axis in AXES}
  if all(size == -1 for size in sizes.values()):
    raise UsageError.bad_value("mesh.model", -1, "a positive size when mesh.data is -1 (only one axis may be -1)")
  for axis, size in sizes.items():
    if size == -1:
      other = sizes[AXES[1 - AXES.index(axis)]]
      require(num_devices % other == 0, f"mesh.{axis}", -1,
              f"a size that fits {num_devices} devices (the other axis is {other})")
      sizes[axis] = num_devices // other
  require(sizes["data"] * sizes["model"] <= num_devices, "mesh.data x mesh.model", f"{sizes['data']}x{sizes['model']}",
          f"at most {num_devices} devices in all")
  return sizes["data"], sizes["model"]


def check_mesh_fits_processes(data_size: int, model_size: int, num_devices: int, num_processes: int) -> None:
  """UsageError unless the (data, model) mesh lays whole `data` rows on each of `num_processes` hosts."""
  whole = data_size * model_size == num_devices and data_size % num_processes == 0
  require(num_processes == 1 or whole, "mesh", f"{data_size}x{model_size}",
          f"all {num_devices} devices, with mesh.data a multiple of the {num_processes} processes")


def make_mesh(mesh_config: ml_collections.ConfigDict, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A Mesh over the first data*model devices, axes ('data', 'model')."""
  devices = list(jax.devices() if devices is None else devices)
  data, model = mesh_shape(mesh_config, len(devices))
  return Mesh(np.array(devices[: data * model]).reshape(data, model), AXES)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Token batches (B,) split along `data`."""
  return NamedSharding(mesh, PartitionSpec("data"))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


# The environment variables that describe a run of several processes started by hand (docs/scale-out.md).
COORDINATOR, NUM_PROCESSES, PROCESS_ID = "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"
# The task counts of launchers whose environment jax.distributed.initialize() reads by itself (Slurm, Open MPI).
_LAUNCHER_SIZES = ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")


def _env_int(environ: dict[str, str], name: str, default: int) -> int:
  """The integer in environment variable `name` (`default` if unset); UsageError if it isn't one."""
  if (text := environ.get(name)) is None:
    return default
  try:
    return int(text)
  except ValueError:
    raise UsageError(f"{name}={text!r} is not allowed: expected an integer") from None


def initialize_from_environment(environ: dict[str, str] | None = None) -> bool:
  """Joins the other processes the environment describes (JAX_*, Slurm, Open MPI) before any device use; → whether."""
  environ = os.environ if environ is None else environ
  num_processes = _env_int(environ, NUM_PROCESSES, default=1)
  if num_processes > 1:
    process_id = _env_int(environ, PROCESS_ID, default=-1)
    if not environ.get(COORDINATOR) or not 0 <= process_id < num_processes:
      raise UsageError(f"{NUM_PROCESSES}={num_processes} needs {COORDINATOR}=host:port (process 0's address) and "
                       f"{PROCESS_ID} in 0..{num_processes - 1}")
    jax.distributed.initialize(coordinator_address=environ[COORDINATOR], num_processes=num_processes,
                               process_id=process_id)
    return True
  if any(_env_int(environ, size, default=1) > 1 for size in _LAUNCHER_SIZES):
    jax.distributed.initialize()
    return True
  return False


def process_slice(batch: np.ndarray, process_index: int, process_count: int) -> np.ndarray:
  """This process's contiguous share of a global batch: (B,) → (B / process_count,)."""
  require(len(batch) % process_count == 0, "train.batch_size", len(batch),
          f"a multiple of the {process_count} processes")
  share = len(batch) // process_count
  return batch[process_index * share:(process_index + 1) * share]


def global_batch(batch: tuple[np.ndarray, ...], sharding: NamedSharding) -> tuple[jax.Array, ...]:
  """The same global (B,) arrays on every process → jax.Arrays with `sharding`, each process placing its own slice."""
  if jax.process_count() == 1:
    return jax.device_put(batch, sharding)
  index, count = jax.process_index(), jax.process_count()
  return tuple(jax.make_array_from_process_local_data(sharding, process_slice(array, index, count), array.shape)
               for array in batch)


def process_0_first(make: Callable[[], T], what: str) -> T:
  """`make()` on process 0, then on the others (reading what it left); process 0 reaches the barrier even on failure."""
  if jax.process_count() == 1:
    return make()
  if jax.process_index() == 0:
    try:
      return make()
    finally:
      multihost_utils.sync_global_devices(f"tied_embed: {what}")
  multihost_utils.sync_global_devices(f"tied_embed: {what}")
  return make()
