"""The asymmetry budget: how much of a bigram task a tied table cannot express (pure NumPy).

A tied model's logits E·Eᵀ are symmetric and the softmax ignores a constant per row, so it produces only X + c·1ᵀ with X
symmetric (PSD, rank ≤ D). Of M = log P(next | current) (V, V), what no such table fits is a share of the row-centred
variance ‖M·J‖² (J = I − 11ᵀ/V): `antisymmetric_share` bounds it below, `psd_rank_fit` (a fit it achieves) above."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tied_embed.data.base import LogProbRows, log_softmax, row_block

MAX_DENSE = 4096  # a (V, V) float64 table of this size is 128 MB
MAX_RANK_FIT = 256  # the rank fit's dozens of eigendecompositions: ~1 s at 256 tokens, 2-10 s at 512 (2 busy cores)
_GRID_POINTS = 11  # coarse search of the free constant shift, then golden-section refinement
_GOLDEN_STEPS = 24


def prepared_table(log_probs: Any, ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
  """(V, V) array or `LogProbRows` → (K, K) float64 of `ids`' rows with a finite entry, -inf raised; those ids (K,)."""
  vocab_size = len(log_probs)
  ids = np.arange(vocab_size) if ids is None else np.asarray(ids)
  blocks = np.array_split(ids, max(1, -(-len(ids) // row_block(vocab_size))))
  rows = [np.asarray(log_probs[block], np.float64)[:, ids] for block in blocks if len(block)]
  table = np.concatenate(rows) if rows else np.zeros((0, 0))
  keep = np.isfinite(table).any(axis=1)
  table, ids = table[np.ix_(keep, keep)], ids[keep]
  finite = np.isfinite(table)
  if table.size and not finite.all():
    table = np.where(finite, table, table[finite].min() if finite.any() else 0.0)
  return table, ids


def row_centred(table: np.ndarray) -> np.ndarray:
  """M·J, each row less its mean: (K, K) → (K, K)."""
  return table - table.mean(axis=1, keepdims=True)


def antisymmetric_share(table: np.ndarray) -> float:
  """min over symmetric X and row constants c of ‖M − X − c·1ᵀ‖² / ‖M·J‖², of a (K, K) `prepared_table` → float in [0,
  1]: 0 where a tied model of any width fits. The minimum is ‖J·A·J‖², A = (M − Mᵀ)/2, less what row constants make."""
  centred = row_centred(table)
  doubly = centred - centred.mean(axis=0, keepdims=True)  # J·A·J = (J·M·J − (J·M·J)ᵀ) / 2: what no X + c·1ᵀ fits
  total = np.sum(np.square(centred))
  return float(np.sum(np.square((doubly - doubly.T) / 2)) / total) if total > 0 else 0.0


class RankFit(NamedTuple):
  """A tied table of width ≤ D fitted to M, and what it leaves."""

  table: np.ndarray  # E (K, r), r ≤ D: the fitted logits are E·Eᵀ
  residual_share: float  # ‖(M − E·Eᵀ)·J‖² / ‖M·J‖², in [antisymmetric_share, 1]


def psd_rank_fit(table: np.ndarray, rank: int) -> RankFit:
  """The PSD rank-≤`rank` truncation of N_t = X + t·11ᵀ, X = sym(M) − (a·1ᵀ + 1·aᵀ)/K with a = A·1, the best symmetric
  target: (K, K) → RankFit.

  Every N_t fits as well at full rank; their truncations differ. The residual is at most ‖J·A·J‖² + the squared
  eigenvalues dropped, so t minimises that bound (grid, then golden section): a good fit, not provably the best."""
  row_sums = ((table - table.T) / 2).sum(axis=1)
  target = (table + table.T) / 2 - (row_sums[:, None] + row_sums[None, :]) / len(table)

  def dropped(shift: float) -> float:
    values = np.sort(np.linalg.eigvalsh(target + shift))[::-1]
    return float(np.sum(np.square(values[rank:])) + np.sum(np.square(np.minimum(values[:rank], 0))))

  reach = 2 * float(np.abs(target).max()) + 1.0
  grid = np.linspace(-reach, reach, _GRID_POINTS)
  best = int(np.argmin([dropped(t) for t in grid]))
  low, high = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
  ratio = (np.sqrt(5) - 1) / 2
  left, right = high - ratio * (high - low), low + ratio * (high - low)
  at_left, at_right = dropped(left), dropped(right)
  for _ in range(_GOLDEN_STEPS):
    if at_left <= at_right:
      high, right, at_right = right, left, at_left
      left = high - ratio * (high - low)
      at_left = dropped(left)
    else:
      low, left, at_left = left, right, at_right
      right = low + ratio * (high - low)
      at_right = dropped(right)
  shift = min((grid[best], left, right), key=dropped)
  values, vectors = np.linalg.eigh(target + shift)  # the nearest PSD matrix of rank ≤ `rank`: E·Eᵀ, E (K, r)
  top = np.argsort(values)[::-1][:rank]
  top = top[values[top] > 0]  # the largest positive eigenvalues
  factor = vectors[:, top] * np.sqrt(values[top])
  total = np.sum(np.square(row_centred(table)))
  residual = np.sum(np.square(row_centred(table - factor @ factor.T)))
  return RankFit(factor, float(residual / total) if total > 0 else 0.0)


def excess_loss(log_probs: np.ndarray, logits: np.ndarray, weights: np.ndarray) -> float:
  """Σ_i w_i KL(P_i ‖ softmax(logits_i)) in nats: log P (K, K) (-inf allowed), logits (K, K), w (K,) → float.
  Rows of P are renormalised over the K tokens (a row with no mass left counts 0); w is normalised to sum to 1."""
  with np.errstate(invalid="ignore"):
    log_p = log_probs - np.logaddexp.reduce(log_probs, axis=1, keepdims=True)
  log_p = np.where(np.isnan(log_p), -np.inf, log_p)
  probs = np.exp(log_p)
  kl = np.where(probs > 0, probs * (np.where(probs > 0, log_p, 0.0) - log_softmax(logits)), 0.0).sum(axis=1)
  return float(np.sum(weights * kl) / np.sum(weights))


def summary(data: Any, d_model: int | None = None) -> dict[str, float]:
  """The asymmetry budget of a run's task (anything with `.true_log_probs`, `.vocab_size`, optionally `.input_counts`) →
  {name: float}: antisymmetric_share, tokens, sampled (1.0 if computed on a random `MAX_DENSE` of them); with `d_model`
  and at most `MAX_RANK_FIT` tokens also psd_rank_residual_share and psd_rank_excess_loss (nats, weighted by
  `input_counts`): an upper bound on the best width-D tied table's."""
  vocab_size = int(data.vocab_size)
  sampled = vocab_size > MAX_DENSE
  ids = np.sort(np.random.default_rng(0).choice(vocab_size, MAX_DENSE, replace=False)) if sampled else None
  table, kept = prepared_table(data.true_log_probs, ids)
  result = {"antisymmetric_share": antisymmetric_share(table), "tokens": float(len(kept)), "sampled": float(sampled)}
  if d_model is not None and not sampled and 0 < len(kept) <= MAX_RANK_FIT:
    fit = psd_rank_fit(table, int(d_model))
    counts = getattr(data, "input_counts", None)
    weights = np.ones(len(kept)) if counts is None else np.asarray(counts, np.float64)[kept]
    weights = weights if weights.sum() > 0 else np.ones(len(kept))
    original = np.asarray(data.true_log_probs[kept], np.float64)[:, kept]
    result["psd_rank_residual_share"] = fit.residual_share
    result["psd_rank_excess_loss"] = excess_loss(original, fit.table @ fit.table.T, weights)
  return result


def hidden_summary(hidden_stats: dict, scores: np.ndarray | LogProbRows) -> dict[str, float]:
  """{name: float}: the model's `hidden_stats` (W's antisymmetric share as kernel_antisymmetric_share) and, for V ≤
  MAX_DENSE, learned_antisymmetric_share of the log-probabilities of its scores S (V, V)."""
  result = {("kernel_" if name == "antisymmetric_share" else "") + name: float(value)
            for name, value in hidden_stats.items()}
  if len(scores) <= MAX_DENSE:
    logits = np.asarray(scores, np.float64)
    log_probs = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    result["learned_antisymmetric_share"] = antisymmetric_share(prepared_table(log_probs)[0])
  return result
