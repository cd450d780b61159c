"""Orbax checkpoints of a training run: WORKDIR/checkpoints/<step>/ with the train state, the config (JSON) and
a manifest (JSON: a fingerprint of every saved array, a checksum of the config, the dataset's identity).

The train state is saved as the pure dict of `TrainState`'s nnx.State: the model's tables, the optimizer state
(with its step), the provenance totals and the running train metrics. Restoring needs nothing but the workdir:
the saved config rebuilds the state's structure, and the arrays are read straight into the shardings asked for,
so a checkpoint written on one mesh restores on another.

Orbax writes each checkpoint into `<step>.orbax-checkpoint-tmp` and renames it when complete, so a run killed
mid-save leaves only a temporary directory, which is never listed as a step and is deleted when the next run
opens the directory. A finalized checkpoint that cannot be read back whole (a file truncated or deleted, a
flipped byte that changes an array's fingerprint, a garbled config or manifest) is damaged: a resuming run moves
it to WORKDIR/damaged_checkpoints/, so it neither blocks a later save of that step nor is taken for a good one;
`restore` (read-only) skips it and says so in `Restored.skipped`. A checkpoint of another layout (one without a
manifest) is damaged like any other. `newest_readable` is the one scan every reader goes through.

With a selection split (`tied_embed.train.best_step`) each checkpoint also carries Orbax metrics, {'step', and at an
eval 'select_loss'}, and Orbax's retention keeps the newest train.keep_checkpoints checkpoints and, beside them,
the best one by `selection_rank`; `best_step` finds it the same way. Its manifest records the same select_loss
and the run's `Selection`, so the best checkpoint is checked like any other and a resume continues early
stopping's count; metrics that don't parse or disagree with the manifest make a checkpoint damaged
(`_metrics_problems`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import pathlib
import shutil
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import Mesh
from orbax.checkpoint.checkpoint_manager import METRIC_ITEM_NAME
from orbax.checkpoint.checkpoint_managers import preservation_policy

from tied_embed.core import optim
from tied_embed.core.model import Model, build_model
from tied_embed.core.step import TrainState
from tied_embed.train.best_step import Selection
from tied_embed.train.integrity import config_checksum, fingerprint
from tied_embed.util import RunStopped, UsageError, first_line

log = logging.getLogger(__name__)

ITEMS = ("state", "config", "manifest")
T = TypeVar("T")


class WriteFailed(RunStopped):
  """Writing a checkpoint failed (disk full, directory removed, ...): exit status 1."""

  def __init__(self, directory: pathlib.Path, step: int | None, error: BaseException):
    what = "checkpoints" if step is None else f"checkpoint {step}"
    super().__init__(f"writing {what} in {directory} failed: {first_line(error)}")


class Damaged(Exception):
  """A checkpoint whose items read back but do not match its manifest."""


def checkpoint_dir(workdir: str | pathlib.Path) -> pathlib.Path:
  return pathlib.Path(workdir).absolute() / "checkpoints"


def damaged_dir(workdir: str | pathlib.Path) -> pathlib.Path:
  """Where checkpoints that could not be read back are moved: WORKDIR/damaged_checkpoints/<step>[-n]."""
  return pathlib.Path(workdir).absolute() / "damaged_checkpoints"


def selection_rank(metrics: dict[str, Any]) -> tuple[float, int]:
  """How checkpoints rank by selection, best last in Orbax's 'min' mode: the lowest select_loss, on a tie the
  earlier step (the one `Selection.record` keeps); a checkpoint saved between evals has none and ranks worst."""
  return metrics.get("select_loss", math.inf), metrics["step"]


def _manager(
    workdir: str | pathlib.Path, keep: int | None = None, *, read_only: bool = True, select: bool = False
) -> ocp.CheckpointManager:
  """Orbax's manager of WORKDIR/checkpoints; `select`: it ranks by `selection_rank` (and writes metrics), and with
  `keep` it keeps the `keep` newest checkpoints and the best one."""
  retention: dict[str, Any] = {"max_to_keep": keep}
  if select:
    retention = {"best_fn": selection_rank, "best_mode": "min"}
    if keep is not None:
      retention["preservation_policy"] = preservation_policy.AnyPreservationPolicy([
          preservation_policy.LatestN(n=keep),
          preservation_policy.BestN(get_metric_fn=selection_rank, reverse=True, n=1,
                                    keep_checkpoints_without_metrics=False),
      ])
  options = ocp.CheckpointManagerOptions(
      **retention, create=not read_only, read_only=read_only, enable_async_checkpointing=not read_only,
      # A reader that doesn't rank reads no metrics, so one that doesn't parse can't stop it (`_metrics_problems`).
      lightweight_initialize=read_only and not select,
      cleanup_tmp_directories=not read_only,  # leftovers of a save that was killed before it was finalized
      # Writing the root metadata ends in a barrier of all processes; a reader must not wait there, or processes
      # that looked at the workdir at different moments (one before another created it) would disagree.
      save_root_metadata=not read_only,
  )
  return ocp.CheckpointManager(checkpoint_dir(workdir), options=options, item_names=ITEMS)


def _metrics_problems(workdir: str | pathlib.Path) -> list[tuple[int, Exception]]:
  """[(step, error)] of the checkpoints whose Orbax metrics do not read back or disagree with their manifest.

  Orbax ranks checkpoints by their metrics when it decides which to keep and which is best, and reads them (and
  fails on one that doesn't parse) as soon as a manager that ranks opens the directory: so they are checked
  first, against the select_loss the manifest recorded, through a manager that does not rank.
  """
  if not checkpoint_dir(workdir).is_dir():
    return []
  problems = []
  with _manager(workdir) as manager:
    for step in sorted(manager.all_steps()):
      try:
        metrics = json.loads((checkpoint_dir(workdir) / str(step) / METRIC_ITEM_NAME / METRIC_ITEM_NAME).read_text())
        _, manifest = _read_config_and_manifest(manager, step)
        expected = {"step": step}
        if manifest.get("select_loss") is not None:
          expected["select_loss"] = manifest["select_loss"]
        if metrics != expected:
          raise Damaged(f"its metrics {metrics} are not its manifest's {expected}")
      except Exception as error:  # noqa: BLE001 (whatever fails to read back, the checkpoint can't be trusted)
        problems.append((step, error))
  return problems


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
  shardings = mesh.state_shardings(shapes, mesh)
  return graphdef, jax.tree.map(
      lambda shape, sharding: jax.ShapeDtypeStruct(shape.shape, shape.dtype, sharding=sharding), shapes, shardings
  )


def fresh_state(config: ml_collections.ConfigDict, target: nnx.State) -> nnx.State:
  """A new TrainState's state for `config`, created directly in the shardings of `target` (`abstract_state`'s)."""
  shardings = jax.tree.map(lambda leaf: leaf.sharding, target)
  tx = optim.make_optimizer(config.train)
  return jax.jit(lambda: nnx.state(TrainState(build_model(config), tx)), out_shardings=shardings)()


def _read_state(manager: ocp.CheckpointManager, step: int, target: nnx.State) -> nnx.State:
  """The saved train state of `step`, read into a copy of `target`'s structure, shapes and shardings."""
  restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(nnx.to_pure_dict(target))))
  state = jax.tree.map(lambda leaf: leaf, target)
  nnx.replace_by_pure_dict(state, restored.state)
  return state


