"""When does tying help? Tied, untied and tied + W, each tuned and scored at its best step, across train data sizes.

  .venv/bin/python science/when_to_tie.py                  # the whole sweep into runs/when_to_tie/
  .venv/bin/python science/when_to_tie.py --write-docs     # the same, and docs/when_to_tie.* and README's block
  .venv/bin/python science/when_to_tie.py --quick --corpora=bytes --out=runs/when_to_tie_quick  # seconds
  .venv/bin/python science/when_to_tie.py --from-json docs/when_to_tie.json --add-convergence --write-docs
                                           # only the convergence check, added to an existing sweep's JSON

Three models: tied (logits E[i]·Eᵀ), untied (A[i]·Bᵀ) and tied + W (E[i]·W·Eᵀ, model.hidden="linear", W a D×D
matrix that starts at the identity, with the penalty λ·‖W − I‖², model.hidden_l2 = λ, whose grid holds 0). Each
trains on the first 1%, 3%, 10%, 30% and 100% of what the selection split leaves of the train split
(data.train_fraction), on two corpora: (a) `bytes`, byte bigrams of the default text corpus (configs/text.py:
Python's pydoc topics, ~750 KB); (b) `subword`, SentencePiece bigrams with V = SUBWORD_VOCAB (configs/subword.py)
of Vim's help files (/usr/share/vim/vim*/doc/*.txt, ~9.5 MB, the largest real English text on the build machine).

Every model gets the same care. The last share of the train split (`Plan.selection_share`) is the selection split
(data.selection_fraction), never trained on; every run scores it at every eval (select/loss), keeps the checkpoint
with the lowest select/loss, runs its whole schedule (PATIENCE = 0: early stopping off, see there) and is scored
at that best step: its eval loss, its loss on rare inputs, and (from the restored best checkpoint, in NumPy float64) how
often its likeliest next token is the current token itself. Each model's regulariser is chosen on the selection
split, never on eval: on seed 0, for each data size, by a coordinate search over its `GRIDS` (weight decay for
all three; then λ for tied + W at the chosen weight decay); the chosen setting's seed-0 run is that model's seed-0
run, and seed 1 reruns it. Where the two best models' spreads overlap, both get a third seed.

Beside the models, at every size, the count-bigram reference: add-k counts of exactly the pairs the models train
on, k chosen from count_bigram.K_GRID on the selection split; each model is reported as its distance from it.
The floor (the validation split's own bigram entropy, unreachable) stays beside it.

The convergence check (--convergence-factor F, default CONVERGENCE_FACTOR; 0: off): at the largest data size (100%),
each model at the settings chosen there reruns seed 0 with F times the steps, the same schedule shape (warmup, then
cosine decay to 0 over the longer run) and as many evals, scored at its best step as every run is. It says whether
the best step comes before the end once the schedule is long enough, or how far the loss still moves; the ranking
uses the 1× runs. --from-json with --add-convergence trains only these runs and adds them to that JSON.

Compiled programs are cached on disk (JAX's persistent compilation cache, under <out>/jax_cache): runs that differ
only in seed or data size share their step and eval programs. The sweep prints each run and its own wall and CPU
time. It writes <out>/when_to_tie.{md,json,png}; --write-docs also copies them to docs/when_to_tie.* (keeping the
hand-written notes between the NOTES markers there) and rewrites the README's block between the WHEN_TO_TIE
markers. The datasets are built once per corpus under <out>/data/; each run's workdir under <out>/runs/ is deleted
once its numbers are taken, unless --keep-runs.
"""

from __future__ import annotations

import os
import sys

# Before anything imports TensorFlow (TFDS does): its oneDNN banner and C++ log lines would reach stderr.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import glob  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
FRACTIONS = (0.01, 0.03, 0.1, 0.3, 1.0)
SEEDS = (0, 1)
THIRD_SEED = 2  # for the two best models of a size whose mean ± sd ranges overlap
# train.early_stopping_patience: off. With patience 3 the untied model on all the byte data plateaued at the peak
# learning rate and stopped at step 1,050 of 3,000 (best 600, eval 1.731), where running on through the cosine
# decay reaches ~1.69: stopping on a plateau before the decay judges the schedule, not the model. So every run goes
# through its whole schedule and is scored at the eval with the lowest select/loss.
PATIENCE = 0
# AdamW's decay shrinks weights by exp(-weight_decay · Σ learning rate): Σ lr is ~1-5 where small data stops
# early and ~20-75 at 100%, so 0.1 and 1 span mild to strong at every size. λ: the grid the penalty was tuned on
# before, and 0 (tied + W without the penalty).
GRIDS = {"weight_decay": (0.0, 0.1, 1.0), "hidden_l2": (0.0, 0.001, 0.01, 0.1)}
QUICK_GRIDS = {"weight_decay": (0.0,), "hidden_l2": (0.1,)}  # one run per model (tune: its own test)
SUBWORD_VOCAB = 2048  # 8192 pieces cost ~4× the steps and evals, and do not converge at 100% in the budget
EPOCHS = 10  # a run's schedule: 10 passes over its train pairs, within [MIN_STEPS, Plan.max_steps]
MIN_STEPS = 200
MIN_EVAL_EVERY = 10
# The convergence check's steps at 100%, as a multiple of the sweep's: the 1× runs at 100% end still improving (best
# step = last step), and 3× is what the budget allows on the 2-core build machine (~1.5 min CPU per subword run).
CONVERGENCE_FACTOR = 3


@dataclasses.dataclass(frozen=True)
class Plan:
  """How one corpus's runs are scheduled. Each eval scores the selection and the whole validation split, which
  on the subword corpus (~0.3 M validation pairs, V = 2048) costs ~1 s on the loaded 2-core build machine against
  ~6 ms a step, so its plan evaluates less often and holds out a smaller selection share."""

  selection_share: float  # data.selection_fraction
  max_steps: int  # optimizer updates at most (the --<corpus>-steps flag)
  evals_per_epoch: float  # evals per pass over the train pairs used
  max_evals: int  # at least steps / max_evals between evals


