"""`open_run(config, workdir, stack)`: a run's set-up, from taking its workdir to opening its metric writer."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pathlib
import stat
import tempfile
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from clu import parameter_overview
from flax import nnx

from tied_embed import util
from tied_embed import workdir as workdir_lib
from tied_embed.data import asymmetry, sources
from tied_embed.data import bigram as data_lib
from tied_embed.fast import choose, compilation
from tied_embed.fast.kernels import in_use
from tied_embed.train import checkpoint, run_step
from tied_embed.train import config as config_lib
from tied_embed.train import events as events_lib
from tied_embed.train import mesh as mesh_lib
from tied_embed.train import signals as signals_lib
from tied_embed.train import state as state_lib
from tied_embed.train.evaluation import Selection
from tied_embed.util import UsageError, first_line

log = logging.getLogger(__name__)


@dataclasses.dataclass
class OpenRun:
  """A run past its set-up: workdir held, step compiled, state resumed, data loaded, writer open."""

  config: ml_collections.ConfigDict
  workdir: pathlib.Path
  dataset: str  # the data's identity (`data_lib.DataPlan.identity`), saved in every checkpoint's manifest
  data: data_lib.BigramData
  mesh: jax.sharding.Mesh
  graphdef: nnx.GraphDef
  target: nnx.State  # the abstract state: the RunState's shapes, dtypes and shardings
  train_step: Callable[..., tuple[nnx.State, dict[str, Any]]]
  checkpointer: checkpoint.Checkpointer
  writer: events_lib.EventWriter  # TensorBoard events in the workdir (none where `complete` or not process 0)
  signals: signals_lib.StopSignals
  start: int  # the step the run starts from: its newest intact checkpoint's, or 0
  state: nnx.State
  selection: Selection
  stopped_early: bool  # the checkpoint's count of evals since the best had reached the patience
  complete: bool  # nothing left to train, and the start is the newest checkpoint: a rerun writes nothing
  num_steps: int
  param_count: int
  param_table: str  # the model's arrays: name, shape, dtype, size (clu.parameter_overview's table)
  antisymmetric_share: float | None  # of the task: what a tied table cannot fit (None: V > asymmetry.MAX_DENSE)


def open_run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path, stack: contextlib.ExitStack, *,
             verbose: bool) -> OpenRun:
  """Takes `workdir` for a validated `config`, compiles the train step, resumes, loads the data and opens the writer;
  the signal handlers, the lock, the checkpointer and the writer are `stack`'s to close.

  Before anything is written, UsageError if the corpus cannot support the SentencePiece vocabulary, the workdir cannot
  be written or is held, or its checkpoints are of a different run (config_lib.RESUMABLE), other data, past
  train.num_steps or unreadable. A signal raises signals_lib.Interrupted (Preempted if processes agree at the end)."""
  data_plan = data_lib.DataPlan.of(config, workdir)  # the config's data, read once (a text corpus hashed once)
  dataset = data_plan.identity
  data_lib.check_preparable(data_plan)
  workdir = _ensure_writable(workdir)
  signals = stack.enter_context(signals_lib.StopSignals(interrupting=True))  # set-up ends at once on a signal
  newest, record_holder = _take_workdir(config, workdir, stack, dataset)
  num_steps, patience = int(config.train.num_steps), int(config.train.early_stopping_patience)
  # The run trains unless its newest checkpoint is at num_steps or early stopping's patience. A refused run, or a
  # rerun of a finished one, leaves the workdir as it found it, .lock included (recorded below if found damaged).
  trains = newest is None or (newest.step < num_steps and not newest.selection.exhausted(patience))
  if trains:
    record_holder()
  mesh = mesh_lib.make_mesh(config.mesh)
  build_state = state_lib.state_builder(config)
  graphdef, target = state_lib.abstract_state(build_state, mesh)
  selecting = data_plan.selection_fraction > 0
  checkpointer = checkpoint.Checkpointer(workdir, int(config.train.keep_checkpoints), config, dataset=dataset,
                                         select=selecting)
  stack.enter_context(contextlib.closing(checkpointer))
  train_step = run_step.train_step_for(config, graphdef, target)
  if trains:
    # Compiled before the state exists, so the compiler's working memory and the state never add up (then the
    # compiler's freed memory goes back to the OS; jit reuses the programs).
    length = data_plan.context_length  # the trainer's batches: (B,) pairs, or (B, L) windows
    shape = (int(config.train.batch_size),) + ((length,) if length > 1 else ())
    batch = jax.ShapeDtypeStruct(shape, jnp.int32, sharding=mesh_lib.batch_sharding(mesh))
    compilation.compile_ahead(train_step, target, batch, batch)
  start, state, selection, manifest = _resume(config, build_state, target, checkpointer, dataset)
  data = mesh_lib.process_0_first(lambda: data_lib.load(data_plan), "bigram dataset ready")
  _check_same_pairs(start, manifest, data, data_plan.split_files)
  checkpointer.dataset_sha256 = data.digests
  if start == 0:  # the tracked rows (tied_embed.train.run_step.TRACKED_ROWS) are the most frequent train inputs
    rows = state["tracked_rows"][...]
    most_frequent = np.argsort(-np.asarray(data.input_counts), kind="stable")[: rows.shape[0]].astype(np.int32)
    state["tracked_rows"][...] = jax.device_put(most_frequent, rows.sharding)
  stopped_early = selection.exhausted(patience) and start < num_steps
  complete = (start == num_steps or stopped_early) and checkpointer.latest_step() == start
  if not complete:
    record_holder()
  events = jax.process_index() == 0 and not complete
  if events:
    try:  # WORKDIR/report_data.npz, so inspection needs nothing outside the workdir
      data_lib.record_for_inspection(data, workdir)
    except OSError as error:  # a full disk, a file size limit
      why = error.strerror or first_line(error)
      raise data_lib.DataFailed(f"writing {error.filename or workdir} failed: {why}") from error
    kernels = choose.kernel_set(config, nnx.merge(graphdef, target).model, mesh.size)
    in_use.record(workdir, kernels, resuming=start > 0)  # a resume on another kernel set is not bitwise
  dense = data.vocab_size <= asymmetry.MAX_DENSE  # what no tied table fits, of the task's (V, V) log-probabilities
  share = asymmetry.antisymmetric_share(asymmetry.prepared_table(data.true_log_probs)[0]) if dense else None
  writer = stack.enter_context(contextlib.closing(events_lib.EventWriter(workdir if events else None, verbose=verbose)))
  if stop := signals.agreed(sync_point=True):
    raise signals_lib.Preempted(stop, None)
  signals.interrupting = False  # from here on a signal stops the loop at the next step, after saving it
  params = target["model"].filter(nnx.Param)  # a dropout key is the model's state, not a parameter
  return OpenRun(
      config=config, workdir=workdir, dataset=dataset, data=data, mesh=mesh, graphdef=graphdef, target=target,
      train_step=train_step, checkpointer=checkpointer, writer=writer, signals=signals, start=start, state=state,
      selection=selection, stopped_early=stopped_early, complete=complete, num_steps=num_steps,
      param_count=sum(leaf.size for leaf in jax.tree.leaves(params)), antisymmetric_share=share,
      param_table=parameter_overview.get_parameter_overview(params.to_pure_dict(), include_stats=False))


def _take_workdir(config: ml_collections.ConfigDict, workdir: pathlib.Path, stack: contextlib.ExitStack,
                  dataset: str) -> tuple[checkpoint.Restored | None, Callable[[], None]]:
  """Locks `workdir` until `stack` closes (process 0, for all), refuses a run its checkpoints cannot continue on
  `dataset`; → the newest checkpoint without arrays (or None), `record_holder` (writes the holder, once checks pass)."""
  lock = util.exclusive(workdir, f"--workdir={str(workdir)!r}", record_now=False)
  record_holder = stack.enter_context(lock if jax.process_index() == 0 else contextlib.nullcontext(lambda: None))
  _check_layout(workdir)
  newest = checkpoint.restore(workdir, arrays=False, resuming=True)  # the refusals of a rerun, read cheaply
  if newest is not None:
    if differences := config_differences(newest.config, config):
      raise UsageError(f"{checkpoint.checkpoint_dir(workdir)} holds checkpoints of a different run "
                       f"({'; '.join(differences)}); use another --workdir, or the config those checkpoints were made "
                       f"with")
    _check_resumable(newest.step, newest.manifest, config, dataset)
  return newest, record_holder


def _ensure_writable(workdir: str | pathlib.Path) -> pathlib.Path:
  """Creates `workdir` if needed; UsageError if a file cannot be written in it or its path is not UTF-8."""
  path = pathlib.Path(workdir)
  util.require(util.is_utf8(str(path)), "--workdir", str(workdir), "a path that is valid UTF-8")
  try:
    path.mkdir(parents=True, exist_ok=True)
    _probe_writable(path)
  except OSError as error:
    reason = error.strerror or type(error).__name__
    raise UsageError(f"--workdir={str(workdir)!r} cannot be written: {reason} ({error.filename or path})") from None
  return path


def _probe_writable(directory: pathlib.Path) -> None:
  """OSError unless a file can be created and deleted in `directory`; its times are put back, changing nothing."""
  times = directory.stat()
  tempfile.NamedTemporaryFile(dir=directory, prefix=".write-check-").close()  # created, then deleted
  os.utime(directory, ns=(times.st_atime_ns, times.st_mtime_ns))


# The files the run keeps in its workdir, each replaced whole (a link there is replaced, never written through).
_OWN_FILES = workdir_lib.RUN_FILES


def _check_layout(workdir: pathlib.Path) -> None:
  """UsageError, before training, if a path the run writes as a directory (checkpoints/, ...) or as a file
  (kernels.json, ...) is something else, not writable, or a symbolic link (it would write in another run's folder)."""
  for name in _OWN_FILES:
    with contextlib.suppress(FileNotFoundError):
      mode = (path := workdir / name).lstat().st_mode
      if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise UsageError(f"{util.printable(str(path))} is {util.file_kind(mode)}, not a regular file; the run keeps "
                         f"its {name} there: move it away")
  for name in workdir_lib.FOLDERS:
    path = workdir / name
    if path.is_symlink():
      raise UsageError(f"{path} is a symbolic link; the run keeps its {name} inside the workdir: replace the link "
                       f"with a directory, or use another --workdir")
    # a step or dataset file from elsewhere
    if name != workdir_lib.REPORT and (link := util.first_link(path)) is not None:
      raise UsageError(f"{link} is a symbolic link (to {os.readlink(link)}); the run keeps its {name} inside the "
                       f"workdir: replace the link with the files themselves, or use another --workdir")
    if path.exists() and not path.is_dir():
      raise UsageError(f"{path} is not a directory; the run keeps its {name} there: move it away")
    if path.is_dir():
      try:
        _probe_writable(path)
      except OSError as error:
        raise UsageError(f"{path} cannot be written: {error.strerror or type(error).__name__}") from None


def config_differences(saved: ml_collections.ConfigDict, config: ml_collections.ConfigDict) -> list[str]:
  """The fields outside config_lib.RESUMABLE where `config` differs from `saved`, as 'path: saved → new'. A field
  that does nothing in both is no difference, nor one no source reads; one `saved` lacks is compared as its default."""
  new = config_lib.leaf_paths(config)
  added = {**{field.path: field.default for field in config_lib.FIELDS},
           **{f"data.{name}": value for source in sources.REGISTRY.values()
              for name, value in source.assumed_when_absent.items()}}
  old = {**{path: value for path, value in added.items() if path in new}, **config_lib.leaf_paths(saved)}
  ignored = (config_lib.RESUMABLE | (config_lib.inactive_paths(saved) & config_lib.inactive_paths(config))
             | (old.keys() - config_lib.known_fields()))  # a saved field that nothing here reads does nothing
  return [f"{path}: {old.get(path, '<absent>')!r} in the checkpoints, {new.get(path, '<absent>')!r} now"
          for path in sorted(set(old) | set(new))
          if path not in ignored and old.get(path, "<absent>") != new.get(path, "<absent>")]


def _resume(config: ml_collections.ConfigDict, build_state: Callable[[], Any], target: nnx.State,
            checkpointer: checkpoint.Checkpointer, dataset: str) -> tuple[int, nnx.State, Selection, dict]:
  """The step, train state, selection record and manifest to start from: the newest intact checkpoint's (newer
  damaged ones moved aside), or a fresh state at step 0 (`build_state`'s, `state_lib.state_builder`; manifest {})."""
  restored = checkpoint.restore(checkpointer.workdir, target=target, resuming=True)
  if restored is not None:
    checkpointer.move_aside(restored.damaged, f"resuming from step {restored.step}")
    _check_resumable(restored.step, restored.manifest, config, dataset)
    log.info("Resuming from the checkpoint at step %d.", restored.step)
    return restored.step, restored.state, restored.selection, restored.manifest
  return 0, state_lib.fresh_state(build_state, target), Selection(), {}


def _check_same_pairs(step: int, manifest: dict, data: data_lib.BigramData, files: pathlib.Path) -> None:
  """UsageError naming the split's files if the pairs loaded are not those checkpoint `step`'s manifest digested."""
  for split, digest in (manifest.get("dataset_sha256") or {}).items():
    if data.digests.get(split) != digest:
      raise UsageError(f"{util.printable(str(files))}/bigram_pairs-{split}.array_record* holds other pairs than "
                       f"checkpoint {step} was trained on (sha256 {str(data.digests.get(split))[:16]}..., the "
                       f"checkpoint's {str(digest)[:16]}...): delete {util.printable(str(files))} to have it generated "
                       f"again, or start fresh with another --workdir")


def _check_resumable(step: int, manifest: dict, config: ml_collections.ConfigDict, dataset: str) -> None:
  """UsageError if checkpoint `step` (its `manifest`) is past train.num_steps, or was trained on other data."""
  if step > int(config.train.num_steps):
    raise UsageError.bad_value("train.num_steps", config.train.num_steps, f"at least {step}, the latest checkpoint")
  if manifest.get("dataset") != dataset:
    raise UsageError(f"the data changed since checkpoint {step} was written (it trained on "
                     f"{manifest.get('dataset')!r}, the config now gives {dataset!r}): resuming would train on other "
                     f"data; start fresh with another --workdir")
