"""`train_and_evaluate(config, workdir)`: the training loop, its logging and its checkpoints.

Step s (0-based) trains on the batch `data.train_batch(data, seed, s, batch_size)` and leaves the run at step
s + 1, the number every log line, eval and checkpoint is labelled with. A workdir holding checkpoints resumes
from the newest one that reads back whole; since batches depend only on (seed, step) and a checkpoint holds the
whole train state plus the train-loss window, the resumed run repeats the uninterrupted one bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import time

import jax
import ml_collections
import numpy as np
from absl import logging
from clu import metric_writers, periodic_actions
from flax import nnx

from tied_embed import checkpoint, guard, multihost_data, optim, preemption
from tied_embed import data as data_lib
from tied_embed import mesh as mesh_lib
from tied_embed import train_step as step_lib
from tied_embed import workdir as workdir_lib
from tied_embed.config_validation import validate_config
from tied_embed.errors import UsageError
from tied_embed.model import param_counts


@dataclasses.dataclass
class RunSummary:
  """Where a run ended: its final eval loss against the floor, its size and time, and its final state."""

  step: int
  eval_loss: float
  loss_floor: float
  gap: float  # eval_loss - loss_floor
  relative_gap: float  # gap / loss_floor
  param_count: int
  train_seconds: float  # the training loop of this invocation (after data loading), including evals
  state: nnx.State  # the final TrainState's state (model, optimizer, provenance totals), on the mesh


def _on_schedule(step: int, every: int, num_steps: int) -> bool:
  """Whether the run, now at `step`, logs/evaluates/saves: every `every` steps and at the last step."""
  return step % every == 0 or step == num_steps


class _Evaluator:
  """The whole validation split, placed on the mesh once, scored in batches into an nnx.metrics.Average."""

  def __init__(self, graphdef, data: data_lib.BigramData, config: ml_collections.ConfigDict, mesh):
    self._losses = step_lib.make_eval_losses(graphdef, int(config.loss.chunk_size))
    size, data_size = int(config.train.eval_batch_size), mesh.shape["data"]
    self._batches = []
    for start in range(0, len(data.eval_ids), size):
      ids, next_ids = data.eval_ids[start : start + size], data.eval_next[start : start + size]
      # A short last batch that `data` doesn't divide is scored whole on every device instead.
      sharding = mesh_lib.batch_sharding(mesh) if len(ids) % data_size == 0 else mesh_lib.replicated(mesh)
      self._batches.append(jax.device_put((ids, next_ids), sharding))

  def __call__(self, state: nnx.State) -> float:
    """Mean loss over the validation split at `state`'s parameters."""
    metric = nnx.metrics.Average("loss")
    for ids, next_ids in self._batches:
      metric.update(loss=self._losses(state, ids, next_ids))
    return float(metric.compute())


def _initial_state(config: ml_collections.ConfigDict, target: nnx.State) -> nnx.State:
  """A fresh TrainState's state, created directly in the shardings of `target`."""
  shardings = jax.tree.map(lambda leaf: leaf.sharding, target)
  tx = optim.make_optimizer(config.train)
  return jax.jit(lambda: nnx.state(step_lib.TrainState(step_lib.build_model(config), tx)), out_shardings=shardings)()


def _write_log_step(writer, step: int, train_loss: float, learning_rate: float, stats: dict, state: nnx.State) -> None:
  """The train/* and grad/* scalars of a log step and the provenance histograms."""
  scalars = {"train/loss": train_loss, "train/learning_rate": learning_rate}
  scalars.update({f"grad/{name}": float(value) for name, value in jax.device_get(stats).items()})
  writer.write_scalars(step, scalars)
  writer.write_histograms(
      step,
      {
          "provenance/lookup_total": np.asarray(state["lookup_total"][...]),
          "provenance/projection_total": np.asarray(state["projection_total"][...]),
      },
  )


def _resume(
    config: ml_collections.ConfigDict, target: nnx.State, checkpointer: checkpoint.Checkpointer
) -> tuple[int, nnx.State, guard.Tally]:
  """The step, train state and tally to start from: the newest intact checkpoint's, or fresh ones at step 0."""
  restored = checkpointer.restore_newest_intact(target)
  if restored is None:
    return 0, _initial_state(config, target), guard.new_tally(0)
  start, state, progress = restored
  if start > int(config.train.num_steps):
    raise UsageError.bad_value("train.num_steps", config.train.num_steps, f"at least {start}, the latest checkpoint")
  logging.info("Resuming from the checkpoint at step %d.", start)
  return start, state, guard.new_tally(start, progress["train_loss_sum"], progress["train_loss_count"])


