"""What the sweep runs: the models, the corpora, the grids searched, each corpus's schedule and each run's config."""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import pathlib
from typing import Any

# Bad command-line input: main prints `error: <message>` and exits with status 2, before any work. The project's own
# class, so that a refusal from the trainer (a workdir in use, a config it cannot run) is answered the same way.
from tied_embed.util import UsageError

REPO = pathlib.Path(__file__).resolve().parents[2]
FRACTIONS = (0.01, 0.1, 1.0)  # three sizes a decade apart: what fits a (corpus, family) block in BLOCK_SECONDS
SEEDS = (0, 1, 2, 3, 4)  # the scored seeds: five per cell, each model at its chosen settings
TUNE_SEED = 100  # the seed of every tuning trial: never one of SEEDS, so no scored run is the run a choice was made on
DRAWS = 3  # data draws (data.draw_seed) at DRAW_FRACTIONS, where which documents a size holds can change the answer
DRAW_FRACTIONS = (0.01, 0.1)
# train.early_stopping_patience: off. With patience 3 the untied model on all the byte data plateaued at the peak
# learning rate and stopped at step 1,050 of 3,000 (best 600, eval 1.731), where running on through the cosine
# decay reaches ~1.69: stopping on a plateau before the decay judges the schedule, not the model. So every run
# goes through its whole schedule and is scored at the eval with the lowest select/loss.
PATIENCE = 0
# Every model gets the same first trials, `trials`: the learning rate (these multiples of its corpus config's peak
# learning rate) crossed with the weight decay, 3 × 4 = 12 trials; tied + W's λ is spread over those same 12 trials
# (a Latin rectangle), not searched on top. Neighbouring values above 0 are 3× apart on every axis, so a choice is
# resolved to within 3×; 0 is "off". AdamW's decay shrinks weights by exp(-weight_decay · Σ learning rate): Σ lr is
# ~1-5 where the data is small and ~20-75 at 100%, so 0.1 to 1 spans mild to strong at every size, and 1 holds the
# value between 0.3 and 3 that the subword grid {0, 0.3, 3} missed (issue 72): one grid serves both corpora.
LEARNING_RATE_FACTORS = (1 / 3, 1.0, 3.0)
GRIDS = {"weight_decay": (0.0, 0.1, 0.3, 1.0), "hidden_l2": (0.0, 0.001, 0.003, 0.01)}
# A corpus's own grids over GRIDS ({corpus: {axis: values}}): none, since the edge rule extends a grid where a corpus
# needs more.
CORPUS_GRIDS: dict[str, dict[str, tuple[float, ...]]] = {}
# The edge rule (tuning.search), the same for every model: after its first trials, an axis whose choice is the highest
# value tried, or the lowest where that is not 0, is tried one step beyond it (× or ÷ EDGE_RATIO, the grids' own
# spacing) at the choice's other settings, and the choice is made again; at most EDGE_EXTENSIONS steps per axis and
# side (27× past the first grid), after which the cell is marked as still at the edge. A chosen 0 stands only where
# the value next above it, at the choice's other settings, was tried and lost.
EDGE_RATIO = 3.0
EDGE_EXTENSIONS = 3
QUICK_GRIDS = {"learning_rate": (1.0,), "weight_decay": (0.0,), "hidden_l2": (0.1,)}  # one trial per model
# A (corpus, model family) block of runs: at most this long on the 2-core build machine, so a block is one sitting.
BLOCK_SECONDS = 2 * 3600
# Wall seconds of one run by corpus and size on 2 idle cores; a block's estimate is its runs times these
# (`block_seconds`). The controls cost what the bigram models cost. Bytes: the mean of a full two-seed sweep's runs at
# the same schedule (EPOCHS passes, at most 3,000 steps) on a 2-core Xeon; the bytes bigram block of
# docs/when_to_tie.json took 53.0 min of CPU (84.6 min wall beside other jobs, load 9-14). Subword: the means of the
# subword bigram block's runs on the 2-core AMD EPYC build machine (AVX2; evaluation by distinct inputs), 1% and 10%
# measured (72 runs each, 277 and 2,772 steps); 100% estimated as 10%'s 25.7 ms of CPU a step × its 27,774 steps.
RUN_SECONDS = {"bytes": {0.01: 6.6, 0.1: 5.9, 1.0: 10.3}, "subword": {0.01: 15.9, 0.1: 61.4, 1.0: 714.0}}
# A context family's run: wall seconds of one run by corpus and size, as its block's sweep measured them (median
# wall seconds of its runs; `block_seconds` is their sum). Bytes, on the 2-core AMD EPYC build machine (AVX2) at a
# load average of 2-4: MLP 12.4 s, 15.8 s and 31.4 s at 1%, 10% and 100% (2,500 steps at most; the block 63.8 min),
# transformer 20.1 s, 27.5 s and 60.0 s (the block 112.8 min, two sittings). Subword, on the 2-core AMD EPYC with
# AVX-512, the MLP and transformer blocks' sittings side by side (each run on about one core): MLP 41.7 s at 1%
# (285 steps, 12 evals of ~496,000 tokens: the windowed evals are most of it), 139.5 s at 10% and 676.5 s at 100%
# (all 42 runs of 28,534 steps: 31 side by side, 649-925 s, the last 11 alone, 378-415 s); transformer 84.0 s at 1%,
# 146.4 s at 10% and 523.1 s at 100% (all 42 runs: 15 side by side, 823-1,050 s, the rest partly or wholly alone,
# 411-777 s; the block 736.8 min over five sittings).
CONTEXT_RUN_SECONDS = {
    "mlp": {"bytes": {0.01: 12.4, 0.1: 15.8, 1.0: 31.4}, "subword": {0.01: 41.7, 0.1: 139.5, 1.0: 676.5}},
    "transformer": {"bytes": {0.01: 20.1, 0.1: 27.5, 1.0: 60.0},
                    "subword": {0.01: 84.0, 0.1: 146.4, 1.0: 523.1}},
}
TIMED_FAMILIES = ("bigram", "controls", *CONTEXT_RUN_SECONDS)
# What was cut so that a context block fits BLOCK_SECONDS, per (corpus, family) block: Plan fields replaced, the
# seeds, draws, trials and sizes kept. Bytes MLP: 2,500 steps at most (8.3 passes at 100%, not 10): its 100% run
# 55.4 s (60.3 s less 500 steps at 9.75 ms), the block 7,101 s.
CONTEXT_CUTS: dict[tuple[str, str], dict[str, float]] = {("bytes", "mlp"): {"max_steps": 2500}}
CONTEXT_MAX_STEPS = {block: cut["max_steps"] for block, cut in CONTEXT_CUTS.items() if "max_steps" in cut}
# The blocks that do not fit BLOCK_SECONDS under any cut that keeps 5 seeds, 3 draws at 1% and 10%, 12 first trials
# and 3 sizes (`block_seconds` gives their estimate): on subword the 51 runs at 100% (28,534 steps each) outweigh the
# two hours alone, 10.1 h of the bigram models' ~11.9 h block and 9.6 h of the MLP's ~13.7 h: the steps themselves. Run
# them in sittings (a killed sweep resumes from its finished runs), by size (--fractions), or on more cores.
UNFIT_BLOCKS = {("subword", "mlp"), ("subword", "transformer"), ("subword", "bigram"), ("subword", "controls")}
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
# The data.split that draws selection and validation from one pool with data.draw_seed (issue 45, point 1): a corpus
# on it is scored on DRAWS draws at DRAW_FRACTIONS; on any other split, on its one fixed split.
DRAWN = "drawn"




