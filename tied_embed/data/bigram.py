"""The bigram pairs as a TFDS dataset: generated under a lock on the data dir, cached, verified on every load (a bad
cache is generated again) and loaded into NumPy. The selection split and data.train_fraction are cut at load time, so
runs on other amounts of data share one stored dataset."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import os
import pathlib
import shutil
from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from tied_embed import util
from tied_embed import workdir as workdir_lib
from tied_embed.data import record as record_lib
from tied_embed.data import sources
from tied_embed.data import windows as windows_lib
from tied_embed.data.text import corpus
from tied_embed.util import UsageError

log = logging.getLogger(__name__)

BLOCK_SIZE = 1 << 16  # pairs per stored example: whole blocks, since per-pair Python generators are slow
SPLITS = ("train", "validation")
TOKENIZERS = "tokenizers"  # the data dir's folder of SentencePiece models (tied_embed.data.sources.text)
DOCUMENT_ENDS = "document_ends"  # the TFDS metadata key of a by-document dataset: {split: [pair end of each doc]}
DIGESTS = "sha256"  # the loaded splits' key of {split: `pairs_digest`}
DIGEST_FILE = "pairs_sha256.json"  # in the dataset's version folder: {split: `pairs_digest`} as stored when built
# TFDS's own files in the version folder, which decide how the pairs are read and cut (the split sizes, the document
# ends): each one's sha256 is recorded in DIGEST_FILE under METADATA_DIGESTS, so an edit is seen as a swapped split is.
METADATA_FILES = ("dataset_info.json", "features.json", "metadata.json")
METADATA_DIGESTS = "metadata_sha256"
_METADATA_BYTES = 1 << 28  # metadata.json holds one number per document: a generous bound, never a read without end
_RECORDED = "recorded"  # the loaded splits' key: whether DIGEST_FILE covers the pairs and the metadata files


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
  digests: dict[str, str] = dataclasses.field(default_factory=dict)  # {split: `pairs_digest`} of the whole splits
  # Windows (tied_embed/data/windows.py): L = data.context_length; with L > 1 the first pair of every window of L
  # pairs inside one train document, and where the validation and selection pairs' documents end (None: one).
  context_length: int = 1
  train_starts: np.ndarray | None = None  # (W,) int64
  train_document_ends: np.ndarray | None = None  # where the train pairs' documents end (None: one)
  eval_document_ends: np.ndarray | None = None
  select_document_ends: np.ndarray | None = None


@dataclasses.dataclass(eq=False)
class BigramConfig(tfds.core.BuilderConfig):
  """One task: its source and the source's settings; its name is the source's identity of those settings."""

  source: str = ""
  settings: dict[str, Any] = dataclasses.field(default_factory=dict)


class _LocalInfo(tfds.core.DatasetInfo):
  """TFDS's DatasetInfo of a dataset that exists only where it is generated: none is ever in TFDS's bucket."""

  def initialize_from_bucket(self) -> None:
    """Nothing: for a dataset not yet built TFDS would copy its metadata from its bucket (off here: TFDS's GCS access
    is disabled) into a new folder in the system's temporary directory, left there empty and never removed."""


class BigramPairs(tfds.core.GeneratorBasedBuilder):
  """(ids, next_ids) token pairs in blocks of BLOCK_SIZE, in generation order (shuffling disabled)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "bigram pairs of a tied_embed source."}
  # TFDS's own lookup of this needs the `importlib_resources` backport, absent on Python >= 3.9.
  code_path = epath.Path(__file__)

  def _info(self) -> tfds.core.DatasetInfo:
    block = tfds.features.Tensor(shape=(None,), dtype=np.int32, encoding=tfds.features.Encoding.BYTES)
    return _LocalInfo(
        builder=self, description="Next-token pairs of a bigram task; see tied_embed/data/sources/.",
        features=tfds.features.FeaturesDict({"ids": block, "next_ids": block}),
        disable_shuffling=True,  # loading returns exactly the generated order
        # only a dataset split by document has metadata (metadata.json): the others stay as they were written
        metadata=tfds.core.MetadataDict() if by_document(self.builder_config) else None,
    )

  def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
    del dl_manager  # nothing to download
    splits = task_splits(self.builder_config)
    if by_document(self.builder_config):
      self.info.metadata[DOCUMENT_ENDS] = {name: [int(end) for end in pairs[2]] for name, pairs in splits.items()}
    return {name: self._generate_examples(*pairs[:2]) for name, pairs in splits.items()}

  def _generate_examples(self, ids: np.ndarray, next_ids: np.ndarray):
    for index, start in enumerate(range(0, len(ids), BLOCK_SIZE)):
      yield index, {"ids": ids[start:start + BLOCK_SIZE], "next_ids": next_ids[start:start + BLOCK_SIZE]}


def task_splits(bc: BigramConfig) -> dict[str, tuple[np.ndarray, ...]]:
  """The pairs stored: {split: (ids, next_ids)} int32, by document with each document's pair ends (D,) int64."""
  return sources.get(bc.source).splits(bc.settings)


