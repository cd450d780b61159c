"""What a training run says while it runs: one compact console line per log step, full detail in TensorBoard.

The console gets, at each log step, the step, the train loss, the eval loss and its gap to the floor when there
is an eval, the provenance split in a few numbers (lookup and projection gradient norms, their cosine, the rows
that learned only through the projection), the speed and the time left. Everything (every scalar, the provenance
histograms) goes to the TensorBoard event files; `verbose` also echoes every scalar and histogram to the log,
as CLU's default writer does.
"""

from __future__ import annotations

import logging
import pathlib
import sys
import time

import numpy as np
from clu import metric_writers

from tied_embed.util import shell_quote

log = logging.getLogger(__name__)


def make_writer(workdir: pathlib.Path, *, events: bool, verbose: bool) -> metric_writers.MetricWriter:
  """The run's metric writer: TensorBoard events in `workdir` if `events`, plus every value logged if `verbose`."""
  writers: list[metric_writers.MetricWriter] = []
  if verbose:
    writers.append(metric_writers.LoggingWriter())
  if events:
    writers.append(metric_writers.SummaryWriter(str(workdir)))
  return metric_writers.AsyncMultiWriter(writers)


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
      parts.append(
          f"grad lookup {scalars['grad/lookup_norm']:.3g} proj {scalars['grad/projection_norm']:.3g} "
          f"cos {scalars['grad/cosine']:.2f} proj-only rows {int(scalars['grad/rows_projection_only'])}"
      )
    left = (self._num_steps - step) / rate if rate > 0 else float("inf")
    parts.append(f"{rate:.0f} steps/s, {left:.0f} s left")
    return " | ".join(parts)


def shown_path(path: pathlib.Path) -> str:
  """`path` relative to the current directory when it is inside it ('runs/default'), else absolute."""
  path = pathlib.Path(path).absolute()
  try:
    return str(path.relative_to(pathlib.Path.cwd())) or "."
  except ValueError:
    return str(path)


def venv_command(name: str, *module: str) -> str:
  """How to start the console script `name` as pasted into a shell without this venv activated: the script beside
  this Python (.venv/bin/tied-embed-inspect), else `python -m module` with this Python; quoted, as `shown_path`."""
  beside = pathlib.Path(sys.executable).parent / name
  if beside.is_file():
    return shell_quote(shown_path(beside))
  if module:
    return " ".join([shell_quote(shown_path(pathlib.Path(sys.executable))), "-m", *module])
  return name


def closing_lines(workdir: pathlib.Path, step: int, best_step: int | None = None) -> None:
  """Where the run left its checkpoints (the best one by select/loss too, when there is one), and the commands that
  look at them, to paste as they are (paths as `shown_path` gives them, quoted for the shell)."""
  shown = shell_quote(shown_path(workdir))
  best = "" if best_step is None else f", best: step {best_step}, inspect it with --step best"
  log.info(
      "Checkpoints in %s (latest: step %d%s). Inspect: %s --workdir %s | Watch: %s --logdir %s",
      shell_quote(shown_path(pathlib.Path(workdir) / "checkpoints")), step, best,
      venv_command("tied-embed-inspect", "tied_embed.inspection"), shown, venv_command("tensorboard"), shown,
  )


# Read scalar series back from a run's TensorBoard event files (as CLU's writer left them in WORKDIR).

def read_scalars(logdir: str | pathlib.Path, tags: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Scalar series from the event files directly in `logdir` (not its subfolders, e.g. report/).

  Returns {tag: (steps (N,) int64, values (N,) float64)} sorted by step, for each tag that occurs. When a step
  was written twice (a resumed run repeats the steps after its last checkpoint), the later write wins.
  """
  from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: PLC0415
  from tensorboard.util.tensor_util import make_ndarray  # noqa: PLC0415

  wanted = set(tags)
  series: dict[str, dict[int, float]] = {}
  for path in sorted(pathlib.Path(logdir).glob("events.out.tfevents.*")):
    events = sorted(EventFileLoader(str(path)).Load(), key=lambda event: event.wall_time)
    for event in events:
      for value in event.summary.value:
        if value.tag not in wanted:
          continue
        number = float(make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
        series.setdefault(value.tag, {})[int(event.step)] = number
  result = {}
  for tag, by_step in series.items():
    steps = np.array(sorted(by_step), np.int64)
    result[tag] = (steps, np.array([by_step[s] for s in steps], np.float64))
  return result


def value_at(series: tuple[np.ndarray, np.ndarray] | None, step: int) -> dict[str, float] | None:
  """The last logged value at or before `step`: ((N,), (N,)) → {'step', 'value'}, or None if there is none."""
  if series is None:
    return None
  steps, values = series
  index = int(np.searchsorted(steps, step, side="right")) - 1
  if index < 0:
    return None
  return {"step": int(steps[index]), "value": float(values[index])}
