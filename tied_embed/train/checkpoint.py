"""Orbax checkpoints of a run: WORKDIR/checkpoints/<step>/ with the train state (a pure dict), the config (JSON) and a
manifest (JSON: array fingerprints, the config's checksum, the dataset's identity).

Arrays are read straight into the shardings asked for, so a checkpoint restores on another mesh. A checkpoint that does
not read back whole or disagrees with its manifest is damaged: `restore` skips it, a resuming run moves it to
WORKDIR/damaged_checkpoints/. With a selection split, Orbax metrics let retention keep the best beside the newest."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import json
import logging
import math
import os
import pathlib
import re
import traceback
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import Mesh
from orbax.checkpoint.checkpoint_manager import METRIC_ITEM_NAME
from orbax.checkpoint.checkpoint_managers import preservation_policy

from tied_embed import workdir as workdir_lib
from tied_embed.core.model import LanguageModel
from tied_embed.train import mesh as mesh_lib
from tied_embed.train import state as state_lib
from tied_embed.train.evaluation import Selection
from tied_embed.util import RunStopped, UsageError, drop_unraisable, first_line, irregular_file, json_sha256

log = logging.getLogger(__name__)


class WriteFailed(RunStopped):
  """Writing a checkpoint failed (disk full, directory removed, ...): exit status 1."""

  def __init__(self, directory: pathlib.Path, step: int | None, error: BaseException):
    what = "checkpoints" if step is None else f"checkpoint {step}"
    super().__init__(f"writing {what} in {directory} failed: {first_line(error)}")


@jax.jit
def _fingerprints(arrays: list[jax.Array]) -> list[jax.Array]:
  """Two 32-bit sums Σ bits_i · w_i (mod 2³²) per array of its raw bits, for two weightings with odd w_i: exact and
  associative, so the same on any sharding; changing one element changes both."""
  prints = []
  for array in arrays:
    unsigned = {1: jnp.uint8, 2: jnp.uint16}.get(array.dtype.itemsize, jnp.uint32)
    bits = jax.lax.bitcast_convert_type(array, unsigned).astype(jnp.uint32).reshape(-1)
    index = jnp.arange(bits.shape[0], dtype=jnp.uint32)
    for multiplier in (jnp.uint32(2654435761), jnp.uint32(2246822519)):
      weights = index * multiplier * jnp.uint32(2) + jnp.uint32(1)
      prints.append(jnp.sum(bits * weights, dtype=jnp.uint32))
  return prints


def fingerprint(state: nnx.State) -> dict[str, str]:
  """{'model/embedding': '<16 hex digits>', ...}: a fingerprint of every array of `state`, layout-independent."""
  flat = jax.tree_util.tree_leaves_with_path(nnx.to_pure_dict(state))
  values = np.asarray(jax.device_get(_fingerprints([leaf for _, leaf in flat])), np.uint32).reshape(-1, 2)
  return {"/".join(str(getattr(key, "key", key)) for key in path): f"{int(a):08x}{int(b):08x}"
          for (path, _), (a, b) in zip(flat, values, strict=True)}


class Damaged(Exception):
  """A checkpoint whose items read back but do not match its manifest."""


def checkpoint_dir(workdir: str | pathlib.Path) -> pathlib.Path:
  return workdir_lib.checkpoints(workdir)


def damaged_dir(workdir: str | pathlib.Path) -> pathlib.Path:
  """WORKDIR/damaged_checkpoints: damaged checkpoints are moved to <step>[-n] in it."""
  return workdir_lib.damaged_checkpoints(workdir)


# TensorStore appends what it was opening to its errors (` [tensorstore_spec='{...}']`, ` [source locations='...']`).
_ANNOTATIONS = re.compile(r" \[(?:tensorstore_spec|source locations)\b")


def reason(error: BaseException, limit: int = 400) -> str:
  """Why a checkpoint did not read back: 'TypeName: message' on one line, cut to `limit` characters. Orbax wraps a
  failed TensorStore read in an error dozens of lines long; the error it wraps is named instead, unannotated."""
  while error.__cause__ is not None and "See full TensorStore details" in str(error):
    error = error.__cause__
  text = _ANNOTATIONS.split(first_line(error, limit=1 << 20))[0]
  return text if len(text) <= limit else text[: limit - 3] + "..."


def unreadable(directory: pathlib.Path, step: int, error: BaseException) -> str:
  """'checkpoint 60 at WORKDIR/checkpoints/60 is damaged: <reason>', `directory` being WORKDIR/checkpoints."""
  return f"checkpoint {step} at {directory / str(step)} is damaged: {reason(error)}"


@dataclasses.dataclass
class Restored:
  """A checkpoint `restore` read: its step, the config it was trained with, its manifest and its train state."""

  step: int
  config: ml_collections.ConfigDict
  manifest: dict
  state: nnx.State | None = None  # in the layout asked for; None when read with arrays=False
  graphdef: nnx.GraphDef | None = None  # the saved config's, when that gave the layout (no `target`)
  directory: pathlib.Path | None = None  # WORKDIR/checkpoints
  damaged: list[tuple[int, Exception]] = dataclasses.field(default_factory=list)  # newer ones that failed, newest first

  @property
  def selection(self) -> Selection:
    """The selection record saved with it: the best step by select/loss, and early stopping's count."""
    return Selection.from_manifest(self.manifest)

  @functools.cached_property
  def model(self) -> LanguageModel:
    return nnx.merge(self.graphdef, self.state).model

  @functools.cached_property
  def provenance(self) -> dict[str, np.ndarray]:
    """'lookup_total', 'projection_total': (V,) float32."""
    return {name: np.asarray(self.state[name][...]) for name in ("lookup_total", "projection_total")}

  @functools.cached_property
  def path_directions(self) -> dict[str, np.ndarray]:
    """'rows': (K,) int32 tracked rows; 'lookup', 'projection': (K, D) float32, each path's summed gradient rows."""
    names = {"rows": "tracked_rows", "lookup": "tracked_lookup", "projection": "tracked_projection"}
    return {key: np.asarray(self.state[name][...]) for key, name in names.items()}