def by_document(bc: BigramConfig) -> bool:
  """Whether the dataset is split by document (its settings say so only then, so no other identity changes)."""
  return bc.settings.get("split") == corpus.BY_DOCUMENT


def builder_config(config: Any) -> BigramConfig:
  """The TFDS builder config of an experiment config (ConfigDict); hashes the text file for the text source."""
  source = sources.get(config.data.source)
  settings = source.settings(config)
  return BigramConfig(name=source.identity(settings), source=source.name, settings=settings)


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

  task: BigramConfig  # the source, its settings and the builder config's name
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
    return _version_dir(self.task, self.directory)


def _builder(bc: BigramConfig, directory: pathlib.Path) -> BigramPairs:
  """The TFDS builder of `bc`'s dataset under `directory`."""
  return BigramPairs(config=bc, data_dir=str(directory), file_format="array_record")


def _version_dir(bc: BigramConfig, directory: pathlib.Path) -> pathlib.Path:
  return directory / BigramPairs.name / bc.name / str(BigramPairs.VERSION)


def refuse_links(bc: BigramConfig, directory: pathlib.Path) -> None:
  """UsageError if a path under `directory` the dataset is written or deleted through is or holds a symbolic link."""
  pairs = directory / BigramPairs.name
  for path in (pairs, directory / TOKENIZERS):
    if path.is_symlink():
      raise _link_refused(path, directory)
  for path in (pairs / bc.name, directory / TOKENIZERS):
    if (link := util.first_link(path)) is not None:
      raise _link_refused(link, directory)


def _link_refused(link: pathlib.Path, directory: pathlib.Path) -> UsageError:
  return UsageError(f"data.data_dir={util.printable(str(directory))!r}: {util.printable(str(link))} is a symbolic link "
                    f"(to {util.printable(os.readlink(link))}); the run writes and deletes its dataset there and never "
                    f"through a link: replace the link with the files themselves, or use another data.data_dir")


def pairs_digest(ids: np.ndarray, next_ids: np.ndarray) -> str:
  """sha256 (hex) of a split's pairs: the (N,) ids then the (N,) next ids, as int32 little-endian bytes."""
  digest = hashlib.sha256()
  for array in (ids, next_ids):
    digest.update(np.ascontiguousarray(array, "<i4").tobytes())
  return digest.hexdigest()


def split_files(config: Any, workdir: str | pathlib.Path) -> pathlib.Path:
  """The folder holding the stored splits' array_record files of `config`'s dataset (its version folder)."""
  return DataPlan.of(config, workdir).split_files


def _recorded_digests(bc: BigramConfig, directory: pathlib.Path) -> dict[str, Any] | None:
  """{split: hex digest, METADATA_DIGESTS: {file: hex digest}} stored when the dataset was built, or None (the latter
  key absent from a record written before it existed); ValueError or OSError if the file is odd."""
  path = _version_dir(bc, directory) / DIGEST_FILE
  if not os.path.lexists(path):
    return None
  recorded = json.loads(util.read_regular(path, 1 << 12))
  if not isinstance(recorded, dict) or sorted(set(recorded) - {METADATA_DIGESTS}) != sorted(SPLITS):
    raise ValueError(f"{path} holds no digest of each split")
  metadata = recorded.get(METADATA_DIGESTS, {})
  if not isinstance(metadata, dict) or not all(isinstance(digest, str) for digest in metadata.values()):
    raise ValueError(f"{path} holds no digest of each metadata file")
  return recorded


def metadata_digests(version_dir: pathlib.Path) -> dict[str, str]:
  """{file name: sha256 hex} of the METADATA_FILES present in `version_dir` (only regular files are read)."""
  return {name: hashlib.sha256(util.read_regular(version_dir / name, _METADATA_BYTES)).hexdigest()
          for name in METADATA_FILES if os.path.lexists(version_dir / name)}