def _read_verified(
    manager: ocp.CheckpointManager, step: int, target: nnx.State
) -> tuple[nnx.State, ml_collections.ConfigDict, dict]:
  """(state, config, manifest) of checkpoint `step`, checked against its manifest; raises if any item is off."""
  config, manifest = _read_config_and_manifest(manager, step)
  return _read_state_matching(manager, step, target, manifest), config, manifest


def _read_state_matching(manager: ocp.CheckpointManager, step: int, target: nnx.State, manifest: dict) -> nnx.State:
  """The state of checkpoint `step` (as `_read_state`); Damaged unless every array matches its fingerprint."""
  state = _read_state(manager, step, target)
  saved, found = manifest.get("arrays", {}), fingerprint(state)
  bad = sorted(path for path in set(saved) | set(found) if saved.get(path) != found.get(path))
  if bad:
    raise Damaged(f"{len(bad)} array(s) do not match their fingerprints in the manifest, e.g. {bad[0]}")
  return state


def _read_config_and_manifest(manager: ocp.CheckpointManager, step: int) -> tuple[ml_collections.ConfigDict, dict]:
  """The config and manifest of checkpoint `step`, the config checked against the manifest's checksum."""
  items = manager.restore(step, args=ocp.args.Composite(config=ocp.args.JsonRestore(), manifest=ocp.args.JsonRestore()))
  config, manifest = dict(items.config), dict(items.manifest)
  if config_checksum(config) != manifest.get("config_sha256"):
    raise Damaged("its config does not match the checksum in its manifest")
  return ml_collections.ConfigDict(config), manifest