def selection_rank(metrics: dict[str, Any]) -> tuple[float, int]:
  """Orbax's 'min' rank, as `Selection.record`: the lowest (best-so-far) select_loss, then the earlier step."""
  return metrics.get("best_select_loss", metrics.get("select_loss", math.inf)), metrics["step"]


def _manager(workdir: str | pathlib.Path, keep: int | None = None, *, read_only: bool = True,
             select: bool = False) -> ocp.CheckpointManager:
  """Orbax's manager of WORKDIR/checkpoints; `select`: ranks by `selection_rank` and keeps the best one too."""
  retention: dict[str, Any] = {"max_to_keep": keep}
  if select:
    retention = {"best_fn": selection_rank, "best_mode": "min"}
    if keep is not None:
      retention["preservation_policy"] = preservation_policy.AnyPreservationPolicy([
          preservation_policy.LatestN(n=keep), preservation_policy.BestN(
              get_metric_fn=selection_rank, reverse=True, n=1, keep_checkpoints_without_metrics=False)])
  options = ocp.CheckpointManagerOptions(
      **retention, create=not read_only, read_only=read_only, enable_async_checkpointing=not read_only,
      lightweight_initialize=read_only and not select,  # reads no metrics, so a garbled one can't stop it
      cleanup_tmp_directories=not read_only,  # leftovers of a save that was killed before it was finalized
      save_root_metadata=not read_only,  # ends in a barrier of all processes, which readers must not wait at
  )
  return ocp.CheckpointManager(checkpoint_dir(workdir), options=options, item_names=("state", "config", "manifest"))


def available_steps(workdir: str | pathlib.Path) -> list[int]:
  """The steps with a finished checkpoint in `workdir`, ascending; [] if there are none."""
  if not checkpoint_dir(workdir).is_dir():
    return []
  with _manager(workdir) as manager:
    return sorted(manager.all_steps())


