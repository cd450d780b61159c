"""A run's bigram data: the task and where it is stored, read from the config once (`DataPlan`), the stored dataset
(data/cache.py: generated once, verified on every load) loaded into NumPy. The selection split and data.train_fraction
are cut at load time, so runs on other amounts of data share one stored dataset."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import pathlib
from typing import Any

import numpy as np

from tied_embed import util
from tied_embed import workdir as workdir_lib
from tied_embed.data import cache, sources
from tied_embed.data import record as record_lib
from tied_embed.data import windows as windows_lib
from tied_embed.util import UsageError


@dataclasses.dataclass
class BigramData:
  """Both splits in memory, with what the best possible model would score."""

  source: str
  vocab_size: int
  train_ids: np.ndarray  # (N,) int32 each: the train pairs used (`train_pairs_used`, less the selection share)
  train_next: np.ndarray
  eval_ids: np.ndarray  # (M,) int32 each: the whole validation split
  eval_next: np.ndarray
  select_ids: np.ndarray  # (S,) int32 each: the last `selection_pairs` of the train split, never trained on
  select_next: np.ndarray
  loss_floor: float  # H(next | current) in nats: exact for synthetic sources, empirical on validation for text
  true_log_probs: sources.LogProbRows  # (V, V) log P(next=j | current=i), rows computed when indexed
  input_counts: np.ndarray  # (V,) int64: how often each token is current in the train pairs used
  identity: str  # `dataset_identity`
  reference: sources.Reference  # the source's, of the whole dataset
  eval_references: dict[str, float]  # logged as eval/<name> beside eval/loss (fitted on the whole train split)
  digests: dict[str, str] = dataclasses.field(default_factory=dict)  # {split: `cache.pairs_digest`} of the whole splits
  # Windows (tied_embed/data/windows.py): L = data.context_length; with L > 1 the first pair of every window of L
  # pairs inside one train document, and where the validation and selection pairs' documents end (None: one).
  context_length: int = 1
  train_starts: np.ndarray | None = None  # (W,) int64
  train_document_ends: np.ndarray | None = None  # where the train pairs' documents end (None: one)
  eval_document_ends: np.ndarray | None = None
  select_document_ends: np.ndarray | None = None


def builder_config(config: Any) -> cache.BigramConfig:
  """The TFDS builder config of an experiment config (ConfigDict); hashes the text file for the text source."""
  source = sources.get(config.data.source)
  settings = source.settings(config)
  return cache.BigramConfig(name=source.identity(settings), source=source.name, settings=settings)


def train_fraction(config: Any) -> float:
  """data.train_fraction, in (0, 1]: the share of the train split a run trains on (1 if absent)."""
  return float(config.data.get("train_fraction", 1.0))


def selection_fraction(config: Any) -> float:
  """data.selection_fraction, in [0, 0.5): the share of the train split held out for selection (0 if absent)."""
  return float(config.data.get("selection_fraction", 0.0))


def selection_pairs(num_train_pairs: int, fraction: float, document_ends: np.ndarray | None = None) -> int:
  """How many of the train split's last pairs are held out: 0 for fraction 0, else round(fraction · N) in [1, N - 1];
  with `document_ends` (ascending), moved to the nearest document end that holds out at most half (or the count)."""
  if fraction == 0:
    return 0
  count = min(num_train_pairs - 1, max(1, round(fraction * num_train_pairs)))
  lowest = max(1, num_train_pairs - max(count, num_train_pairs // 2))  # a cut here or later holds out at most that
  cuts = [int(end) for end in (() if document_ends is None else document_ends) if lowest <= end < num_train_pairs]
  return num_train_pairs - min(cuts, key=lambda cut: (abs(cut - (num_train_pairs - count)), cut)) if cuts else count


def train_pairs_used(num_train_pairs: int, fraction: float) -> int:
  """The train split's first pairs a run trains on: round(fraction · N) in [1, N] (0.29 · 100 is 28.999999999999996)."""
  return min(num_train_pairs, max(1, round(fraction * num_train_pairs)))


