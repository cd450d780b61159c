"""What a training run says: its opening lines, one console line per log step, scalars and provenance histograms in
TensorBoard event files, its closing lines; and the scalar series read back."""

from __future__ import annotations

import logging
import pathlib
import sys
import time

import ml_collections
import numpy as np
from tensorboard.util.tensor_util import make_ndarray

from tied_embed import workdir as workdir_lib
from tied_embed.data import bigram as data_lib
from tied_embed.data import sources
from tied_embed.train import events as events_lib
from tied_embed.util import shown_path

log = logging.getLogger(__name__)


def write_log_step(writer, step: int, learning_rate: float, metrics: dict, state) -> dict[str, float]:
  """Writes a log step's train/* and grad/* scalars and `state`'s provenance histograms; → the scalars."""
  metrics = dict(metrics)
  scalars = {"train/loss": float(metrics.pop("train_loss")), "train/learning_rate": learning_rate}
  metrics.pop("loss")
  scalars.update({name if "/" in name else f"grad/{name}": float(value) for name, value in metrics.items()})
  writer.write_scalars(step, scalars)
  writer.write_histograms(step, {f"provenance/{name}": np.asarray(state[name][...])
                                 for name in ("lookup_total", "projection_total")})
  return scalars


class ProgressLine:
  """Formats the console line of a log step, with steps/s since the previous one and the time left in seconds."""

  def __init__(self, start: int, num_steps: int):
    self._num_steps = num_steps
    self._last_step, self._last_time = start, time.perf_counter()

  def steps_per_second(self, step: int) -> float:
    """Steps per second since the previous call (or the start), and resets the clock."""
    now = time.perf_counter()
    rate = (step - self._last_step) / max(now - self._last_time, 1e-9)
    self._last_step, self._last_time = step, now
    return rate

  def format(self, step: int, scalars: dict[str, float], rate: float) -> str:
    """'step 100/3000 | loss 4.9789 | eval 3.8831 gap 2.8% | grad lookup 0.070 proj 0.070 cos 0.24 ...'."""
    parts = [f"step {step}/{self._num_steps}"]
    if "train/loss" in scalars:
      parts.append(f"loss {scalars['train/loss']:.4f}")
    if "eval/loss" in scalars:
      floor = scalars["eval/loss_floor"]
      gap = f"{100 * scalars['eval/gap'] / floor:.1f}%" if floor > 0 else f"{scalars['eval/gap']:.4f}"
      parts.append(f"eval {scalars['eval/loss']:.4f} gap {gap}")
    if "select/loss" in scalars:
      parts.append(f"select {scalars['select/loss']:.4f} best@{int(scalars['select/best_step'])}")
    if "grad/cosine" in scalars:
      parts.append(f"grad lookup {scalars['grad/lookup_norm']:.3g} proj {scalars['grad/projection_norm']:.3g} "
                   f"cos {scalars['grad/cosine']:.2f} proj-only rows {int(scalars['grad/rows_projection_only'])}")
    left = (self._num_steps - step) / rate if rate > 0 else float("inf")
    parts.append(f"{rate:.0f} steps/s, {left:.0f} s left")
    return " | ".join(parts)


def venv_command(name: str, *module: str) -> str:
  """How to start the console script `name` as pasted into a shell without this venv activated: the script beside
  this Python (.venv/bin/tied-embed-inspect), else `python -m module` with this Python; as `shown_path` shows paths."""
  beside = pathlib.Path(sys.executable).parent / name
  if beside.is_file():
    return shown_path(beside)
  if module:
    return " ".join([shown_path(pathlib.Path(sys.executable)), "-m", *module])
  return name


def opening_lines(config: ml_collections.ConfigDict, data: data_lib.BigramData, param_count: int,
                  antisymmetric_share: float | None, param_table: str = "") -> None:
  """The lines that open a run: the data, the model's size and the floor, its arrays (`param_table`), what the config
  makes of the task and, where given, how much of it a tied table cannot fit (`antisymmetric_share`)."""
  train, patience = config.train, int(config.train.early_stopping_patience)
  log.info("%s, %d parameters, loss floor %.4f nats.", data.source, param_count, data.loss_floor)
  for line in param_table.splitlines():
    log.info("%s", line)
  if data.source in sources.SYNTHETIC_SOURCES:
    log.info("The task's hidden table e* is %d wide (data.task_d_model); the model's rows are %d (model.d_model).",
             int(config.data.task_d_model), int(config.model.d_model))
  if data_lib.train_fraction(config) < 1:
    log.info("Training on the first %d pairs of the train split (data.train_fraction=%g); the eval, the floor "
             "and the references are the whole dataset's.", len(data.train_ids), data_lib.train_fraction(config))
  if data_lib.selection_fraction(config) > 0:
    log.info("Holding out the train split's last %d pairs for selection (data.selection_fraction=%g): select/loss "
             "at every eval picks the best checkpoint%s%s.", len(data.select_ids), data_lib.selection_fraction(config),
             f" (a new best is more than {float(train.min_delta):g} nats lower)" if float(train.min_delta) else "",
             f", and the run stops after {patience} evals without a new best" if patience else "")
  if len(data.train_ids) < int(train.batch_size):
    log.warning("data.train_fraction=%g leaves %d train pairs, fewer than one batch (train.batch_size=%d): every "
                "batch draws the same few pairs again.", data_lib.train_fraction(config), len(data.train_ids),
                int(train.batch_size))
  if antisymmetric_share is not None:
    log.info("Asymmetry budget: %.3f of the task's row-centred log-probabilities is antisymmetric, which a tied "
             "table (symmetric logits E·Eᵀ) cannot fit; an untied one can.", antisymmetric_share)


def closing_lines(workdir: pathlib.Path, step: int, best_step: int | None = None) -> None:
  """Where the run left its checkpoints (and the best, while there), and the commands that look at them."""
  shown, checkpoints = (shown_path(path) for path in (workdir, workdir_lib.checkpoints(workdir)))
  best = ""
  if best_step is not None:
    kept = (workdir_lib.checkpoints(workdir) / str(best_step)).is_dir()
    best = f", best: step {best_step}, " + ("inspect it with --step best" if kept else "its checkpoint is gone")
  log.info("Checkpoints in %s (latest: step %d%s). Inspect: %s --workdir %s | Watch: %s --logdir %s",
           checkpoints, step, best, venv_command("tied-embed-inspect", "tied_embed.inspection"), shown,
           venv_command("tensorboard"), shown)


def read_scalars(logdir: str | pathlib.Path, tags: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """{tag: (steps (N,) int64, values (N,) float64)} from `logdir`'s event files; a step written twice keeps the last."""
  wanted = set(tags)
  series: dict[str, dict[int, float]] = {}
  for path in workdir_lib.event_files(logdir):
    for event in sorted(events_lib.load_events(path), key=lambda event: event.wall_time):
      for value in (value for value in event.summary.value if value.tag in wanted):
        number = float(make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
        series.setdefault(value.tag, {})[int(event.step)] = number
  return {tag: (np.array(sorted(by_step), np.int64), np.array([by_step[s] for s in sorted(by_step)], np.float64))
          for tag, by_step in series.items()}


def value_at(series: tuple[np.ndarray, np.ndarray] | None, step: int) -> dict[str, float] | None:
  """The last logged value at or before `step`: ((N,), (N,)) → {'step', 'value'}, or None if there is none."""
  if series is None:
    return None
  steps, values = series
  index = int(np.searchsorted(steps, step, side="right")) - 1
  return None if index < 0 else {"step": int(steps[index]), "value": float(values[index])}
