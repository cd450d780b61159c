"""The fields a training config has, so that a misspelt key in a config file is refused rather than ignored.

`FIELDS` is the set of dotted paths of configs/default.py's `get_config()` (its comments say what each field
means); every config in configs/ has exactly these. It lives in the package, not in configs/, because the
package must not import the configs, and a test keeps the two in step.
"""

from __future__ import annotations

from typing import Any

import ml_collections

FIELDS = frozenset({
    "seed",
    "model.vocab_size", "model.d_model", "model.tied",
    "data.source", "data.text_path", "data.data_dir", "data.task_seed", "data.num_train_pairs",
    "data.num_eval_pairs", "data.logit_scale", "data.zipf_exponent",
    "train.num_steps", "train.batch_size", "train.eval_batch_size", "train.learning_rate", "train.warmup_steps",
    "train.optimizer", "train.weight_decay", "train.grad_clip_norm", "train.log_every", "train.eval_every",
    "train.checkpoint_every", "train.keep_checkpoints",
    "loss.chunk_size",
    "mesh.data", "mesh.model",
})


def leaf_paths(config: ml_collections.ConfigDict, prefix: str = "") -> dict[str, Any]:
  """Every non-group field of `config` by dotted path: {'model.vocab_size': 1024, ...}."""
  leaves = {}
  for key, value in config.items():
    path = f"{prefix}{key}"
    if isinstance(value, ml_collections.ConfigDict):
      leaves.update(leaf_paths(value, f"{path}."))
    else:
      leaves[path] = value
  return leaves


def unknown_and_missing(config: ml_collections.ConfigDict) -> tuple[dict[str, Any], list[str]]:
  """The fields of `config` that `FIELDS` doesn't know (path → value), and the known ones it lacks (sorted)."""
  leaves = leaf_paths(config)
  unknown = {path: value for path, value in leaves.items() if path not in FIELDS}
  return unknown, sorted(FIELDS - leaves.keys())