def _record_digests(bc: BigramConfig, directory: pathlib.Path, splits: dict[str, Any]) -> None:
  """Stores the loaded `splits`' pair and metadata digests beside the dataset (under the data dir's lock, which the
  caller holds)."""
  record = {**splits[DIGESTS], METADATA_DIGESTS: splits[METADATA_DIGESTS]}
  util.write_atomically(_version_dir(bc, directory) / DIGEST_FILE, json.dumps(record, sort_keys=True).encode())


def _check_digests(bc: BigramConfig, directory: pathlib.Path, splits: dict[str, Any]) -> str:
  """Adds {split: digest} to `splits` under DIGESTS, the metadata files' under METADATA_DIGESTS and under _RECORDED
  whether the record covers both; → '' if they are the digests recorded when it was built (or none were), else why
  not, naming the files: a swapped or rewritten file is generated again."""
  version_dir = _version_dir(bc, directory)
  splits[DIGESTS] = {split: pairs_digest(*splits[split]) for split in SPLITS}
  try:
    splits[METADATA_DIGESTS] = metadata_digests(version_dir)
    recorded = _recorded_digests(bc, directory)
  except (OSError, ValueError) as error:
    return f"its digests cannot be read ({util.first_line(error)})"
  splits[_RECORDED] = recorded is not None and METADATA_DIGESTS in recorded
  for split in SPLITS:
    if recorded is not None and recorded[split] != splits[DIGESTS][split]:
      return (f"{version_dir}/bigram_pairs-{split}.array_record* holds other pairs than when it "
              f"was built (sha256 {splits[DIGESTS][split][:16]}..., recorded {str(recorded[split])[:16]}...)")
  if splits[_RECORDED] and (changed := sorted(set(recorded[METADATA_DIGESTS].items())
                                              ^ set(splits[METADATA_DIGESTS].items()))):
    return (f"{version_dir}/{changed[0][0]} is not the file written when the dataset was built (its sha256 differs "
            f"from the one in {DIGEST_FILE}, or it was added or removed since)")
  return ""


def refuse_irregular_files(bc: BigramConfig, directory: pathlib.Path) -> None:
  """UsageError if the stored dataset of `bc` under `directory` holds anything but regular files and folders (a FIFO
  would hang TFDS or array_record at open, a device be read without end): checked before either opens a file."""
  if problem := util.irregular_file(directory / BigramPairs.name / bc.name):
    raise UsageError(f"data.data_dir={util.printable(str(directory))!r}: {util.printable(problem)}; a stored dataset "
                     f"holds only regular files: remove it (the run generates the dataset again), or use another "
                     f"data.data_dir")


def _read_verified(bc: BigramConfig, directory: pathlib.Path) -> tuple[dict[str, Any] | None, str]:
  """(the cached splits, '') if present and checked (counts, ids, document ends, digests), else (None, why not)."""
  if not _version_dir(bc, directory).exists():
    return None, "missing"
  refuse_irregular_files(bc, directory)
  try:
    builder = _builder(bc, directory)
    splits = {}
    for split in SPLITS:
      blocks = builder.as_data_source(split=split)
      examples = [blocks[i] for i in range(len(blocks))]
      splits[split] = tuple(np.concatenate([np.zeros(0, np.int32)] + [e[key] for e in examples]).astype(np.int32)
                            for key in ("ids", "next_ids"))
  except Exception as error:  # noqa: BLE001 (TFDS and array_record report damaged files in many types)
    return None, f"cannot be read ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
  source, vocab_size = sources.get(bc.source), bc.settings["vocab_size"]
  for split, (ids, next_ids) in splits.items():
    expected = source.num_pairs(bc.settings)[split] if source.num_pairs_exact(bc.settings) else len(ids)
    if ids.ndim != 1 or ids.shape != (expected,) or next_ids.shape != (expected,):
      return None, f"{split} holds {ids.shape[0]} / {next_ids.shape[0]} pairs, expected {expected}"
    if any(array.size and (array.min() < 0 or array.max() >= vocab_size) for array in (ids, next_ids)):
      return None, f"{split} has token ids outside [0, {vocab_size}) (a cache of another task?)"
  if by_document(bc):
    try:
      ends = {split: np.asarray(builder.info.metadata[DOCUMENT_ENDS][split], np.int64) for split in SPLITS}
    except Exception as error:  # noqa: BLE001 (a missing or damaged metadata.json, in TFDS's or JSON's types)
      return None, f"has no document ends ({type(error).__name__})"
    for split, split_ends in ends.items():
      count = len(splits[split][0])
      if split_ends.ndim != 1 or np.any(np.diff(split_ends) < 0) or (len(split_ends) and split_ends[-1] != count):
        return None, f"{split}'s document ends do not fit its {count} pairs"
    splits[DOCUMENT_ENDS] = ends["train"]
    splits[f"{DOCUMENT_ENDS}_validation"] = ends["validation"]
  if why := _check_digests(bc, directory, splits):
    return None, why
  return splits, ""


