"""The bigram dataset stored under a data dir, as TFDS's array_record builder writes it: generated under the data
dir's lock, its pairs' and TFDS's metadata files' digests recorded beside it, and verified on every read (a bad cache
is deleted and generated again)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
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
from tied_embed.data import sources
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


def _builder(bc: BigramConfig, directory: pathlib.Path) -> BigramPairs:
  """The TFDS builder of `bc`'s dataset under `directory`."""
  return BigramPairs(config=bc, data_dir=str(directory), file_format="array_record")


def version_folder(bc: BigramConfig, directory: pathlib.Path) -> pathlib.Path:
  """The folder of `bc`'s stored splits under the data dir `directory` (TFDS's version folder)."""
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


def _recorded_digests(bc: BigramConfig, directory: pathlib.Path) -> dict[str, Any] | None:
  """{split: hex digest, METADATA_DIGESTS: {file: hex digest}} stored when the dataset was built, or None (the latter
  key absent from a record written before it existed); ValueError or OSError if the file is odd."""
  path = version_folder(bc, directory) / DIGEST_FILE
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
  util.write_atomically(version_folder(bc, directory) / DIGEST_FILE, json.dumps(record, sort_keys=True).encode())


def _check_digests(bc: BigramConfig, directory: pathlib.Path, splits: dict[str, Any]) -> str:
  """Adds {split: digest} to `splits` under DIGESTS, the metadata files' under METADATA_DIGESTS and under _RECORDED
  whether the record covers both; → '' if they are the digests recorded when it was built (or none were), else why
  not, naming the files: a swapped or rewritten file is generated again."""
  version_dir = version_folder(bc, directory)
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


def read_verified(bc: BigramConfig, directory: pathlib.Path) -> tuple[dict[str, Any] | None, str]:
  """(the cached splits, '') if present and checked (counts, ids, document ends, digests), else (None, why not)."""
  if not version_folder(bc, directory).exists():
    return None, "missing"
  refuse_irregular_files(bc, directory)
  try:
    builder = _builder(bc, directory)
    splits = {split: _read_pairs(builder, split) for split in SPLITS}
  except Exception as error:  # noqa: BLE001 (TFDS and array_record report damaged files in many types)
    return None, f"cannot be read ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
  why = _pairs_problem(bc, splits) or (_add_document_ends(builder, splits) if by_document(bc) else "")
  why = why or _check_digests(bc, directory, splits)
  return (None, why) if why else (splits, "")


def _read_pairs(builder: BigramPairs, split: str) -> tuple[np.ndarray, np.ndarray]:
  """A stored split's (ids, next_ids), (N,) int32 each: its blocks in the order they were written."""
  blocks = builder.as_data_source(split=split)
  examples = [blocks[i] for i in range(len(blocks))]
  return tuple(np.concatenate([np.zeros(0, np.int32)] + [e[key] for e in examples]).astype(np.int32)
               for key in ("ids", "next_ids"))


def _pairs_problem(bc: BigramConfig, splits: dict[str, Any]) -> str:
  """'' if each split's pairs are as many as the source makes (where it knows) with ids in [0, V), else why not."""
  source, vocab_size = sources.get(bc.source), bc.settings["vocab_size"]
  for split in SPLITS:
    ids, next_ids = splits[split]
    expected = source.num_pairs(bc.settings)[split] if source.num_pairs_exact(bc.settings) else len(ids)
    if ids.ndim != 1 or ids.shape != (expected,) or next_ids.shape != (expected,):
      return f"{split} holds {ids.shape[0]} / {next_ids.shape[0]} pairs, expected {expected}"
    if any(array.size and (array.min() < 0 or array.max() >= vocab_size) for array in (ids, next_ids)):
      return f"{split} has token ids outside [0, {vocab_size}) (a cache of another task?)"
  return ""


def _add_document_ends(builder: BigramPairs, splits: dict[str, Any]) -> str:
  """A by-document dataset's pair ends of each document, (D,) int64 ascending and ending at the split's pairs, added
  to `splits` (train's under DOCUMENT_ENDS, validation's beside it): '' if they fit, else why not."""
  try:
    ends = {split: np.asarray(builder.info.metadata[DOCUMENT_ENDS][split], np.int64) for split in SPLITS}
  except Exception as error:  # noqa: BLE001 (a missing or damaged metadata.json, in TFDS's or JSON's types)
    return f"has no document ends ({type(error).__name__})"
  for split, split_ends in ends.items():
    count = len(splits[split][0])
    if split_ends.ndim != 1 or np.any(np.diff(split_ends) < 0) or (len(split_ends) and split_ends[-1] != count):
      return f"{split}'s document ends do not fit its {count} pairs"
  splits[DOCUMENT_ENDS] = ends["train"]
  splits[f"{DOCUMENT_ENDS}_validation"] = ends["validation"]
  return ""


def prepare(bc: BigramConfig, directory: pathlib.Path) -> dict[str, Any]:
  """The verified splits (and DOCUMENT_ENDS), generated under the data dir's lock unless a good cache exists."""
  splits, _ = read_verified(bc, directory)
  if splits is not None and os.path.lexists(version_folder(bc, directory) / DIGEST_FILE):
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
  splits, why = read_verified(bc, directory)
  if splits is not None:
    return splits
  version_dir = version_folder(bc, directory)
  if why != "missing":
    log.warning("The cached dataset %s is unusable (%s): deleting it and generating it again.", version_dir, why)
    shutil.rmtree(version_dir)
  tfds.disable_progress_bar()  # generation takes about a second; bars would only clutter the training log
  _builder(bc, directory).download_and_prepare(download_config=tfds.download.DownloadConfig(try_download_gcs=False))
  splits, why = read_verified(bc, directory)
  if splits is None:
    raise UsageError(f"the dataset generated in {version_dir} is unusable ({why}): delete {directory} and run again")
  return splits