def _metrics_problems(workdir: str | pathlib.Path) -> list[tuple[int, Exception]]:
  """[(step, error)] of the checkpoints whose Orbax metrics do not read back or disagree with their manifest,
  checked through a manager that does not rank: a ranking one reads (and fails on) them as soon as it opens."""
  if not checkpoint_dir(workdir).is_dir():
    return []
  problems = []
  with _manager(workdir) as manager:
    for step in sorted(manager.all_steps()):
      try:
        _check_regular(workdir, step)
        metrics = json.loads((checkpoint_dir(workdir) / str(step) / METRIC_ITEM_NAME / METRIC_ITEM_NAME).read_text())
        if metrics != (expected := _metrics_of(step, _read_config_and_manifest(manager, step)[1])):
          raise Damaged(f"its metrics {metrics} are not its manifest's {expected}")
      except Exception as error:  # noqa: BLE001 (whatever fails to read back, the checkpoint can't be trusted)
        problems.append((step, error))
  return problems


def _check_regular(workdir: str | pathlib.Path, step: int) -> None:
  """Damaged unless every file of checkpoint `step` is a regular file: Orbax and TensorStore open them as they are,
  and a FIFO among them would be waited on for ever (a device read without end). Checked before Orbax opens any."""
  if problem := irregular_file(checkpoint_dir(workdir) / str(step)):
    raise Damaged(problem)


def _metrics_of(step: int, manifest: dict) -> dict[str, Any]:
  """Checkpoint `step`'s Orbax metrics: {'step'}, and the manifest's select_loss (and best_select_loss) if any."""
  metrics = {"step": step}
  if manifest.get("select_loss") is not None:
    metrics["select_loss"] = manifest["select_loss"]
    if manifest.get("min_delta"):
      metrics["best_select_loss"] = manifest["selection"]["best_select_loss"]
  return metrics


def _read_state(manager: ocp.CheckpointManager, step: int, target: nnx.State) -> nnx.State:
  """The saved train state of `step`, read into a copy of `target`'s structure, shapes and shardings."""
  restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(nnx.to_pure_dict(target))))
  state = jax.tree.map(lambda leaf: leaf, target)
  nnx.replace_by_pure_dict(state, restored.state)
  return state


def _read_config_and_manifest(manager: ocp.CheckpointManager, step: int) -> tuple[ml_collections.ConfigDict, dict]:
  """The config and manifest of checkpoint `step`, the config checked against the manifest's checksum."""
  items = manager.restore(step, args=ocp.args.Composite(config=ocp.args.JsonRestore(), manifest=ocp.args.JsonRestore()))
  config, manifest = dict(items.config), dict(items.manifest)
  if json_sha256(config) != manifest.get("config_sha256"):
    raise Damaged("its config does not match the checksum in its manifest")
  return ml_collections.ConfigDict(config), manifest


