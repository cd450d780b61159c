"""The asymmetry budget of the sweep's own data: per corpus, size and data draw, what of the train pairs' count model
no tied table can express (tied_embed/data/asymmetry.py), measured on exactly the pairs a run at that size trains on.

The count model is the sweep's add-k bigram of those pairs (sweep.count_reference), its k chosen on that draw's
selection split from count_bigram.K_GRID as the sweep chooses it; its log-probabilities (V, V) are the table the
budget reads, each current token weighted by how often it is current in the train pairs. A token never current in
them has no row to measure and is left out as a row and a column (asymmetry.prepared_table's convention).
`python -m science.when_to_tie --asymmetry` runs it (cli.py) and writes <out>/when_to_tie_asymmetry.json."""

from __future__ import annotations

import json
import os
import pathlib
import time
import types
from typing import Any

import numpy as np

from science.when_to_tie.mechanism import BUDGET_JSON, mean_of_draws
from science.when_to_tie.plan import Corpus, Plan, draws
from science.when_to_tie.sweep import Sweep


def add_k_log_probs(ids: np.ndarray, next_ids: np.ndarray, vocab_size: int, k: float) -> np.ndarray:
  """log P(next | current) of the add-k model of the pairs (N,), (N,): (count(i, j) + k) / (count(i) + k·V) → (V, V)
  float64; a token never current is a row of nan (no row to measure)."""
  from tied_embed.data.text import count_bigram  # noqa: PLC0415

  counts = count_bigram.PairCounts.of(ids, next_ids, vocab_size).dense_rows(np.arange(vocab_size)).astype(np.float64)
  rows = counts.sum(axis=1, keepdims=True)
  table = np.log((counts + k) / (rows + k * vocab_size))
  return np.where(rows > 0, table, np.nan)


def pairs_budget(ids: np.ndarray, next_ids: np.ndarray, vocab_size: int, k: float, d_model: int) -> dict[str, float]:
  """asymmetry.summary of the add-k table of the pairs (N,), (N,) at width `d_model`, its rows weighted by how often
  each token is current: → {antisymmetric_share, tokens, sampled, psd_rank_residual_share, psd_rank_excess_loss,
  k, pairs}."""
  from tied_embed.data import asymmetry  # noqa: PLC0415

  data = types.SimpleNamespace(true_log_probs=add_k_log_probs(ids, next_ids, vocab_size, k), vocab_size=vocab_size,
                               input_counts=np.bincount(ids, minlength=vocab_size))
  return {**asymmetry.summary(data, d_model), "k": float(k), "pairs": float(len(ids))}


def chosen_k(sweep: Sweep, fraction: float, draw: int) -> float:
  """The add-k count model's k at one size and draw, chosen on that draw's selection pairs (count_bigram.best_k, as
  sweep.count_reference chooses it)."""
  from tied_embed.data.text import count_bigram  # noqa: PLC0415

  data = sweep.drawn(draw)
  fit = count_bigram.PairCounts.of(*sweep.train_pairs(fraction, draw), sweep.corpus.vocab_size)
  return count_bigram.best_k(fit, data.select_ids, data.select_next)


def corpus_budget(corpus: Corpus, plan: Plan, fractions: tuple[float, ...], out: pathlib.Path,
                  single: bool = False) -> dict[str, Any]:
  """The budget of one corpus at each size and each draw the sweep scores there (plan.draws; `single`: draw 0
  alone), on the sweep's own datasets (built under <out>/data/ as the sweep builds them): → its JSON entry
  {dataset, datasets, vocab_size, d_model, by_fraction: {fraction: {by_draw: {draw: numbers}, mean: numbers}}}."""
  sweep = Sweep(corpus, plan, out, keep_runs=False)
  d_model = int(corpus.base.get_config().model.d_model)
  entry: dict[str, Any] = {"dataset": sweep.data.identity, "datasets": {}, "vocab_size": corpus.vocab_size,
                           "d_model": d_model, "by_fraction": {}}
  for fraction in fractions:
    by_draw = {}
    for draw in draws(fraction, single):
      entry["datasets"][str(draw)] = sweep.drawn(draw).identity
      by_draw[str(draw)] = pairs_budget(*sweep.train_pairs(fraction, draw), corpus.vocab_size,
                                        chosen_k(sweep, fraction, draw), d_model)
    entry["by_fraction"][f"{fraction:g}"] = {"by_draw": by_draw, "mean": mean_of_draws(by_draw)}
  return entry


def measure(chosen: dict[str, Corpus], plans: dict[str, Plan], fractions: tuple[float, ...], out: pathlib.Path,
            command: str, machine: str, single: bool = False) -> pathlib.Path:
  """The budget of each chosen corpus, written whole to <out>/BUDGET_JSON with the command, the machine and the
  time it took: → its path."""
  started, cpu_started = time.perf_counter(), time.process_time()
  results = {"command": command, "machine": machine,
             "corpora": {name: corpus_budget(corpus, plans[name], fractions, out, single)
                         for name, corpus in chosen.items()}}
  results["seconds"], results["cpu_seconds"] = time.perf_counter() - started, time.process_time() - cpu_started
  out.mkdir(parents=True, exist_ok=True)
  path = out / BUDGET_JSON
  temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # renamed over: a link at the path is replaced
  temporary.write_text(json.dumps(results, indent=1))
  os.replace(temporary, path)
  return path
