"""What the sweep runs: the models, the corpora, the grids searched, each corpus's schedule and each run's config."""

from __future__ import annotations

import dataclasses
import glob
import os
import pathlib
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]
FRACTIONS = (0.01, 0.03, 0.1, 0.3, 1.0)
SEEDS = (0, 1)
THIRD_SEED = 2  # for the two best models of a size whose mean ± sd ranges overlap
# train.early_stopping_patience: off. With patience 3 the untied model on all the byte data plateaued at the peak
# learning rate and stopped at step 1,050 of 3,000 (best 600, eval 1.731), where running on through the cosine
# decay reaches ~1.69: stopping on a plateau before the decay judges the schedule, not the model. So every run
# goes through its whole schedule and is scored at the eval with the lowest select/loss.
PATIENCE = 0
# AdamW's decay shrinks weights by exp(-weight_decay · Σ learning rate): Σ lr is ~1-5 where small data stops
# early and ~20-75 at 100%, so 0.1 and 1 span mild to strong at every size. λ: 0 (tied + W without the penalty)
# and three strengths a decade apart.
GRIDS = {"weight_decay": (0.0, 0.1, 1.0), "hidden_l2": (0.0, 0.001, 0.01, 0.1)}
# A corpus's own grids, over GRIDS: on the subword pieces the top weight decay, 1, was chosen by every model at 1-3%
# (on the alphabetical split), so the grid goes on to 3 there; 3 was then chosen by plain tying at 1% (by document),
# so it goes on to 10. The bytes keep GRIDS (their results were swept on it).
CORPUS_GRIDS = {"subword": {"weight_decay": (0.0, 0.1, 1.0, 3.0, 10.0)}}
QUICK_GRIDS = {"weight_decay": (0.0,), "hidden_l2": (0.1,)}  # one run per model (tune: its own test)
SUBWORD_VOCAB = 2048  # 8192 pieces cost ~4× the steps and evals, and do not converge at 100% in the budget
EPOCHS = 10  # a run's schedule: 10 passes over its train pairs, within [MIN_STEPS, Plan.max_steps]
MIN_STEPS = 200
MIN_EVAL_EVERY = 10
# The convergence check's steps at 100%, as a multiple of the sweep's: it reruns each model's chosen setting longer, to
# see how far the 1× numbers are from converged. The published bytes row ran it at 3×; the subword row at 4× (added with
# --add-convergence --convergence-factor 4: ~22 min of CPU a run at 117,664 steps on the 2-core build machine).
CONVERGENCE_FACTOR = 3
# --recheck-ends reruns a run whose best step is at the end of its schedule with this many times the evals (the same
# training): the sweep's evals are 8% of a schedule apart, too coarse to see where in the cosine decay the last
# interval's gain came.
RECHECK_EVALS = 4
VIM_DOCS = "/usr/share/vim/vim*/doc"


class UsageError(Exception):
  """Bad command-line input: main prints `error: <message>` and exits with status 2, before any work."""


@dataclasses.dataclass(frozen=True)
class Plan:
  """How one corpus's runs are scheduled. Each eval scores the selection and the whole validation split, which
  on the subword corpus (~0.3 M validation pairs, V = 2048) costs ~1 s on the loaded 2-core build machine against
  ~6 ms a step, so its plan evaluates less often and holds out a smaller selection share."""

  selection_share: float  # data.selection_fraction
  max_steps: int  # optimizer updates at most (the --<corpus>-steps flag)
  evals_per_epoch: float  # evals per pass over the train pairs used
  max_evals: int  # at least steps / max_evals between evals
  min_delta: float = 0.0  # train.min_delta: a new best must be this many nats of select/loss below the best so far


