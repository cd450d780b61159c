"""Orbax checkpoints of a training run: WORKDIR/checkpoints/<step>/ with the train state and the config (JSON).

The train state is saved as the pure dict of `TrainState`'s nnx.State: the model's tables, the optimizer state
(with its step) and the provenance totals. Restoring needs nothing but the workdir: the saved config rebuilds
the state's structure, and the arrays are read straight into the shardings asked for, so a checkpoint
written on one mesh restores on another.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import Mesh

from tied_embed import mesh as mesh_lib
from tied_embed import optim
from tied_embed.errors import UsageError
from tied_embed.train_step import Model, TrainState, build_model


def checkpoint_dir(workdir: str | pathlib.Path) -> pathlib.Path:
  return pathlib.Path(workdir).absolute() / "checkpoints"


def _manager(workdir: str | pathlib.Path, keep: int | None = None, *, read_only: bool = True) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(
      max_to_keep=keep, create=not read_only, read_only=read_only, enable_async_checkpointing=not read_only
  )
  return ocp.CheckpointManager(checkpoint_dir(workdir), options=options, item_names=("state", "config"))


def available_steps(workdir: str | pathlib.Path) -> list[int]:
  """The steps with a finished checkpoint in `workdir`, ascending; [] if there are none."""
  if not checkpoint_dir(workdir).is_dir():
    return []
  with _manager(workdir) as manager:
    return sorted(manager.all_steps())


def abstract_state(config: ml_collections.ConfigDict, mesh: Mesh) -> tuple[nnx.GraphDef, nnx.State]:
  """The graphdef and the shape/dtype/sharding-only state of the TrainState `config` describes, on `mesh`."""
  tx = optim.make_optimizer(config.train)
  graphdef, shapes = nnx.split(nnx.eval_shape(lambda: TrainState(build_model(config), tx)))
  shardings = mesh_lib.state_shardings(shapes, mesh, int(config.model.vocab_size))
  return graphdef, jax.tree.map(
      lambda shape, sharding: jax.ShapeDtypeStruct(shape.shape, shape.dtype, sharding=sharding), shapes, shardings
  )


def _read_state(manager: ocp.CheckpointManager, step: int, target: nnx.State) -> nnx.State:
  """The saved train state of `step`, read into a copy of `target`'s structure, shapes and shardings."""
  restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(nnx.to_pure_dict(target))))
  state = jax.tree.map(lambda leaf: leaf, target)
  nnx.replace_by_pure_dict(state, restored.state)
  return state


class Checkpointer:
  """Saves a run's checkpoints (asynchronously) and restores them into a given state layout."""

  def __init__(self, workdir: str | pathlib.Path, keep: int):
    self._manager = _manager(workdir, keep, read_only=False)

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(self, step: int, state: nnx.State, config: ml_collections.ConfigDict) -> None:
    """Starts writing checkpoint `step`; the arrays are copied off the device before this returns."""
    self._manager.save(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(nnx.to_pure_dict(state)), config=ocp.args.JsonSave(config.to_dict())
        ),
    )

  def restore(self, step: int, target: nnx.State) -> nnx.State:
    """Checkpoint `step` read into the layout of `target` (abstract arrays with shardings)."""
    return _read_state(self._manager, step, target)

  def close(self) -> None:
    """Waits for any save still being written, then releases the manager."""
    self._manager.wait_until_finished()
    self._manager.close()


@dataclasses.dataclass
class Restored:
  """A restored checkpoint: the model, the config it was trained with, its step and the provenance totals."""

  model: Model
  config: ml_collections.ConfigDict
  step: int
  provenance: dict[str, np.ndarray]  # 'lookup_total', 'projection_total': (V,) float32


def _resolve_step(workdir: str | pathlib.Path, step: int | None) -> int:
  """`step`, or the latest one if None; UsageError if the workdir has no checkpoints or none at `step`."""
  steps = available_steps(workdir)
  if not steps:
    raise UsageError(f"no checkpoints in {checkpoint_dir(workdir)}")
  if step is None:
    return steps[-1]
  if step not in steps:
    raise UsageError.bad_value("step", step, f"one of the checkpointed steps {steps}")
  return step


def _read_config(manager: ocp.CheckpointManager, step: int) -> ml_collections.ConfigDict:
  saved = manager.restore(step, args=ocp.args.Composite(config=ocp.args.JsonRestore()))
  return ml_collections.ConfigDict(saved.config)


def saved_config(workdir: str | pathlib.Path, step: int | None = None) -> ml_collections.ConfigDict:
  """The config checkpoint `step` (default: the latest) was trained with, without reading any array."""
  step = _resolve_step(workdir, step)
  with _manager(workdir) as manager:
    return _read_config(manager, step)


def restore(workdir: str | pathlib.Path, step: int | None = None, mesh: Mesh | None = None) -> Restored:
  """The checkpoint at `step` (default: the latest) in `workdir`, on `mesh` (default: one device).

  Raises UsageError if the workdir has no checkpoints or none at `step`.
  """
  step = _resolve_step(workdir, step)
  with _manager(workdir) as manager:
    config = _read_config(manager, step)
    if mesh is None:
      mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), mesh_lib.AXES)
    graphdef, target = abstract_state(config, mesh)
    train_state = nnx.merge(graphdef, _read_state(manager, step, target))
  return Restored(
      model=train_state.model,
      config=config,
      step=step,
      provenance={
          "lookup_total": np.asarray(train_state.lookup_total[...]),
          "projection_total": np.asarray(train_state.projection_total[...]),
      },
  )