def dataset_identity(config: Any) -> str:
  """The data a config trains on: the builder config name, then '-select<fraction>' when data.selection_fraction is
  over 0 and '-train<fraction>' when data.train_fraction is under 1, so a run cannot resume on other data."""
  return _identity(builder_config(config).name, train_fraction(config), selection_fraction(config))


def _identity(builder_name: str, fraction: float, held_out: float) -> str:
  selection = "" if held_out == 0 else f"-select{held_out!r}"
  return builder_name + selection + ("" if fraction == 1 else f"-train{fraction!r}")


def data_dir(config: Any, workdir: str | pathlib.Path) -> pathlib.Path:
  """Where the dataset is cached: data.data_dir, or <workdir>/data when that is ''."""
  return pathlib.Path(config.data.data_dir).expanduser() if config.data.data_dir else workdir_lib.data(workdir)


@dataclasses.dataclass(frozen=True)
class DataPlan:
  """What a run's data is, read from its config once (a text source hashes its corpus here, once): the task, where it
  is cached, and how a run cuts it at load time. A run's set-up asks it, and passes it, instead of the config."""

  task: cache.BigramConfig  # the source, its settings and the builder config's name
  directory: pathlib.Path  # the data dir (`data_dir`)
  train_fraction: float  # `train_fraction`
  selection_fraction: float  # `selection_fraction`
  context_length: int = 1  # L: windows of L pairs (1: pairs)

  @classmethod
  def of(cls, config: Any, workdir: str | pathlib.Path) -> DataPlan:
    return cls(builder_config(config), data_dir(config, workdir), train_fraction(config), selection_fraction(config),
               int(config.data.get("context_length", 1)))

  @property
  def identity(self) -> str:
    """`dataset_identity`: saved in every checkpoint's manifest, so a run cannot resume on other data."""
    return _identity(self.task.name, self.train_fraction, self.selection_fraction)

  @property
  def split_files(self) -> pathlib.Path:
    """The folder holding the stored splits' array_record files (the dataset's version folder)."""
    return cache.version_folder(self.task, self.directory)


def split_files(config: Any, workdir: str | pathlib.Path) -> pathlib.Path:
  """The folder holding the stored splits' array_record files of `config`'s dataset (its version folder)."""
  return DataPlan.of(config, workdir).split_files


def check_preparable(plan: DataPlan) -> None:
  """UsageError if a link is where the dataset goes, or the source refuses what it makes first (a vocabulary)."""
  cache.refuse_links(plan.task, plan.directory)
  cache.refuse_irregular_files(plan.task, plan.directory)
  sources.get(plan.task.source).check_preparable(plan.task.settings, plan.directory)


class DataFailed(util.RunStopped):
  """Preparing the dataset failed for a reason outside the config (a full disk, a vanished directory): exit 1."""


def load_bigram_data(config: Any, workdir: str | pathlib.Path) -> BigramData:
  """`load` of `config`'s data, its data dir under `workdir` where data.data_dir is ''."""
  return load(DataPlan.of(config, workdir))


def load(plan: DataPlan) -> BigramData:
  """Generates the dataset unless cached, then loads both splits into memory. TFDS's console chatter about
  'downloading' is dropped; DataFailed (one line) for a failure to write or read the dataset."""
  bc, directory = plan.task, plan.directory
  try:
    with contextlib.redirect_stdout(io.StringIO()):
      cache.refuse_links(bc, directory)  # before the source writes its tokenizer there
      settings = sources.get(bc.source).prepare(bc.settings, directory)
      bc = cache.BigramConfig(name=bc.name, source=bc.source, settings=settings)
      splits = cache.prepare(bc, directory)
      return _bigram_data(bc, splits, plan)
  except (UsageError, util.RunStopped):
    raise
  except Exception as error:  # noqa: BLE001 (TFDS and array_record report I/O failures in many types)
    raise DataFailed(f"preparing the dataset in {directory} failed: {util.first_line(error)}") from error


