"""The bigram pairs as a TFDS dataset: generated locally, cached under the data dir, loaded once into NumPy.

`load_bigram_data(config, workdir)` builds (or reuses) the `bigram_pairs` dataset for the task the config
describes and returns a `BigramData` holding both splits, the loss floor and the true transition table.
`train_batch(data, seed, step, batch_size)` picks the pairs of one step; it depends on (seed, step) alone, so a
resumed run sees the same batches as an uninterrupted one. The data.* config fields are described and checked
in `tied_embed.data_config`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from tied_embed import sources
from tied_embed.data_config import resolve_text_path, validate_data_config
from tied_embed.errors import UsageError

BLOCK_SIZE = 1 << 16  # pairs per stored example: whole blocks, since per-pair Python generators are slow


@dataclasses.dataclass
class BigramData:
  """Both splits in memory, with what the best possible model would score.

  train_ids, train_next: (N,) int32; eval_ids, eval_next: (M,) int32.
  loss_floor: H(next | current) in nats (exact for synthetic sources, empirical on the eval split for text).
  true_log_probs: (V, V) float64 log P(next=j | current=i); for text from eval counts (-inf for unseen pairs,
    nan rows for tokens never current). input_counts: (V,) int64, how often each token is current in train.
  """

  source: str
  vocab_size: int
  train_ids: np.ndarray
  train_next: np.ndarray
  eval_ids: np.ndarray
  eval_next: np.ndarray
  loss_floor: float
  true_log_probs: np.ndarray
  input_counts: np.ndarray


@dataclasses.dataclass(eq=False)
class BigramConfig(tfds.core.BuilderConfig):
  """One task; its name spells out every parameter that changes the data, so caches never mix tasks."""

  source: str = "planted"
  vocab_size: int = 0
  d_model: int = 0
  task_seed: int = 0
  num_train_pairs: int = 0
  num_eval_pairs: int = 0
  logit_scale: float = 0.0
  zipf_exponent: float = 0.0
  text_path: str = ""


class BigramPairs(tfds.core.GeneratorBasedBuilder):
  """(ids, next_ids) token pairs in blocks of BLOCK_SIZE, in generation order (shuffling disabled)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "planted, directed and text bigram pairs."}
  # TFDS's own lookup of this needs the `importlib_resources` backport, absent on Python >= 3.9.
  code_path = epath.Path(__file__)

  def _info(self) -> tfds.core.DatasetInfo:
    block = tfds.features.Tensor(shape=(None,), dtype=np.int32, encoding=tfds.features.Encoding.BYTES)
    return tfds.core.DatasetInfo(
        builder=self,
        description="Next-token pairs of a bigram task; see tied_embed/sources.py.",
        features=tfds.features.FeaturesDict({"ids": block, "next_ids": block}),
        disable_shuffling=True,  # loading returns exactly the generated order
    )

  def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
    del dl_manager  # nothing to download
    return {name: self._generate_examples(*pairs) for name, pairs in task_splits(self.builder_config).items()}

  def _generate_examples(self, ids: np.ndarray, next_ids: np.ndarray):
    for index, start in enumerate(range(0, len(ids), BLOCK_SIZE)):
      yield index, {"ids": ids[start:start + BLOCK_SIZE], "next_ids": next_ids[start:start + BLOCK_SIZE]}


def _synthetic_task(bc: BigramConfig) -> tuple[np.ndarray, np.ndarray]:
  return sources.synthetic_task(
      bc.source, bc.vocab_size, bc.d_model, bc.logit_scale, bc.zipf_exponent, bc.task_seed
  )


def task_splits(bc: BigramConfig) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """The pairs the dataset stores: → {'train': (ids, next_ids), 'validation': (ids, next_ids)}, int32."""
  if bc.source == "text":
    return sources.text_pairs(pathlib.Path(bc.text_path).read_bytes())
  return sources.synthetic_splits(*_synthetic_task(bc), bc.num_train_pairs, bc.num_eval_pairs, bc.task_seed)