PLANS = {"bytes": Plan(0.1, 3000, 2, 20), "subword": Plan(0.05, 2000, 1, 8)}
QUICK_PLAN = Plan(0.1, 20, 1, 4)
VIM_DOCS = "/usr/share/vim/vim*/doc"
NOTES_START, NOTES_END = "<!-- NOTES (kept by --write-docs) -->", "<!-- /NOTES -->"
README_START, README_END = "<!-- when-to-tie -->", "<!-- /when-to-tie -->"


class UsageError(Exception):
  """Bad command-line input: main prints `error: <message>` and exits with status 2, before any work."""


@dataclasses.dataclass(frozen=True)
class Model:
  """One of the compared models: its key, its label in tables and plots, its model.* settings and what it tunes."""

  key: str
  label: str
  tied: bool
  hidden: str = "none"
  tuned: tuple[str, ...] = ("weight_decay",)  # the GRIDS axes searched, in this order


MODELS = (
    Model("tied", "tied E·Eᵀ", tied=True),
    Model("untied", "untied A·Bᵀ", tied=False),
    Model("tied_w", "tied + W  E·W·Eᵀ", tied=True, hidden="linear", tuned=("weight_decay", "hidden_l2")),
)


@dataclasses.dataclass(frozen=True)
class Corpus:
  """A corpus and the config its runs start from: configs/<config>.py with text_path and vocab_size set."""

  key: str
  base: Any  # a configs module
  text_path: str
  vocab_size: int
  note: str


def vim_docs() -> str:
  """A glob of Vim's help files on this machine; UsageError if there are none."""
  found = sorted(glob.glob(os.path.join(VIM_DOCS, "*.txt")))
  if not found:
    raise UsageError(f"no Vim help files under {VIM_DOCS}: give another English corpus with --subword-corpus")
  return os.path.join(os.path.dirname(found[0]), "*.txt")


def corpora(quick: bool, subword_corpus: str) -> dict[str, Corpus]:
  """The two corpora; --quick: the subword corpus is the byte corpus with 512 pieces, so the test stays small."""
  from configs import subword, text  # noqa: PLC0415

  byte_corpus = Corpus("bytes", text, "", 256, "bytes of Python's pydoc topics (configs/text.py's default)")
  if quick:
    return {"bytes": byte_corpus,
            "subword": Corpus("subword", subword, "", 512, "SentencePiece, 512 pieces, of Python's pydoc topics")}
  path = subword_corpus or vim_docs()
  files = glob.glob(path) if "*" in path else [path]
  if not files or not all(os.path.exists(p) for p in files):
    raise UsageError(f"--subword-corpus={subword_corpus!r}: no such file, directory or glob")
  size = sum(_size(p) for p in files)
  return {
      "bytes": byte_corpus,
      "subword": Corpus("subword", subword, path, SUBWORD_VOCAB,
                        f"SentencePiece, {SUBWORD_VOCAB} pieces, of {path} ({size / 1e6:.1f} MB; Vim's help files "
                        "by default)"),
  }


def _size(path: str) -> int:
  target = pathlib.Path(path)
  return sum(p.stat().st_size for p in target.rglob("*") if p.is_file()) if target.is_dir() else target.stat().st_size