class Checkpointer:
  """Saves a run's checkpoints asynchronously, moving damaged ones aside; a failed write raises WriteFailed later."""

  def __init__(self, workdir: str | pathlib.Path, keep: int, config: ml_collections.ConfigDict, *, dataset: str = "",
               select: bool = False):
    """Every checkpoint holds the run's `config` and, in its manifest, `dataset` (the data's identity: a resume on
    other data is refused). `select`: the run has a selection split; its saves carry a `Selection` and the best
    checkpoint is kept."""
    self.workdir, self._writing, self._select = pathlib.Path(workdir), None, select
    self._config, self._dataset = config, dataset
    self.dataset_sha256: dict[str, str] = {}  # {split: digest} of the stored pairs, kept in every manifest
    _quiet_cut_off_io()  # a failed save's cut-off writes call back at any moment
    for step in available_steps(workdir):  # a file that is not a regular file: before Orbax's writer opens it
      if problem := irregular_file(checkpoint_dir(workdir) / str(step)):
        _move_to_damaged(self.workdir, step, Damaged(problem), "Orbax would wait on it for ever")
    for step, error in _metrics_problems(workdir) if select else []:  # before a ranking manager reads them
      _move_to_damaged(self.workdir, step, error, "its select/loss can't be trusted to rank it")
    with self._errors_as_write_failed():
      self._manager = _manager(workdir, keep, read_only=False, select=select)

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(self, step: int, state: nnx.State, selection: Selection | None = None,
           select_loss: float | None = None) -> None:
    """Starts writing checkpoint `step` (the arrays are copied off the device before this returns). With a selection
    split, the `Selection` and `select_loss` (None between evals) go into the manifest and the Orbax metrics retention
    ranks by."""
    with self._errors_as_write_failed():
      self._manager.wait_until_finished()  # a failure of the save before this one is reported as that save's
    config, config_dict = self._config, self._config.to_dict()
    manifest = {"arrays": fingerprint(state), "config_sha256": json_sha256(config_dict), "dataset": self._dataset}
    if self.dataset_sha256:
      manifest["dataset_sha256"] = self.dataset_sha256
    metrics = None
    if self._select:
      manifest.update(select_loss=select_loss, selection=dataclasses.asdict(selection or Selection()))
      if min_delta := float(config.train.get("min_delta", 0.0)):
        manifest["min_delta"] = min_delta
      metrics = _metrics_of(step, manifest)
    with self._errors_as_write_failed():
      self._writing = step
      self._manager.save(step, metrics=metrics, args=ocp.args.Composite(
          state=ocp.args.StandardSave(nnx.to_pure_dict(state)), config=ocp.args.JsonSave(config_dict),
          manifest=ocp.args.JsonSave(manifest)))

  def move_aside(self, damaged: list[tuple[int, Exception]], consequence: str) -> None:
    """Moves each of `damaged` ([(step, error)], as `Restored.damaged`) to damaged_dir(workdir), warning."""
    for step, error in damaged:
      _move_to_damaged(self.workdir, step, error, consequence)
    if damaged:
      self._manager.reload()

  def close(self) -> None:
    with self._errors_as_write_failed():
      self._manager.wait_until_finished()
      self._manager.close()

  @contextlib.contextmanager
  def _errors_as_write_failed(self):
    try:
      yield
    except Exception as error:  # noqa: BLE001 (Orbax and TensorStore report write failures in many types)
      raise WriteFailed(checkpoint_dir(self.workdir), self._writing, error) from error


def _move_to_damaged(workdir: pathlib.Path, step: int, error: Exception, consequence: str) -> None:
  """Moves damaged checkpoint `step` aside (so a later save of `step` can't collide) and warns."""
  destination, n = damaged_dir(workdir) / str(step), 1
  while destination.exists():
    n += 1
    destination = damaged_dir(workdir) / f"{step}-{n}"
  if jax.process_count() > 1:  # every process has listed `step` and named its destination before it moves
    multihost_utils.sync_global_devices(f"tied_embed: damaged checkpoint {step} named")
  if jax.process_index() == 0:  # renamed within the workdir, whole or not at all: never a copy left half-deleted
    made = not destination.parent.exists()
    try:
      destination.parent.mkdir(parents=True, exist_ok=True)
      os.rename(checkpoint_dir(workdir) / str(step), destination)
    except OSError as failure:
      if made:
        with contextlib.suppress(OSError):
          destination.parent.rmdir()
      raise RunStopped(f"{unreadable(checkpoint_dir(workdir), step, error)}, and it cannot be moved to {destination} "
                       f"({failure.strerror or first_line(failure)}): move or delete it, then run again") from None
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f"tied_embed: damaged checkpoint {step} moved")
  log.warning("Checkpoint %d is damaged (%s): moved it to %s; %s.", step, reason(error), destination, consequence)


def _is_cut_off_io(unraisable) -> bool:
  """Whether an unraisable exception comes from Orbax I/O that one failed read or write cut off: TensorStore calls
  back into Orbax's closed asyncio loop (a RuntimeError there), and the coroutines left raise from GeneratorExit."""
  error, source = unraisable.exc_value, unraisable.object
  if inspect.iscoroutine(source) and isinstance(getattr(error, "__cause__", None), GeneratorExit):
    return f"{os.sep}orbax{os.sep}" in source.cr_code.co_filename
  return isinstance(error, RuntimeError) and any(
      isinstance(owner := frame.f_locals.get("self"), asyncio.AbstractEventLoop) and owner.is_closed()
      for frame, _ in traceback.walk_tb(unraisable.exc_traceback))


def _is_not_cut_off_task(record: logging.LogRecord) -> bool:
  """Keeps all but asyncio's '... exception was never retrieved' of those (Orbax's tasks, TensorStore's futures)."""
  message = record.getMessage()
  return "exception was never retrieved" not in message or not any(
      mark in message for mark in (f"{os.sep}orbax{os.sep}", "TensorStore", "OCDBT database"))


