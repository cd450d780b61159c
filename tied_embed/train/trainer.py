"""`train_and_evaluate(config, workdir)`: the training loop, its logging and its checkpoints.

Step s (0-based) trains on the batch `data.train_batch(data, seed, s, batch_size)` and leaves the run at step
s + 1, the number every log line, eval and checkpoint is labelled with. A workdir holding checkpoints resumes
from the newest one that reads back whole; since batches depend only on (seed, step) and a checkpoint holds the
whole train state (running train metrics included), the resumed run repeats the uninterrupted one bit for bit.

With a selection split (data.selection_fraction > 0) every eval also scores it (select/loss); an eval that lowers it
is the best step and is saved, and Orbax keeps that checkpoint beside the newest ones. Early stopping
(train.early_stopping_patience) ends the run at the eval where the count of evals since the best reaches the
patience; the count is saved in each checkpoint (`tied_embed.train.best_step`), so a resumed run stops at the same
step as one that ran through.

On a mesh, the loop keeps what runs on the devices ordered and bounded. XLA:CPU runs each device's part of a
program on a shared thread pool, and a collective holds its thread until every participant arrives; with a
hundred steps dispatched ahead (JAX's asynchronous dispatch between two log steps), the threads can all end up
waiting in collectives whose other participants never get a thread, and the run aborts after a 40 s rendezvous
timeout. So at most two steps are in flight (the loop waits for step s - 1 once step s is dispatched, which
still overlaps the Python loop with the device work), each step consumes the state the previous one produced, a
log step's statistics come out of the step itself, evaluation batches are chained through their running total,
and at every sync point (log, eval, checkpoint) the loop waits for the step before anything else (an eval, a
save, the processes' stop agreement) runs on the devices.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import pathlib
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from tied_embed.core import optim
from tied_embed.data import bigram as data_lib
from tied_embed.data import frequency, sources
from tied_embed.fast import choose, compilation, host_memory
from tied_embed.inspection import asymmetry
from tied_embed.train import checkpoint, config_fields, evaluation, nonfinite
from tied_embed.train import mesh as mesh_lib
from tied_embed.train import metrics as metrics_lib
from tied_embed.train import signals as signals_lib
from tied_embed.train import workdir as workdir_lib
from tied_embed.train.best_step import Selection
from tied_embed.train.config_validation import validate_config
from tied_embed.util import RunStopped, UsageError, first_line

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RunSummary:
  """Where a run ended: its final eval loss against the floor, its size and time, its final state, and with a
  selection split its best step by select/loss."""

  step: int  # the step the run ended at: train.num_steps, or where early stopping stopped it
  eval_loss: float
  loss_floor: float
  gap: float  # eval_loss - loss_floor
  relative_gap: float  # gap / loss_floor
  param_count: int
  # eval loss over the pairs whose current token is in each input-frequency bucket (`tied_embed.data.frequency`),
  # {'rare': nats, ...}, for the buckets that hold eval pairs
  loss_by_input_frequency: dict[str, float]
  train_seconds: float  # the training loop of this invocation (after data loading), including evals
  state: nnx.State  # the final TrainState's state (model, optimizer, provenance totals, metrics), on the mesh
  # With a selection split (data.selection_fraction > 0; else None, None, None, {}, None): the step of the eval with
  # the lowest select/loss (its checkpoint is kept: `tied-embed-inspect --step best`), that select/loss, the eval
  # loss there, and every eval/* scalar logged there ({'eval/loss': ..., 'eval/loss_rare_inputs': ..., ...});
  # and select/loss at the final step.
  best_step: int | None = None
  best_select_loss: float | None = None
  best_eval_loss: float | None = None
  best_eval: dict[str, float] = dataclasses.field(default_factory=dict)
  select_loss: float | None = None
  stopped_early: bool = False  # early stopping ended the run before train.num_steps


def _on_schedule(step: int, every: int, num_steps: int) -> bool:
  """Whether the run, now at `step`, logs/evaluates/saves: every `every` steps and at the last step."""
  return step % every == 0 or step == num_steps


class _Evaluator:
  """A whole held-out split (the validation split, or the selection split), placed on the mesh once, scored batch
  after batch into one running total.

  Beside the total it sums the losses by the input-frequency bucket of each pair's current token.
  """

  def __init__(self, graphdef: nnx.GraphDef, ids: np.ndarray, next_ids: np.ndarray, data: data_lib.BigramData,
               config: ml_collections.ConfigDict, mesh):
    """`ids`, `next_ids`: (M,) int32, the split's pairs; `data` gives the train counts that define the buckets."""
    num_buckets = len(frequency.BUCKETS)
    self._add_batch = evaluation.make_bucket_totals(
        graphdef, int(config.loss.chunk_size), num_buckets, str(config.model.dtype))
    self._totals = jax.device_put((jnp.float32(0), jnp.zeros(num_buckets, jnp.float32)), mesh_lib.replicated(mesh))
    size, data_size = int(config.train.eval_batch_size), mesh.shape["data"]
    self._count = len(ids)
    eval_buckets = frequency.input_buckets(data.input_counts)[ids]
    self._bucket_counts = np.bincount(eval_buckets, minlength=num_buckets)
    self._batches = []
    for start in range(0, len(ids), size):
      batch = (ids[start : start + size], next_ids[start : start + size], eval_buckets[start : start + size])
      # A short last batch that `data` doesn't divide is scored whole on every device instead.
      sharding = mesh_lib.batch_sharding(mesh) if len(batch[0]) % data_size == 0 else mesh_lib.replicated(mesh)
      self._batches.append(jax.device_put(batch, sharding))

  def compile_ahead(self, state: nnx.State) -> None:
    """Compiles the batch program for every batch shape and layout the split has (jit reuses them)."""
    layouts = {(batch[0].shape, batch[0].sharding): batch for batch in self._batches}
    for batch in layouts.values():
      self._add_batch.lower(state, *self._totals, *batch).compile()

  def __call__(self, state: nnx.State) -> tuple[float, dict[str, float]]:
    """Mean loss over the split at `state`'s parameters, and per input-frequency bucket with pairs."""
    totals = self._totals
    for batch in self._batches:
      totals = self._add_batch(state, *totals, *batch)
    total, bucket_totals = jax.device_get(totals)
    by_bucket = {name: float(bucket_totals[k]) / int(self._bucket_counts[k])
                 for k, name in enumerate(frequency.BUCKETS) if self._bucket_counts[k]}
    return float(total) / self._count, by_bucket


