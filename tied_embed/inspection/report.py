"""What a restored table learned, in numbers: pure NumPy over the (V, D) tables and the bigram data.

Every function takes plain arrays, so a notebook can call it on any table. The learned scores are
`S = lookup @ projection.T` (V, V) (`E·Eᵀ` tied, `input·outputᵀ` untied); after token i the model predicts
`softmax(S[i])`. `build_report` assembles the JSON-ready dict `python -m tied_embed.inspection` prints, forming S and
the reference one block of rows at a time (`sources.LogProbRows`): memory grows with V·D and the rows shown, not V².
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tied_embed.core.model import param_counts
from tied_embed.data import sources
from tied_embed.data.base import LogProbRows, dense_rows, log_softmax, row_blocks


def score_matrix(lookup_table: np.ndarray, projection_table: np.ndarray) -> np.ndarray:
  """Learned scores `S[i, j] = lookup[i] · projection[j]`: (V, D), (V, D) → (V, V) float64."""
  return np.asarray(lookup_table, np.float64) @ np.asarray(projection_table, np.float64).T


def own_score_rank(scores: np.ndarray, token: int) -> tuple[float, int]:
  """A token's own score (the squared norm when tied) and its rank in its row (1 = highest): scores (V, V), token i
  → (S[i, i], 1 + #{j : S[i, j] > S[i, i]})."""
  return row_own_rank(np.asarray(scores[token]), token)


def row_own_rank(scores_row: np.ndarray, token: int) -> tuple[float, int]:
  """`own_score_rank` from row i of S alone: (V,), i → (S[i, i], rank)."""
  own = float(scores_row[token])
  return own, 1 + int(np.sum(scores_row > own))


def top_next(scores_row: np.ndarray, true_log_probs_row: np.ndarray, k: int) -> list[dict[str, Any]]:
  """The k likeliest next tokens under the model: (V,), (V,) → k dicts {id, model_prob, true_prob}, true_prob None
  where the true row is unknown (nan: a text token never seen as current token)."""
  model_probs = np.exp(log_softmax(np.asarray(scores_row, np.float64)[None]))[0]
  order = np.argsort(-model_probs, kind="stable")[:k]
  true_probs = np.exp(np.asarray(true_log_probs_row, np.float64))
  return [{"id": int(j), "model_prob": float(model_probs[j]),
           "true_prob": float(true_probs[j]) if np.isfinite(true_probs[j]) else None} for j in order]


def fit_to_truth(scores: np.ndarray, true_log_probs: np.ndarray) -> dict[str, Any]:
  """How well S fits the true log-probabilities once each row's additive constant is removed.

  Both (V, V). Softmax ignores a per-row constant, so each row of both matrices is centred on its mean over the
  row's finite true entries; -inf (never observed) and nan (unknown row) entries are skipped, as are rows with
  fewer than two finite entries. Returns {correlation, mean_abs_error, entries, rows}.
  """
  scores, true_log_probs = np.asarray(scores, np.float64), np.asarray(true_log_probs, np.float64)
  return fit_by_rows(lambda ids: (scores[ids], true_log_probs[ids]), len(scores))


def fit_by_rows(rows: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], vocab_size: int) -> dict[str, Any]:
  """`fit_to_truth` from a function of row ids (K,) → (scores (K, V), true log-probs (K, V)), summed by blocks."""
  totals = np.zeros(7)  # entries, Σx, Σy, Σx², Σy², Σxy, Σ|x - y| over centred learned x and true y
  rows_used = 0
  for ids in row_blocks(vocab_size):
    scores, truth = rows(ids)
    mask = np.isfinite(truth)
    mask &= (mask.sum(axis=1) >= 2)[:, None]
    counts = np.maximum(mask.sum(axis=1, keepdims=True), 1)
    truth = np.where(mask, truth, 0.0)
    learned = np.where(mask, scores, 0.0)
    y = (truth - truth.sum(axis=1, keepdims=True) / counts)[mask]
    x = (learned - learned.sum(axis=1, keepdims=True) / counts)[mask]
    totals += [x.size, x.sum(), y.sum(), x @ x, y @ y, x @ y, np.abs(x - y).sum()]
    rows_used += int(mask.any(axis=1).sum())
  n, sx, sy, sxx, syy, sxy, sabs = totals
  correlation = None
  if n >= 2:
    var_x, var_y = sxx - sx * sx / n, syy - sy * sy / n
    if var_x > 0 and var_y > 0:
      correlation = float((sxy - sx * sy / n) / np.sqrt(var_x * var_y))
  return {"correlation": correlation, "mean_abs_error": float(sabs / n) if n else None, "entries": int(n),
          "rows": rows_used}


def lookup_share(lookup_total: np.ndarray, projection_total: np.ndarray) -> np.ndarray:
  """Each row's share of accumulated gradient that came through the lookup: (V,), (V,) → (V,) float64 (the
  projection's is 1 minus it; nan for rows that got no gradient)."""
  lookup_total = np.asarray(lookup_total, np.float64)
  total = lookup_total + np.asarray(projection_total, np.float64)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(total > 0, lookup_total / total, np.nan)


