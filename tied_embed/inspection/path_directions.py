"""Do the two paths pull a row the same way? The cosine between each path's summed gradient, per tracked row.

Training keeps, for the most frequent rows (train_step.TRACKED_ROWS of them), the running sum over steps of each
row's gradient through the lookup and through the projection. Their cosine says whether the row's two roles
agree (near 1: both push it the same way), pull it apart (near -1), or act on unrelated directions (near 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def path_cosines(lookup: np.ndarray, projection: np.ndarray) -> np.ndarray:
  """Row-wise cosine of two (K, D) arrays → (K,) float64; 0 where either row is all zero."""
  lookup, projection = np.asarray(lookup, np.float64), np.asarray(projection, np.float64)
  norms = np.linalg.norm(lookup, axis=1) * np.linalg.norm(projection, axis=1)
  dots = np.sum(lookup * projection, axis=1)
  return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def path_direction_summary(directions: dict[str, np.ndarray], label: Callable[[int], str] = str) -> dict[str, Any]:
  """{'rows': (K,), 'lookup': (K, D), 'projection': (K, D)} → JSON-ready {'rows': [...], 'median_cosine'}."""
  cosines = path_cosines(directions["lookup"], directions["projection"])
  rows = [
      {"id": int(row), "label": label(int(row)), "cosine": float(cosine),
       "lookup_norm": float(np.linalg.norm(lookup)), "projection_norm": float(np.linalg.norm(projection))}
      for row, cosine, lookup, projection in zip(
          directions["rows"], cosines, directions["lookup"], directions["projection"], strict=True)
  ]
  return {"rows": rows, "median_cosine": float(np.median(cosines)) if len(cosines) else None}


def format_path_directions(summary: dict[str, Any], shown: int = 8) -> list[str]:
  """The report's lines for the tracked rows (the first `shown`, most frequent first)."""
  return [
      "path directions (the most frequent rows: cosine between each path's summed gradient; median "
      f"{summary['median_cosine']:.3f})",
      f"  {'token':>12} {'cosine':>8} {'|lookup|':>9} {'|projection|':>13}",
      *(f"  {row['label']:>12} {row['cosine']:8.3f} {row['lookup_norm']:9.3g} {row['projection_norm']:13.3g}"
        for row in summary["rows"][:shown]),
  ]
