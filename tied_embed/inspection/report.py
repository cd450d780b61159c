"""What a restored table learned, in numbers: pure NumPy on plain arrays, so a notebook can call it on any table. The
scores are `S = lookup @ projection.T` (V, V); after token i the model predicts `softmax(S[i])`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tied_embed.core.model import param_counts
from tied_embed.data import sources
from tied_embed.data.base import LogProbRows, dense_rows, log_softmax, row_blocks


def own_score_rank(scores: np.ndarray, token: int) -> tuple[float, int]:
  """S (V, V) or its row i (V,), token i → (own score S[i, i], its rank in the row, 1 + #{j : S[i, j] > S[i, i]})."""
  row = np.asarray(scores)
  row = row[token] if row.ndim == 2 else row
  own = float(row[token])
  return own, 1 + int(np.sum(row > own))


def top_next(scores_row: np.ndarray, true_log_probs_row: np.ndarray, k: int) -> list[dict[str, Any]]:
  """The k likeliest next tokens: (V,), (V,) → k dicts {id, model_prob, true_prob (None where unknown)}."""
  model_probs = np.exp(log_softmax(np.asarray(scores_row, np.float64)[None]))[0]
  order = np.argsort(-model_probs, kind="stable")[:k]
  true_probs = np.exp(np.asarray(true_log_probs_row, np.float64))
  return [{"id": int(j), "model_prob": float(model_probs[j]),
           "true_prob": float(true_probs[j]) if np.isfinite(true_probs[j]) else None} for j in order]


def fit_to_truth(scores: np.ndarray | LogProbRows, true_log_probs: np.ndarray | LogProbRows) -> dict[str, Any]:
  """How well S fits the true log-probabilities once each row's constant (which softmax ignores) is removed: (V, V), (V,
  V) → {correlation, mean_abs_error, entries, rows}, over the finite true entries of rows with at least two. Summed
  over blocks of rows, so either table may be a `LogProbRows` that computes only the rows asked for."""
  totals = np.zeros(7)  # entries, Σx, Σy, Σx², Σy², Σxy, Σ|x - y| over centred learned x and true y
  rows_used = 0
  for ids in row_blocks(len(scores)):
    learned, truth = (np.asarray(table[ids], np.float64) for table in (scores, true_log_probs))
    mask = np.isfinite(truth)
    mask &= (mask.sum(axis=1) >= 2)[:, None]
    counts = np.maximum(mask.sum(axis=1, keepdims=True), 1)
    truth = np.where(mask, truth, 0.0)
    learned = np.where(mask, learned, 0.0)
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


def _share(part: np.ndarray, total: np.ndarray) -> np.ndarray:
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(total > 0, part / total, np.nan)


def provenance_summary(lookup_total: np.ndarray, projection_total: np.ndarray, k: int) -> dict[str, Any]:
  """The per-row gradient totals of each path: (V,), (V,), k → JSON-ready dict: projection_only rows, lookup_share
  (quantiles and mean), most_lookup / most_projection (the k looked-up rows of highest / lowest lookup share)."""
  lookup_total, projection_total = np.asarray(lookup_total, np.float64), np.asarray(projection_total, np.float64)
  share = _share(lookup_total, lookup_total + projection_total)
  projection_only = np.flatnonzero((lookup_total == 0) & (projection_total > 0))
  valid = np.flatnonzero(np.isfinite(share))
  looked_up = valid[lookup_total[valid] > 0]

  def rows(ids: np.ndarray) -> list[dict[str, Any]]:
    return [{"id": int(i), "lookup_share": float(share[i]), "lookup_total": float(lookup_total[i]),
             "projection_total": float(projection_total[i])} for i in ids]

  shares = share[valid]
  stats = dict.fromkeys(("min", "p25", "median", "p75", "max", "mean"))
  if shares.size:
    quantiles = np.quantile(shares, [0, 0.25, 0.5, 0.75, 1]).tolist()
    stats = dict(zip(stats, [*quantiles, float(shares.mean())], strict=True))
  return {
      "lookup_sum": float(lookup_total.sum()), "projection_sum": float(projection_total.sum()),
      "projection_only": [int(i) for i in projection_only], "lookup_share": stats,
      "most_lookup": rows(valid[np.argsort(-shares, kind="stable")[:k]]),
      "most_projection": rows(looked_up[np.argsort(share[looked_up], kind="stable")[:k]]),
  }


def undertrained_summary(lookup_table: np.ndarray, lookup_total: np.ndarray, projection_total: np.ndarray,
                         input_counts: np.ndarray, k: int, label: Callable[[int], str] = str) -> dict[str, Any]:
  """The rows to distrust: a row seldom current gets almost all its gradient through the projection. (V, D) lookup
  table, (V,) totals and train counts, k → {never_looked_up, of_them_never_in_train, spearman (lookup total vs count,
  or None), rows (the k least looked up: id, label, train_count, lookup_total, projection_share, norm, neighbours)}."""
  from scipy import stats  # noqa: PLC0415 (only when a report is built)

  table = np.asarray(lookup_table, np.float64)
  lookup_total, projection_total = np.asarray(lookup_total, np.float64), np.asarray(projection_total, np.float64)
  counts = np.asarray(input_counts, np.int64)
  norms = np.linalg.norm(table, axis=1)
  unit = table / np.maximum(norms, 1e-30)[:, None]
  projection_share = _share(projection_total, lookup_total + projection_total)
  never = lookup_total == 0
  varies = np.ptp(lookup_total) > 0 and np.ptp(counts) > 0
  spearman = float(stats.spearmanr(lookup_total, counts).statistic) if varies else None
  rows = []
  for i in np.lexsort((counts, lookup_total))[:k]:
    cosines = unit @ unit[i]
    cosines[i] = -np.inf
    nearest = np.argsort(-cosines, kind="stable")[:3]
    rows.append({
        "id": int(i), "label": label(int(i)), "train_count": int(counts[i]), "lookup_total": float(lookup_total[i]),
        "projection_share": None if np.isnan(projection_share[i]) else float(projection_share[i]),
        "norm": float(norms[i]),
        "neighbours": [{"id": int(j), "label": label(int(j)), "cosine": float(cosines[j])} for j in nearest],
    })
  return {"never_looked_up": int(never.sum()), "of_them_never_in_train": int((never & (counts == 0)).sum()),
          "spearman": spearman, "rows": rows}


def path_cosines(lookup: np.ndarray, projection: np.ndarray) -> np.ndarray:
  """Row-wise cosine of two (K, D) arrays → (K,) float64; 0 where either row is all zero."""
  lookup, projection = np.asarray(lookup, np.float64), np.asarray(projection, np.float64)
  norms = np.linalg.norm(lookup, axis=1) * np.linalg.norm(projection, axis=1)
  dots = np.sum(lookup * projection, axis=1)
  return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def path_direction_summary(directions: dict[str, np.ndarray], label: Callable[[int], str] = str) -> dict[str, Any]:
  """Do the two paths pull a row the same way (cosine near 1) or apart (near -1)? The tracked {'rows': (K,), 'lookup':
  (K, D), 'projection': (K, D)} → {'rows': [{id, label, cosine, lookup_norm, projection_norm}], 'median_cosine'}."""
  cosines = path_cosines(directions["lookup"], directions["projection"])
  rows = [{"id": int(row), "label": label(int(row)), "cosine": float(cosine),
           "lookup_norm": float(np.linalg.norm(lookup)), "projection_norm": float(np.linalg.norm(projection))}
          for row, cosine, lookup, projection in zip(directions["rows"], cosines, directions["lookup"],
                                                     directions["projection"], strict=True)]
  return {"rows": rows, "median_cosine": float(np.median(cosines)) if len(cosines) else None}


def sample_after(scores: Callable[[list[int]], np.ndarray], prompt: list[int], num_tokens: int, temperature: float,
                 seed: int) -> list[int]:
  """`num_tokens` ids drawn one by one from softmax(scores(ids so far) / temperature); temperature 0: the likeliest."""
  rng = np.random.default_rng(seed)
  tokens = list(prompt)
  for _ in range(num_tokens):
    next_scores = scores(tokens)
    if temperature == 0:
      token = int(np.argmax(next_scores))
    else:
      with np.errstate(over="ignore"):  # scores far below the maximum become -inf: probability 0
        probs = np.exp(log_softmax(((next_scores - next_scores.max()) / temperature)[None]))[0]
      token = int(rng.choice(len(probs), p=probs / probs.sum()))
    tokens.append(token)
  return tokens[len(prompt):]


def parameter_summary(vocab_size: int, d_model: int, tied: bool, other_params: int = 0) -> dict[str, Any]:
  """Table shape, tied (V·D) and untied (2·V·D) parameter counts, each + `other_params` (Params beside the tables)."""
  counts = param_counts(vocab_size, d_model)
  return {"table_shape": [vocab_size, d_model], "tied": counts.tied + other_params,
          "untied": counts.untied + other_params, "saved": counts.saved,
          "this_model": (counts.tied if tied else counts.untied) + other_params}


def build_report(lookup_table: np.ndarray, projection_table: np.ndarray, *, tied: bool, source: str,
                 true_log_probs: np.ndarray | LogProbRows, lookup_total: np.ndarray, projection_total: np.ndarray,
                 tokens: list[int], top_k: int, label: Callable[[int], str] | None = None,
                 other_params: int = 0, scores: str | None = None, d_model: int | None = None,
                 score_rows: Callable[[np.ndarray], np.ndarray] | None = None) -> dict[str, Any]:
  """The table-dependent part of the report: tables (V, D), true_log_probs (V, V), totals (V,) → dict: scores (what S =
  `lookup_table[ids] · projection_tableᵀ` is), parameters, tokens (ids already checked), fit, provenance.

  Only the rows shown of S and the true table are formed whole, the fit running over row blocks: memory grows with V·D,
  not V². `label(id)` names a token; `d_model`: the table's D where the scoring tables are wider; `score_rows(ids)` (K,)
  → (K, V): S's rows where no table product gives them (a context model run on each token), `scores` saying what."""
  vocab_size, width = np.shape(lookup_table)
  d_model = width if d_model is None else d_model  # a table's D, where the scoring tables carry more (a bias column)
  lookup, projection = np.asarray(lookup_table, np.float64), np.asarray(projection_table, np.float64)
  true_rows = true_log_probs if isinstance(true_log_probs, LogProbRows) else dense_rows(true_log_probs)
  label = label or sources.get(source).token_label
  ids = np.asarray(tokens, np.int64)
  score_rows = score_rows or (lambda ids: lookup[ids] @ projection.T)
  shown_rows = score_rows(ids) if ids.size else np.zeros((0, vocab_size))
  truth_rows = true_rows.rows(ids) if ids.size else np.zeros((0, vocab_size))
  token_entries = []
  for token, scores_row, truth_row in zip(tokens, shown_rows, truth_rows, strict=True):
    own, rank = own_score_rank(scores_row, token)
    predicted = [{**entry, "label": label(entry["id"])} for entry in top_next(scores_row, truth_row, top_k)]
    token_entries.append({"id": token, "label": label(token), "own_score": own, "own_rank": rank, "top": predicted})
  provenance = provenance_summary(lookup_total, projection_total, top_k)
  for entry in provenance["most_lookup"] + provenance["most_projection"]:
    entry["label"] = label(entry["id"])
  own_name = "S_ii" if scores else "|e_i|²" if tied else "in_i·out_i"  # S's diagonal where S is more than the tables
  if scores is None:
    scores = "E·Eᵀ (tied table)" if tied else "input·outputᵀ (untied model: input and output tables differ)"
  return {
      "scores": scores, "own_score_name": own_name,
      "parameters": parameter_summary(vocab_size, d_model, tied, other_params),
      "tokens": token_entries,
      "fit": fit_to_truth(LogProbRows(vocab_size, score_rows), true_rows),
      "provenance": provenance,
  }