def newest_readable(
    manager: ocp.CheckpointManager, read: Callable[[int], T], step: int | None = None
) -> tuple[int | None, T | None, list[tuple[int, Exception]]]:
  """The newest checkpoint that `read(step)` reads back whole (or checkpoint `step` alone): → (step, what `read`
  returned, failures), failures being [(step, error)] of the newer checkpoints it could not read, newest first.

  (None, None, failures) if none reads back, (None, None, []) if there are no checkpoints; UsageError if `step`
  is given and not a checkpointed step. Every reader of checkpoints (training's resume, its compatibility
  check, `restore`, inspection) finds its checkpoint here.
  """
  steps = sorted(manager.all_steps(), reverse=True)
  if step is not None:
    if step not in steps:
      raise UsageError.bad_value("step", step, f"one of the checkpointed steps {sorted(steps)}")
    steps = [step]
  failures = []
  for candidate in steps:
    try:
      return candidate, read(candidate), failures
    except Exception as error:  # noqa: BLE001 (whatever fails to read back, the checkpoint can't be trusted)
      failures.append((candidate, error))
  return None, None, failures


class Checkpointer:
  """Saves a run's checkpoints (asynchronously) and restores them into a given state layout.

  A failure to write surfaces (from the background writer) at the next save or at `close`, as WriteFailed.
  """

  def __init__(self, workdir: str | pathlib.Path, keep: int, *, select: bool = False):
    """`select`: the run has a selection split; its saves carry a `Selection` and the best checkpoint is kept."""
    self._workdir = pathlib.Path(workdir)
    self._writing: int | None = None
    self._select = select
    _drop_calls_into_closed_loops()  # a failed save's cut-off writes call back in the background, at any moment
    for step, error in _metrics_problems(workdir) if select else []:  # before a ranking manager reads them
      _move_to_damaged(self._workdir, step, error, "its select/loss can't be trusted to rank it")
    with self._errors_as_write_failed():
      self._manager = _manager(workdir, keep, read_only=False, select=select)

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(
      self, step: int, state: nnx.State, config: ml_collections.ConfigDict, dataset: str = "",
      selection: Selection | None = None, select_loss: float | None = None,
  ) -> None:
    """Starts writing checkpoint `step`; the arrays are copied off the device before this returns.

    `dataset` is the identity of the data the run trains on (`tied_embed.data.bigram.dataset_identity`), recorded so
    that a resume on different data can be refused. With a selection split, `selection` is the run's `Selection`
    as of `step` and `select_loss` the selection split's loss at `step` (None between evals); both go into the
    manifest, and select_loss into the Orbax metrics that retention ranks by.
    """
    with self._errors_as_write_failed():
      self._manager.wait_until_finished()  # a failure of the previous save is reported as that save's
    config_dict = config.to_dict()
    manifest = {"arrays": fingerprint(state), "config_sha256": config_checksum(config_dict), "dataset": dataset}
    metrics = None
    if self._select:
      manifest.update(select_loss=select_loss, selection=(selection or Selection()).to_json())
      metrics = {"step": step} if select_loss is None else {"step": step, "select_loss": select_loss}
    with self._errors_as_write_failed():
      self._writing = step
      self._manager.save(
          step,
          args=ocp.args.Composite(
              state=ocp.args.StandardSave(nnx.to_pure_dict(state)),
              config=ocp.args.JsonSave(config_dict),
              manifest=ocp.args.JsonSave(manifest),
          ),
          metrics=metrics,
      )

  def restore(self, step: int, target: nnx.State) -> nnx.State:
    """Checkpoint `step` read into the layout of `target` (abstract arrays with shardings)."""
    return _read_state(self._manager, step, target)

  def restore_newest_intact(self, target: nnx.State) -> tuple[int, nnx.State, dict] | None:
    """(step, state, manifest) of the newest checkpoint that reads back whole; None if there are none.

    Newer checkpoints that fail to read are moved to damaged_dir(workdir) with a warning naming their step.
    If none reads back, nothing is moved and UsageError says so: the run must not start again from step 0 over
    them.
    """
    step, read, damaged = newest_readable(self._manager, lambda step: _read_verified(self._manager, step, target))
    if step is not None:
      for bad_step, error in damaged:
        self._move_aside(bad_step, error, f"resuming from step {step}")
      state, _, manifest = read
      return step, state, manifest
    if damaged:
      listed = "; ".join(f"step {step}: {first_line(error, 120)}" for step, error in damaged)
      raise UsageError(
          f"no checkpoint in {checkpoint_dir(self._workdir)} reads back ({listed}); not starting again from "
          f"step 0 over them: move them away or use another --workdir"
      )
    return None

  def _move_aside(self, step: int, error: Exception, consequence: str) -> None:
    """`_move_to_damaged` for the open manager, which then lists the checkpoints again."""
    _move_to_damaged(self._workdir, step, error, consequence)
    self._manager.reload()

  def close(self) -> None:
    """Waits for any save still being written, then releases the manager."""
    with self._errors_as_write_failed():
      self._manager.wait_until_finished()
      self._manager.close()

  @contextlib.contextmanager
  def _errors_as_write_failed(self):
    try:
      yield
    except Exception as error:  # noqa: BLE001 (Orbax and TensorStore report write failures in many types)
      raise WriteFailed(checkpoint_dir(self._workdir), self._writing, error) from error