def provenance_summary(lookup_total: np.ndarray, projection_total: np.ndarray, k: int) -> dict[str, Any]:
  """Summary of the per-row gradient totals of each path: (V,), (V,) float, k → JSON-ready dict.

  - `projection_only`: rows never looked up (zero lookup total) that still got projection gradient;
  - `lookup_share`: quantiles and mean of the per-row lookup share over rows with any gradient;
  - `most_lookup` / `most_projection`: the k rows with the highest / lowest lookup share, the latter among
    rows that were looked up at all (the projection-only rows are listed above).
  """
  lookup_total, projection_total = np.asarray(lookup_total, np.float64), np.asarray(projection_total, np.float64)
  share = lookup_share(lookup_total, projection_total)
  projection_only = np.flatnonzero((lookup_total == 0) & (projection_total > 0))
  valid = np.flatnonzero(np.isfinite(share))
  looked_up = valid[lookup_total[valid] > 0]

  def rows(ids: np.ndarray) -> list[dict[str, Any]]:
    return [{"id": int(i), "lookup_share": float(share[i]), "lookup_total": float(lookup_total[i]),
             "projection_total": float(projection_total[i])} for i in ids]

  shares = share[valid]
  stats = dict.fromkeys(("min", "p25", "median", "p75", "max", "mean"))
  if shares.size:
    quantiles = np.quantile(shares, [0, 0.25, 0.5, 0.75, 1])
    stats = dict(zip(("min", "p25", "median", "p75", "max"), map(float, quantiles), strict=True))
    stats["mean"] = float(shares.mean())
  return {
      "lookup_sum": float(lookup_total.sum()),
      "projection_sum": float(projection_total.sum()),
      "projection_only": [int(i) for i in projection_only],
      "lookup_share": stats,
      "most_lookup": rows(valid[np.argsort(-shares, kind="stable")[:k]]),
      "most_projection": rows(looked_up[np.argsort(share[looked_up], kind="stable")[:k]]),
  }


def parameter_summary(vocab_size: int, d_model: int, tied: bool, hidden: str = "none") -> dict[str, Any]:
  """Table shape and the tied (V·D) vs untied (2·V·D) parameter counts (+ D² with a hidden map)."""
  counts = param_counts(vocab_size, d_model, hidden)
  return {"table_shape": [vocab_size, d_model], "tied": counts.tied, "untied": counts.untied, "saved": counts.saved,
          "this_model": counts.tied if tied else counts.untied}


def token_label(token: int, source: str) -> str:
  """How a token is shown, as its source says: byte tokens of text as a printable literal ('a', '\\n')."""
  return sources.get(source).token_label(token)


def token_label_of(source: str, tokenizer: Any) -> Callable[[int], str]:
  """How the report names tokens: the run's tokenizer's labels when it has one, else as the source shows them."""
  return sources.get(source).token_label if tokenizer is None else tokenizer.label


def build_report(
    lookup_table: np.ndarray, projection_table: np.ndarray, *, tied: bool, source: str,
    true_log_probs: np.ndarray | LogProbRows, lookup_total: np.ndarray, projection_total: np.ndarray,
    tokens: list[int], top_k: int, label: Callable[[int], str] | None = None, hidden: str = "none",
) -> dict[str, Any]:
  """The table-dependent part of the report: tables (V, D), true_log_probs (V, V), totals (V,) → dict.

  S = `lookup_table[ids] · projection_tableᵀ` (with a hidden map W, pass E_in · W as the lookup table). Keys: scores
  (what S is), parameters, tokens (one entry per requested token, ids already checked to lie in [0, V)), fit,
  provenance. Only the requested rows of S and the true table are formed whole; the fit runs over blocks of rows.
  `label(id)` names a token (default: as the source shows it).
  """
  vocab_size, d_model = np.shape(lookup_table)
  lookup, projection = np.asarray(lookup_table, np.float64), np.asarray(projection_table, np.float64)
  true_rows = true_log_probs if isinstance(true_log_probs, LogProbRows) else dense_rows(true_log_probs)
  label = label or sources.get(source).token_label
  ids = np.asarray(tokens, np.int64)
  score_rows = lookup[ids] @ projection.T
  truth_rows = true_rows.rows(ids) if ids.size else np.zeros((0, vocab_size))
  token_entries = []
  for token, scores_row, truth_row in zip(tokens, score_rows, truth_rows, strict=True):
    own, rank = row_own_rank(scores_row, token)
    predicted = top_next(scores_row, truth_row, top_k)
    for entry in predicted:
      entry["label"] = label(entry["id"])
    token_entries.append({"id": token, "label": label(token), "own_score": own, "own_rank": rank, "top": predicted})
  provenance = provenance_summary(lookup_total, projection_total, top_k)
  for key in ("most_lookup", "most_projection"):
    for entry in provenance[key]:
      entry["label"] = label(entry["id"])
  return {
      "scores": _scores_name(tied, hidden),
      "parameters": parameter_summary(vocab_size, d_model, tied, hidden),
      "tokens": token_entries,
      "fit": fit_by_rows(lambda ids: (lookup[ids] @ projection.T, true_rows.rows(ids)), vocab_size),
      "provenance": provenance,
  }


def _scores_name(tied: bool, hidden: str) -> str:
  if hidden == "linear":
    if tied:
      return "E·W·Eᵀ (tied table with a hidden map W: W's antisymmetric part lets S differ from Sᵀ)"
    return "input·W·outputᵀ (untied model with a hidden map W)"
  return "E·Eᵀ (tied table)" if tied else "input·outputᵀ (untied model: input and output tables differ)"


def learned_log_probs(lookup_table: np.ndarray, projection_table: np.ndarray, ids: np.ndarray) -> np.ndarray:
  """Rows of log softmax(S): (V, D), (V, D), ids (K,) → (K, V) float64."""
  lookup, projection = np.asarray(lookup_table, np.float64), np.asarray(projection_table, np.float64)
  return log_softmax(lookup[ids] @ projection.T)