def _progress(tally: guard.Tally) -> dict[str, float | int]:
  """What a checkpoint keeps of the tally: the train-loss window, exactly (a float32 is exact as a JSON float)."""
  return {"train_loss_sum": float(tally["loss_sum"]), "train_loss_count": int(tally["loss_count"])}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | pathlib.Path) -> RunSummary:
  """Trains `config` in `workdir` (resuming from its newest intact checkpoint) and returns where it ended.

  Raises, before loading data or compiling anything, UsageError if the config is invalid (nothing written), if
  the workdir cannot be written, if its checkpoints were made by a different run (workdir.RESUMABLE_CHANGES)
  or if none of them reads back. Stops with preemption.Preempted after saving on SIGTERM/SIGINT, with
  guard.NonFinite at a non-finite loss or gradient (saving nothing after it), with checkpoint.WriteFailed.
  Whatever the outcome, the saves already started finish and the logs are flushed before it returns or raises.
  """
  validate_config(config)
  workdir = workdir_lib.ensure_writable(workdir)
  saved_config = checkpoint.newest_saved_config(workdir)
  if saved_config is not None:
    workdir_lib.check_compatible(saved_config, config, str(checkpoint.checkpoint_dir(workdir)))
  mesh = mesh_lib.make_mesh(config.mesh)
  graphdef, target = checkpoint.abstract_state(config, mesh)
  try:
    with contextlib.closing(checkpoint.Checkpointer(workdir, int(config.train.keep_checkpoints))) as checkpointer:
      start, state, tally = _resume(config, target, checkpointer)
      data = multihost_data.load_bigram_data(config, workdir)
      writer = metric_writers.create_default_writer(workdir, just_logging=jax.process_index() > 0)
      try:
        return _train(config, data, mesh, graphdef, target, checkpointer, writer, start, state, tally)
      finally:
        writer.close()  # flushes
  except preemption.Preempted as stopped:  # by now its checkpoint is written (closing waits for the save)
    logging.warning("Stopped at step %d after saving its checkpoint: rerun the same command to resume.", stopped.step)
    raise


def _train(config, data, mesh, graphdef, target, checkpointer, writer, start, state, tally) -> RunSummary:
  """The loop of `train_and_evaluate`, from `start` with `state` and `tally`, on open `checkpointer`/`writer`."""
  train, num_steps = config.train, int(config.train.num_steps)
  if start == 0:
    writer.write_hparams(workdir_lib.flatten_config(config))
  counts = param_counts(int(config.model.vocab_size), int(config.model.d_model))
  param_count = counts.tied if config.model.tied else counts.untied
  logging.info("%s, %d parameters, loss floor %.4f nats.", data.source, param_count, data.loss_floor)

  chunk_size = int(config.loss.chunk_size)
  shardings = jax.tree.map(lambda leaf: leaf.sharding, target)
  train_step = guard.guarded_step(step_lib.make_train_step(graphdef, chunk_size), shardings)
  diagnostics = step_lib.make_diagnostics(graphdef, chunk_size)
  evaluate = _Evaluator(graphdef, data, config, mesh)
  schedule = optim.learning_rate_schedule(train)
  batch_sharding = mesh_lib.batch_sharding(mesh)
  report_progress = periodic_actions.ReportProgress(
      num_train_steps=num_steps, writer=writer, every_steps=int(train.log_every)
  )
  seed, batch_size = int(config.seed), int(train.batch_size)
  every = {what: int(train[f"{what}_every"]) for what in ("log", "eval", "checkpoint")}

  def write_eval(step: int) -> float:
    with report_progress.timed("eval"):
      loss = evaluate(state)
    writer.write_scalars(
        step, {"eval/loss": loss, "eval/loss_floor": data.loss_floor, "eval/gap": loss - data.loss_floor}
    )
    return loss

  eval_loss, saved_step, started = None, checkpointer.latest_step(), time.perf_counter()
  with preemption.StopSignals() as signals:
    for step in range(start, num_steps):
      pairs = data_lib.train_batch(data, seed, step, batch_size)  # the same global batch on every process
      batch = multihost_data.global_batch(pairs, batch_sharding)
      done = step + 1
      log_now, eval_now, save_now = (_on_schedule(done, every[what], num_steps) for what in every)
      # Diagnostics read the parameters the step is about to update, before the step donates them.
      stats = diagnostics(state, *batch) if log_now else None
      state, tally = train_step(state, tally, *batch)
      report_progress(done)
      sync_now = log_now or eval_now or save_now
      stop = signals.agreed(sync_now) if done < num_steps else None  # at the last step, finish normally
      if sync_now or stop:
        guard.check(tally, saved_step)  # a host sync, but only where the loop syncs anyway
      if log_now:
        train_loss, tally = guard.train_loss(tally)
        _write_log_step(writer, done, train_loss, float(schedule(step)), stats, state)
      if eval_now:
        eval_loss = write_eval(done)
      if save_now or stop:
        checkpointer.save(done, state, config, _progress(tally))
        saved_step = done
      if stop:
        raise preemption.Preempted(stop, done)
  if eval_loss is None:  # nothing left to train: report where the run is
    eval_loss = write_eval(num_steps)
  if saved_step != num_steps:  # a fresh run of num_steps=0
    checkpointer.save(num_steps, state, config, _progress(tally))
  train_seconds = time.perf_counter() - started
  gap = eval_loss - data.loss_floor
  summary = RunSummary(
      step=num_steps,
      eval_loss=eval_loss,
      loss_floor=data.loss_floor,
      gap=gap,
      relative_gap=gap / data.loss_floor if data.loss_floor > 0 else float("inf"),
      param_count=param_count,
      train_seconds=train_seconds,
      state=state,
  )
  logging.info(
      "Step %d: eval loss %.4f, floor %.4f, gap %.4f (%.2f%% of the floor), %d parameters, %.1f s of training.",
      num_steps, eval_loss, data.loss_floor, gap, 100 * summary.relative_gap, param_count, train_seconds,
  )
  return summary
