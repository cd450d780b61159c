"""Read scalar series back from a run's TensorBoard event files (as CLU's writer left them in WORKDIR)."""

from __future__ import annotations

import pathlib

import numpy as np


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
