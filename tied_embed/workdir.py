"""A run's workdir: every path a run keeps under it, named once. The trainer writes them, inspection reads them,
and every other module asks here for them.

  WORKDIR/
    .lock                   whose the workdir is while a run or an inspection holds it (tied_embed/util.py's lock)
    checkpoints/<step>/     Orbax checkpoints: the state, the config, a manifest (tied_embed/train/checkpoint.py)
    damaged_checkpoints/    checkpoints that failed their check on resume, moved aside whole
    data/                   the TFDS dataset, unless data.data_dir names another place (tied_embed/data/cache.py)
    report_data.npz         what inspection needs of the data, so it reads nothing outside the workdir
    tokenizer.model         a SentencePiece run's vocabulary, beside it
    kernels.json            which C++ kernels the last run here trained on (tied_embed/fast/kernels/in_use.py)
    events.out.tfevents.*   TensorBoard events (tied_embed/train/events.py)
    report/                 inspection's report.md, its pictures and their events
"""

from __future__ import annotations

import os
import pathlib

LOCK = ".lock"
CHECKPOINTS = "checkpoints"
DAMAGED_CHECKPOINTS = "damaged_checkpoints"
DATA = "data"
REPORT = "report"
REPORT_DATA = "report_data.npz"
TOKENIZER = "tokenizer.model"
KERNELS = "kernels.json"
EVENTS_PREFIX = "events.out.tfevents."

FOLDERS = (CHECKPOINTS, DAMAGED_CHECKPOINTS, DATA, REPORT)  # the folders a run keeps
RUN_FILES = (KERNELS, REPORT_DATA, TOKENIZER)  # the files a run writes beside its events


def checkpoints(workdir: str | os.PathLike) -> pathlib.Path:
  """WORKDIR/checkpoints, absolute (Orbax takes no relative path)."""
  return pathlib.Path(workdir).absolute() / CHECKPOINTS


def damaged_checkpoints(workdir: str | os.PathLike) -> pathlib.Path:
  """WORKDIR/damaged_checkpoints, absolute."""
  return pathlib.Path(workdir).absolute() / DAMAGED_CHECKPOINTS


def data(workdir: str | os.PathLike) -> pathlib.Path:
  """WORKDIR/data: the dataset's place when data.data_dir is ''."""
  return pathlib.Path(workdir) / DATA


def report(workdir: str | os.PathLike) -> pathlib.Path:
  """WORKDIR/report: inspection's report and pictures."""
  return pathlib.Path(workdir) / REPORT


def report_data(workdir: str | os.PathLike) -> pathlib.Path:
  """WORKDIR/report_data.npz."""
  return pathlib.Path(workdir) / REPORT_DATA


def tokenizer(workdir: str | os.PathLike) -> pathlib.Path:
  """WORKDIR/tokenizer.model."""
  return pathlib.Path(workdir) / TOKENIZER


def event_files(directory: str | os.PathLike) -> list[pathlib.Path]:
  """The TensorBoard event files directly in `directory` (the workdir, or its report/), in name order."""
  return sorted(pathlib.Path(directory).glob(EVENTS_PREFIX + "*"))