@dataclasses.dataclass(frozen=True)
class Plan:
  """How one corpus's runs are scheduled. Each eval scores the selection and the whole validation split, which
  on the subword corpus (~0.3 M validation pairs, V = 2048) costs ~1 s on the loaded 2-core build machine against
  ~6 ms a step, so its plan evaluates less often and holds out a smaller selection share."""

  selection_share: float  # data.selection_fraction
  max_steps: int  # optimizer updates at most (the --<corpus>-steps flag)
  evals_per_epoch: float  # evals per pass over the train pairs used
  max_evals: int  # at most steps / max_evals steps between evals: at least max_evals evals a run
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
  """One of the compared models: its key, its label in tables and plots, its model.* settings, what it tunes, and
  for a model the trainer cannot build yet, the config fields it needs (`needs`: {field: value})."""

  key: str
  label: str
  tied: bool
  hidden: str = "none"
  tuned: tuple[str, ...] = ("learning_rate", "weight_decay")  # the axes of its `trials`
  d_model_factor: float = 1.0  # × the corpus config's model.d_model (the equal-parameter control: 0.5)
  needs: tuple[tuple[str, Any], ...] = ()  # (config field, value) the model sets beyond tied / hidden


MODELS = (
    Model("tied", "tied E·Eᵀ", tied=True),
    Model("untied", "untied A·Bᵀ", tied=False),
    Model("tied_w", "tied + W  E·W·Eᵀ", tied=True, hidden="linear",
          tuned=("learning_rate", "weight_decay", "hidden_l2")),
)
# The controls that test the mechanism (issue 45, point 5), each tuned as the models are: the output bias
# (model.output_bias, tied_embed/core/model.py's WithOutputBias), the symmetric S (model.hidden="symmetric",
# WithSymmetricMap, its λ tuned as tied + W's) and the equal-parameter control (untied at D/2). `--family controls`.
CONTROLS = (
    Model("tied_bias", "tied + bias  E·Eᵀ + b", tied=True, needs=(("model.output_bias", True),)),
    Model("tied_sym", "tied + S  E·S·Eᵀ, S = Sᵀ", tied=True, hidden="symmetric",
          tuned=("learning_rate", "weight_decay", "hidden_l2")),
    Model("untied_half", "untied at D/2  A·Bᵀ", tied=False, d_model_factor=0.5),  # tied's parameter count
)
# The model axis (point 6): the bigram models again with a context of the previous tokens (issue 44's model.context),
# each carrying what its config needs. Windows of CONTEXT_LENGTH tokens (never across a document), B / L windows a
# step so a step holds the bigram's tokens (`run_config`), at the corpus config's D (32 bytes, 64 subword pieces):
# the MLP reads the last 3 rows (a 4-gram's context; configs/context_mlp.py reads 4 in windows of 32); the
# transformer is one pre-norm block of 2 heads (configs/context_transformer_small.py: 2 blocks of 4 heads in windows
# of 32), as small as still attends over the window, so that a (corpus, family) block fits BLOCK_SECONDS (see
# RUN_SECONDS).
CONTEXT_LENGTH = 16
CONTEXT_NEEDS = {
    "mlp": (("data.context_length", CONTEXT_LENGTH), ("model.context", "mlp"), ("model.context_k", 3)),
    "transformer": (("data.context_length", CONTEXT_LENGTH), ("model.context", "transformer"), ("model.layers", 1),
                    ("model.heads", 2)),
}
CONTEXTS = tuple(CONTEXT_NEEDS)
FAMILIES = {"bigram": MODELS, "controls": CONTROLS,
            **{context: tuple(dataclasses.replace(model, key=f"{model.key}_{context}",
                                                  label=f"{model.label.split('  ')[0]} + {context}",
                                                  needs=CONTEXT_NEEDS[context])
                              for model in MODELS) for context in CONTEXTS}}