def _resume(
    config: ml_collections.ConfigDict, target: nnx.State, checkpointer: checkpoint.Checkpointer, dataset: str
) -> tuple[int, nnx.State, Selection]:
  """The step, train state and selection record to start from: the newest intact checkpoint's, or a fresh state
  at step 0.

  UsageError if the checkpoint is past train.num_steps, or was trained on other data than `dataset`.
  """
  restored = checkpointer.restore_newest_intact(target)
  if restored is None:
    return 0, checkpoint.fresh_state(config, target), Selection()
  start, state, manifest = restored
  _check_resumable(start, manifest, config, dataset)
  log.info("Resuming from the checkpoint at step %d.", start)
  return start, state, Selection.from_manifest(manifest)


def _check_resumable(step: int, manifest: dict, config: ml_collections.ConfigDict, dataset: str) -> None:
  """UsageError if checkpoint `step` (its `manifest`) is past train.num_steps, or was trained on other data."""
  if step > int(config.train.num_steps):
    raise UsageError.bad_value("train.num_steps", config.train.num_steps, f"at least {step}, the latest checkpoint")
  if manifest.get("dataset") != dataset:
    raise UsageError(
        f"the data changed since checkpoint {step} was written (it trained on {manifest.get('dataset')!r}, the "
        f"config now gives {dataset!r}): resuming would train on other data; start fresh with another --workdir"
    )