# subword: at most 30,000 steps, so 10 passes at every size as on the bytes (with ~4 passes at 100% every model still
# improved at its last step). A longer schedule rather than early stopping: patience would stop on the plateau at
# the peak learning rate (see PATIENCE); a cosine that ends sooner is a short schedule. Converged is
# judged with min_delta: at 10 passes on 100% a probe's last eval interval (8% of the schedule) gained 0.003 nats of
# select/loss for tied and untied, against 0.007-0.03 for each interval before it, so with 0.005 nats the best step is
# the last eval that still gained that much, and the chosen model is within 0.005 nats of the lowest select/loss seen.
# 12 evals. docs/when_to_tie.md, "Did the runs converge?".
PLANS = {"bytes": Plan(0.1, 3000, 2, 20), "subword": Plan(0.05, 30000, 1, 12, min_delta=0.005)}
QUICK_PLAN = Plan(0.1, 20, 1, 4)


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
  split: str = "contiguous"  # data.split: a corpus of several files is split by whole files ("by_document")


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
            "subword": Corpus("subword", subword, "", 512, "SentencePiece, 512 pieces, of Python's pydoc topics",
                              "by_document")}
  path = subword_corpus or vim_docs()
  files = glob.glob(path) if "*" in path else [path]
  if not files or not all(os.path.exists(p) for p in files):
    raise UsageError(f"--subword-corpus={subword_corpus!r}: no such file, directory or glob")
  size = sum(_size(p) for p in files)
  return {
      "bytes": byte_corpus,
      "subword": Corpus("subword", subword, path, SUBWORD_VOCAB,
                        f"SentencePiece, {SUBWORD_VOCAB} pieces, of {path} ({size / 1e6:.1f} MB; Vim's help files "
                        "by default), split by whole files in a seeded shuffled order", "by_document"),
  }


def _size(path: str) -> int:
  target = pathlib.Path(path)
  return sum(p.stat().st_size for p in target.rglob("*") if p.is_file()) if target.is_dir() else target.stat().st_size


def corpus_grids(corpus_key: str, grids: dict[str, tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
  """The grids a corpus is tuned on: `grids` with the corpus's CORPUS_GRIDS over them (QUICK_GRIDS stay as they are)."""
  return grids if grids is QUICK_GRIDS else {**grids, **CORPUS_GRIDS.get(corpus_key, {})}


def schedule(plan: Plan, train_pairs: int, batch_size: int) -> tuple[int, int]:
  """(steps, steps between evals) of a run on `train_pairs`: EPOCHS passes within [MIN_STEPS, plan.max_steps]
  (early stopping ends most runs sooner); plan.evals_per_epoch evals a pass, at least MIN_EVAL_EVERY steps apart
  and at most steps / plan.max_evals (so a run that never stops early has max_evals evals to choose from)."""
  per_epoch = train_pairs / batch_size
  steps = int(min(plan.max_steps, max(MIN_STEPS, round(EPOCHS * per_epoch))))
  every = max(1, min(max(MIN_EVAL_EVERY, round(per_epoch / plan.evals_per_epoch)), steps // plan.max_evals))
  return steps, int(every)


def run_config(corpus: Corpus, model: Model, fraction: float, seed: int, settings: dict[str, float], steps: int,
               every: int, data_dir: pathlib.Path, selection_share: float, min_delta: float = 0.0):
  """The config of one run: the corpus's config, the model and its regulariser, the train fraction, the selection
  split, evals (and checkpoints of the best) every `every` steps, the best step's min_delta and early stopping."""
  config = corpus.base.get_config()
  config.seed = seed
  config.data.text_path = corpus.text_path
  config.data.split = corpus.split  # set here, not left to the base config: the bytes stay contiguous
  config.data.data_dir = str(data_dir)
  config.data.train_fraction = fraction
  config.data.selection_fraction = selection_share
  config.model.vocab_size = corpus.vocab_size
  config.model.tied = model.tied
  config.model.hidden = model.hidden
  config.model.hidden_l2 = float(settings.get("hidden_l2", 0.0)) if model.hidden != "none" else 0.0
  config.train.weight_decay = float(settings.get("weight_decay", 0.0))
  config.train.update(num_steps=steps, warmup_steps=max(1, steps // 10), log_every=steps, eval_every=every,
                      checkpoint_every=steps, keep_checkpoints=1, early_stopping_patience=PATIENCE,
                      min_delta=min_delta)
  return config