def load_existing_bigram_data(config: Any, workdir: str | pathlib.Path) -> BigramData:
  """The dataset as cached under the data dir, writing nothing; UsageError saying what is missing or wrong."""
  plan = DataPlan.of(config, workdir)
  bc, directory = plan.task, plan.directory
  settings = sources.get(bc.source).prepared(bc.settings, directory)
  if settings is None:
    raise UsageError(f"the tokenizer of dataset {bc.name} is not in {directory}")
  bc = cache.BigramConfig(name=bc.name, source=bc.source, settings=settings)
  splits, why = cache.read_verified(bc, directory)
  if splits is None:
    where = cache.version_folder(bc, directory)
    raise UsageError(f"{where} is missing" if why == "missing" else f"the dataset in {where} is unusable ({why})")
  return _bigram_data(bc, splits, plan)


def _bigram_data(bc: cache.BigramConfig, splits: dict[str, Any], plan: DataPlan) -> BigramData:
  """BigramData of loaded splits (`bc`: the plan's task, prepared): the last selection_fraction of train for
  selection, the first train_fraction of the rest to train on, windows of context_length L pairs; the references from
  the whole splits (the bigram's, whatever the length)."""
  fraction, held_out, length = plan.train_fraction, plan.selection_fraction, plan.context_length
  source = sources.get(bc.source)
  (train_ids, train_next), (eval_ids, eval_next) = splits["train"], splits["validation"]
  train_ends = splits.get(cache.DOCUMENT_ENDS)
  kept = len(train_ids) - selection_pairs(len(train_ids), held_out, train_ends)
  used = train_pairs_used(kept, fraction)
  vocab_size = bc.settings["vocab_size"]
  reference = source.reference(bc.settings, eval_ids, eval_next)
  windows = {}
  if length > 1:
    starts = windows_lib.window_starts(used, train_ends, length)
    if len(starts) == 0:
      raise UsageError.bad_value("data.context_length", length, f"at most the longest train document's pairs (of "
                                 f"the {used:,} pairs trained on, none lies in a window of {length})")
    select_ends = None if train_ends is None else np.asarray(train_ends, np.int64)[train_ends > kept] - kept
    train_document_ends = None if train_ends is None else np.asarray(train_ends, np.int64)[train_ends <= used]
    windows = dict(context_length=length, train_starts=starts, train_document_ends=train_document_ends,
                   select_document_ends=select_ends,
                   eval_document_ends=splits.get(f"{cache.DOCUMENT_ENDS}_validation"))
  return BigramData(
      source=bc.source, vocab_size=vocab_size, train_ids=train_ids[:used], train_next=train_next[:used],
      eval_ids=eval_ids, eval_next=eval_next, select_ids=train_ids[kept:], select_next=train_next[kept:],
      loss_floor=reference.loss_floor, true_log_probs=reference.log_probs,
      input_counts=np.bincount(train_ids[:used], minlength=vocab_size).astype(np.int64),
      identity=_identity(bc.name, fraction, held_out), reference=reference, digests=splits[cache.DIGESTS],
      eval_references=source.eval_references(bc.settings, splits["train"], splits["validation"]), **windows,
  )


def inspection_data(data: BigramData) -> record_lib.InspectionData:
  """What inspection needs of loaded data (its `tokenizer` left None)."""
  reference = data.reference
  return record_lib.InspectionData(
      source=data.source, identity=data.identity, vocab_size=data.vocab_size, loss_floor=float(data.loss_floor),
      reference_name=reference.name, true_log_probs=reference.log_probs, input_counts=data.input_counts,
      eval_input_counts=np.bincount(data.eval_ids, minlength=data.vocab_size).astype(np.int64))


def record_for_inspection(data: BigramData, workdir: str | pathlib.Path) -> pathlib.Path:
  """Writes WORKDIR/report_data.npz, what inspection needs of the data (and WORKDIR/tokenizer.model; data/record.py)."""
  for_inspection = inspection_data(data)
  return record_lib.write(workdir, for_inspection, data.reference.record)