def schedule(plan: Plan, train_pairs: int, batch_size: int) -> tuple[int, int]:
  """(steps, steps between evals) of a run on `train_pairs`: EPOCHS passes within [MIN_STEPS, plan.max_steps]
  (early stopping ends most runs sooner); plan.evals_per_epoch evals a pass, at least MIN_EVAL_EVERY steps apart
  and at most steps / plan.max_evals (so a run that never stops early has max_evals evals to choose from)."""
  per_epoch = train_pairs / batch_size
  steps = int(min(plan.max_steps, max(MIN_STEPS, round(EPOCHS * per_epoch))))
  every = max(1, min(max(MIN_EVAL_EVERY, round(per_epoch / plan.evals_per_epoch)), steps // plan.max_evals))
  return steps, int(every)


def run_config(corpus: Corpus, model: Model, fraction: float, seed: int, settings: dict[str, float], steps: int,
               every: int, data_dir: pathlib.Path, selection_share: float):
  """The config of one run: the corpus's config, the model and its regulariser, the train fraction, the selection
  split, evals (and checkpoints of the best) every `every` steps and early stopping."""
  config = corpus.base.get_config()
  config.seed = seed
  config.data.text_path = corpus.text_path
  config.data.data_dir = str(data_dir)
  config.data.train_fraction = fraction
  config.data.selection_fraction = selection_share
  config.model.vocab_size = corpus.vocab_size
  config.model.tied = model.tied
  config.model.hidden = model.hidden
  config.model.hidden_l2 = float(settings.get("hidden_l2", 0.0)) if model.hidden != "none" else 0.0
  config.train.weight_decay = float(settings.get("weight_decay", 0.0))
  config.train.update(num_steps=steps, warmup_steps=max(1, steps // 10), log_every=steps, eval_every=every,
                      checkpoint_every=steps, keep_checkpoints=1, early_stopping_patience=PATIENCE)
  return config


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


def _mean(values: np.ndarray) -> float:
  return float(np.mean(values, dtype=np.float64)) if len(values) else float("nan")


# --- the sweep ----------------------------------------------------------------------------------------------------


class Sweep:
  """Runs and remembers the runs of one corpus."""

  def __init__(self, corpus: Corpus, plan: Plan, out: pathlib.Path, keep_runs: bool):
    from tied_embed.data import bigram as data_lib  # noqa: PLC0415

    self.corpus, self.plan, self.keep_runs = corpus, plan, keep_runs
    self.data_dir = out / "data" / corpus.key
    self.runs_dir = out / "runs" / corpus.key
    shutil.rmtree(self.runs_dir, ignore_errors=True)  # a rerun trains afresh, whatever the steps were
    probe = run_config(corpus, MODELS[0], 1.0, 0, {}, MIN_STEPS, MIN_STEPS, self.data_dir, plan.selection_share)
    with contextlib.redirect_stdout(io.StringIO()):  # TFDS's 'downloading' chatter, as the trainer drops it
      self.data = data_lib.load_bigram_data(probe, self.runs_dir / "probe")  # builds the shared dataset once
    self.batch_size = int(probe.train.batch_size)

  def train_pairs(self, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Exactly the pairs a run at `fraction` trains on (the trainer's `train_pairs_used` of what selection leaves)."""
    from tied_embed.data import bigram as data_lib  # noqa: PLC0415

    used = data_lib.train_pairs_used(len(self.data.train_ids), fraction)
    return self.data.train_ids[:used], self.data.train_next[:used]

  def rare_inputs(self, fraction: float) -> np.ndarray:
    """(V,) bool: the tokens in the rare bucket of the train pairs used at `fraction` (tied_embed/data/frequency)."""
    from tied_embed.data import frequency  # noqa: PLC0415

    counts = np.bincount(self.train_pairs(fraction)[0], minlength=self.corpus.vocab_size)
    return frequency.input_buckets(counts) == frequency.BUCKETS.index("rare")

  def train(self, model: Model, fraction: float, seed: int, settings: dict[str, float],
            steps_factor: int = 1) -> dict[str, Any]:
    """One run, scored at its best step: → its numbers. `steps_factor` stretches its schedule: that many times the
    steps and the steps between evals (the same warmup share, cosine decay and eval count; the convergence check)."""
    from tied_embed.train import (
      checkpoint,  # noqa: PLC0415
      trainer,  # noqa: PLC0415
    )

    steps, every = schedule(self.plan, len(self.train_pairs(fraction)[0]), self.batch_size)
    steps, every = steps * steps_factor, every * steps_factor
    config = run_config(self.corpus, model, fraction, seed, settings, steps, every, self.data_dir,
                        self.plan.selection_share)
    name = "-".join(f"{key}={value:g}" for key, value in sorted(settings.items()))
    stretched = "" if steps_factor == 1 else f"-x{steps_factor}"
    workdir = self.runs_dir / f"{model.key}-{name}-f{fraction:g}-s{seed}{stretched}"
    started, cpu_started = time.perf_counter(), time.process_time()
    summary = trainer.train_and_evaluate(config, workdir)
    best = checkpoint.restore(workdir, step=summary.best_step).model
    lookup, projection = (np.asarray(table) for table in best.scoring_tables())
    scores = best_step_scores(lookup, projection, self.data.eval_ids, self.data.eval_next, self.rare_inputs(fraction))
    run = {
        "seed": seed, "settings": dict(settings), "steps_factor": steps_factor, "eval_every": every,
        "num_steps": steps,
        "best_step": summary.best_step, "end_step": summary.step, "stopped_early": summary.stopped_early,
        "select_loss": summary.best_select_loss, "eval_loss": summary.best_eval_loss,
        "gap_percent": 100 * (summary.best_eval_loss - summary.loss_floor) / summary.loss_floor,
        "loss_rare_inputs": summary.best_eval.get("eval/loss_rare_inputs", float("nan")),
        "end_eval_loss": summary.eval_loss,
        "float64_eval_loss": scores["eval_loss"],  # the restored best checkpoint rescored in NumPy
        "predicts_self": scores["predicts_self"], "predicts_self_rare": scores["predicts_self_rare"],
        "param_count": summary.param_count,
        "seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu_started,
    }
    if not self.keep_runs:  # the numbers are all the sweep needs of it
      shutil.rmtree(workdir)
    print(f"  {self.corpus.key:7s} {model.key:7s} {name:28s} f={fraction:<5g} seed {seed}"
          f"{'' if steps_factor == 1 else f' ×{steps_factor}'}: best step "
          f"{run['best_step']:>4}/{run['end_step']:<4} select {run['select_loss']:.4f} eval {run['eval_loss']:.4f} "
          f"self-argmax {100 * run['predicts_self']:5.1f}%  [{run['seconds']:.1f} s, {run['cpu_seconds']:.1f} s CPU]",
          flush=True)
    return run


def tune(sweep: Sweep, model: Model, fraction: float, seed: int, grids: dict[str, tuple[float, ...]]):
  """Coordinate search of `model.tuned` over `grids` by select/loss at the best step, on `seed`: → (the chosen
  settings, its run, every trial {settings: select/loss})."""
  settings = {axis: grids[axis][0] for axis in model.tuned}
  trials: dict[tuple, dict[str, Any]] = {}
  for axis in model.tuned:
    for value in grids[axis]:
      candidate = {**settings, axis: value}
      key = tuple(sorted(candidate.items()))
      if key not in trials:
        trials[key] = sweep.train(model, fraction, seed, candidate)
    best = min(grids[axis], key=lambda value: trials[tuple(sorted({**settings, axis: value}.items()))]["select_loss"])
    settings = {**settings, axis: best}
  chosen = trials[tuple(sorted(settings.items()))]
  return settings, chosen, [{key: run[key] for key in ("settings", "select_loss", "best_step", "eval_loss",
                                                      "predicts_self") if key in run} for run in trials.values()]


def spreads_cross(runs_by_model: dict[str, list[dict[str, Any]]]) -> list[str]:
  """The two models with the lowest mean eval loss if their mean ± sd ranges overlap, else []."""
  stats = {key: mean_sd(runs, "eval_loss") for key, runs in runs_by_model.items()}
  first, second = sorted(stats, key=lambda key: stats[key][0])[:2]
  (m1, s1), (m2, s2) = stats[first], stats[second]
  return [first, second] if m2 - s2 <= m1 + s1 else []


CONVERGENCE_KEYS = ("num_steps", "eval_every", "best_step", "end_step", "select_loss", "eval_loss")


def convergence_check(sweep: Sweep, entry: dict[str, Any], models: tuple[Model, ...], factor: int) -> dict[str, Any]:
  """At the entry's largest data size, each model at its chosen settings rerun on seed 0 with `factor` × the steps:
  → {fraction, factor, count_eval_loss, runs: {model: {base, long, change_select, change_eval}}, seconds, ...}."""
  started, cpu_started = time.perf_counter(), time.process_time()
  fraction = max(entry["count"], key=float)
  check: dict[str, Any] = {"fraction": fraction, "factor": factor,
                           "count_eval_loss": entry["count"][fraction]["eval_loss"], "runs": {}}
  for model in models:
    base = next(run for run in entry["runs"][model.key][fraction] if run["seed"] == 0)
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
                 out: pathlib.Path, keep_runs: bool = False, third_seed: bool = True,
                 convergence_factor: int = CONVERGENCE_FACTOR) -> dict[str, Any]:
  """Every model × fraction × seed on one corpus, each tuned on the selection split, and the convergence check at
  the largest fraction (`convergence_factor` 0: none): → the corpus's JSON entry."""
  started, cpu_started = time.perf_counter(), time.process_time()
  sweep = Sweep(corpus, plan, out, keep_runs)
  data = sweep.data
  entry: dict[str, Any] = {
      "note": corpus.note, "dataset": data.identity, "vocab_size": corpus.vocab_size,
      "d_model": int(corpus.base.get_config().model.d_model), "plan": dataclasses.asdict(plan), "patience": PATIENCE,
      "floor": data.loss_floor, "uniform": math.log(corpus.vocab_size),
      "train_pairs": len(data.train_ids), "select_pairs": len(data.select_ids), "eval_pairs": len(data.eval_ids),
      "count": {}, "repeats": {}, "tuning": {model.key: {} for model in models},
      "runs": {model.key: {} for model in models},
  }
  for fraction in fractions:
    key = f"{fraction:g}"
    entry["count"][key] = count_reference(sweep.train_pairs(fraction), (data.select_ids, data.select_next),
                                          (data.eval_ids, data.eval_next), corpus.vocab_size)
    entry["repeats"][key] = repeat_shares(data.eval_ids, data.eval_next, sweep.rare_inputs(fraction))
    print(f"  {corpus.key:7s} count model f={fraction:g}: k = {entry['count'][key]['k']:g}, eval "
          f"{entry['count'][key]['eval_loss']:.4f}", flush=True)
    for model in models:
      settings, chosen, trials = tune(sweep, model, fraction, seeds[0], grids)
      entry["tuning"][model.key][key] = {"chosen": settings, "trials": trials}
      entry["runs"][model.key][key] = [chosen] + [sweep.train(model, fraction, seed, settings) for seed in seeds[1:]]
    if third_seed and len(seeds) > 1:
      for model_key in spreads_cross({model.key: entry["runs"][model.key][key] for model in models}):
        model = next(m for m in models if m.key == model_key)
        entry["runs"][model_key][key].append(
            sweep.train(model, fraction, THIRD_SEED, entry["tuning"][model_key][key]["chosen"]))
  if convergence_factor:
    entry["convergence"] = convergence_check(sweep, entry, models, convergence_factor)
  entry["seconds"] = time.perf_counter() - started
  entry["cpu_seconds"] = time.process_time() - cpu_started
  return entry


# --- the report ---------------------------------------------------------------------------------------------------


def mean_sd(runs: list[dict[str, Any]], key: str) -> tuple[float, float]:
  values = np.array([run[key] for run in runs], np.float64)
  return float(np.mean(values)), float(np.std(values))


def ranking(entry: dict[str, Any], fraction: str) -> list[str]:
  """The models at one size, lowest mean best-step eval loss first."""
  return sorted(entry["runs"], key=lambda key: mean_sd(entry["runs"][key][fraction], "eval_loss")[0])


def picks(entry: dict[str, Any], labels: dict[str, str]) -> list[str]:
  """Per data size, the model to pick and by how much it leads (or that the seeds cannot separate the two best)."""
  lines = []
  for fraction in entry["count"]:
    first, second = ranking(entry, fraction)[:2]
    (m1, s1), (m2, s2) = (mean_sd(entry["runs"][k][fraction], "eval_loss") for k in (first, second))
    tie = " (within the seeds' spread of " + labels[second] + ")" if m2 - s2 <= m1 + s1 else ""
    lines.append(f"{100 * float(fraction):g}%: {labels[first]}, {m2 - m1:.3f} nats ahead{tie}")
  return lines


def unconverged(results: dict[str, Any]) -> list[str]:
  """Every run whose best step is its last (it may still have been improving when the schedule ended)."""
  return [f"{corpus} {key} {100 * float(fraction):g}% seed {run['seed']}"
          for corpus, entry in results["corpora"].items() for key, by_fraction in entry["runs"].items()
          for fraction, runs in by_fraction.items() for run in runs if run["best_step"] >= run["end_step"]]


def _settings_text(settings: dict[str, float]) -> str:
  names = {"weight_decay": "wd", "hidden_l2": "λ"}
  return ", ".join(f"{names[axis]} {value:g}" for axis, value in settings.items())


def markdown(results: dict[str, Any], png_name: str, notes: str = "") -> str:
  """The sweep's tables: per corpus, best-step loss and distance from the count model per model and data size, the
  chosen regularisers, the best steps and the repeat shares."""
  labels = {model["key"]: model["label"] for model in results["models"]}
  grids = results["grids"]
  lines = ["# When does tying help?", ""]
  if notes:  # the answer first: the hand-written reading of the tables below
    lines += [NOTES_START, notes.strip("\n"), NOTES_END, ""]
  lines += [
      f"Written by `science/when_to_tie.py` in {results['seconds'] / 60:.1f} min ({results['cpu_seconds'] / 60:.1f} "
      f"min of CPU time) on {results['machine']}. Models: {', '.join(labels.values())}. Every run holds out the "
      "train split's last share as a selection split (never trained on), scores it at every eval, "
      + (f"stops {results['patience']} evals after its lowest selection loss" if results["patience"]
         else "runs its whole schedule (no early stopping)")
      + " and is scored at the eval with the lowest selection loss, its best step; its schedule "
      f"(warmup, then cosine decay to 0) is {EPOCHS} passes over its train pairs, within [{MIN_STEPS}, the corpus's "
      "most steps]. Each model's regulariser is chosen per data size on the selection split (seed 0), never on eval: weight "
      f"decay (AdamW, decoupled) from {{{', '.join(f'{v:g}' for v in grids['weight_decay'])}}} for every model, "
      f"then for tied + W the penalty λ‖W − I‖² from {{{', '.join(f'{v:g}' for v in grids['hidden_l2'])}}}. "
      f"Seeds {', '.join(map(str, results['seeds']))} (seed {THIRD_SEED} too for the two best models where their "
      "spreads overlap): mean ± standard deviation. The count model is add-k counts of exactly the pairs the models "
      "train on, k chosen on the selection split; Δ count = model − count model (negative: the model beats it). "
      "Rare inputs: validation pairs whose current token is among the least frequent making up the last 10% of the "
      "train occurrences used, or never current in them (`tied_embed/data/frequency.py`). Self-argmax: the share of "
      "validation pairs whose predicted likeliest next token is the current token, from the restored best "
      "checkpoint in NumPy float64; beside it the data's own rate of repeats (next = current).",
  ]
  failing = unconverged(results)
  lines += ["", "Best step before the last step: " + (
      "every run." if not failing else f"all but {len(failing)} runs, whose best step is their last (still "
      f"improving when the schedule ended): {'; '.join(failing)}.")]
  for corpus, entry in results["corpora"].items():
    keys = list(entry["runs"])
    lines += [
        "",
        f"## {corpus}: {entry['note']}",
        "",
        f"V = {entry['vocab_size']}, D = {entry['d_model']}, at most {entry['plan']['max_steps']} steps per run, "
        f"{entry['plan']['evals_per_epoch']:g} eval{'s' if entry['plan']['evals_per_epoch'] != 1 else ''} per "
        "pass over the train pairs (at most "
        f"{entry['plan']['max_evals']} a run); {entry['train_pairs']:,} train pairs at 100% (what the "
        f"{entry['select_pairs']:,} selection pairs, the train split's last "
        f"{100 * entry['plan']['selection_share']:g}%, leave), "
        f"{entry['eval_pairs']:,} validation pairs, floor {entry['floor']:.4f} nats, uniform guess "
        f"log V = {entry['uniform']:.4f}; dataset `{entry['dataset']}`; {entry['seconds'] / 60:.1f} min "
        f"({entry['cpu_seconds'] / 60:.1f} min CPU).",
        "",
        "Best-step eval loss (nats) and its distance from the count model:",
        "",
        "| train data | count model (k) | " + " | ".join(f"{labels[k]} (Δ count)" for k in keys) + " | pick |",
        "|---" * (3 + len(keys)) + "|",
    ]
    for fraction, count in entry["count"].items():
      pairs = len_used(entry, fraction)
      cells = []
      for k in keys:
        mean, sd = mean_sd(entry["runs"][k][fraction], "eval_loss")
        cells.append(f"{mean:.4f} ± {sd:.4f} ({mean - count['eval_loss']:+.3f})")
      lines.append(f"| {100 * float(fraction):g}% ({pairs:,} pairs) | {count['eval_loss']:.4f} ({count['k']:g}) | "
                   + " | ".join(cells) + f" | {labels[ranking(entry, fraction)[0]]} |")
    lines += [
        "",
        "Per model: the chosen regulariser, the best step / the step it ended at (per seed), the gap to the floor, "
        "the rare-input loss, and the self-argmax share (all pairs / rare inputs) against the data's repeats:",
        "",
        "| train data | model | chosen | best / end step | gap % of floor | rare-input loss | self-argmax "
        "| data repeats |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for fraction, repeats in entry["repeats"].items():
      for k in keys:
        runs = entry["runs"][k][fraction]
        steps = ", ".join(f"{run['best_step']}/{run['end_step']}" for run in runs)
        gap, gap_sd = mean_sd(runs, "gap_percent")
        rare = mean_sd(runs, "loss_rare_inputs")[0]
        own, own_rare = mean_sd(runs, "predicts_self")[0], mean_sd(runs, "predicts_self_rare")[0]
        lines.append(
            f"| {100 * float(fraction):g}% | {labels[k]} | {_settings_text(entry['tuning'][k][fraction]['chosen'])} "
            f"| {steps} | {gap:.2f} ± {gap_sd:.2f} | {rare:.4f} | {100 * own:.1f}% / {100 * own_rare:.1f}% | "
            f"{100 * repeats['repeats']:.1f}% / {100 * repeats['repeats_rare']:.1f}% |")
    lines += ["", "Pick per data size: " + "; ".join(picks(entry, labels)) + "."]
    if "convergence" in entry:
      lines += convergence_lines(entry, labels)
  lines += ["", f"![best-step eval loss and self-argmax share against train data]({png_name})", ""]
  return "\n".join(lines)


def convergence_lines(entry: dict[str, Any], labels: dict[str, str]) -> list[str]:
  """The convergence check's table and what it shows: the best step before the end of the longer schedule, or how
  far the loss still moved; and whether the longer runs change the pick or the distance from the count model."""
  check = entry["convergence"]
  factor, fraction, count = check["factor"], check["fraction"], check["count_eval_loss"]
  size = f"{100 * float(fraction):g}%"
  lines = [
      "", f"### Convergence at {size}", "",
      f"Each model at its chosen settings, seed 0, rerun with {factor}× the steps (warmup, then cosine decay to 0 "
      f"over the longer run, as many evals) and scored at its best step by the selection loss, as above; the count "
      f"model's eval loss is {count:.4f}. Written in {check['seconds'] / 60:.1f} min "
      f"({check['cpu_seconds'] / 60:.1f} min CPU).", "",
      "| model | 1× steps | 1× best / end step | 1× eval loss (Δ count) | "
      f"{factor}× steps | {factor}× best / end step | {factor}× eval loss (Δ count) | change select / eval | "
      "best before the end? |",
      "|---" * 9 + "|",
  ]
  for key, run in check["runs"].items():
    base, long = run["base"], run["long"]
    lines.append(
        f"| {labels[key]} | {base['num_steps']} | {base['best_step']} / {base['end_step']} | "
        f"{base['eval_loss']:.4f} ({base['eval_loss'] - count:+.3f}) | {long['num_steps']} | "
        f"{long['best_step']} / {long['end_step']} | {long['eval_loss']:.4f} ({long['eval_loss'] - count:+.3f}) | "
        f"{run['change_select']:+.4f} / {run['change_eval']:+.4f} | "
        f"{'yes' if long['best_step'] < long['end_step'] else 'no'} |")
  still = [labels[key] for key, run in check["runs"].items() if run["long"]["best_step"] >= run["long"]["end_step"]]
  most = max(check["runs"], key=lambda key: abs(check["runs"][key]["change_eval"]))
  moved = f"{abs(check['runs'][most]['change_eval']):.4f} nats ({labels[most]})"
  if not still:
    verdict = (f"Criterion met: enough steps. At {factor}× every model's best step comes before the end of its "
               f"schedule, and from 1× to {factor}× the eval loss moved by at most {moved}: the 1× runs are "
               "converged to within that.")
  else:
    verdict = (f"Best step before the end: not met for {', '.join(still)}, whose best step is still the last at "
               f"{factor}×: still improving. From 1× to {factor}× the eval loss moved by at most {moved}; the 1× "
               "runs are at least that far from converged.")
  verdict += " The tables above and the ranking use the 1× runs."
  lines += ["", verdict]
  change = convergence_change(entry, labels)
  if change:
    lines += ["", change]
  return lines


def convergence_change(entry: dict[str, Any], labels: dict[str, str]) -> str:
  """One sentence where the convergence check's longer runs change the pick at its size, or move a model's distance
  from the count model by more than that model's seed spread (sd of its 1× runs); '' where they do not."""
  check = entry["convergence"]
  fraction, factor = check["fraction"], check["factor"]
  first = ranking(entry, fraction)[0]
  long_first = min(check["runs"], key=lambda key: check["runs"][key]["long"]["eval_loss"])
  spread = {key: mean_sd(entry["runs"][key][fraction], "eval_loss")[1] for key in check["runs"]}
  moved = [key for key, run in check["runs"].items() if abs(run["change_eval"]) > spread[key]]
  parts = []
  if long_first != first:
    parts.append(f"the pick becomes {labels[long_first]}")
  if moved:
    parts.append("the distance from the count model moves by more than the seeds' spread for "
                 + ", ".join(f"{labels[key]} ({check['runs'][key]['change_eval']:+.3f}, sd {spread[key]:.4f})"
                             for key in moved))
  if not parts:
    return ""
  best = check["runs"][long_first]["long"]["eval_loss"] - check["count_eval_loss"]
  return (f"With {factor}× the steps at {100 * float(fraction):g}% (seed 0): " + "; ".join(parts)
          + f"; {labels[long_first]} ends {best:+.3f} nats from the count model.")


def convergence_readme(entry: dict[str, Any], labels: dict[str, str]) -> str:
  """The README's clause on the convergence check: where the longer runs change the pick, or move the pick's
  distance from the count model by more than its seed spread, that distance at F× ('' otherwise)."""
  check = entry["convergence"]
  fraction, factor = check["fraction"], check["factor"]
  first = ranking(entry, fraction)[0]
  long_first = min(check["runs"], key=lambda key: check["runs"][key]["long"]["eval_loss"])
  moved = abs(check["runs"][first]["change_eval"]) > mean_sd(entry["runs"][first][fraction], "eval_loss")[1]
  if long_first == first and not moved:
    return ""
  distance = check["runs"][long_first]["long"]["eval_loss"] - check["count_eval_loss"]
  side = f"count model {distance:.3f} ahead" if distance > 0 else f"{-distance:.3f} ahead of the count model"
  return (f" (with {factor}× the steps, seed 0: {labels[long_first]}" + (", the pick" if long_first != first else "")
          + f", {side})")


def len_used(entry: dict[str, Any], fraction: str) -> int:
  from tied_embed.data import bigram as data_lib  # noqa: PLC0415

  return data_lib.train_pairs_used(entry["train_pairs"], float(fraction))


def readme_block(results: dict[str, Any]) -> str:
  """The README's first-screen answer: per corpus and data size the model to pick, by how much (nats of eval loss
  at the best step) or that the seeds cannot separate it from the next one, and where the count model is ahead."""
  labels = {model["key"]: model["label"].split("  ")[0] for model in results["models"]}
  lines = []
  for corpus, entry in results["corpora"].items():
    sizes = []
    for fraction, count in entry["count"].items():
      first, second = ranking(entry, fraction)[:2]
      (m1, s1), (m2, s2) = (mean_sd(entry["runs"][k][fraction], "eval_loss") for k in (first, second))
      pick = (f"{labels[first]} ≈ {labels[second]}" if m2 - s2 <= m1 + s1
              else f"{labels[first]} by {m2 - m1:.3f}")
      behind = f", count model {m1 - count['eval_loss']:.3f} ahead" if count["eval_loss"] < m1 else ""
      sizes.append(f"{100 * float(fraction):g}% {pick}{behind}")
    lines.append(f"- **{corpus}** ({entry['note'].split(' (')[0]}, V = {entry['vocab_size']}): " + "; ".join(sizes))
    if "convergence" in entry:
      lines[-1] += convergence_readme(entry, labels)
  lines.append(f"\nMeasured by `science/when_to_tie.py` in {results['seconds'] / 60:.0f} min "
               f"({results['cpu_seconds'] / 60:.0f} min of CPU time) on {results['machine']}.")
  return "\n".join(lines)


def figure(results: dict[str, Any]):
  """Per corpus: the best-step eval loss against train pairs, one line per model, with the count model and the
  floor; and the self-argmax share with the data's repeat rate."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
  from matplotlib.figure import Figure  # noqa: PLC0415
  from matplotlib.ticker import FuncFormatter  # noqa: PLC0415

  labels = {model["key"]: model["label"] for model in results["models"]}
  names = list(results["corpora"])
  fig = Figure(figsize=(11, 4.2 * len(names)))
  FigureCanvasAgg(fig)
  axes = fig.subplots(len(names), 2, squeeze=False)
  for row, corpus in enumerate(names):
    entry = results["corpora"][corpus]
    fractions = list(entry["count"])
    pairs = [len_used(entry, f) for f in fractions]
    loss_ax, self_ax = axes[row]
    for key, runs in entry["runs"].items():
      means, sds = zip(*(mean_sd(runs[f], "eval_loss") for f in fractions), strict=True)
      loss_ax.errorbar(pairs, means, yerr=sds, marker="o", capsize=3, label=labels[key])
      means, sds = zip(*(mean_sd(runs[f], "predicts_self") for f in fractions), strict=True)
      self_ax.errorbar(pairs, 100 * np.array(means), yerr=100 * np.array(sds), marker="o", capsize=3,
                       label=labels[key])
    loss_ax.plot(pairs, [entry["count"][f]["eval_loss"] for f in fractions], "k--", marker="s",
                 label="count bigram (add-k)")
    loss_ax.axhline(entry["floor"], color="grey", linestyle=":", label="floor (unreachable)")
    self_ax.plot(pairs, [100 * entry["repeats"][f]["repeats"] for f in fractions], "k--",
                 label="data: next = current")
    loss_ax.set_ylabel("best-step eval loss (nats)")
    self_ax.set_ylabel("predicted next = current (% of eval pairs)")
    loss_ax.set_title(f"{corpus}: best-step eval loss")
    self_ax.set_title(f"{corpus}: likeliest next token = the current one")
    for ax in (loss_ax, self_ax):
      ax.set_xscale("log")
      ax.set_xlabel("train pairs used")
      ax.grid(alpha=0.3)
      ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))  # 1,000,000, not 1e+06
      ax.xaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    loss_ax.legend(fontsize=8)
    self_ax.legend(fontsize=8)
  fig.tight_layout()
  return fig


def write(results: dict[str, Any], out: pathlib.Path, notes: str = "") -> list[pathlib.Path]:
  """<out>/when_to_tie.{json,md,png}: → their paths."""
  out.mkdir(parents=True, exist_ok=True)
  paths = [out / f"when_to_tie.{suffix}" for suffix in ("json", "md", "png")]
  paths[0].write_text(json.dumps(results, indent=1, allow_nan=True))
  paths[1].write_text(markdown(results, paths[2].name, notes))
  figure(results).savefig(paths[2], dpi=100)
  return paths


def kept_notes(path: pathlib.Path) -> str:
  """The hand-written notes between the NOTES markers of an existing docs page ('' if none)."""
  text = path.read_text() if path.exists() else ""
  if NOTES_START not in text or NOTES_END not in text:
    return ""
  return text.split(NOTES_START, 1)[1].split(NOTES_END, 1)[0]


def write_readme(results: dict[str, Any], readme: pathlib.Path) -> None:
  """Rewrites the generated sentence of the README's when-to-tie block (between its markers), keeping the rest."""
  text = readme.read_text()
  if README_START not in text or README_END not in text:
    return
  before, block = text.split(README_START, 1)
  block, after = block.split(README_END, 1)
  start, end = "<!-- picks -->", "<!-- /picks -->"
  if start in block and end in block:
    head, rest = block.split(start, 1)
    block = f"{head}{start}\n{readme_block(results)}\n{end}{rest.split(end, 1)[1]}"
  readme.write_text(f"{before}{README_START}{block}{README_END}{after}")


def machine() -> str:
  """'Intel(R) Xeon(R) Processor, 2 cores (AVX-512, AMX)' from /proc/cpuinfo, and the load average at the start."""
  cpuinfo = pathlib.Path("/proc/cpuinfo").read_text() if pathlib.Path("/proc/cpuinfo").exists() else ""
  model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
               "an unknown CPU")
  flags = next((set(line.split(":", 1)[1].split()) for line in cpuinfo.splitlines() if line.startswith("flags")),
               set())
  extensions = [name for flag, name in (("avx512f", "AVX-512"), ("amx_tile", "AMX")) if flag in flags]
  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
  return (f"{model}, {len(os.sched_getaffinity(0))} cores" + (f" ({' + '.join(extensions)})" if extensions else "")
          + f", load average {load:.1f} at the start")


class _Parser(argparse.ArgumentParser):
  def error(self, message: str):  # one line, exit 2: the project's answer to bad input
    raise UsageError(message)


def parse(argv: list[str] | None) -> argparse.Namespace:
  """The command line, checked before any work: UsageError (one line) for a bad value."""
  parser = _Parser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default=str(REPO / "runs" / "when_to_tie"), help="writes <out>/when_to_tie.*")
  parser.add_argument("--write-docs", action="store_true",
                      help="also copy the results to docs/when_to_tie.* and rewrite README.md's when-to-tie picks")
  parser.add_argument("--quick", action="store_true",
                      help=f"a tiny sweep for tests: {QUICK_PLAN.max_steps} steps, 1 size, 1 seed, one setting "
                           "per model")
  parser.add_argument("--corpora", default="bytes,subword", help="comma-separated: bytes, subword")
  parser.add_argument("--subword-corpus", default="", help="the subword corpus (default: Vim's help files)")
  for name, plan in PLANS.items():
    parser.add_argument(f"--{name}-steps", type=int, default=plan.max_steps,
                        help=f"at most this many steps per {name} run (default {plan.max_steps})")
  parser.add_argument("--fractions", default=",".join(f"{f:g}" for f in FRACTIONS),
                      help="comma-separated train data sizes in (0, 1] (default: all five)")
  parser.add_argument("--from-json", default="",
                      help="train nothing: rewrite the tables, plot (and with --write-docs the docs) from this JSON")
  parser.add_argument("--convergence-factor", type=int, default=CONVERGENCE_FACTOR,
                      help="the convergence check at the largest size: this many times the steps, an integer ≥ 2 "
                           f"(0: no check; default {CONVERGENCE_FACTOR})")
  parser.add_argument("--add-convergence", action="store_true",
                      help="with --from-json: train only the convergence check and add it to that JSON's results")
  parser.add_argument("--no-third-seed", action="store_true",
                      help=f"skip seed {THIRD_SEED} where the two best models' spreads overlap")
  parser.add_argument("--keep-runs", action="store_true",
                      help="keep every run's workdir under <out>/runs/ for inspection")
  parser.add_argument("--no-compile-cache", action="store_true",
                      help="leave JAX's persistent compilation cache alone (tests: it is one per process)")
  args = parser.parse_args(argv)
  for name in PLANS:
    steps = getattr(args, f"{name}_steps")
    if steps < 1:
      raise UsageError(f"--{name}-steps={steps}: expected a positive number of steps")
  if args.convergence_factor < 0 or args.convergence_factor == 1:
    raise UsageError(f"--convergence-factor={args.convergence_factor}: expected 0 (no check) or an integer ≥ 2")
  if args.add_convergence and not args.from_json:
    raise UsageError("--add-convergence: needs --from-json, the sweep to add the check to")
  if args.add_convergence and args.convergence_factor == 0:
    raise UsageError("--add-convergence with --convergence-factor=0: expected a factor ≥ 2")
  out = pathlib.Path(args.out)
  existing = next((p for p in (out, *out.parents) if p.exists()), None)
  if existing is not None and not existing.is_dir():
    raise UsageError(f"--out={args.out}: {existing} exists and is not a directory")
  chosen = args.corpora.split(",")
  unknown = [name for name in chosen if name not in ("bytes", "subword")]
  if unknown:
    raise UsageError(f"--corpora={args.corpora!r}: {unknown[0]!r} is not one of bytes, subword")
  try:
    args.fraction_list = tuple(float(f) for f in args.fractions.split(","))
  except ValueError:
    raise UsageError(f"--fractions={args.fractions!r}: expected comma-separated numbers in (0, 1]") from None
  bad = [f for f in args.fraction_list if not 0 < f <= 1]
  if bad:
    raise UsageError(f"--fractions={args.fractions!r}: {bad[0]:g} is not in (0, 1]")
  if args.from_json and not pathlib.Path(args.from_json).is_file():
    raise UsageError(f"--from-json={args.from_json}: no such file")
  args.available = corpora(args.quick, args.subword_corpus)
  args.chosen = chosen
  return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
  try:
    args = parse(argv)
  except UsageError as error:
    print(f"error: {error}", file=sys.stderr)
    raise SystemExit(2) from None
  if args.from_json:
    results = json.loads(pathlib.Path(args.from_json).read_text())
    if args.add_convergence:
      try:
        add_convergence(results, args)
      except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    publish(results, pathlib.Path(args.out), args.write_docs)
    return results
  return sweep(args)


def publish(results: dict[str, Any], out: pathlib.Path, write_docs: bool) -> list[pathlib.Path]:
  """Writes <out>/when_to_tie.*; with `write_docs` also docs/when_to_tie.* (keeping its notes) and README's picks."""
  docs = REPO / "docs"
  paths = write(results, out, kept_notes(docs / "when_to_tie.md") if write_docs else "")
  if write_docs:
    for path in paths:
      if path.resolve() != (docs / path.name).resolve():
        shutil.copyfile(path, docs / path.name)
    write_readme(results, REPO / "README.md")
  return paths


def setup_jax(args: argparse.Namespace, out: pathlib.Path) -> None:
  """JAX's persistent compilation cache under <out>/jax_cache (unless --no-compile-cache) and quiet run logs."""
  import jax  # noqa: PLC0415
  from absl import logging  # noqa: PLC0415

  if not args.no_compile_cache:
    # Runs that differ only in seed or data size compile the same programs: compile them once, keep them on disk.
    jax.config.update("jax_compilation_cache_dir", str(out / "jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  logging.set_verbosity(logging.ERROR)  # one line per run from here, not the trainer's log of every run


def add_convergence(results: dict[str, Any], args: argparse.Namespace) -> None:
  """The convergence check of each chosen corpus in `results` (an existing sweep), on the same datasets (rebuilt
  under <out>/data/ if absent; UsageError if they differ from the sweep's), added to its entries."""
  out = pathlib.Path(args.out)
  swept = {model["key"] for model in results["models"]}
  models = tuple(model for model in MODELS if model.key in swept)
  setup_jax(args, out)
  for name in args.chosen:
    if name not in results["corpora"]:
      raise UsageError(f"--corpora: {name!r} is not in {args.from_json}")
    entry = results["corpora"][name]
    plan = Plan(**entry["plan"])
    sweep = Sweep(args.available[name], plan, out, args.keep_runs)
    if sweep.data.identity != entry["dataset"]:
      raise UsageError(f"--from-json={args.from_json}: its {name} dataset is {entry['dataset']!r}, the one under "
                       f"{sweep.data_dir} is {sweep.data.identity!r}")
    print(f"{name}: convergence check, {args.convergence_factor}× {plan.max_steps} steps at most", flush=True)
    entry["convergence"] = convergence_check(sweep, entry, models, args.convergence_factor)
  results["convergence_factor"] = args.convergence_factor


def sweep(args: argparse.Namespace) -> dict[str, Any]:
  """The sweep of a checked command line: → the results written."""
  started, cpu_started = time.perf_counter(), time.process_time()
  out = pathlib.Path(args.out)
  models = MODELS
  if args.quick:
    fractions, seeds, grids = (0.1,), SEEDS[:1], QUICK_GRIDS
  else:
    fractions, seeds, grids = args.fraction_list, SEEDS, GRIDS
  setup_jax(args, out)
  results: dict[str, Any] = {
      "models": [dataclasses.asdict(model) for model in models], "fractions": list(fractions),
      "convergence_factor": args.convergence_factor,
      "seeds": list(seeds), "grids": {axis: list(values) for axis, values in grids.items()},
      "patience": PATIENCE, "machine": machine(), "corpora": {},
  }
  for name in args.chosen:
    plan = QUICK_PLAN if args.quick else dataclasses.replace(PLANS[name], max_steps=getattr(args, f"{name}_steps"))
    print(f"{name}: {args.available[name].note}, at most {plan.max_steps} steps per run", flush=True)
    entry = sweep_corpus(args.available[name], models, fractions, seeds, grids, plan, out, args.keep_runs,
                         third_seed=not args.no_third_seed, convergence_factor=args.convergence_factor)
    results["corpora"][name] = entry
    print(f"{name}: {entry['seconds'] / 60:.1f} min, {entry['cpu_seconds'] / 60:.1f} min CPU", flush=True)
  results["seconds"] = time.perf_counter() - started
  results["cpu_seconds"] = time.process_time() - cpu_started
  paths = publish(results, out, args.write_docs)
  print(f"wrote {', '.join(map(str, paths))}{' and docs/when_to_tie.*, README.md' if args.write_docs else ''}; "
        f"wall time {results['seconds'] / 60:.1f} min, CPU time {results['cpu_seconds'] / 60:.1f} min")
  return results


if __name__ == "__main__":
  main()
