"""What a restored table learned, in numbers: pure NumPy over the (V, D) tables and the bigram data.

Every function takes plain arrays so a notebook can call it on any table. The learned score matrix is
`S = lookup @ projection.T` (V, V): `E·Eᵀ` for a tied model, `input·outputᵀ` for the untied ablation; the
model's next-token distribution after token i is `softmax(S[i])`. `build_report` assembles the pieces into
the JSON-ready dict that `python -m tied_embed.inspect` prints.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tied_embed.model import param_counts
from tied_embed.sources import log_softmax


def score_matrix(lookup_table: np.ndarray, projection_table: np.ndarray) -> np.ndarray:
  """Learned scores `S[i, j] = lookup[i] · projection[j]`: (V, D), (V, D) → (V, V) float64."""
  return np.asarray(lookup_table, np.float64) @ np.asarray(projection_table, np.float64).T


def own_score_rank(scores: np.ndarray, token: int) -> tuple[float, int]:
  """A token's own score `S[i, i]` (the squared norm when tied) and its rank in row i (1 = highest).

  scores (V, V), token i → (S[i, i], 1 + #{j : S[i, j] > S[i, i]}).
  """
  own = float(scores[token, token])
  return own, 1 + int(np.sum(scores[token] > own))


def top_next(scores_row: np.ndarray, true_log_probs_row: np.ndarray, k: int) -> list[dict[str, Any]]:
  """The k likeliest next tokens under the model: (V,), (V,) → k dicts {id, model_prob, true_prob}.

  `true_prob` is None where the true row is unknown (nan: a text token never seen as current token).
  """
  model_probs = np.exp(log_softmax(np.asarray(scores_row, np.float64)[None]))[0]
  order = np.argsort(-model_probs, kind="stable")[:k]
  true_probs = np.exp(np.asarray(true_log_probs_row, np.float64))
  return [
      {"id": int(j), "model_prob": float(model_probs[j]), "true_prob": _finite_or_none(true_probs[j])}
      for j in order
  ]


def fit_to_truth(scores: np.ndarray, true_log_probs: np.ndarray) -> dict[str, Any]:
  """How well S fits the true log-probabilities once each row's additive constant is removed.

  Both (V, V). Softmax ignores a per-row constant, so each row of both matrices is centred on its mean over the
  row's finite true entries; -inf (never observed) and nan (unknown row) entries are skipped, as are rows with
  fewer than two finite entries. Returns {correlation, mean_abs_error, entries, rows}.
  """
  scores = np.asarray(scores, np.float64)
  true_log_probs = np.asarray(true_log_probs, np.float64)
  mask = np.isfinite(true_log_probs)
  mask &= (mask.sum(axis=1) >= 2)[:, None]
  counts = np.maximum(mask.sum(axis=1, keepdims=True), 1)
  truth = np.where(mask, true_log_probs, 0.0)
  learned = np.where(mask, scores, 0.0)
  truth_c = (truth - truth.sum(axis=1, keepdims=True) / counts)[mask]
  learned_c = (learned - learned.sum(axis=1, keepdims=True) / counts)[mask]
  if truth_c.size < 2 or np.std(truth_c) == 0 or np.std(learned_c) == 0:
    correlation = None
  else:
    correlation = float(np.corrcoef(learned_c, truth_c)[0, 1])
  return {
      "correlation": correlation,
      "mean_abs_error": float(np.mean(np.abs(learned_c - truth_c))) if truth_c.size else None,
      "entries": int(mask.sum()),
      "rows": int(mask.any(axis=1).sum()),
  }


def lookup_share(lookup_total: np.ndarray, projection_total: np.ndarray) -> np.ndarray:
  """Each row's share of accumulated gradient that came through the lookup: (V,), (V,) → (V,) float64.

  The projection's share is 1 minus it; rows that got no gradient at all are nan.
  """
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
  lookup_total = np.asarray(lookup_total, np.float64)
  projection_total = np.asarray(projection_total, np.float64)
  share = lookup_share(lookup_total, projection_total)
  projection_only = np.flatnonzero((lookup_total == 0) & (projection_total > 0))
  valid = np.flatnonzero(np.isfinite(share))
  looked_up = valid[lookup_total[valid] > 0]

  def rows(ids: np.ndarray) -> list[dict[str, Any]]:
    return [
        {
            "id": int(i),
            "lookup_share": float(share[i]),
            "lookup_total": float(lookup_total[i]),
            "projection_total": float(projection_total[i]),
        }
        for i in ids
    ]

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


def parameter_summary(vocab_size: int, d_model: int, tied: bool) -> dict[str, Any]:
  """Table shape and the tied (V·D) vs untied (2·V·D) parameter counts, from `model.param_counts`."""
  counts = param_counts(vocab_size, d_model)
  return {
      "table_shape": [vocab_size, d_model],
      "tied": counts.tied,
      "untied": counts.untied,
      "saved": counts.saved,
      "this_model": counts.tied if tied else counts.untied,
  }


def token_label(token: int, source: str) -> str:
  """How to show a token: byte tokens of the text source as a printable literal ('a', ' ', '\\n', '\\xc3')."""
  if source == "text":
    return repr(bytes([token]))[1:]
  return str(token)


def build_report(
    lookup_table: np.ndarray,
    projection_table: np.ndarray,
    *,
    tied: bool,
    source: str,
    true_log_probs: np.ndarray,
    lookup_total: np.ndarray,
    projection_total: np.ndarray,
    tokens: list[int],
    top_k: int,
) -> dict[str, Any]:
  """The table-dependent part of the report: tables (V, D), true_log_probs (V, V), totals (V,) → dict.

  Keys: scores (what S is), parameters, tokens (one entry per requested token), fit, provenance. Token ids
  must already be validated to lie in [0, V).
  """
  vocab_size, d_model = np.shape(lookup_table)
  scores = score_matrix(lookup_table, projection_table)
  token_entries = []
  for token in tokens:
    own, rank = own_score_rank(scores, token)
    predicted = top_next(scores[token], true_log_probs[token], top_k)
    for entry in predicted:
      entry["label"] = token_label(entry["id"], source)
    token_entries.append(
        {"id": token, "label": token_label(token, source), "own_score": own, "own_rank": rank, "top": predicted}
    )
  provenance = provenance_summary(lookup_total, projection_total, top_k)
  for key in ("most_lookup", "most_projection"):
    for entry in provenance[key]:
      entry["label"] = token_label(entry["id"], source)
  return {
      "scores": "E·Eᵀ (tied table)" if tied else "input·outputᵀ (untied model: input and output tables differ)",
      "parameters": parameter_summary(vocab_size, d_model, tied),
      "tokens": token_entries,
      "fit": fit_to_truth(scores, true_log_probs),
      "provenance": provenance,
  }


def _finite_or_none(value: float) -> float | None:
  return float(value) if np.isfinite(value) else None
