"""planted and directed: a hidden table e* (V, D), P(j|i) = softmax_j(e*_i · out_j), Zipf current tokens p_i ∝ (i +
1)^-s (high ids rarely looked up), sampled pairs, an exact floor."""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np

from tied_embed.data import base
from tied_embed.util import require

MAX_PAIRS = 100_000_000  # pairs are held in memory as two int32 arrays (8 bytes a pair, more while sampling)
# Generating a synthetic dataset computes the (V, V) table TABLE_PASSES times (train, eval, floor): V = 16,384 took
# 111 s on 2 busy CPU cores (~140 ns an entry), so MAX_VOCAB_SIZE takes minutes and V = 10⁶ would take days.
TABLE_PASSES = 3
MAX_VOCAB_SIZE = 32_768


def hidden_table(vocab_size: int, d_model: int, logit_scale: float, seed: int) -> np.ndarray:
  """e* (V, D) float64, entries N(0, logit_scale / D): the self or next logit ≈ logit_scale, others ± it / √D."""
  return np.random.default_rng([seed, 0]).standard_normal((vocab_size, d_model)) * np.sqrt(logit_scale / d_model)


def table_rows(table: np.ndarray, output: np.ndarray) -> base.LogProbRows:
  """log softmax(e*_i · out_j) row by row: tables (V, D), (V, D) → LogProbRows."""
  return base.LogProbRows(len(table), lambda ids: base.log_softmax(table[ids] @ output.T))


def conditional_entropy(current_probs: np.ndarray, log_probs: Any) -> float:
  """H(next | current) in nats, a block of rows at a time: p (V,), log P (V, V) array or LogProbRows → float."""
  terms = []
  for ids in base.row_blocks(len(current_probs)):
    block = np.asarray(log_probs[ids])
    probs = np.exp(block)
    terms.append((probs * np.where(probs > 0, block, 0.0)).sum(axis=1))  # Σ_j P(j|i) log P(j|i) of each row
  return float(-(current_probs * np.concatenate(terms)).sum())


