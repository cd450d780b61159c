"""The sweep's runs: each model trained, tuned on the selection split and scored at its best step, the convergence
check, and the plain-NumPy references they are scored against (the count-bigram model, the repeat shares)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import pathlib
import shutil
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from science.when_to_tie import checks, tuning
from science.when_to_tie.plan import (
  CONVERGENCE_FACTOR,
  DRAWN,
  MIN_STEPS,
  MODELS,
  PATIENCE,
  TUNE_SEED,
  Corpus,
  Model,
  Plan,
  UsageError,
  context_length,
  context_of,
  draws,
  ngram_orders,
  run_config,
  schedule,
  trials,
)

# --- the count-bigram reference and the repeat shares: plain NumPy, independent of the trainer --------------------


def count_reference(train: tuple[np.ndarray, np.ndarray], selection: tuple[np.ndarray, np.ndarray],
                    evaluation: tuple[np.ndarray, np.ndarray], vocab_size: int) -> dict[str, float]:
  """The add-k count bigram model of the train pairs (N,), (N,), k chosen on the selection pairs: → {k, select_loss,
  eval_loss} (nats)."""
  from tied_embed.data.text import count_bigram  # noqa: PLC0415

  fit = count_bigram.PairCounts.of(*train, vocab_size)
  k = count_bigram.best_k(fit, *selection)
  return {"k": k, "select_loss": count_bigram.add_k_loss(fit, *selection, k),
          "eval_loss": count_bigram.add_k_loss(fit, *evaluation, k)}


def kneser_ney_reference(train: tuple[np.ndarray, np.ndarray], selection: tuple[np.ndarray, np.ndarray],
                         evaluation: tuple[np.ndarray, np.ndarray], vocab_size: int) -> dict[str, float]:
  """The interpolated Kneser-Ney bigram of the train pairs (N,), (N,), its discount chosen on the selection pairs:
  → {discount, select_loss, eval_loss} (nats)."""
  from science import kneser_ney  # noqa: PLC0415
  from tied_embed.data.text import count_bigram  # noqa: PLC0415

  fit = count_bigram.PairCounts.of(*train, vocab_size)
  discount = kneser_ney.best_discount(fit, *selection)
  return {"discount": discount, "select_loss": kneser_ney.kneser_ney_loss(fit, *selection, discount),
          "eval_loss": kneser_ney.kneser_ney_loss(fit, *evaluation, discount)}


def ngram_reference(train: tuple[np.ndarray, np.ndarray, np.ndarray | None],
                    selection: tuple[np.ndarray, np.ndarray, np.ndarray | None],
                    evaluation: tuple[np.ndarray, np.ndarray, np.ndarray | None], window: int,
                    orders: tuple[int, ...], vocab_size: int) -> dict[str, float]:
  """The interpolated Kneser-Ney n-gram (science/kneser_ney.py) of a context model's train pairs, each split given as
  (ids (N,), next ids (N,), where its documents end or None), counted within documents, its order (of `orders`) and
  discount (kneser_ney.DISCOUNT_GRID) chosen on the selection pairs, each split scored from exactly the context
  its model sees there: windows of `window` tiled from each document's start, as the trainer's evals tile them.
  → {order, discount, window, select_loss, eval_loss} (nats)."""
  from science import kneser_ney  # noqa: PLC0415

  counts = kneser_ney.NgramCounts.of(*train, max(orders), vocab_size)
  select_loss, order, discount = kneser_ney.choose(counts, counts.statistics(*selection, window), orders)
  scored = counts.mix(counts.statistics(*evaluation, window), discount, order)
  return {"order": order, "discount": discount, "window": window, "select_loss": select_loss,
          "eval_loss": float(-np.mean(np.log(scored)))}


def window_scores(model: Any, ids: np.ndarray, next_ids: np.ndarray, document_ends: np.ndarray | None, length: int,
                  rare: np.ndarray, windows_per_batch: int = 256) -> dict[str, float]:
  """A context model's best_step_scores: the pairs (M,) tiled into windows of `length` from each document's start
  (the trainer's eval windows), scored through the model's own forward pass (float32 logits, their logsumexp and
  argmax per position, summed in float64): its loss, its loss on rare inputs (`rare`: (V,) bool) and the share of
  pairs (all, rare inputs) whose likeliest next token is the current token."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  from flax import nnx  # noqa: PLC0415

  from tied_embed.data import windows  # noqa: PLC0415

  graphdef, state = nnx.split(model)

  @jax.jit
  def scored(state, batch_ids, batch_next):  # (W, L) each → losses (W, L), likeliest next (W, L)
    logits = nnx.merge(graphdef, state)(batch_ids)
    picked = jnp.take_along_axis(logits, batch_next[..., None], axis=-1)[..., 0]
    return jax.nn.logsumexp(logits, axis=-1) - picked, logits.argmax(axis=-1)

  tiled_ids, tiled_next, weights = windows.tiled_windows(ids, next_ids, document_ends, length)
  losses, argmax = [], []
  for start in range(0, len(tiled_ids), windows_per_batch):  # the last batch padded to the batch's shape
    batch = [np.resize(part[start : start + windows_per_batch], (windows_per_batch, length))
             for part in (tiled_ids, tiled_next)]
    batch_losses, batch_argmax = jax.device_get(scored(state, *batch))
    kept = len(tiled_ids[start : start + windows_per_batch])
    losses.append(batch_losses[:kept])
    argmax.append(batch_argmax[:kept])
  valid = weights.reshape(-1) > 0
  losses = np.concatenate(losses).reshape(-1)[valid].astype(np.float64)
  current = tiled_ids.reshape(-1)[valid]
  predicts_self = np.concatenate(argmax).reshape(-1)[valid] == current
  on_rare = rare[current]
  return {"eval_loss": float(losses.mean()), "loss_rare_inputs": _mean(losses[on_rare]),
          "predicts_self": float(predicts_self.mean()), "predicts_self_rare": _mean(predicts_self[on_rare])}


def row_predictions(lookup: np.ndarray, projection: np.ndarray, rows: int = 512) -> tuple[np.ndarray, np.ndarray]:
  """Each token's logsumexp and likeliest next token under logits = lookup · projectionᵀ, in float64.

  lookup, projection: (V, D) → (logsumexp (V,) float64, argmax (V,) int64), `rows` rows of logits at a time.
  """
  lookup, projection = np.asarray(lookup, np.float64), np.asarray(projection, np.float64)
  lse, argmax = np.empty(len(lookup)), np.empty(len(lookup), np.int64)
  for start in range(0, len(lookup), rows):
    logits = lookup[start : start + rows] @ projection.T
    top = logits.max(axis=1)
    lse[start : start + rows] = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
    argmax[start : start + rows] = logits.argmax(axis=1)
  return lse, argmax


def pair_losses(lookup: np.ndarray, projection: np.ndarray, lse: np.ndarray, ids: np.ndarray,
                next_ids: np.ndarray, chunk: int = 65_536) -> np.ndarray:
  """-log P(next | current) of pairs (M,), (M,) from the tables (V, D) and row logsumexps (V,): → (M,) float64."""
  lookup, projection = np.asarray(lookup, np.float64), np.asarray(projection, np.float64)
  out = np.empty(len(ids))
  for start in range(0, len(ids), chunk):
    i, j = ids[start : start + chunk], next_ids[start : start + chunk]
    out[start : start + chunk] = lse[i] - np.einsum("md,md->m", lookup[i], projection[j])
  return out


def best_step_scores(lookup: np.ndarray, projection: np.ndarray, eval_ids: np.ndarray, eval_next: np.ndarray,
                     rare: np.ndarray) -> dict[str, float]:
  """A model's scoring tables (V, D) on the eval pairs (M,): its loss, its loss on rare inputs (`rare`: (V,) bool),
  and the share of pairs (all, rare inputs) whose likeliest next token is the current token."""
  lse, argmax = row_predictions(lookup, projection)
  losses = pair_losses(lookup, projection, lse, eval_ids, eval_next)
  on_rare = rare[eval_ids]
  predicts_self = argmax[eval_ids] == eval_ids
  return {"eval_loss": float(losses.mean()), "loss_rare_inputs": _mean(losses[on_rare]),
          "predicts_self": float(predicts_self.mean()), "predicts_self_rare": _mean(predicts_self[on_rare])}


def repeat_shares(eval_ids: np.ndarray, eval_next: np.ndarray, rare: np.ndarray) -> dict[str, float]:
  """The data's own rate of repeats: the share of eval pairs (all, rare inputs) with next == current."""
  repeats = eval_ids == eval_next
  return {"repeats": float(repeats.mean()), "repeats_rare": _mean(repeats[rare[eval_ids]]),
          "rare_pair_share": float(rare[eval_ids].mean())}


def count_self_shares(train: tuple[np.ndarray, np.ndarray], discount: float, eval_ids: np.ndarray,
                      rare: np.ndarray, vocab_size: int, rows: int = 256) -> dict[str, float]:
  """The count model's own "same token again": the share of eval pairs (all, rare inputs) whose current token is its
  own likeliest next token under the Kneser-Ney bigram of the train pairs (N,), (N,) (`discount` as chosen), the
  reference line for a model's self-argmax share. Ties go to the lowest token id, as np.argmax breaks them."""
  from science import kneser_ney  # noqa: PLC0415
  from tied_embed.data.text import count_bigram  # noqa: PLC0415

  fit = count_bigram.PairCounts.of(*train, vocab_size)
  argmax = np.empty(vocab_size, np.int64)
  for start in range(0, vocab_size, rows):
    ids = np.arange(start, min(start + rows, vocab_size))
    block = np.repeat(ids, vocab_size), np.tile(np.arange(vocab_size), len(ids))
    argmax[ids] = kneser_ney.kneser_ney_probs(fit, *block, discount).reshape(len(ids), vocab_size).argmax(axis=1)
  own = argmax[eval_ids] == eval_ids
  return {"count_self": float(own.mean()), "count_self_rare": _mean(own[rare[eval_ids]])}


def _mean(values: np.ndarray) -> float:
  return float(np.mean(values, dtype=np.float64)) if len(values) else float("nan")


def repeat_references(sweep: Sweep, fraction: float, scored_draws: tuple[int, ...], discount: float) -> dict[str, Any]:
  """The data's repeat shares (`repeat_shares`) and the Kneser-Ney count model's own (`count_self_shares`) at one
  size, each on a scored draw's validation pairs and rare bucket, the count model fitted on that draw's train pairs at
  `discount` (chosen on draw 0, as the models' settings are): → their means over the draws (a share a draw has no
  pairs for left out), with {"by_draw": {draw: shares}} where several are scored, beside the runs they average over."""
  found = {}
  for draw in scored_draws:
    data, rare = sweep.drawn(draw), sweep.rare_inputs(fraction, draw)
    found[str(draw)] = {**repeat_shares(data.eval_ids, data.eval_next, rare),
                        **count_self_shares(sweep.train_pairs(fraction, draw), discount, data.eval_ids, rare,
                                            sweep.corpus.vocab_size)}
  means = {name: _mean(np.array([numbers[name] for numbers in found.values() if not math.isnan(numbers[name])]))
           for name in found[str(scored_draws[0])]}
  return {**means, "by_draw": found} if len(found) > 1 else means


# --- the sweep ----------------------------------------------------------------------------------------------------

class Sweep:
  """Runs and remembers the runs of one corpus. `context_length`: the longest window of its models (1: pairs
  alone), with which the data is loaded, so that it knows where each split's documents end."""

  def __init__(self, corpus: Corpus, plan: Plan, out: pathlib.Path, keep_runs: bool, context_length: int = 1):
    self.corpus, self.plan, self.keep_runs, self.out = corpus, plan, keep_runs, out
    self.context_length = context_length
    self.data_dir = out / "data" / corpus.key
    self.runs_dir = out / "runs" / corpus.key
    self.finished_path = out / FINISHED
    self.finished = read_finished(self.finished_path)
    self.resumed: dict[str, tuple[float, float]] = {}  # key → (seconds, cpu_seconds) of a run taken from the record
    self.draws: dict[int, Any] = {}
    self.data = self.drawn(0)
    self.batch_size = int(corpus.base.get_config().train.batch_size)

  def drawn(self, draw: int):
    """The BigramData of data draw `draw` (the corpus's one split where it does not draw), built once per draw."""
    from tied_embed.data import bigram as data_lib  # noqa: PLC0415

    if draw not in self.draws:
      probe = run_config(self.corpus, MODELS[0], 1.0, 0, {}, MIN_STEPS, MIN_STEPS, self.data_dir,
                         self.plan.selection_share, draw=draw)
      probe.data.context_length = self.context_length  # the same pairs; with L > 1 their documents' ends too
      with contextlib.redirect_stdout(io.StringIO()):  # TFDS's 'downloading' chatter, as the trainer drops it
        self.draws[draw] = data_lib.load_bigram_data(probe, self.runs_dir / "probe")  # shared by the draw's runs
    return self.draws[draw]

  def train_pairs(self, fraction: float, draw: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Exactly the pairs a run at `fraction` trains on (the trainer's `train_pairs_used` of what selection leaves)."""
    from tied_embed.data import bigram as data_lib  # noqa: PLC0415

    data = self.drawn(draw)
    used = data_lib.train_pairs_used(len(data.train_ids), fraction)
    return data.train_ids[:used], data.train_next[:used]

  def splits(self, fraction: float, draw: int = 0) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray | None], ...]:
    """(train, selection, validation) at `fraction`, each (ids, next ids, where its documents end or None): the pairs
    a context model trains on and is scored on, its windows never crossing a document's end."""
    data = self.drawn(draw)
    return ((*self.train_pairs(fraction, draw), data.train_document_ends),
            (data.select_ids, data.select_next, data.select_document_ends),
            (data.eval_ids, data.eval_next, data.eval_document_ends))

  def rare_inputs(self, fraction: float, draw: int = 0) -> np.ndarray:
    """(V,) bool: the tokens in the rare bucket of the train pairs used at `fraction` (tied_embed/data/frequency.py)."""
    from tied_embed.data import frequency  # noqa: PLC0415

    counts = np.bincount(self.train_pairs(fraction, draw)[0], minlength=self.corpus.vocab_size)
    return frequency.input_buckets(counts) == frequency.BUCKETS.index("rare")

  def train(self, model: Model, fraction: float, seed: int, settings: dict[str, float],
            steps_factor: int = 1, evals_factor: int = 1, draw: int = 0) -> dict[str, Any]:
    """One run, scored at its best step: → its numbers. `steps_factor` stretches its schedule: that many times the
    steps and the steps between evals (the same warmup share, cosine decay and eval count; the convergence check).
    `evals_factor`: that many times the evals, the training unchanged (a best step's recheck). A run already in
    the finished record (FINISHED, under --out) is not trained again: its numbers are returned as recorded. `draw`:
    the data draw (0 alone until the corpus's split draws; plan.draws)."""
    from tied_embed.train import checkpoint, trainer  # noqa: PLC0415

    steps, every = schedule(self.plan, len(self.train_pairs(fraction, draw)[0]), self.batch_size)
    steps, every = steps * steps_factor, max(1, every * steps_factor // evals_factor)
    config = run_config(self.corpus, model, fraction, seed, settings, steps, every, self.data_dir,
                        self.plan.selection_share, self.plan.min_delta, draw=draw)
    name = "-".join(f"{key}={value:g}" for key, value in sorted(settings.items()))
    stretched = ("" if steps_factor == 1 else f"-x{steps_factor}") + ("" if evals_factor == 1 else f"-e{evals_factor}")
    drawn = "" if draw == 0 else f"-d{draw}"
    # The run's name holds all that decides its numbers: readable, the model, settings, size, seed, draw and
    # schedule; whole, the digest of its config and dataset (corpus contents, split, draw, selection share). So an
    # edited model, another --<corpus>-steps or another --subword-corpus is another run, in another workdir: a
    # stopped run's checkpoint is resumed only under the schedule and data it was made with.
    dataset = self.drawn(draw).identity
    run_name = (f"{model.key}-{name}-f{fraction:g}-s{seed}{drawn}{stretched}-n{steps}-e{every}"
                f"-m{self.plan.min_delta:g}-c{run_digest(config, dataset)}")
    workdir = self.runs_dir / run_name
    key = f"{dataset}/{run_name}"  # the record's key: the dataset readable too
    if key in self.finished:
      self.resumed[key] = (self.finished[key]["seconds"], self.finished[key]["cpu_seconds"])
      return self.finished[key]
    stop_point()  # a stop that landed where it could not be raised ends the sitting before another run starts
    problem = checks.link_problem(self.out, [workdir])  # a link made since the command line was checked
    if problem:
      raise UsageError(problem)
    clock = RunClock(workdir)
    try:
      summary = trainer.train_and_evaluate(config, workdir)
    except BaseException as stopped:  # stopped (a signal, say): its checkpoint resumes it, so its seconds are kept
      clock.keep()
      stopped.run_in_progress = workdir  # named in the sitting's closing line
      raise
    best = checkpoint.restore(workdir, step=summary.best_step).model
    data = self.drawn(draw)
    if context_length(model) > 1:  # its logits depend on the tokens before: scored through its forward pass
      scores = window_scores(best, data.eval_ids, data.eval_next, data.eval_document_ends, context_length(model),
                             self.rare_inputs(fraction, draw))
    else:
      lookup, projection = (np.asarray(table) for table in best.scoring_tables())
      scores = best_step_scores(lookup, projection, data.eval_ids, data.eval_next, self.rare_inputs(fraction, draw))
    run = {
        "seed": seed, "draw": draw, "settings": dict(settings), "steps_factor": steps_factor, "eval_every": every,
        "num_steps": steps,
        "best_step": summary.best_step, "end_step": summary.step, "stopped_early": summary.stopped_early,
        "select_loss": summary.best_select_loss, "eval_loss": summary.best_eval_loss,
        "gap_percent": 100 * (summary.best_eval_loss - summary.loss_floor) / summary.loss_floor,
        "loss_rare_inputs": summary.best_eval.get("eval/loss_rare_inputs", float("nan")),
        "end_eval_loss": summary.eval_loss, "end_select_loss": summary.select_loss,
        "float64_eval_loss": scores["eval_loss"],  # the restored best checkpoint rescored in NumPy
        "predicts_self": scores["predicts_self"], "predicts_self_rare": scores["predicts_self_rare"],
        "param_count": summary.param_count,
        **clock.spent(),  # seconds, cpu_seconds: from the run's first start, its stopped invocations included
    }
    self.finished[key] = run
    write_json(self.finished_path, self.finished)  # before the workdir goes: a kill between keeps the numbers
    if not self.keep_runs:  # the numbers are all the sweep needs of it
      shutil.rmtree(workdir)
    stop_point()
    print(f"  {self.corpus.key:7s} {model.key:7s} {name:28s} f={fraction:<5g} seed {seed}"
          f"{'' if steps_factor == 1 else f' ×{steps_factor}'}{'' if evals_factor == 1 else f' {evals_factor}× evals'}"
          f": best step "
          f"{run['best_step']:>4}/{run['end_step']:<4} select {run['select_loss']:.4f} eval {run['eval_loss']:.4f} "
          f"self-argmax {100 * run['predicts_self']:5.1f}%  [{run['seconds']:.1f} s, {run['cpu_seconds']:.1f} s CPU]",
          flush=True)
    return run


def count_references(sweep: Sweep, fraction: float, scored_draws: tuple[int, ...]):
  """The add-k and Kneser-Ney count models at one size, each fitted on a draw's train pairs and tuned on its selection
  pairs: → (add-k, Kneser-Ney), each draw 0's numbers with {"by_draw": {draw: eval loss}} where several are scored."""
  found = {}
  for draw in scored_draws:
    data = sweep.drawn(draw)
    splits = sweep.train_pairs(fraction, draw), (data.select_ids, data.select_next), (data.eval_ids, data.eval_next)
    found[draw] = (count_reference(*splits, sweep.corpus.vocab_size),
                   kneser_ney_reference(*splits, sweep.corpus.vocab_size))
  add_k, kneser_ney = found[scored_draws[0]]
  if len(scored_draws) > 1:
    add_k["by_draw"] = {str(draw): found[draw][0]["eval_loss"] for draw in scored_draws}
    kneser_ney["by_draw"] = {str(draw): found[draw][1]["eval_loss"] for draw in scored_draws}
  return add_k, kneser_ney


def ngram_references(sweep: Sweep, fraction: float, scored_draws: tuple[int, ...],
                     models: tuple[Model, ...]) -> dict[str, dict[str, Any]]:
  """Per context of `models` (none for a block without one), the Kneser-Ney n-gram of that context's order
  (`ngram_reference`), fitted on each draw's train pairs and chosen on its selection pairs: → {context: draw 0's
  numbers, with {"by_draw": {draw: eval loss}} where several are scored}."""
  found: dict[str, dict[str, Any]] = {}
  for model in models:
    context = context_of(model)
    if context == "none" or context in found:
      continue
    by_draw = {draw: ngram_reference(*sweep.splits(fraction, draw), context_length(model), ngram_orders(model),
                                     sweep.corpus.vocab_size) for draw in scored_draws}
    found[context] = by_draw[scored_draws[0]]
    if len(scored_draws) > 1:
      found[context]["by_draw"] = {str(draw): numbers["eval_loss"] for draw, numbers in by_draw.items()}
  return found


def tune(sweep: Sweep, model: Model, fraction: float, grids: dict[str, tuple[float, ...]]):
  """The model's `trials` on TUNE_SEED (never scored), the lowest select/loss at the best step chosen, then the edge
  rule's trials where the choice is at an edge of its grid (tuning.search): → (the chosen settings, the cell's record
  {chosen, trials, grid, extensions, edges})."""
  cell = tuning.search(lambda settings: sweep.train(model, fraction, TUNE_SEED, settings), trials(model, grids))
  for edge in cell["edges"]:
    print(f"  {sweep.corpus.key:7s} {model.key:7s} f={fraction:g}: {edge['axis']} still at its {edge['side']} value "
          f"after {edge['extensions']} extensions", flush=True)
  return dict(cell["chosen"]), cell


def cell_of(sweep: Sweep, model: Model, fraction: float, grids: dict[str, tuple[float, ...]], seeds,
            scored_draws: tuple[int, ...]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
  """One cell of the results: the model tuned at `fraction` (`tune`), then scored at its choice on every seed and
  draw: → (its tuning record, with whether it is shown converged (tuning.shown_converged), its scored runs)."""
  settings, cell = tune(sweep, model, fraction, grids)
  runs = [sweep.train(model, fraction, seed, settings, draw=draw) for draw in scored_draws for seed in seeds]
  return {**cell, "shown_converged": tuning.shown_converged(cell, runs)}, runs


FINISHED = "finished_runs.json"  # under --out: every finished run's numbers, so a killed sweep resumes
SPENT = "sweep_seconds.json"  # in a stopped run's workdir: the wall and CPU seconds it had spent


class RunClock:
  """A run's wall and CPU seconds from its first start: a stopped invocation keeps its seconds in the workdir (SPENT)
  beside the checkpoint it resumes from, and the invocation that resumes it starts from them."""

  def __init__(self, workdir: pathlib.Path):
    self.path = workdir / SPENT
    earlier = read_spent(self.path) if os.path.lexists(self.path) else {"seconds": 0.0, "cpu_seconds": 0.0}
    self.wall_origin = time.perf_counter() - earlier["seconds"]
    self.cpu_origin = time.process_time() - earlier["cpu_seconds"]

  def spent(self) -> dict[str, float]:
    """{seconds, cpu_seconds} since the run first started."""
    return {"seconds": time.perf_counter() - self.wall_origin, "cpu_seconds": time.process_time() - self.cpu_origin}

  def keep(self) -> None:
    """Writes spent() to the workdir, if the run made one (a link there is replaced, never written through)."""
    if self.path.parent.is_dir():
      write_json(self.path, self.spent())


def read_finished(path: pathlib.Path) -> dict[str, dict[str, Any]]:
  """The finished runs recorded at `path` ({} if none): {run key: its numbers}. UsageError naming the file and the
  entry where it is not a regular file of JSON, or an entry lacks a field a run records or holds a value that
  --from-json would refuse to publish (checks.first_value_problem, shared with it)."""
  if not os.path.lexists(path):
    return {}
  return _read_checked(path, "this --out's record of finished runs",
                       lambda record: checks.entries_problem(record, checks.RUN_FIELDS))


SPENT_FIELDS = ("seconds", "cpu_seconds")


def read_spent(path: pathlib.Path) -> dict[str, float]:
  """The seconds a stopped run had spent (SPENT in its workdir); UsageError naming the file where it is damaged."""
  return _read_checked(path, "a stopped run's seconds", lambda spent: checks.entry_problem(spent, SPENT_FIELDS))


def _read_checked(path: pathlib.Path, what: str, problem_of: Callable[[Any], str]) -> Any:
  """The JSON at `path` where `problem_of` finds nothing wrong with it; else UsageError in one line naming the file,
  what it is, and what is wrong (the entry and value at fault)."""
  value, problem = checks.read_checked(path, problem_of)
  if not problem:
    return value
  raise UsageError(f"{path} ({what}): {problem}; the sitting reads it back: repair or remove it, or give another "
                   "--out")


def check_sitting(out: pathlib.Path, corpora: list[str]) -> None:
  """Every file a sitting on `out` reads back, checked before any work: the record of finished runs and each stopped
  run's seconds under <out>/runs/<corpus>/ (UsageError naming the first damaged file and entry)."""
  read_finished(out / FINISHED)
  for name in corpora:
    runs = out / "runs" / name
    if runs.is_dir() and not runs.is_symlink():  # a link there is refused by the command line's link check
      for workdir in sorted(runs.iterdir()):
        if os.path.lexists(workdir / SPENT):
          read_spent(workdir / SPENT)


# The config fields that name where a run reads or writes, not what it computes: the dataset's identity in the
# digest stands for the data, so a record copied to another --out or machine resumes there.
PLACES = ("data.data_dir", "data.text_path")


def run_digest(config, dataset: str) -> str:
  """12 hex digits of SHA-256 over the run's config fields that act (its model: family fields, hidden map, context,
  width; its schedule, seed and settings; not PLACES, nor a field that does nothing in it, such as another family's
  or another source's, so a new model variant's fields leave other runs as they are) and its dataset's identity:
  any change to what decides the run's numbers makes another run."""
  from tied_embed import util  # noqa: PLC0415
  from tied_embed.train import config as config_lib  # noqa: PLC0415

  idle = config_lib.inactive_paths(config) | set(PLACES)
  fields = {path: value for path, value in config_lib.leaf_paths(config).items() if path not in idle}
  return util.json_sha256({"config": fields, "dataset": dataset})[:12]


def stop_point() -> None:
  """Raises the stop that the sitting's StopSignals (cli.main's) received but could not raise where the signal
  landed: inside a callback (a finalizer, a library's hook) its Interrupted is swallowed, `received` holds it all
  the same. Called between runs and between a corpus's sizes, the sitting's sync points, so no stop is lost."""
  import signal  # noqa: PLC0415

  from tied_embed.train import signals  # noqa: PLC0415

  for signum in (signal.SIGTERM, signal.SIGINT):
    owner = getattr(signal.getsignal(signum), "__self__", None)
    if isinstance(owner, signals.StopSignals) and owner.received is not None:
      raise signals.Interrupted(owner.received)


def write_json(path: pathlib.Path, value: dict[str, Any]) -> None:
  """Writes `value` as JSON whole or not at all (a kill leaves the old file or the new; a link there is replaced)."""
  from tied_embed import util  # noqa: PLC0415

  util.write_atomically(path, json.dumps(value, indent=0, allow_nan=True).encode())


CONVERGENCE_KEYS = ("num_steps", "eval_every", "best_step", "end_step", "select_loss", "eval_loss")


def convergence_check(sweep: Sweep, entry: dict[str, Any], models: tuple[Model, ...], factor: int) -> dict[str, Any]:
  """At the entry's largest data size, each model at its chosen settings rerun on seed 0 with `factor` × the steps:
  → {fraction, factor, count_eval_loss, runs: {model: {base, long, change_select, change_eval}}, seconds, ...}."""
  started, cpu_started = time.perf_counter(), time.process_time()
  fraction = max(entry["count"], key=float)
  check: dict[str, Any] = {"fraction": fraction, "factor": factor,
                           "count_eval_loss": entry["count"][fraction]["eval_loss"], "runs": {}}
  for model in models:
    base = next(run for run in entry["runs"][model.key][fraction] if run["seed"] == 0 and run.get("draw", 0) == 0)
    long = sweep.train(model, float(fraction), 0, entry["tuning"][model.key][fraction]["chosen"], steps_factor=factor)
    check["runs"][model.key] = {
        "base": {key: base[key] for key in CONVERGENCE_KEYS}, "long": long,
        "change_select": long["select_loss"] - base["select_loss"],
        "change_eval": long["eval_loss"] - base["eval_loss"],
    }
  check["seconds"] = time.perf_counter() - started
  check["cpu_seconds"] = time.process_time() - cpu_started
  return check


def sweep_corpus(corpus: Corpus, models: tuple[Model, ...], fractions, seeds, grids, plan: Plan,
                 out: pathlib.Path, keep_runs: bool = False, convergence_factor: int = CONVERGENCE_FACTOR,
                 quick: bool = False) -> dict[str, Any]:
  """Every model × fraction × draw × seed on one corpus, each tuned on the selection split (on TUNE_SEED), and the
  convergence check at the largest fraction (`convergence_factor` 0: none): → the corpus's JSON entry."""
  started, cpu_started = time.perf_counter(), time.process_time()
  sweep = Sweep(corpus, plan, out, keep_runs, max(context_length(model) for model in models))
  data = sweep.data
  contexts = {model.key: context_of(model) for model in models if context_of(model) != "none"}
  entry: dict[str, Any] = {
      "note": corpus.note, "dataset": data.identity, "vocab_size": corpus.vocab_size,
      "d_model": int(corpus.base.get_config().model.d_model), "plan": dataclasses.asdict(plan), "patience": PATIENCE,
      "floor": data.loss_floor, "uniform": math.log(corpus.vocab_size),
      "train_pairs": len(data.train_ids), "select_pairs": len(data.select_ids), "eval_pairs": len(data.eval_ids),
      "grids": {axis: list(values) for axis, values in grids.items()}, "tune_seed": TUNE_SEED,
      "count": {}, "kneser_ney": {}, "repeats": {},
      # a context model's own count baseline: the Kneser-Ney n-gram of its context, {context: {size: numbers}}
      **({"contexts": contexts, "ngram": {context: {} for context in dict.fromkeys(contexts.values())}}
         if contexts else {}),
      "tuning": {model.key: {} for model in models}, "runs": {model.key: {} for model in models},
  }
  for fraction in fractions:
    stop_point()
    key = f"{fraction:g}"
    scored_draws = draws(fraction, quick or corpus.split != DRAWN)
    entry["count"][key], entry["kneser_ney"][key] = count_references(sweep, fraction, scored_draws)
    entry["repeats"][key] = repeat_references(sweep, fraction, scored_draws, entry["kneser_ney"][key]["discount"])
    print(f"  {corpus.key:7s} count models f={fraction:g}: add-k (k = {entry['count'][key]['k']:g}) eval "
          f"{entry['count'][key]['eval_loss']:.4f}, Kneser-Ney (discount {entry['kneser_ney'][key]['discount']:g}) "
          f"eval {entry['kneser_ney'][key]['eval_loss']:.4f}", flush=True)
    for context, numbers in ngram_references(sweep, fraction, scored_draws, models).items():
      entry["ngram"][context][key] = numbers
      print(f"  {corpus.key:7s} count model of the {context}'s context f={fraction:g}: Kneser-Ney "
            f"{numbers['order']}-gram (discount {numbers['discount']:g}) eval {numbers['eval_loss']:.4f}", flush=True)
    for model in models:
      entry["tuning"][model.key][key], entry["runs"][model.key][key] = cell_of(sweep, model, fraction, grids, seeds,
                                                                                scored_draws)
  if convergence_factor:
    entry["convergence"] = convergence_check(sweep, entry, models, convergence_factor)
  # a resumed sweep counts the runs it took from the record at the times they took when they ran
  resumed = [sum(times) for times in zip(*sweep.resumed.values(), strict=True)] or [0.0, 0.0]
  entry["seconds"] = time.perf_counter() - started + resumed[0]
  entry["cpu_seconds"] = time.process_time() - cpu_started + resumed[1]
  if sweep.resumed:
    entry["resumed"] = {"runs": len(sweep.resumed), "seconds": resumed[0], "cpu_seconds": resumed[1]}
  return entry