def _write_log_step(writer, step: int, learning_rate: float, metrics: dict, state: nnx.State) -> dict[str, float]:
  """The train/* and grad/* scalars of a log step and the provenance histograms; returns the scalars."""
  metrics = jax.device_get(metrics)
  scalars = {"train/loss": float(metrics.pop("train_loss")), "train/learning_rate": learning_rate}
  metrics.pop("loss")
  scalars.update({name if "/" in name else f"grad/{name}": float(value) for name, value in metrics.items()})
  writer.write_scalars(step, scalars)
  writer.write_histograms(
      step,
      {
          "provenance/lookup_total": np.asarray(state["lookup_total"][...]),
          "provenance/projection_total": np.asarray(state["projection_total"][...]),
      },
  )
  return scalars


def _write_eval(
    writer, step: int, eval_loss: float, by_bucket: dict[str, float], data: data_lib.BigramData
) -> dict[str, float]:
  """eval/loss, the floor, the gap to it, the bucket losses and the data's further references; returns them.

  A bucket's loss (eval/loss_<bucket>_inputs) is written only where the bucket holds eval pairs.
  """
  scalars = {"eval/loss": eval_loss, "eval/loss_floor": data.loss_floor, "eval/gap": eval_loss - data.loss_floor}
  scalars.update({frequency.scalar_name(bucket): loss for bucket, loss in by_bucket.items()})
  scalars.update({f"eval/{name}": value for name, value in data.eval_references.items()})
  writer.write_scalars(step, scalars)
  return scalars


def _write_selection(writer, step: int, select_loss: float, selection: Selection) -> dict[str, float]:
  """select/loss (the mean loss over the selection split) and select/best_step (the eval with the lowest one so
  far, this one included); returns them."""
  scalars = {"select/loss": select_loss, "select/best_step": float(selection.best_step)}
  writer.write_scalars(step, scalars)
  return scalars


class DataFailed(RunStopped):
  """Preparing the dataset failed for a reason outside the config (a full disk, a vanished directory): exit 1."""


def _track_most_frequent_rows(state: nnx.State, input_counts: np.ndarray) -> nnx.State:
  """A fresh state whose tracked rows (train_step.TRACKED_ROWS) are the most frequent current tokens in train."""
  rows = state["tracked_rows"][...]
  most_frequent = np.argsort(-np.asarray(input_counts), kind="stable")[: rows.shape[0]].astype(np.int32)
  state["tracked_rows"][...] = jax.device_put(most_frequent, rows.sharding)
  return state


def _log_asymmetry(data: data_lib.BigramData, d_model: int) -> None:
  """At the start of a run: how much of the task a tied table cannot express (its logits E·Eᵀ are symmetric).

  Computed from the task's (V, V) reference table, so only for V up to asymmetry.MAX_DENSE (inspection covers
  larger vocabularies by sampling).
  """
  if data.vocab_size > asymmetry.MAX_DENSE:
    return
  budget = asymmetry.summary(data, d_model=d_model)
  log.info(
      "Asymmetry budget: %.3f of the task's row-centred log-probabilities is antisymmetric, which a tied table "
      "(symmetric logits E·Eᵀ) cannot fit; an untied one can.", budget["antisymmetric_share"],
  )


def _load_data(config: ml_collections.ConfigDict, workdir: pathlib.Path) -> data_lib.BigramData:
  """The run's data, generated by process 0 first; TFDS's console chatter about 'downloading' is dropped.

  UsageError for what the config got wrong; DataFailed (one line) for a failure to write or read the dataset.
  """
  try:
    with contextlib.redirect_stdout(io.StringIO()):
      return mesh_lib.process_0_first(lambda: data_lib.load_bigram_data(config, workdir), "bigram dataset ready")
  except (UsageError, RunStopped):
    raise
  except Exception as error:  # noqa: BLE001 (TFDS and array_record report I/O failures in many types)
    raise DataFailed(
        f"preparing the dataset in {data_lib.data_dir(config, workdir)} failed: {first_line(error)}"
    ) from error