def _quiet_cut_off_io() -> None:
  """Orbax's cut-off I/O prints nothing, neither unraisable exceptions nor asyncio's records (each filter once)."""
  drop_unraisable(_is_cut_off_io)
  logging.getLogger("asyncio").addFilter(_is_not_cut_off_task)


def restore(workdir: str | pathlib.Path, step: int | str | None = None, *, mesh: Mesh | None = None,
            target: nnx.State | None = None, arrays: bool = True, resuming: bool = False) -> Restored | None:
  """Checkpoint `step` of `workdir` (default: the newest that reads back whole; 'best': by select/loss), checked against
  its manifest. Arrays go into `target`'s layout, else the saved config's on `mesh` (default: one device);
  `arrays=False` reads only config and manifest.

  Without `step`, newer damaged checkpoints are skipped into `Restored.damaged`. UsageError if there are none, none at
  `step`, or the one asked for (or every one) is damaged. `resuming`: None if none, a refusal if none reads back."""
  _quiet_cut_off_io()  # a failed read's other reads call back into Orbax's closed loop
  directory, steps = checkpoint_dir(workdir), available_steps(workdir)
  if not steps:
    if resuming:
      return None
    raise UsageError(f"no checkpoints in {directory}")
  if step == "best":
    step = _best_step(workdir, steps)
  elif step is not None and step not in steps:
    raise UsageError.bad_value("step", step, f"one of the checkpointed steps {steps}")
  damaged = []
  with _manager(workdir) as manager:
    for candidate in sorted(steps, reverse=True) if step is None else [step]:
      try:
        _check_regular(workdir, candidate)
        config, manifest = _read_config_and_manifest(manager, candidate)
        graphdef, layout, state = None, target, None
        if arrays:
          if layout is None:  # each candidate's own config: a damaged newer one may describe another state
            mesh = mesh or mesh_lib.make_mesh(ml_collections.ConfigDict({"data": 1, "model": 1}), jax.devices()[:1])
            graphdef, layout = state_lib.abstract_state(state_lib.state_builder(config), mesh)
          state = _read_state(manager, candidate, layout)
          saved, found = manifest.get("arrays", {}), fingerprint(state)
          if bad := sorted(path for path in set(saved) | set(found) if saved.get(path) != found.get(path)):
            raise Damaged(f"{len(bad)} array(s) do not match their fingerprints in the manifest, e.g. {bad[0]}")
        return Restored(candidate, config, manifest, state, graphdef, directory, damaged)
      except Exception as error:  # noqa: BLE001 (whatever fails to read back, the checkpoint can't be trusted)
        damaged.append((candidate, error))
  if resuming:
    listed = "; ".join(f"step {failed}: {reason(error, 160)}" for failed, error in damaged)
    raise UsageError(f"no checkpoint in {directory} reads back ({listed}); not starting again from step 0 over "
                     f"them: move them away or use another --workdir")
  problems = [unreadable(directory, failed, error) for failed, error in damaged]
  raise UsageError(problems[0] if len(problems) == 1 else
                   f"no checkpoint in {directory} reads back whole ({problems[0]}; and {len(problems) - 1} more)")


def _best_step(workdir: str | pathlib.Path, steps: list[int]) -> int:
  """The best step the newest manifest's `Selection` names; UsageError if none, if metrics disagree, or if gone."""
  directory, newest = checkpoint_dir(workdir), restore(workdir, arrays=False)
  best = newest.selection.best_step
  if best is None:
    raise UsageError(f"no checkpoint in {directory} has a select/loss: the run has no selection split "
                     f"(data.selection_fraction = 0) or stopped before its first eval")
  if problems := _metrics_problems(workdir):  # any of them could be the best one
    raise UsageError(unreadable(directory, *problems[0]))
  if best not in steps:
    raise UsageError(f"the best checkpoint by select/loss, step {best} (as checkpoint {newest.step}'s manifest "
                     f"records), is gone from {directory}: expected one of the saved steps "
                     f"{', '.join(map(str, steps))}")
  return best