def _move_to_damaged(workdir: pathlib.Path, step: int, error: Exception, consequence: str) -> None:
  """Moves damaged checkpoint `step` out of the manager's directory, so a later save of `step` can't collide, and
  warns, naming the step, the error and (last) `consequence`."""
  source = checkpoint_dir(workdir) / str(step)
  destination, n = damaged_dir(workdir) / str(step), 1
  while destination.exists():
    n += 1
    destination = damaged_dir(workdir) / f"{step}-{n}"
  if jax.process_index() == 0:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(source, destination)
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f"tied_embed: damaged checkpoint {step} moved")
  log.warning("Checkpoint %d is damaged (%s): moved it to %s; %s.", step, first_line(error), destination, consequence)


def _drop_calls_into_closed_loops() -> None:
  """Stops Python printing a traceback for each write that a failed save left in flight.

  Orbax runs a save's writes in an asyncio event loop of its own and closes that loop as soon as one write fails.
  TensorStore finishes the other writes anyway and then calls back into the closed loop, in the background and
  often before the failure reaches the run; each callback fails with `RuntimeError: Event loop is closed`, which
  Python hands to `sys.unraisablehook` and which would print as a traceback beside the run's one-line error.
  Exactly those are dropped (a RuntimeError raised inside a method of an event loop that is closed); every other
  unraisable exception still reaches the hook that was there before. Installed once per process.
  """
  previous = sys.unraisablehook
  if getattr(previous, "drops_calls_into_closed_loops", False):
    return

  def hook(unraisable) -> None:
    if not _is_call_into_closed_loop(unraisable):
      previous(unraisable)

  hook.drops_calls_into_closed_loops = True
  sys.unraisablehook = hook


def _is_call_into_closed_loop(unraisable) -> bool:
  """Whether an unraisable exception is a RuntimeError raised in a method of an asyncio loop that is closed."""
  if not isinstance(unraisable.exc_value, RuntimeError):
    return False
  frame = unraisable.exc_traceback
  while frame is not None:
    owner = frame.tb_frame.f_locals.get("self")
    if isinstance(owner, asyncio.AbstractEventLoop) and owner.is_closed():
      return True
    frame = frame.tb_next
  return False


@dataclasses.dataclass
class Restored:
  """A restored checkpoint: the model, the config it was trained with, its step and the provenance totals."""

  model: Model
  config: ml_collections.ConfigDict
  step: int
  provenance: dict[str, np.ndarray]  # 'lookup_total', 'projection_total': (V,) float32
  # 'rows': (K,) int32 tracked rows; 'lookup', 'projection': (K, D) float32, each path's summed gradient rows
  path_directions: dict[str, np.ndarray]
  skipped: list[str] = dataclasses.field(default_factory=list)  # why each newer checkpoint was not read, one line
  dataset: str = ""  # the identity of the data it trained on, as its manifest records it ('' if none was given)


def _unreadable(workdir: str | pathlib.Path, step: int, error: BaseException) -> str:
  return f"checkpoint {step} at {checkpoint_dir(workdir) / str(step)} is damaged: {first_line(error, 200)}"


def _newest_readable_in(
    workdir: str | pathlib.Path, read: Callable[[ocp.CheckpointManager, int], T], step: int | None
) -> tuple[int, T, list[str]]:
  """`newest_readable` on a read-only manager of `workdir`: → (step, what `read` returned, the skipped ones' lines).

  UsageError if there are no checkpoints, none at `step`, or the one asked for (or every one) does not read back.
  """
  if not checkpoint_dir(workdir).is_dir():
    raise UsageError(f"no checkpoints in {checkpoint_dir(workdir)}")
  with _manager(workdir) as manager:
    found, value, failures = newest_readable(manager, lambda candidate: read(manager, candidate), step)
  if found is None and not failures:
    raise UsageError(f"no checkpoints in {checkpoint_dir(workdir)}")
  problems = [_unreadable(workdir, failed, error) for failed, error in failures]
  if found is None:
    raise UsageError(problems[0] if len(problems) == 1 else
                     f"no checkpoint in {checkpoint_dir(workdir)} reads back whole ({problems[0]}; and "
                     f"{len(problems) - 1} more)")
  return found, value, problems


