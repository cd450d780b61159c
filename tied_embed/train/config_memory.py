"""What a run of a config needs in memory, as a sum of named terms, and what this machine has (`config.validate`
refuses a config that does not fit)."""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import ml_collections

from tied_embed.data import sources

# Python, JAX, TensorFlow and the compiled programs: configs/smoke.py, whose arrays are ~1 MB, peaks at 0.9 GiB.
RUNTIME_BYTES = 2**30


class MemoryTerm(NamedTuple):
  """One part of a run's memory: what it is, its bytes, and the config fields it grows with."""

  what: str
  bytes: int
  fields: tuple[str, ...]


def memory_estimate(config: ml_collections.ConfigDict, settings: dict[str, Any] | None = None) -> list[MemoryTerm]:
  """The memory a run of a valid config needs on one host, as named terms (bytes; float32 = 4): the (V, D) tables
  6 times (the parameter, two Adam moments, the gradient and its lookup and projection parts); a synthetic task's
  hidden table (float64); the train logits 3 times (the logits, their exponentials and gradient); the hidden vectors
  twice (the looked-up rows and their gradient); the eval logits twice (the logits and their exponentials); and the
  dataset, 32 bytes per train or validation pair (while generating, the int32 pair, a float64 uniform draw and an
  int64 sort order; then the int32 pair loaded). Not counted: (V, V) tables (the sources compute them a few MB at a
  time); every array is counted whole, as if unsharded. `settings`: `Source.settings(config)`, computed if not given.
  """
  vocab_size, d_model = int(config.model.vocab_size), int(config.model.d_model)
  batch_size, eval_batch_size = int(config.train.batch_size), int(config.train.eval_batch_size)
  chunk_size, num_tables = int(config.loss.chunk_size), 1 if config.model.tied else 2
  source = sources.get(config.data.source)
  pairs = sum(source.num_pairs(source.settings(config) if settings is None else settings).values())
  counts = [f"data.{field}" for field in source.fields if field.startswith("num_")]
  pair_fields = tuple(counts or [f"data.{field}" for field in source.fields] or ["data.source"])
  train_rows, eval_rows = (min(chunk_size or rows, rows) for rows in (batch_size, eval_batch_size))
  task_d_model = int(config.data.task_d_model) if config.data.source in sources.SYNTHETIC_SOURCES else 0
  return [
      MemoryTerm("the (V, D) tables and their optimizer state", vocab_size * d_model * num_tables * 4 * 6,
                 ("model.vocab_size", "model.d_model")),
      MemoryTerm("the task's hidden table e*", vocab_size * task_d_model * 8,
                 ("data.task_d_model", "model.vocab_size")),
      MemoryTerm("the train logits (loss.chunk_size > 0 bounds them)", train_rows * vocab_size * 4 * 3,
                 ("train.batch_size" if train_rows == batch_size else "loss.chunk_size", "model.vocab_size")),
      MemoryTerm("the hidden vectors of a batch", batch_size * d_model * 4 * 2, ("train.batch_size", "model.d_model")),
      MemoryTerm("the eval logits", eval_rows * vocab_size * 4 * 2,
                 ("train.eval_batch_size" if eval_rows == eval_batch_size else "loss.chunk_size", "model.vocab_size")),
      MemoryTerm("the dataset", pairs * 32, pair_fields),
  ]


def available_memory() -> int:
  """This machine's physical memory in bytes, or its cgroup's memory limit when that is smaller."""
  limits = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
  for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
    try:
      with open(path) as f:
        limits.append(int(f.read().strip()))
    except (OSError, ValueError):  # no such cgroup file, or "max"
      pass
  return min(limits)


def gib(num_bytes: int) -> str:
  """Bytes as a person reads them: '4.0 GiB'."""
  return f"{num_bytes / 2**30:,.1f} GiB"