def _prepare(bc: BigramConfig, directory: pathlib.Path) -> dict[str, Any]:
  """The verified splits (and DOCUMENT_ENDS), generated under the data dir's lock unless a good cache exists."""
  splits, _ = _read_verified(bc, directory)
  if splits is not None and os.path.lexists(_version_dir(bc, directory) / DIGEST_FILE):
    if not splits[_RECORDED]:  # recorded before the metadata files' digests were: added where it can be locked now
      with contextlib.suppress(UsageError, OSError), util.exclusive(directory, f"data.data_dir={str(directory)!r}"):
        _record_digests(bc, directory, splits)  # a read-only or busy data dir keeps the record it has
    return splits
  directory.mkdir(parents=True, exist_ok=True)
  with util.exclusive(directory, f"data.data_dir={str(directory)!r}"):
    refuse_links(bc, directory)  # under the lock: no run of ours makes one while this one writes
    splits = _read_or_generate(bc, directory)
    if not splits[_RECORDED]:  # built without a record (or before the metadata's digests), or just generated
      _record_digests(bc, directory, splits)
  return splits


def _read_or_generate(bc: BigramConfig, directory: pathlib.Path) -> dict[str, Any]:
  """Under the data dir's lock: the verified splits as stored (another run may have finished them meanwhile), else
  generated anew, an unusable cache deleted first (with a warning); UsageError if what was generated is unusable."""
  splits, why = _read_verified(bc, directory)
  if splits is not None:
    return splits
  version_dir = _version_dir(bc, directory)
  if why != "missing":
    log.warning("The cached dataset %s is unusable (%s): deleting it and generating it again.", version_dir, why)
    shutil.rmtree(version_dir)
  tfds.disable_progress_bar()  # generation takes about a second; bars would only clutter the training log
  _builder(bc, directory).download_and_prepare(download_config=tfds.download.DownloadConfig(try_download_gcs=False))
  splits, why = _read_verified(bc, directory)
  if splits is None:
    raise UsageError(f"the dataset generated in {version_dir} is unusable ({why}): delete {directory} and run again")
  return splits


def check_preparable(plan: DataPlan) -> None:
  """UsageError if a link is where the dataset goes, or the source refuses what it makes first (a vocabulary)."""
  refuse_links(plan.task, plan.directory)
  refuse_irregular_files(plan.task, plan.directory)
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
      refuse_links(bc, directory)  # before the source writes its tokenizer there
      bc = BigramConfig(name=bc.name, source=bc.source, settings=sources.get(bc.source).prepare(bc.settings, directory))
      splits = _prepare(bc, directory)
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
  bc = BigramConfig(name=bc.name, source=bc.source, settings=settings)
  splits, why = _read_verified(bc, directory)
  if splits is None:
    where = _version_dir(bc, directory)
    raise UsageError(f"{where} is missing" if why == "missing" else f"the dataset in {where} is unusable ({why})")
  return _bigram_data(bc, splits, plan)


def _bigram_data(bc: BigramConfig, splits: dict[str, Any], plan: DataPlan) -> BigramData:
  """BigramData of loaded splits (`bc`: the plan's task, prepared): the last selection_fraction of train for
  selection, the first train_fraction of the rest to train on, windows of context_length L pairs; the references from
  the whole splits (the bigram's, whatever the length)."""
  fraction, held_out, length = plan.train_fraction, plan.selection_fraction, plan.context_length
  source = sources.get(bc.source)
  (train_ids, train_next), (eval_ids, eval_next) = splits["train"], splits["validation"]
  train_ends = splits.get(DOCUMENT_ENDS)
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
                   select_document_ends=select_ends, eval_document_ends=splits.get(f"{DOCUMENT_ENDS}_validation"))
  return BigramData(
      source=bc.source, vocab_size=vocab_size, train_ids=train_ids[:used], train_next=train_next[:used],
      eval_ids=eval_ids, eval_next=eval_next, select_ids=train_ids[kept:], select_next=train_next[kept:],
      loss_floor=reference.loss_floor, true_log_probs=reference.log_probs,
      input_counts=np.bincount(train_ids[:used], minlength=vocab_size).astype(np.int64),
      identity=_identity(bc.name, fraction, held_out), reference=reference, digests=splits[DIGESTS],
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