def _record_for_inspection(data: data_lib.BigramData, config: ml_collections.ConfigDict, workdir: pathlib.Path) -> None:
  """WORKDIR/report_data.npz, so inspection needs nothing outside the workdir; DataFailed naming the file if the
  write fails (a full disk, a file size limit)."""
  try:
    data_lib.record_for_inspection(data, config, workdir)
  except OSError as error:
    raise DataFailed(f"writing {error.filename or workdir} failed: {error.strerror or first_line(error)}") from error


def train_and_evaluate(
    config: ml_collections.ConfigDict, workdir: str | pathlib.Path, *, verbose: bool = False
) -> RunSummary:
  """Trains `config` in `workdir` (resuming from its newest intact checkpoint) and returns where it ended.

  Logs one line per log step (`verbose`: also every scalar and histogram, as CLU's default writer does). Returns
  at train.num_steps, or earlier where early stopping stops the run (`RunSummary.stopped_early`).

  Raises, before loading data or compiling anything, UsageError if the config is invalid or its corpus cannot
  support its SentencePiece vocabulary (nothing written), if the workdir cannot be written or another run holds
  it, if its checkpoints were made by a different run (config_fields.RESUMABLE) or on other data, or if none
  of them reads back. Stops with
  signals_lib.Preempted on SIGTERM/SIGINT (after saving, once the loop has started), with
  nonfinite.NonFinite at a non-finite loss or gradient (saving nothing after it), with
  checkpoint.WriteFailed. Whatever the outcome, the saves already started finish and the logs are flushed
  before it returns or raises.
  """
  try:
    return _train_and_evaluate(config, workdir, verbose)
  except signals_lib.Interrupted as interrupted:  # a signal during set-up: nothing to save yet
    raise signals_lib.Preempted(interrupted.signum, None) from None


