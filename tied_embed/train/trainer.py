"""`train_and_evaluate(config, workdir)`: the training loop, its logging and its checkpoints.

Step s (0-based) trains on `train_batch(data, seed, s, batch_size)` and leaves the run at step s + 1, the number its
logs, evals and checkpoints carry. Batches depend only on (seed, step) and a checkpoint holds the whole train state, so
a resumed run repeats the uninterrupted one bit for bit."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import pathlib
import time
from collections.abc import Callable

import jax
import ml_collections
import numpy as np
from flax import nnx

from tied_embed.core import optim
from tied_embed.data import windows
from tied_embed.data.bigram import BigramData
from tied_embed.fast import compilation
from tied_embed.train import config as config_lib
from tied_embed.train import evaluation, nonfinite, run_setup
from tied_embed.train import mesh as mesh_lib
from tied_embed.train import metrics as metrics_lib
from tied_embed.train import signals as signals_lib
from tied_embed.train.run_setup import OpenRun

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RunSummary:
  """Where a run ended: its final eval loss, floor, size, time and state, and its best step by select/loss if any."""

  step: int  # train.num_steps, or where early stopping stopped the run
  eval_loss: float
  loss_floor: float
  gap: float  # eval_loss - loss_floor
  relative_gap: float  # gap / loss_floor
  param_count: int
  loss_by_input_frequency: dict[str, float]  # {'rare': nats, ...}: eval loss per bucket that holds eval pairs
  train_seconds: float  # this invocation's training loop (after data loading), evals included
  state: nnx.State  # the final RunState's state, on the mesh
  # With a selection split (else None, None, None, {}, None): the best step by select/loss (its checkpoint is kept),
  # its select/loss, eval loss and eval/* scalars; and select/loss at the final step.
  best_step: int | None = None
  best_select_loss: float | None = None
  best_eval_loss: float | None = None
  best_eval: dict[str, float] = dataclasses.field(default_factory=dict)
  select_loss: float | None = None
  stopped_early: bool = False  # early stopping ended the run before train.num_steps


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | pathlib.Path, *, verbose: bool = False,
                       checked: bool = False, on_complete: Callable[[], None] | None = None) -> RunSummary:
  """Trains `config` in `workdir`, resuming from its newest intact checkpoint, to train.num_steps or early stopping; →
  where it ended.

  `checked`: the caller ran `config_lib.validate`. `verbose`: also log every scalar and histogram. Raises UsageError
  (`run_setup.open_run`) before anything is written; signals_lib.Preempted (after saving), nonfinite.NonFinite,
  checkpoint.WriteFailed, events.EventsFailed, with started saves finished and logs flushed. `on_complete()` runs once
  everything is written, before the closing lines."""
  if not checked:
    config_lib.validate(config)
  try:
    with contextlib.ExitStack() as stack:  # on the way out the checkpointer's saves finish and the writer flushes
      run = run_setup.open_run(config, workdir, stack, verbose=verbose)
      if run.start == 0:  # a fresh run's hyperparameters, to TensorBoard
        run.writer.write_hparams(config_lib.hparams(run.config))
      metrics_lib.opening_lines(run.config, run.data, run.param_count, run.antisymmetric_share, run.param_table)
      ended = train_loop(run)
  except signals_lib.Interrupted as interrupted:  # a signal during set-up: nothing to save yet
    raise signals_lib.Preempted(interrupted.signum, None) from None
  if on_complete is not None:
    on_complete()
  return finish(run, ended)


@dataclasses.dataclass
class _Ended:
  """Where the loop leaves the run: the step it ends at, its latest eval, and whether early stopping ended it."""

  step: int
  stopped_early: bool
  eval_loss: float | None = None
  by_bucket: dict[str, float] = dataclasses.field(default_factory=dict)  # eval loss by input-frequency bucket
  select_loss: float | None = None  # at the latest step, where it was an eval with a selection split
  train_seconds: float = 0.0


def train_loop(run: OpenRun) -> _Ended:
  """Trains from run.start to train.num_steps or to where early stopping ends the run, logging, evaluating and
  saving on schedule; a complete run is only evaluated, and a fresh run of num_steps=0 evaluated and saved."""
  held_out = evaluation.HeldOut(run.graphdef, run.data, run.config, run.mesh)
  if run.start < run.num_steps:  # the evaluations' programs too, then hand the compiler's freed memory back to the OS
    held_out.compile_ahead(run.state)
    compilation.release_freed()
  ended = _Ended(step=run.start if run.stopped_early else run.num_steps, stopped_early=run.stopped_early)
  started = time.perf_counter()
  if run.complete:
    if run.stopped_early:
      log.info("The run stopped early at step %d (%d evals without a lower select/loss than step %d's): nothing "
               "to train, nothing written.", run.start, run.selection.evals_since_best, run.selection.best_step)
    else:
      log.info("The run is already complete at step %d: nothing to train, nothing written.", run.num_steps)
    ended.eval_loss, ended.by_bucket = held_out.evaluate(run.state)
    ended.select_loss = held_out.select(run.state)[0] if held_out.select is not None else None
  saved_step = _train_steps(run, held_out, ended)
  if saved_step != ended.step:  # a fresh run of num_steps=0
    _evaluate(run, held_out, ended, ended.step)
    run.checkpointer.save(ended.step, run.state, run.selection, ended.select_loss)
  ended.train_seconds = time.perf_counter() - started
  return ended


def _train_steps(run: OpenRun, held_out: evaluation.HeldOut, ended: _Ended) -> int | None:
  """Steps the run from run.start to ended.step; → the newest checkpoint's step. Raises signals_lib.Preempted after
  saving.

  At most two steps are in flight, and each sync point (log, eval, save) waits for the step first: on XLA:CPU a
  collective holds a thread of a shared pool until every participant arrives, so with many steps dispatched ahead the
  threads can all wait, until a 40 s rendezvous timeout aborts the run."""
  config, train, num_steps = run.config, run.config.train, run.num_steps
  seed, batch_size, batch_sharding = int(config.seed), int(train.batch_size), mesh_lib.batch_sharding(run.mesh)
  every = [int(train[name]) for name in ("log_every", "eval_every", "checkpoint_every")]
  schedule = jax.jit(optim.learning_rate_schedule(train))  # one program, not one per arithmetic op run eagerly
  progress = metrics_lib.ProgressLine(run.start, num_steps)  # steps/s and the time left count from here, compiled
  in_flight, saved_step = None, run.checkpointer.latest_step()
  for step in range(run.start, ended.step):
    pairs = train_batch(run.data, seed, step, batch_size)  # the same global batch on every process
    ids, next_ids = mesh_lib.global_batch(pairs, batch_sharding)
    done = step + 1
    log_now, eval_now, save_now = (done % n == 0 or done == num_steps for n in every)  # and at the last step
    run.state, metrics = run.train_step(run.state, ids, next_ids, with_stats=log_now)
    if in_flight is not None:
      in_flight.block_until_ready()  # step s - 1
    in_flight = metrics["loss"]
    sync_now = log_now or eval_now or save_now
    if sync_now:
      jax.block_until_ready(run.state)
    stop = run.signals.agreed(sync_now) if done < num_steps else None  # at the last step, finish normally
    if sync_now or stop:
      nonfinite.check_finite(run.state, saved_step, config)
    scalars, ended.select_loss = {}, None
    if eval_now:
      eval_scalars, new_best = _evaluate(run, held_out, ended, done)
      scalars.update(eval_scalars)
      save_now |= new_best  # the best step always has a checkpoint
      if held_out.select is not None:
        ended.stopped_early = run.selection.exhausted(int(train.early_stopping_patience)) and done < num_steps
    if log_now:
      learning_rate = float(schedule(step))
      scalars.update(metrics_lib.write_log_step(run.writer, done, learning_rate, jax.device_get(metrics), run.state))
    if scalars:
      rate = progress.steps_per_second(done)
      run.writer.write_scalars(done, {"train/steps_per_sec": rate})
      log.info("%s", progress.format(done, scalars, rate))
    if save_now or stop or ended.stopped_early:
      run.writer.flush()  # a checkpoint's events are on disk before it: a run killed after it has logged them
      run.checkpointer.save(done, run.state, run.selection, ended.select_loss)
      saved_step = done
    if ended.stopped_early:
      log.info("Early stopping at step %d: %d evals without a lower select/loss than step %d's.",
               done, run.selection.evals_since_best, run.selection.best_step)
      ended.step = done
      break
    if stop:
      log.warning("Stopped at step %d after saving its checkpoint: rerun the same command to resume.", done)
      raise signals_lib.Preempted(stop, done)
  return saved_step


def train_batch(data: BigramData, seed: int, step: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
  """The global batch of `step`, a pure function of (seed, step): ids, next_ids (B,) int32 pairs, or (B, L) windows."""
  rng = np.random.default_rng([seed, step])
  if data.context_length > 1:
    rows = rng.integers(0, len(data.train_starts), size=batch_size)
    return windows.window_batch(data.train_ids, data.train_next, data.train_starts, rows, data.context_length)
  rows = rng.integers(0, len(data.train_ids), size=batch_size)
  return data.train_ids[rows], data.train_next[rows]


def _evaluate(run: OpenRun, held_out: evaluation.HeldOut, ended: _Ended, step: int) -> tuple[dict[str, float], bool]:
  """Scores run.state on the held-out splits, writes eval/* (select/*) at `step`; → the scalars, whether a new best."""
  ended.eval_loss, ended.by_bucket = held_out.evaluate(run.state)
  scalars, new_best = evaluation.eval_scalars(ended.eval_loss, ended.by_bucket, run.data), False
  if held_out.select is not None:
    ended.select_loss = held_out.select(run.state)[0]
    new_best = run.selection.record(step, ended.select_loss, scalars, float(run.config.train.min_delta))
    scalars.update({"select/loss": ended.select_loss, "select/best_step": float(run.selection.best_step)})
  run.writer.write_scalars(step, scalars)
  return scalars, new_best


def finish(run: OpenRun, ended: _Ended) -> RunSummary:
  """The run's summary, and its closing lines: the final eval (and best step), the checkpoints and commands to look."""
  data, selection = run.data, run.selection
  gap = ended.eval_loss - data.loss_floor
  summary = RunSummary(
      step=ended.step, eval_loss=ended.eval_loss, loss_floor=data.loss_floor, gap=gap,
      relative_gap=gap / data.loss_floor if data.loss_floor > 0 else float("inf"), param_count=run.param_count,
      loss_by_input_frequency=ended.by_bucket, train_seconds=ended.train_seconds, state=run.state,
      best_step=selection.best_step, best_select_loss=selection.best_select_loss,
      best_eval_loss=selection.best_eval.get("eval/loss"), best_eval=dict(selection.best_eval),
      select_loss=ended.select_loss, stopped_early=ended.stopped_early)
  trained = "" if run.complete else f", {ended.train_seconds:.1f} s of training"  # a rerun of a finished run: none
  best = "" if selection.best_step is None else (
      f"; best step {selection.best_step} by select/loss: select loss {selection.best_select_loss:.4f}, "
      f"eval loss {summary.best_eval_loss:.4f}")
  log.info("Step %d: eval loss %.4f, floor %.4f, gap %.4f (%.2f%% of the floor), %d parameters%s%s.", ended.step,
           ended.eval_loss, data.loss_floor, gap, 100 * summary.relative_gap, run.param_count, trained, best)
  metrics_lib.closing_lines(pathlib.Path(run.workdir).absolute(), ended.step, selection.best_step)
  return summary