def saved_config(workdir: str | pathlib.Path, step: int | None = None) -> ml_collections.ConfigDict:
  """The config checkpoint `step` (default: the newest readable one) was trained with, without reading any array.

  UsageError if there is no such checkpoint or its config does not read back whole.
  """
  return _newest_readable_in(workdir, lambda manager, step: _read_config_and_manifest(manager, step)[0], step)[1]


def best_step(workdir: str | pathlib.Path) -> int:
  """The step of the best checkpoint by select/loss (Orbax's ranking by `selection_rank`), checked against its
  manifest. UsageError if there are no checkpoints, none with a select/loss (a run without a selection split, or
  one stopped before its first eval), or the best one's manifest does not read back or disagrees with its metrics.
  """
  if not checkpoint_dir(workdir).is_dir():
    raise UsageError(f"no checkpoints in {checkpoint_dir(workdir)}")
  no_selection = (f"no checkpoint in {checkpoint_dir(workdir)} has a select/loss: the run has no selection split "
                  f"(data.selection_fraction = 0) or stopped before its first eval")
  with _manager(workdir) as manager:
    if not any(_has_metrics(workdir, step) for step in manager.all_steps()):
      raise UsageError(no_selection)
  problems = _metrics_problems(workdir)
  if problems:  # any of them could be the best one
    raise UsageError(_unreadable(workdir, *problems[0]))
  with _manager(workdir, select=True) as manager:
    step = manager.best_step()
    if step is None or "select_loss" not in manager.metrics(step):
      raise UsageError(no_selection)
  return step


def _has_metrics(workdir: str | pathlib.Path, step: int) -> bool:
  return (checkpoint_dir(workdir) / str(step) / METRIC_ITEM_NAME).exists()


def newest_saved_config(workdir: str | pathlib.Path) -> ml_collections.ConfigDict | None:
  """The config of the newest checkpoint whose config reads back whole; None if there is none."""
  try:
    return saved_config(workdir)
  except UsageError:
    return None


def newest_saved(workdir: str | pathlib.Path) -> tuple[int, ml_collections.ConfigDict, dict] | None:
  """(step, config, manifest) of the newest checkpoint whose config and manifest read back whole, without reading
  any array; None if there is none."""
  try:
    step, (config, manifest), _ = _newest_readable_in(workdir, _read_config_and_manifest, None)
  except UsageError:
    return None
  return step, config, manifest


def restore(workdir: str | pathlib.Path, step: int | None = None, mesh: Mesh | None = None) -> Restored:
  """The checkpoint at `step` (default: the newest one that reads back whole) in `workdir`, on `mesh` (default:
  one device).

  Read-only: every item is checked against the checkpoint's manifest. Without `step`, newer damaged checkpoints
  are skipped, each named in `Restored.skipped`. Raises UsageError if the workdir has no checkpoints, none at
  `step`, or the one asked for (or every one) is damaged.
  """
  if mesh is None:
    mesh = mesh.make_mesh(ml_collections.ConfigDict({"data": 1, "model": 1}), jax.devices()[:1])

  def read(manager: ocp.CheckpointManager, candidate: int) -> tuple[ml_collections.ConfigDict, TrainState, dict]:
    config, manifest = _read_config_and_manifest(manager, candidate)
    graphdef, target = abstract_state(config, mesh)
    return config, nnx.merge(graphdef, _read_state_matching(manager, candidate, target, manifest)), manifest

  found, (config, train_state, manifest), skipped = _newest_readable_in(workdir, read, step)
  return Restored(
      model=train_state.model,
      config=config,
      step=found,
      provenance={
          "lookup_total": np.asarray(train_state.lookup_total[...]),
          "projection_total": np.asarray(train_state.projection_total[...]),
      },
      path_directions={
          "rows": np.asarray(train_state.tracked_rows[...]),
          "lookup": np.asarray(train_state.tracked_lookup[...]),
          "projection": np.asarray(train_state.tracked_projection[...]),
      },
      skipped=skipped,
      dataset=str(manifest.get("dataset", "")),
  )