def builder_config(config: Any) -> BigramConfig:
  """The TFDS builder config of an experiment config (ConfigDict); hashes the text file for the text source."""
  data, vocab_size = config.data, int(config.model.vocab_size)
  if data.source == "text":
    path = resolve_text_path(data.text_path).resolve()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return BigramConfig(name=f"text-v{vocab_size}-sha{digest}", source="text", vocab_size=vocab_size,
                        text_path=str(path))
  fields = dict(
      source=data.source, vocab_size=vocab_size, d_model=int(config.model.d_model),
      task_seed=int(data.task_seed), num_train_pairs=int(data.num_train_pairs),
      num_eval_pairs=int(data.num_eval_pairs), logit_scale=float(data.logit_scale),
      zipf_exponent=float(data.zipf_exponent),
  )
  name = ("{source}-v{vocab_size}-d{d_model}-seed{task_seed}-n{num_train_pairs}-m{num_eval_pairs}"
          "-scale{logit_scale:g}-zipf{zipf_exponent:g}").format(**fields)
  return BigramConfig(name=name, **fields)


def data_dir(config: Any, workdir: str | pathlib.Path) -> pathlib.Path:
  """Where the dataset is cached: data.data_dir, or <workdir>/data when that is ''."""
  return pathlib.Path(config.data.data_dir).expanduser() if config.data.data_dir else pathlib.Path(workdir) / "data"


def make_builder(config: Any, workdir: str | pathlib.Path) -> BigramPairs:
  """The builder for this config's task (nothing generated yet)."""
  return BigramPairs(config=builder_config(config), data_dir=str(data_dir(config, workdir)),
                     file_format="array_record")


def _read_split(builder: BigramPairs, split: str) -> tuple[np.ndarray, np.ndarray]:
  blocks = builder.as_data_source(split=split)
  examples = [blocks[i] for i in range(len(blocks))]
  return (np.concatenate([e["ids"] for e in examples]).astype(np.int32),
          np.concatenate([e["next_ids"] for e in examples]).astype(np.int32))


def load_bigram_data(config: Any, workdir: str | pathlib.Path) -> BigramData:
  """Generates the dataset unless cached, then loads both splits into memory: config → BigramData."""
  validate_data_config(config)
  builder = make_builder(config, workdir)
  tfds.disable_progress_bar()  # generation takes about a second; bars would only clutter the training log
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(try_download_gcs=False))
  train_ids, train_next = _read_split(builder, "train")
  eval_ids, eval_next = _read_split(builder, "validation")
  bc, vocab_size = builder.builder_config, builder.builder_config.vocab_size
  if bc.source == "text":
    log_probs = sources.empirical_log_probs(eval_ids, eval_next, vocab_size)
    floor = sources.empirical_conditional_entropy(eval_ids, eval_next, vocab_size)
  else:
    current_probs, log_probs = _synthetic_task(bc)
    floor = sources.conditional_entropy(current_probs, log_probs)
  return BigramData(
      source=bc.source, vocab_size=vocab_size, train_ids=train_ids, train_next=train_next,
      eval_ids=eval_ids, eval_next=eval_next, loss_floor=floor, true_log_probs=log_probs,
      input_counts=np.bincount(train_ids, minlength=vocab_size).astype(np.int64),
  )


def train_batch(data: BigramData, seed: int, step: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
  """The global batch of `step`: pairs drawn uniformly with replacement from train, → ids, next_ids (B,) int32.

  A pure function of (seed, step): no iterator state, so resuming at step s reproduces the uninterrupted run.
  """
  rng = np.random.default_rng([seed, step])
  rows = rng.integers(0, len(data.train_ids), size=batch_size)
  return data.train_ids[rows], data.train_next[rows]


def process_slice(batch: np.ndarray, process_index: int, process_count: int) -> np.ndarray:
  """This process's contiguous share of a global batch: (B,) → (B / process_count,).

  Every process computes the same global batch with `train_batch` and keeps its slice, which is what
  `jax.make_array_from_process_local_data(sharding, local)` expects for a batch sharded over processes.
  """
  if len(batch) % process_count:
    raise UsageError.bad_value("train.batch_size", len(batch), f"a multiple of the {process_count} processes")
  share = len(batch) // process_count
  return batch[process_index * share:(process_index + 1) * share]