# The orders of the Kneser-Ney n-gram a context family is compared with (sweep.ngram_reference), its order chosen
# with its discount on the selection split: the MLP's own (k + 1: the k tokens it reads are the n-gram's context),
# the transformer's (which reads the whole window) the best of 2..8.
TRANSFORMER_ORDERS = tuple(range(2, 9))


def context_of(model: Model) -> str:
  """The model's model.context ('none' for a bigram model or a control)."""
  return dict(model.needs).get("model.context", "none")


def context_length(model: Model) -> int:
  """The model's data.context_length, L: 1 (pairs) unless it reads windows."""
  return int(dict(model.needs).get("data.context_length", 1))


def ngram_orders(model: Model) -> tuple[int, ...]:
  """The n-gram orders its same-context Kneser-Ney count model is chosen from: () for a model without context."""
  needs = dict(model.needs)
  context = context_of(model)
  if context == "mlp":
    return (int(needs["model.context_k"]) + 1,)
  if context == "transformer":
    return tuple(order for order in TRANSFORMER_ORDERS if order <= context_length(model))
  return ()


def trials(model: Model, grids: dict[str, tuple[float, ...]]) -> list[dict[str, float]]:
  """A model's first trials (the edge rule, tuning.search, may add more): the learning rate × weight decay grid, in
  that order, and for a model that also tunes hidden_l2 (λ) its value (i + j) mod len(λ grid) at learning rate i and
  weight decay j (where the λ and weight decay grids are as long, each λ once per learning rate and at most once per
  weight decay: a Latin rectangle). Every model has len(lr) · len(wd) of them."""
  out = []
  for i, rate in enumerate(grids["learning_rate"]):
    for j, decay in enumerate(grids["weight_decay"]):
      settings = {"learning_rate": rate, "weight_decay": decay}
      if "hidden_l2" in model.tuned:
        settings["hidden_l2"] = grids["hidden_l2"][(i + j) % len(grids["hidden_l2"])]
      out.append(settings)
  return out


