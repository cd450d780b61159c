"""The ('data', 'model') device mesh and where each array lives on it.

The batch is split along `data`. Arrays are laid out by the logical axis names they are annotated with where they
are made (`out_sharding` on the nnx.Variable): LOGICAL_AXIS_RULES splits 'vocab' (the tables, their optimizer
moments, the provenance totals) on `model` and replicates 'embed'; unannotated arrays (step counters, scalars)
are replicated. A V that the `model` axis doesn't divide is refused by config
validation rather than padded, so no masked rows ever need to be kept out of the softmax.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tied_embed.errors import UsageError

AXES = ("data", "model")
# Logical axis name → mesh axis (None: replicated). The one place the vocabulary-parallel layout is decided.
LOGICAL_AXIS_RULES = {"vocab": "model", "embed": None}


def mesh_shape(mesh_config: ml_collections.ConfigDict, num_devices: int) -> tuple[int, int]:
  """(data, model) sizes for `num_devices`; one size may be -1 for 'all the remaining devices'."""
  sizes = {axis: int(mesh_config[axis]) for axis in AXES}
  for axis, size in sizes.items():
    if size == 0 or size < -1:
      raise UsageError.bad_value(f"mesh.{axis}", size, "a positive integer, or -1 for all remaining devices")
  if all(size == -1 for size in sizes.values()):
    raise UsageError.bad_value("mesh.model", -1, "a positive size when mesh.data is -1 (only one axis may be -1)")
  for axis, size in sizes.items():
    if size == -1:
      other = sizes[AXES[1 - AXES.index(axis)]]
      if num_devices % other:
        allowed = f"a size that fits {num_devices} devices (the other axis is {other})"
        raise UsageError.bad_value(f"mesh.{axis}", -1, allowed)
      sizes[axis] = num_devices // other
  if sizes["data"] * sizes["model"] > num_devices:
    raise UsageError.bad_value(
        "mesh.data x mesh.model", f"{sizes['data']}x{sizes['model']}", f"at most {num_devices} devices in all"
    )
  return sizes["data"], sizes["model"]


def check_mesh_fits_processes(data_size: int, model_size: int, num_devices: int, num_processes: int) -> None:
  """Raises UsageError unless a (data, model) mesh can be laid over `num_processes` hosts as `global_batch` needs.

  Each host must hold whole `data` rows of the mesh: its own share of the batch and every vocabulary shard, so
  the vocabulary-parallel collectives stay inside a host and only the gradient sum crosses hosts.
  """
  if num_processes == 1:
    return
  if data_size * model_size != num_devices or data_size % num_processes:
    raise UsageError.bad_value(
        "mesh", f"{data_size}x{model_size}",
        f"all {num_devices} devices, with mesh.data a multiple of the {num_processes} processes",
    )


def make_mesh(mesh_config: ml_collections.ConfigDict, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A Mesh over the first data*model devices, axes ('data', 'model')."""
  devices = list(jax.devices() if devices is None else devices)
  data, model = mesh_shape(mesh_config, len(devices))
  return Mesh(np.array(devices[: data * model]).reshape(data, model), AXES)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Token batches (B,) split along `data`."""
  return NamedSharding(mesh, PartitionSpec("data"))


def replicated(mesh: Mesh) -> NamedSharding:
  """Every device holds the whole array."""
  return NamedSharding(mesh, PartitionSpec())


def logical_spec(names: tuple[str | None, ...] | None) -> PartitionSpec:
  """The PartitionSpec of an array annotated with logical axis `names` under LOGICAL_AXIS_RULES (None: replicated)."""
  if not names:
    return PartitionSpec()
  return PartitionSpec(*(LOGICAL_AXIS_RULES.get(name) for name in names))


def state_shardings(state: nnx.State, mesh: Mesh) -> Any:
  """A NamedSharding per leaf of an (abstract) nnx.State, from its Variables' `out_sharding` annotations.

  The tables are annotated where they are made (`model.TABLE_AXES`), the optimizer's moments inherit the Param's
  annotation, the provenance totals carry ('vocab',); anything unannotated (counters, scalars) is replicated.
  """

  def sharding(variable: nnx.Variable) -> nnx.Variable:
    return variable.replace(NamedSharding(mesh, logical_spec(variable.get_metadata().get("out_sharding"))))

  return jax.tree.map(sharding, state, is_leaf=lambda leaf: isinstance(leaf, nnx.Variable))
