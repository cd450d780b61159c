"""What inspection needs of a run's data, WORKDIR/report_data.npz (written by `bigram.record_for_inspection`): the
reference's small record, the input counts (V,) and the floor."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import stat
import zipfile
from typing import Any

import numpy as np

from tied_embed import util
from tied_embed import workdir as workdir_lib
from tied_embed.data import sources
from tied_embed.data.base import LogProbRows

_RECORD_PREFIX = "record."
# What the arrays of a report_data.npz may expand to: this much, plus this many times the file's own size. Float
# tables barely compress and counts a few times; a file that expands further is not one a run wrote (a zip bomb).
_EXPANDED_BYTES = 64 << 20
_EXPANSION = 64


@dataclasses.dataclass
class InspectionData:
  """The data-side facts of a run: the source, its reference table (row by row), floor and input counts."""

  source: str
  identity: str
  vocab_size: int
  loss_floor: float
  reference_name: str  # 'true' or 'empirical'
  true_log_probs: LogProbRows  # (V, V) log P(next | current), computed per row
  input_counts: np.ndarray  # (V,) int64: how often each token is current in the train pairs used
  tokenizer: Any = None  # text sources: a `tied_embed.data.text.tokenizer.Tokenizer` (labels, encode/decode)
  eval_input_counts: np.ndarray | None = None  # (V,) int64: how often each token is current in validation


def write(workdir: str | pathlib.Path, data: InspectionData, record: dict[str, np.ndarray]) -> pathlib.Path:
  """Writes WORKDIR/report_data.npz and a SentencePiece model as WORKDIR/tokenizer.model, each whole or not at all."""
  arrays = {
      "source": np.array(data.source), "identity": np.array(data.identity), "vocab_size": np.array(data.vocab_size),
      "loss_floor": np.array(data.loss_floor), "reference_name": np.array(data.reference_name),
      "input_counts": np.asarray(data.input_counts, np.int64),
      **({} if data.eval_input_counts is None else {"eval_input_counts": np.asarray(data.eval_input_counts, np.int64)}),
      **{_RECORD_PREFIX + key: value for key, value in record.items()},
  }
  # Only the run holding the workdir's lock writes here: a killed writer's temporary files can go.
  if "tokenizer_model" in record:
    model = np.asarray(record["tokenizer_model"]).tobytes()
    util.write_atomically(workdir_lib.tokenizer(workdir), model, remove_stale=True)
  return util.write_atomically(workdir_lib.report_data(workdir), lambda f: np.savez_compressed(f, **arrays),
                               remove_stale=True)


def read(workdir: str | pathlib.Path) -> InspectionData | None:
  """WORKDIR/report_data.npz as InspectionData, or None; ValueError or OSError if unreadable or not a run's."""
  path = workdir_lib.report_data(workdir)
  try:
    mode = path.lstat().st_mode
  except FileNotFoundError:
    return None
  if stat.S_ISLNK(mode):
    return None
  if not stat.S_ISREG(mode):  # a FIFO would be waited on, a device read without end
    raise ValueError(f"{path} is {util.file_kind(mode)}, not a regular file")
  _check_expanded_size(path)
  with np.load(path, allow_pickle=False) as saved:
    arrays = {key: saved[key] for key in saved.files}
  for key, value in arrays.items():
    if np.issubdtype(value.dtype, np.number) and not np.all(np.isfinite(value)):
      raise ValueError(f"{path}: {key} holds a number that is not finite")
  if not float(arrays["loss_floor"]) >= 0:
    raise ValueError(f"{path}: loss_floor is {float(arrays['loss_floor'])!r}, expected a number >= 0")
  source = sources.get(str(arrays["source"]))
  vocab_size = int(arrays["vocab_size"])
  record = {key[len(_RECORD_PREFIX):]: value for key, value in arrays.items() if key.startswith(_RECORD_PREFIX)}
  counts = {key: np.asarray(arrays[key], np.int64) for key in ("input_counts", "eval_input_counts") if key in arrays}
  for name, value in counts.items():
    if value.shape != (vocab_size,):
      raise ValueError(f"{path}: {name} has shape {value.shape}, expected ({vocab_size},)")
    if value.min(initial=0) < 0:
      raise ValueError(f"{path}: {name} holds a negative count")
  return InspectionData(
      source=source.name, identity=str(arrays["identity"]), vocab_size=vocab_size,
      loss_floor=float(arrays["loss_floor"]), reference_name=str(arrays["reference_name"]),
      true_log_probs=source.log_probs_from_record(vocab_size, record), input_counts=counts["input_counts"],
      tokenizer=source.tokenizer_from_record(record), eval_input_counts=counts.get("eval_input_counts"),
  )


def _check_expanded_size(path: pathlib.Path) -> None:
  """ValueError if the arrays in the .npz `path` would take more than `_EXPANDED_BYTES` + `_EXPANSION` times its size,
  by their headers, read before any array (np.load allocates what a header claims)."""
  limit = _EXPANDED_BYTES + _EXPANSION * os.stat(path).st_size
  total = 0
  with zipfile.ZipFile(path) as archive:
    for member in archive.infolist():
      with archive.open(member) as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(f)
      total += max(member.file_size, int(np.prod(shape, dtype=object)) * dtype.itemsize)
      if total > limit:
        raise ValueError(f"{path} expands to more than {limit:,} bytes ({member.filename} and those before it "
                         f"{total:,}): not a record a run writes")