def _train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | pathlib.Path, verbose: bool) -> RunSummary:
  """`train_and_evaluate`'s body; a signal during its set-up raises signals_lib.Interrupted."""
  validate_config(config)
  data_lib.check_preparable(config, workdir)  # a vocabulary the corpus cannot support is refused before any write
  workdir = workdir_lib.ensure_writable(workdir)
  train, num_steps = config.train, int(config.train.num_steps)
  with contextlib.ExitStack() as stack:
    signals = stack.enter_context(signals_lib.StopSignals(interrupting=True))  # set-up ends at once on a signal
    record_holder = stack.enter_context(workdir_lib.exclusive(workdir))
    workdir_lib.check_layout(workdir)
    dataset = data_lib.dataset_identity(config)
    saved = checkpoint.newest_saved(workdir)  # its config and manifest: the refusals of a rerun, read cheaply
    if saved is not None:
      newest_step, newest_config, newest_manifest = saved
      workdir_lib.check_compatible(newest_config, config, str(checkpoint.checkpoint_dir(workdir)))
      _check_resumable(newest_step, newest_manifest, config, dataset)
    record_holder()  # a run refused above leaves the workdir as it found it, its .lock included
    mesh = mesh_lib.make_mesh(config.mesh)
    graphdef, target = checkpoint.abstract_state(config, mesh)
    selecting, patience = data_lib.selection_fraction(config) > 0, int(train.early_stopping_patience)
    checkpointer = checkpoint.Checkpointer(workdir, int(train.keep_checkpoints), select=selecting)
    stack.enter_context(contextlib.closing(checkpointer))
    shardings = jax.tree.map(lambda leaf: leaf.sharding, target)
    shards = choose.data_shards(shardings)
    train_step = choose.make_train_step(
        graphdef, int(config.loss.chunk_size), shardings,
        lookup_grad_scale=float(train.lookup_grad_scale), projection_grad_scale=float(train.projection_grad_scale),
        compute_dtype=str(config.model.dtype),
        split_check=choose.split_check_tokens(int(train.batch_size), int(config.model.vocab_size), shards),
        train_config=train,
    )
    batch_sharding = mesh_lib.batch_sharding(mesh)
    seed, batch_size = int(config.seed), int(train.batch_size)
    if saved is None or (newest_step < num_steps and not Selection.from_manifest(newest_manifest).exhausted(patience)):
      # Compiled from the abstract state, before the state exists: the compiler's working memory and the state never
      # add up (then the compiler's freed memory goes back to the OS; jit reuses the programs).
      batch = jax.ShapeDtypeStruct((batch_size,), jnp.int32, sharding=batch_sharding)
      compilation.compile_ahead(train_step, target, batch, batch)
    start, state, selection = _resume(config, target, checkpointer, dataset)
    data = _load_data(config, workdir)
    if start == 0:
      state = _track_most_frequent_rows(state, data.input_counts)
    # The run ends at num_steps, or where early stopping's count (saved in the checkpoint) reaches the patience.
    stopped_early = selection.exhausted(patience) and start < num_steps
    complete = (start == num_steps or stopped_early) and checkpointer.latest_step() == start  # a rerun writes nothing
    if jax.process_index() == 0 and not complete:
      _record_for_inspection(data, config, workdir)
    events = jax.process_index() == 0 and not complete
    writer = stack.enter_context(contextlib.closing(metrics_lib.make_writer(workdir, events=events, verbose=verbose)))
    stop = signals.agreed(sync_point=True)
    if stop:
      raise signals_lib.Preempted(stop, None)
    signals.interrupting = False  # from here on a signal stops the loop at the next step, after saving it

    if start == 0:
      writer.write_hparams(config_fields.hparams(config))
    param_count = sum(leaf.size for leaf in jax.tree.leaves(target["model"]))  # the model's Params, whatever it is
    log.info("%s, %d parameters, loss floor %.4f nats.", data.source, param_count, data.loss_floor)
    if data.source in sources.SYNTHETIC_SOURCES:
      log.info("The task's hidden table e* is %d wide (data.task_d_model); the model's rows are %d (model.d_model).",
               int(config.data.task_d_model), int(config.model.d_model))
    if data_lib.train_fraction(config) < 1:
      log.info("Training on the first %d pairs of the train split (data.train_fraction=%g); the eval, the floor "
                   "and the references are the whole dataset's.", len(data.train_ids), data_lib.train_fraction(config))
    if selecting:
      log.info("Holding out the train split's last %d pairs for selection (data.selection_fraction=%g): select/loss "
               "at every eval picks the best checkpoint%s.", len(data.select_ids), data_lib.selection_fraction(config),
               f", and the run stops after {patience} evals without a new best" if patience else "")
    if len(data.train_ids) < int(train.batch_size):
      log.warning("data.train_fraction=%g leaves %d train pairs, fewer than one batch (train.batch_size=%d): every "
                  "batch draws the same few pairs again.", data_lib.train_fraction(config), len(data.train_ids),
                  int(train.batch_size))
    _log_asymmetry(data, int(config.model.d_model))
    evaluate = _Evaluator(graphdef, data.eval_ids, data.eval_next, data, config, mesh)
    select_split = _Evaluator(graphdef, data.select_ids, data.select_next, data, config, mesh) if selecting else None
    schedule = optim.learning_rate_schedule(train)
    log_every, eval_every, save_every = int(train.log_every), int(train.eval_every), int(train.checkpoint_every)
    if start < num_steps:  # the evaluations' programs too, then hand the compiler's freed memory back to the OS
      evaluate.compile_ahead(state)
      if select_split is not None:
        select_split.compile_ahead(state)
      host_memory.release_freed()

    progress = metrics_lib.ProgressLine(start, num_steps)  # steps/s and the time left count from here, compiled
    eval_loss, by_bucket, saved_step, started = None, {}, checkpointer.latest_step(), time.perf_counter()
    select_loss, end_step = None, start if stopped_early else num_steps
    if complete:
      if stopped_early:
        log.info("The run stopped early at step %d (%d evals without a lower select/loss than step %d's): nothing "
                 "to train, nothing written.", start, selection.evals_since_best, selection.best_step)
      else:
        log.info("The run is already complete at step %d: nothing to train, nothing written.", num_steps)
      eval_loss, by_bucket = evaluate(state)
      select_loss = select_split(state)[0] if select_split is not None else None
    in_flight = None
    for step in range(start, end_step):
      pairs = data_lib.train_batch(data, seed, step, batch_size)  # the same global batch on every process
      ids, next_ids = mesh_lib.global_batch(pairs, batch_sharding)
      done = step + 1
      log_now = _on_schedule(done, log_every, num_steps)
      eval_now = _on_schedule(done, eval_every, num_steps)
      save_now = _on_schedule(done, save_every, num_steps)
      state, metrics = train_step(state, ids, next_ids, with_stats=log_now)
      if in_flight is not None:
        in_flight.block_until_ready()  # step s - 1: at most two steps in flight
      in_flight = metrics["loss"]
      sync_now = log_now or eval_now or save_now
      if sync_now:
        jax.block_until_ready(state)  # nothing else runs on the devices while a step's collectives are in flight
      stop = signals.agreed(sync_now) if done < num_steps else None  # at the last step, finish normally
      if sync_now or stop:
        nonfinite.check_finite(state, saved_step)
      scalars, select_loss = {}, None
      if log_now:
        scalars.update(_write_log_step(writer, done, float(schedule(step)), metrics, state))
      if eval_now:
        eval_loss, by_bucket = evaluate(state)
        eval_scalars = _write_eval(writer, done, eval_loss, by_bucket, data)
        scalars.update(eval_scalars)
        if select_split is not None:
          select_loss = select_split(state)[0]
          save_now |= selection.record(done, select_loss, eval_scalars)  # the best step always has a checkpoint
          scalars.update(_write_selection(writer, done, select_loss, selection))
          stopped_early = selection.exhausted(patience) and done < num_steps
      if scalars:
        rate = progress.steps_per_second(done)
        writer.write_scalars(done, {"train/steps_per_sec": rate})
        log.info("%s", progress.format(done, scalars, rate))
      if save_now or stop or stopped_early:
        checkpointer.save(done, state, config, dataset, selection, select_loss)
        saved_step = done
      if stopped_early:
        log.info("Early stopping at step %d: %d evals without a lower select/loss than step %d's.",
                 done, selection.evals_since_best, selection.best_step)
        end_step = done
        break
      if stop:
        log.warning("Stopped at step %d after saving its checkpoint: rerun the same command to resume.", done)
        raise signals_lib.Preempted(stop, done)
    if saved_step != end_step:  # a fresh run of num_steps=0
      eval_loss, by_bucket = evaluate(state)
      eval_scalars = _write_eval(writer, end_step, eval_loss, by_bucket, data)
      if select_split is not None:
        select_loss = select_split(state)[0]
        selection.record(end_step, select_loss, eval_scalars)
        _write_selection(writer, end_step, select_loss, selection)
      checkpointer.save(end_step, state, config, dataset, selection, select_loss)
    train_seconds = time.perf_counter() - started

  gap = eval_loss - data.loss_floor
  summary = RunSummary(
      step=end_step,
      eval_loss=eval_loss,
      loss_floor=data.loss_floor,
      gap=gap,
      relative_gap=gap / data.loss_floor if data.loss_floor > 0 else float("inf"),
      param_count=param_count,
      loss_by_input_frequency=by_bucket,
      train_seconds=train_seconds,
      state=state,
      best_step=selection.best_step,
      best_select_loss=selection.best_select_loss,
      best_eval_loss=selection.best_eval.get("eval/loss"),
      best_eval=dict(selection.best_eval),
      select_loss=select_loss,
      stopped_early=stopped_early,
  )
  trained = "" if complete else f", {train_seconds:.1f} s of training"  # a rerun of a finished run trains nothing
  best = "" if selection.best_step is None else (
      f"; best step {selection.best_step} by select/loss: select loss {selection.best_select_loss:.4f}, "
      f"eval loss {summary.best_eval_loss:.4f}")
  log.info(
      "Step %d: eval loss %.4f, floor %.4f, gap %.4f (%.2f%% of the floor), %d parameters%s%s.",
      end_step, eval_loss, data.loss_floor, gap, 100 * summary.relative_gap, param_count, trained, best,
  )
  metrics_lib.closing_lines(pathlib.Path(workdir).absolute(), end_step, selection.best_step)
  return summary