def sample_pairs(current_probs: np.ndarray, log_probs: Any, num_pairs: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """Draws i ~ p, then j ~ P(·|i): (V,), (V, V) array or LogProbRows → ids (N,) int32, next_ids (N,) int32.
  Inverse-CDF sampling per current token, O(N log N) with no (N, V) array, the CDF one block of rows at a time."""
  vocab_size = len(current_probs)
  ids = rng.choice(vocab_size, size=num_pairs, p=current_probs).astype(np.int32)
  uniforms = rng.random(num_pairs)
  order = np.argsort(ids, kind="stable")
  bounds = np.searchsorted(ids[order], np.arange(vocab_size + 1))
  next_ids = np.empty(num_pairs, dtype=np.int32)
  for block in base.row_blocks(vocab_size):
    cdf = np.cumsum(np.exp(np.asarray(log_probs[block])), axis=1)
    for row, token in enumerate(block):
      rows = order[bounds[token]:bounds[token + 1]]
      # Scaling by the row total keeps rounding in the cumulative sum from ever indexing past V - 1.
      next_ids[rows] = np.searchsorted(cdf[row], uniforms[rows] * cdf[row, -1], side="right")
  return ids, np.minimum(next_ids, vocab_size - 1)


def synthetic_splits(current_probs: np.ndarray, log_probs: Any, num_train: int, num_eval: int,
                     seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Independent train and validation samples: → {'train': (ids, next_ids), 'validation': (ids, next_ids)}."""
  rng = np.random.default_rng([seed, 1])  # a stream apart from the hidden table's
  train = sample_pairs(current_probs, log_probs, num_train, rng)
  return {"train": train, "validation": sample_pairs(current_probs, log_probs, num_eval, rng)}


class SyntheticSource(base.Source):
  """A task defined by a hidden table; subclasses say which output table its logits score against."""

  # task_seed: the hidden table e* and the sampled pairs; the train and validation split sizes; logit_scale: E|e*_i|²,
  # the typical self (planted) or next (directed) logit; zipf_exponent s: current tokens follow p_i ∝ (i + 1)^-s
  fields = {"task_seed": 0, "num_train_pairs": 2_000_000, "num_eval_pairs": 50_000, "logit_scale": 8.0,
            "zipf_exponent": 1.0}

  @abc.abstractmethod
  def output_table(self, table: np.ndarray) -> np.ndarray:
    """The table the logits score against: e* (V, D) → (V, D)."""

  def validate(self, config: Any) -> None:
    vocab_size, data = config.model.get("vocab_size"), config.data
    require(base.is_int(vocab_size) and vocab_size >= 2, "model.vocab_size", vocab_size,
            f"an integer >= 2 for data.source={self.name!r}")
    require(vocab_size <= MAX_VOCAB_SIZE, "model.vocab_size", vocab_size,
            f"at most {MAX_VOCAB_SIZE:,} for data.source={self.name!r} (generating its dataset computes the (V, V)"
            f" table {TABLE_PASSES} times, {TABLE_PASSES * vocab_size**2:.1e} entries: minutes at the bound, hours"
            f" past it)")
    require(base.is_int(data.get("task_seed")) and data.task_seed >= 0, "data.task_seed", data.get("task_seed"),
            "an integer >= 0")
    for field in ("num_train_pairs", "num_eval_pairs"):
      value = data.get(field)
      require(base.is_int(value) and 1 <= value <= MAX_PAIRS, f"data.{field}", value,
              f"an integer in [1, {MAX_PAIRS:,}] (pairs are held in memory, 8 bytes each and more while sampling)")
    for field in ("logit_scale", "zipf_exponent"):
      value = data.get(field)
      require(base.is_number(value) and math.isfinite(value) and value >= 0, f"data.{field}", value,
              "a finite number >= 0")

  def settings(self, config: Any) -> dict[str, Any]:
    """The task's parameters; 'd_model' is the hidden table's width, data.task_d_model (not the model's width)."""
    data = config.data
    return dict(
        vocab_size=int(config.model.vocab_size), d_model=int(data.task_d_model), task_seed=int(data.task_seed),
        num_train_pairs=int(data.num_train_pairs), num_eval_pairs=int(data.num_eval_pairs),
        logit_scale=float(data.logit_scale), zipf_exponent=float(data.zipf_exponent),
    )

  def identity(self, settings: dict[str, Any]) -> str:
    return ("{name}-v{vocab_size}-d{d_model}-seed{task_seed}-n{num_train_pairs}-m{num_eval_pairs}"
            "-scale{logit_scale:.15g}-zipf{zipf_exponent:.15g}").format(name=self.name, **settings)  # all 15 digits

  def num_pairs(self, settings: dict[str, Any]) -> dict[str, int]:
    return {"train": settings["num_train_pairs"], "validation": settings["num_eval_pairs"]}

  def task(self, settings: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The current-token distribution p (V,) and the hidden table e* (V, D), both float64."""
    table = hidden_table(settings["vocab_size"], settings["d_model"], settings["logit_scale"], settings["task_seed"])
    return base.zipf_probs(settings["vocab_size"], settings["zipf_exponent"]), table

  def splits(self, settings: dict[str, Any]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    current_probs, table = self.task(settings)
    return synthetic_splits(current_probs, table_rows(table, self.output_table(table)),
                            settings["num_train_pairs"], settings["num_eval_pairs"], settings["task_seed"])

  def reference(self, settings: dict[str, Any], eval_ids: np.ndarray, eval_next: np.ndarray) -> base.Reference:
    del eval_ids, eval_next  # the floor is exact, from the generating distribution
    current_probs, table = self.task(settings)
    log_probs = table_rows(table, self.output_table(table))
    return base.Reference(self.reference_name, conditional_entropy(current_probs, log_probs), log_probs,
                          {"hidden_table": table})

  def log_probs_from_record(self, vocab_size: int, record: dict[str, np.ndarray]) -> base.LogProbRows:
    table = np.asarray(record["hidden_table"], np.float64)
    return table_rows(table, self.output_table(table))


class Planted(SyntheticSource):
  """P(j|i) = softmax_j(e*_i · e*_j): symmetric logits, which a tied model of width D represents exactly."""

  name = "planted"

  def output_table(self, table: np.ndarray) -> np.ndarray:
    return table


class Directed(SyntheticSource):
  """P(j|i) = softmax_j(e*_i · e*_{j-1}), peaked on the cycle i → i+1: untied width D fits it exactly, tied cannot."""

  name = "directed"

  def output_table(self, table: np.ndarray) -> np.ndarray:
    return np.roll(table, 1, axis=0)  # column j scores against row j-1


base.register(Directed())
base.register(Planted())