def draws(fraction: float, single: bool = False) -> tuple[int, ...]:
  """The data draws scored at a size: DRAWS of them at DRAW_FRACTIONS, else draw 0 alone (and with `single`: --quick,
  or a corpus whose split does not draw)."""
  return tuple(range(DRAWS)) if fraction in DRAW_FRACTIONS and not single else (0,)


def run_seconds(corpus_key: str, family: str) -> dict[float, float]:
  """{size: wall seconds of one run} of a family's block on a corpus (RUN_SECONDS, CONTEXT_RUN_SECONDS)."""
  return CONTEXT_RUN_SECONDS[family][corpus_key] if family in CONTEXT_RUN_SECONDS else RUN_SECONDS[corpus_key]


def block_plan(corpus_key: str, families: tuple[str, ...], max_steps: int | None = None) -> Plan:
  """The corpus's plan for a block of `families`, with the CONTEXT_CUTS of its families (the smallest value of a field
  where two cut it), and its most steps `max_steps` (the --<corpus>-steps flag) where given."""
  plan = PLANS[corpus_key]
  for family in families:
    for field, value in CONTEXT_CUTS.get((corpus_key, family), {}).items():
      plan = dataclasses.replace(plan, **{field: min(getattr(plan, field), value)})
  return plan if max_steps is None else dataclasses.replace(plan, max_steps=max_steps)


def block_seconds(corpus_key: str, family: str, fractions=FRACTIONS, seeds=SEEDS) -> float:
  """The estimated wall seconds of one (corpus, family) block on 2 cores: per size, each model's first trials (on
  draw 0; the edge rule's extensions come on top, as many as the choices need) and its scored runs (seeds × draws),
  times `run_seconds` (the convergence check is a block of its own); nan for a family not yet timed."""
  if family not in TIMED_FAMILIES:
    return math.nan
  grids = {"learning_rate": LEARNING_RATE_FACTORS, **GRIDS, **CORPUS_GRIDS.get(corpus_key, {})}
  seconds = run_seconds(corpus_key, family)
  return sum(seconds[fraction] * sum(len(trials(model, grids)) + len(seeds) * len(draws(fraction))
                                     for model in FAMILIES[family])
             for fraction in fractions)


def unavailable(model: Model) -> str:
  """Why the trainer cannot build `model` yet ('' where it can): the first field of `model.needs` its config lacks
  or refuses, on the sweep's byte corpus (a text source: its token stream can be cut into windows)."""
  from configs import text  # noqa: PLC0415
  from tied_embed.train.config import validate  # noqa: PLC0415

  config = text.get_config()
  settings = (("model.hidden", model.hidden), *model.needs)
  for field, value in settings:
    section, name = field.split(".")
    if name not in config[section]:
      return f"{field} does not exist yet"
    with config.unlocked():
      config[section][name] = value
  try:
    validate(config)
  except Exception as error:  # noqa: BLE001 (a refused value: UsageError, or the field's own type check)
    return f"{', '.join(f'{field}={value!r}' for field, value in settings)}: {error}"
  return ""


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
  if quick:  # the one fixed split of each corpus: the quick sweep scores one draw
    return {"bytes": byte_corpus,
            "subword": Corpus("subword", subword, "", 512, "SentencePiece, 512 pieces, of Python's pydoc topics",
                              "by_document")}
  path = subword_corpus or vim_docs()
  files = glob.glob(path) if "*" in path else [path]
  if not files or not all(os.path.exists(p) for p in files):
    raise UsageError(f"--subword-corpus={subword_corpus!r}: no such file, directory or glob")
  size = sum(_size(p) for p in files)
  return {
      "bytes": dataclasses.replace(byte_corpus, note=byte_corpus.note + ", drawn as random blocks of ~8 KiB",
                                   split=DRAWN),
      "subword": Corpus("subword", subword, path, SUBWORD_VOCAB,
                        f"SentencePiece, {SUBWORD_VOCAB} pieces, of {path} ({size / 1e6:.1f} MB; Vim's help files "
                        "by default), drawn as random whole files, one over 64 KiB in blocks", DRAWN),
  }


