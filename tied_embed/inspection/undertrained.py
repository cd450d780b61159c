"""Under-trained rows: the tokens training rarely or never looked up, found from the provenance totals.

A row seldom the current token gets almost all of its gradient through the output projection, in a tied table its
only training: the rows to distrust (the tied-table view of finding under-trained tokens from the unembedding).
For each of the least looked-up rows the summary gives its train count, its gradient's projection share, its norm
and its nearest neighbours by cosine, and how well the lookup total predicts the train count (Spearman, all rows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

_NEIGHBOURS = 3


def undertrained_summary(
    lookup_table: np.ndarray, lookup_total: np.ndarray, projection_total: np.ndarray, input_counts: np.ndarray,
    k: int, label: Callable[[int], str] = str,
) -> dict[str, Any]:
  """(V, D) lookup table, (V,) gradient totals and train counts, k → JSON-ready dict.

  Keys: never_looked_up (rows with no lookup gradient), of_them_never_in_train, spearman (lookup total vs train
  count; None if either is constant), rows (the k rows with the least lookup gradient, fewest train counts first
  among ties: id, label, train_count, lookup_total, projection_share, norm, neighbours [{id, label, cosine}]).
  """
  from scipy import stats  # noqa: PLC0415 (only when a report is built)

  table = np.asarray(lookup_table, np.float64)
  lookup_total, projection_total = np.asarray(lookup_total, np.float64), np.asarray(projection_total, np.float64)
  counts = np.asarray(input_counts, np.int64)
  norms = np.linalg.norm(table, axis=1)
  unit = table / np.maximum(norms, 1e-30)[:, None]
  total = lookup_total + projection_total
  with np.errstate(invalid="ignore", divide="ignore"):
    projection_share = np.where(total > 0, projection_total / total, np.nan)
  never = lookup_total == 0
  spearman = None
  if np.ptp(lookup_total) > 0 and np.ptp(counts) > 0:
    spearman = float(stats.spearmanr(lookup_total, counts).statistic)
  rows = []
  for i in np.lexsort((counts, lookup_total))[:k]:
    cosines = unit @ unit[i]
    cosines[i] = -np.inf
    nearest = np.argsort(-cosines, kind="stable")[:_NEIGHBOURS]
    rows.append({
        "id": int(i), "label": label(int(i)), "train_count": int(counts[i]), "lookup_total": float(lookup_total[i]),
        "projection_share": None if np.isnan(projection_share[i]) else float(projection_share[i]),
        "norm": float(norms[i]),
        "neighbours": [{"id": int(j), "label": label(int(j)), "cosine": float(cosines[j])} for j in nearest],
    })
  return {"never_looked_up": int(never.sum()), "of_them_never_in_train": int((never & (counts == 0)).sum()),
          "spearman": spearman, "rows": rows}


def format_undertrained(summary: dict[str, Any]) -> list[str]:
  """The report's text lines for `undertrained_summary`'s dict."""
  spearman = "n/a" if summary["spearman"] is None else f"{summary['spearman']:.3f}"
  lines = [
      f"under-trained rows (least lookup gradient; Spearman of lookup total vs train count: {spearman})",
      f"  never looked up: {summary['never_looked_up']} rows ({summary['of_them_never_in_train']} of them never"
      f" current in train)",
      f"  {'token':>12}  {'train':>7}  {'lookup':>8}  {'proj share':>10}  {'norm':>6}  nearest (cosine)",
  ]
  for row in summary["rows"]:
    share = "n/a" if row["projection_share"] is None else f"{row['projection_share']:.3f}"
    neighbours = ", ".join(f"{n['label']} ({n['cosine']:.2f})" for n in row["neighbours"])
    lines.append(f"  {row['label']:>12}  {row['train_count']:7d}  {row['lookup_total']:8.3g}  {share:>10}"
                 f"  {row['norm']:6.3f}  {neighbours}")
  return lines