def split_of(dataset: str) -> str:
  """The data.split kind a results entry's dataset identity was made with: DRAWN, by_document or contiguous."""
  return DRAWN if "-draw" in dataset else "by_document" if "-bydoc" in dataset else "contiguous"


def _size(path: str) -> int:
  target = pathlib.Path(path)
  return sum(p.stat().st_size for p in target.rglob("*") if p.is_file()) if target.is_dir() else target.stat().st_size


def corpus_grids(corpus: Corpus, grids: dict[str, tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
  """The grids a corpus is tuned on: `grids` with the corpus's CORPUS_GRIDS over them, and the learning rates as
  LEARNING_RATE_FACTORS (QUICK_GRIDS: its own factor) times the corpus config's peak learning rate."""
  factors = grids.get("learning_rate", LEARNING_RATE_FACTORS)
  base = float(corpus.base.get_config().train.learning_rate)
  own = {} if grids is QUICK_GRIDS else CORPUS_GRIDS.get(corpus.key, {})
  return {**grids, **own, "learning_rate": tuple(float(f"{base * factor:.6g}") for factor in factors)}


def schedule(plan: Plan, train_pairs: int, batch_size: int) -> tuple[int, int]:
  """(steps, steps between evals) of a run on `train_pairs`: EPOCHS passes within [MIN_STEPS, plan.max_steps]
  (early stopping ends most runs sooner); plan.evals_per_epoch evals a pass, at least MIN_EVAL_EVERY steps apart
  and at most steps / plan.max_evals (so a run that never stops early has at least max_evals evals to choose from,
  and the trainer's eval at its last step)."""
  per_epoch = train_pairs / batch_size
  steps = int(min(plan.max_steps, max(MIN_STEPS, round(EPOCHS * per_epoch))))
  every = max(1, min(max(MIN_EVAL_EVERY, round(per_epoch / plan.evals_per_epoch)), steps // plan.max_evals))
  return steps, int(every)


def run_config(corpus: Corpus, model: Model, fraction: float, seed: int, settings: dict[str, float], steps: int,
               every: int, data_dir: pathlib.Path, selection_share: float, min_delta: float = 0.0, draw: int = 0):
  """The config of one run: the corpus's config, the model, its learning rate and regulariser, the train fraction,
  the selection split, evals (and checkpoints of the best) every `every` steps, the best step's min_delta and early
  stopping; on a drawn corpus, data draw `draw` (data.split = 'drawn-<draw>')."""
  config = corpus.base.get_config()
  config.seed = seed
  config.data.text_path = corpus.text_path
  # set here, not left to the base config: the bytes stay contiguous where the corpus does not draw
  config.data.split = f"{DRAWN}-{draw}" if corpus.split == DRAWN else corpus.split
  config.data.data_dir = str(data_dir)
  config.data.train_fraction = fraction
  config.data.selection_fraction = selection_share
  config.model.vocab_size = corpus.vocab_size
  config.model.tied = model.tied
  config.model.hidden = model.hidden
  config.model.hidden_l2 = float(settings.get("hidden_l2", 0.0)) if model.hidden != "none" else 0.0
  config.update_from_flattened_dict(dict(model.needs))  # what a control or a context model sets beyond tied / hidden
  # a step of B / L windows of L holds the corpus config's B tokens, so `schedule`'s passes and steps are the
  # bigram models' and the families compare at the same tokens seen
  config.train.batch_size = max(1, int(config.train.batch_size) // context_length(model))
  config.train.weight_decay = float(settings.get("weight_decay", 0.0))
  if "learning_rate" in settings:
    config.train.learning_rate = float(settings["learning_rate"])
  config.model.d_model = max(1, round(config.model.d_model * model.d_model_factor))
  config.train.update(num_steps=steps, warmup_steps=max(1, steps // 10), log_every=steps, eval_every=every,
                      checkpoint_every=steps, keep_checkpoints=1, early_stopping_patience=PATIENCE,
                      min_delta=min_delta)
  return config
