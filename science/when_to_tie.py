"""When does tying help? Tied, untied, tied + W and tied + W with ‖W − I‖² across train data sizes, on real text.

  .venv/bin/python science/when_to_tie.py                  # the whole sweep into runs/when_to_tie/ (~18 min)
  .venv/bin/python science/when_to_tie.py --write-docs     # the same, and docs/when_to_tie.* rewritten
  .venv/bin/python science/when_to_tie.py --quick --corpora=bytes --out=runs/when_to_tie_quick  # a minute

Four models: tied (logits E[i]·Eᵀ), untied (A[i]·Bᵀ), tied + W (E[i]·W·Eᵀ, model.hidden="linear", W a D×D matrix
that starts at the identity) and tied + W with the penalty λ·‖W − I‖² (model.hidden_l2 = λ), its λ chosen from
`L2_GRID` on a held-out part of the train split, never on eval. Each trains on the first 1%, 3%, 10%, 30% and
100% of the train split (data.train_fraction) with 2 seeds, on two corpora: (a) `bytes`, byte bigrams of the
default text corpus (configs/text.py: Python's pydoc topics, ~750 KB); (b) `subword`, SentencePiece bigrams
with V = 8192 (configs/subword.py) of Vim's help files (/usr/share/vim/vim*/doc/*.txt, ~9.5 MB, the largest real
English text on the build machine). Every run is the project's own trainer (`trainer.train_and_evaluate`,
in-process), and every data size is scored on the same whole validation split against the same floor, so the
gaps compare across sizes. Beside each gap goes the loss on rare inputs (eval/loss_rare_inputs: the validation
pairs whose current token is among the rarest tenth of the train occurrences of the data used, or never seen).

Choosing λ: for each data size f, tied + W trains at each λ of the grid (seed 0) on the first min(f, 0.9) of the
train split and is scored on a sample of the split's last 10%, which none of those runs trained on; the λ with
the lowest held-out loss is the one every seed of "tied + W, λ" uses. For f ≤ 0.9 the selection run at the
chosen λ is that model's seed-0 run itself (the same config), so it is not trained twice.

Compiled programs are cached on disk (JAX's persistent compilation cache, under <out>/jax_cache): runs that differ
only in seed or data size share their step and eval programs. The whole sweep was sized to take about 25 minutes
on 2 CPU cores (`STEPS`; --bytes-steps and --subword-steps change them); it prints each run's time and its own
wall time. It writes <out>/when_to_tie.{md,json,png}; --write-docs also copies them to docs/when_to_tie.*. The
datasets are built once per corpus under <out>/data/; each run's workdir under <out>/runs/ is deleted once its
numbers are taken, unless --keep-runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import io
import json
import os
import pathlib
import shutil
import sys
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import logging  # noqa: E402

from configs import subword, text  # noqa: E402
from tied_embed import evaluation, trainer  # noqa: E402
from tied_embed.data import bigram as data_lib  # noqa: E402
from tied_embed.data import frequency  # noqa: E402
from tied_embed.run import checkpoint, parallel  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
FRACTIONS = (0.01, 0.03, 0.1, 0.3, 1.0)
SEEDS = (0, 1)
L2_GRID = (0.001, 0.01, 0.1)
HOLDOUT_SHARE = 0.1  # the train split's last tenth scores the λ grid
HOLDOUT_PAIRS = 65_536  # at most this many of its pairs (a fixed sample), so scoring costs about one eval
# Optimizer updates per run, sized so the sweep fits ~25 min on 2 cores: 51 runs per corpus (4 models × 5 sizes ×
# 2 seeds, 15 λ trials, 4 of them reused). Measured per run with the programs compiled, in CPU seconds (2 cores
# give about half that in wall time): bytes ~5 s at 1000 steps; subword (V = 8192, D = 64) ~8 s (most of it the
# eval of the ~0.3 M validation pairs) + ~48 ms a step, so ~16 s of wall time at 500 steps and ~14 min in all.
STEPS = {"bytes": 1000, "subword": 500}
QUICK_STEPS = 20
VIM_DOCS = "/usr/share/vim/vim*/doc"


@dataclasses.dataclass(frozen=True)
class Model:
  """One of the compared models: its key, its label in tables and plots, and its model.* settings."""

  key: str
  label: str
  tied: bool
  hidden: str = "none"
  selects_l2: bool = False  # model.hidden_l2 chosen from L2_GRID on the held-out tail


MODELS = (
    Model("tied", "tied E·Eᵀ", tied=True),
    Model("untied", "untied A·Bᵀ", tied=False),
    Model("tied_w", "tied + W  E·W·Eᵀ", tied=True, hidden="linear"),
    Model("tied_w_l2", "tied + W, λ‖W − I‖²", tied=True, hidden="linear", selects_l2=True),
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
  """A glob of Vim's help files on this machine; SystemExit (one line) if there are none."""
  found = sorted(glob.glob(os.path.join(VIM_DOCS, "*.txt")))
  if not found:
    raise SystemExit(f"no Vim help files under {VIM_DOCS}: give another English corpus with --subword-corpus")
  return os.path.join(os.path.dirname(found[0]), "*.txt")


def corpora(quick: bool, subword_corpus: str) -> dict[str, Corpus]:
  """The two corpora; --quick: the subword corpus is the byte corpus with 512 pieces, so the test stays small."""
  if quick:
    return {
        "bytes": Corpus("bytes", text, "", 256, "bytes of Python's pydoc topics (configs/text.py's default)"),
        "subword": Corpus("subword", subword, "", 512, "SentencePiece, 512 pieces, of Python's pydoc topics"),
    }
  path = subword_corpus or vim_docs()
  size = sum(pathlib.Path(p).stat().st_size for p in glob.glob(path)) if "*" in path else _size(path)
  return {
      "bytes": Corpus("bytes", text, "", 256, "bytes of Python's pydoc topics (configs/text.py's default)"),
      "subword": Corpus("subword", subword, path, 8192,
                        f"SentencePiece, 8192 pieces, of {path} ({size / 1e6:.1f} MB; Vim's help files by default)"),
  }


def _size(path: str) -> int:
  target = pathlib.Path(path)
  return sum(p.stat().st_size for p in target.rglob("*") if p.is_file()) if target.is_dir() else target.stat().st_size


def run_config(corpus: Corpus, model: Model, fraction: float, seed: int, l2: float, steps: int, data_dir: pathlib.Path):
  """The config of one run: the corpus's config, the model, the train fraction, one checkpoint and eval at the end."""
  config = corpus.base.get_config()
  config.seed = seed
  config.data.text_path = corpus.text_path
  config.data.data_dir = str(data_dir)
  config.data.train_fraction = fraction
  config.model.vocab_size = corpus.vocab_size
  config.model.tied = model.tied
  config.model.hidden = model.hidden
  config.model.hidden_l2 = l2 if model.hidden != "none" else 0.0
  config.train.update(num_steps=steps, warmup_steps=max(1, steps // 10), log_every=steps, eval_every=steps,
                      checkpoint_every=steps, keep_checkpoints=1)
  return config


def summarise(summary: trainer.RunSummary, seconds: float) -> dict[str, float]:
  """The numbers one run leaves: eval loss, gap (nats and % of the floor), loss per input bucket, size, time."""
  return {
      "eval_loss": summary.eval_loss, "gap": summary.gap, "gap_percent": 100 * summary.relative_gap,
      **{f"loss_{bucket}_inputs": summary.loss_by_input_frequency.get(bucket, float("nan"))
         for bucket in frequency.BUCKETS},
      "param_count": summary.param_count, "seconds": seconds,
  }


class Sweep:
  """Runs and remembers the runs of one corpus; `holdout_loss` scores a run on the held-out tail."""

  def __init__(self, corpus: Corpus, steps: int, out: pathlib.Path, keep_runs: bool):
    self.corpus, self.steps, self.keep_runs = corpus, steps, keep_runs
    self.data_dir = out / "data" / corpus.key
    self.runs_dir = out / "runs" / corpus.key
    shutil.rmtree(self.runs_dir, ignore_errors=True)  # a rerun trains afresh, whatever the steps were
    probe = run_config(corpus, MODELS[0], 1.0, 0, 0.0, steps, self.data_dir)
    with contextlib.redirect_stdout(io.StringIO()):  # TFDS's 'downloading' chatter, as the trainer drops it
      data = data_lib.load_bigram_data(probe, self.runs_dir / "probe")  # builds the shared dataset once
    self.floor, self.train_pairs, self.eval_pairs = data.loss_floor, len(data.train_ids), len(data.eval_ids)
    tail = np.arange(len(data.train_ids) - round(HOLDOUT_SHARE * len(data.train_ids)), len(data.train_ids))
    rows = np.sort(np.random.default_rng(0).choice(tail, size=min(HOLDOUT_PAIRS, len(tail)), replace=False))
    self.holdout = (data.train_ids[rows], data.train_next[rows])
    self.identity = data.identity
    self._holdout_losses: dict[Any, Any] = {}

  def train(self, model: Model, fraction: float, seed: int, l2: float = 0.0) -> tuple[dict[str, float], Any]:
    """One run: → (its numbers, its RunSummary)."""
    config = run_config(self.corpus, model, fraction, seed, l2, self.steps, self.data_dir)
    workdir = self.runs_dir / f"{model.key}-l2={l2:g}-f{fraction:g}-s{seed}"
    started = time.perf_counter()
    summary = trainer.train_and_evaluate(config, workdir)
    numbers = summarise(summary, time.perf_counter() - started)
    if not self.keep_runs:  # the numbers and the in-memory state are all the sweep needs of it
      shutil.rmtree(workdir)
    penalty = f"λ={l2:g}" if model.hidden != "none" else ""
    print(f"  {self.corpus.key:7s} {model.key:9s} {penalty:8s} f={fraction:<5g} seed {seed}: gap "
          f"{numbers['gap_percent']:6.2f}%  rare {numbers['loss_rare_inputs']:.4f}  [{numbers['seconds']:.1f} s]",
          flush=True)
    return numbers, (config, summary)

  def holdout_loss(self, run: Any) -> float:
    """Mean loss of a finished run on the held-out sample of the train split's tail."""
    config, summary = run
    graphdef, _ = checkpoint.abstract_state(config, parallel.make_mesh(config.mesh))
    key = (config.model.tied, config.model.get("hidden", "none"))
    if key not in self._holdout_losses:  # one compiled program per model kind (λ changes only the training)
      self._holdout_losses[key] = evaluation.make_eval_losses(graphdef, int(config.loss.chunk_size),
                                                              str(config.model.dtype))
    losses = self._holdout_losses[key](summary.state, *(jax.numpy.asarray(a) for a in self.holdout))
    return float(np.mean(np.asarray(losses, np.float64)))


def sweep_corpus(corpus: Corpus, models: tuple[Model, ...], fractions, seeds, grid, steps: int,
                 out: pathlib.Path, keep_runs: bool = False) -> dict[str, Any]:
  """Every model × fraction × seed on one corpus, with the λ selection: → the corpus's JSON entry."""
  started = time.perf_counter()
  sweep = Sweep(corpus, steps, out, keep_runs)
  entry: dict[str, Any] = {
      "note": corpus.note, "dataset": sweep.identity, "vocab_size": corpus.vocab_size,
      "d_model": int(corpus.base.get_config().model.d_model), "steps": steps, "floor": sweep.floor,
      "train_pairs": sweep.train_pairs, "eval_pairs": sweep.eval_pairs, "holdout_pairs": len(sweep.holdout[0]),
      "l2_selection": {}, "runs": {model.key: {} for model in models},
  }
  for fraction in fractions:
    key = f"{fraction:g}"
    for model in models:
      if model.selects_l2:
        select_fraction = min(fraction, 1 - HOLDOUT_SHARE)
        trials = {l2: sweep.train(model, select_fraction, seeds[0], l2) for l2 in grid}
        scores = {l2: sweep.holdout_loss(run) for l2, (_, run) in trials.items()}
        chosen = min(scores, key=scores.get)
        entry["l2_selection"][key] = {"trained_on_fraction": select_fraction,
                                      "holdout_loss": {f"{l2:g}": loss for l2, loss in scores.items()},
                                      "chosen": chosen}
        print(f"  {corpus.key:7s} f={fraction:g}: held-out loss by λ "
              + ", ".join(f"{l2:g}: {loss:.4f}" for l2, loss in scores.items()) + f" → λ = {chosen:g}", flush=True)
        runs = [trials[chosen][0] if select_fraction == fraction and seed == seeds[0]
                else sweep.train(model, fraction, seed, chosen)[0] for seed in seeds]
      else:
        runs = [sweep.train(model, fraction, seed)[0] for seed in seeds]
      entry["runs"][model.key][key] = runs
  entry["seconds"] = time.perf_counter() - started
  return entry


def mean_sd(runs: list[dict[str, float]], key: str) -> tuple[float, float]:
  values = np.array([run[key] for run in runs], np.float64)
  return float(np.mean(values)), float(np.std(values))


def best_models(entry: dict[str, Any], labels: dict[str, str]) -> list[str]:
  """Per data size, the model with the lowest mean gap: → ['1%: tied + W, λ‖W − I‖²', ...]."""
  fractions = list(next(iter(entry["runs"].values())))
  lines = []
  for fraction in fractions:
    gaps = {key: mean_sd(runs[fraction], "gap")[0] for key, runs in entry["runs"].items()}
    lines.append(f"{100 * float(fraction):g}%: {labels[min(gaps, key=gaps.get)]}")
  return lines


def markdown(results: dict[str, Any], png_name: str) -> str:
  """The sweep's tables: per corpus, gap (% of the floor) and rare-input loss per model and data size."""
  labels = {model["key"]: model["label"] for model in results["models"]}
  lines = [
      "# When does tying help?",
      "",
      f"Written by `science/when_to_tie.py` in {results['seconds'] / 60:.1f} min on {results['cpus']} CPU cores. "
      f"Models: {', '.join(labels.values())}"
      + (f"; λ from {{{', '.join(f'{v:g}' for v in results['l2_grid'])}}} chosen per data size on a held-out "
         f"sample of the train split's last {100 * HOLDOUT_SHARE:g}% (never on eval)"
         if any(model["selects_l2"] for model in results["models"]) else "")
      + f". Seeds {', '.join(map(str, results['seeds']))}: mean ± standard deviation. Gap: eval loss above the "
      "validation split's empirical bigram entropy, in % of it; every data size is scored on the same whole "
      "validation split. Rare inputs: validation pairs whose current token is among the least frequent making up "
      "the last 10% of the train occurrences used, or never current in them (`tied_embed/data/frequency.py`).",
  ]
  for corpus, entry in results["corpora"].items():
    keys = list(entry["runs"])
    lines += [
        "",
        f"## {corpus}: {entry['note']}",
        "",
        f"V = {entry['vocab_size']}, D = {entry['d_model']}, {entry['steps']} steps per run; {entry['train_pairs']:,}"
        f" train pairs in all, {entry['eval_pairs']:,} validation pairs, floor {entry['floor']:.4f} nats; "
        f"dataset `{entry['dataset']}`; {entry['seconds'] / 60:.1f} min.",
        "",
        "| train data | " + " | ".join(f"{labels[k]}: gap %" for k in keys) + " | "
        + " | ".join(f"{labels[k]}: rare-input loss" for k in keys) + " | λ chosen |",
        "|---" * (2 + 2 * len(keys)) + "|",
    ]
    for fraction in next(iter(entry["runs"].values())):
      pairs = data_lib.train_pairs_used(entry["train_pairs"], float(fraction))
      gaps = [mean_sd(entry["runs"][k][fraction], "gap_percent") for k in keys]
      rare = [mean_sd(entry["runs"][k][fraction], "loss_rare_inputs") for k in keys]
      chosen = entry["l2_selection"].get(fraction, {}).get("chosen")
      lines.append(
          f"| {100 * float(fraction):g}% ({pairs:,} pairs) | " + " | ".join(f"{m:.2f} ± {s:.2f}" for m, s in gaps)
          + " | " + " | ".join(f"{m:.4f}" for m, _ in rare) + f" | {'–' if chosen is None else f'{chosen:g}'} |")
    lines += ["", "Lowest gap per data size: " + "; ".join(best_models(entry, labels)) + "."]
  lines += ["", f"![final gap and rare-input loss against train data]({png_name})", ""]
  return "\n".join(lines)


def figure(results: dict[str, Any]):
  """Per corpus: the final gap (% of floor) and the rare-input loss against train pairs, one line per model."""
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
    for key, runs in entry["runs"].items():
      fractions = list(runs)
      pairs = [data_lib.train_pairs_used(entry["train_pairs"], float(f)) for f in fractions]
      for column, metric in enumerate(("gap_percent", "loss_rare_inputs")):
        means, sds = zip(*(mean_sd(runs[f], metric) for f in fractions), strict=True)
        axes[row][column].errorbar(pairs, means, yerr=sds, marker="o", capsize=3, label=labels[key])
    for column, ylabel in enumerate(("final gap (% of the floor)", "eval loss on rare inputs (nats)")):
      ax = axes[row][column]
      ax.set_xscale("log")
      ax.set_xlabel("train pairs used")
      ax.set_ylabel(ylabel)
      ax.set_title(f"{corpus}: {ylabel.split(' (')[0]}")
      ax.grid(alpha=0.3)
    axes[row][0].set_yscale("log")
    for axis in (axes[row][0].yaxis, axes[row][0].xaxis, axes[row][1].xaxis):  # 20, not 2×10¹
      axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
      axis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
  axes[0][0].legend(fontsize=8)
  fig.tight_layout()
  return fig


def write(results: dict[str, Any], out: pathlib.Path) -> list[pathlib.Path]:
  """<out>/when_to_tie.{json,md,png}: → their paths."""
  out.mkdir(parents=True, exist_ok=True)
  paths = [out / f"when_to_tie.{suffix}" for suffix in ("json", "md", "png")]
  paths[0].write_text(json.dumps(results, indent=1, allow_nan=True))
  paths[1].write_text(markdown(results, paths[2].name))
  figure(results).savefig(paths[2], dpi=100)
  return paths


def main(argv: list[str] | None = None) -> dict[str, Any]:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default=str(REPO / "runs" / "when_to_tie"), help="writes <out>/when_to_tie.*")
  parser.add_argument("--write-docs", action="store_true", help="also copy the results to docs/when_to_tie.*")
  parser.add_argument("--quick", action="store_true",
                      help=f"a tiny sweep for tests: {QUICK_STEPS} steps, 1 size, 1 seed, 2 λ, small corpora")
  parser.add_argument("--corpora", default="bytes,subword", help="comma-separated: bytes, subword")
  parser.add_argument("--subword-corpus", default="", help="the subword corpus (default: Vim's help files)")
  for name, steps in STEPS.items():
    parser.add_argument(f"--{name}-steps", type=int, default=steps, help=f"steps per {name} run (default {steps})")
  parser.add_argument("--keep-runs", action="store_true",
                      help="keep every run's workdir under <out>/runs/ (~12 MB a subword run) for inspection")
  parser.add_argument("--no-compile-cache", action="store_true",
                      help="leave JAX's persistent compilation cache alone (tests: it is one per process)")
  args = parser.parse_args(argv)
  started = time.perf_counter()
  out = pathlib.Path(args.out)
  available = corpora(args.quick, args.subword_corpus)
  chosen = args.corpora.split(",")
  unknown = [name for name in chosen if name not in available]
  if unknown:
    parser.error(f"--corpora={args.corpora!r}: {unknown[0]!r} is not one of {', '.join(available)}")
  models = MODELS
  if args.quick:
    fractions, seeds, grid = (0.1,), SEEDS[:1], L2_GRID[1:]
  else:
    fractions, seeds, grid = FRACTIONS, SEEDS, L2_GRID
  if not args.no_compile_cache:
    # Runs that differ only in seed or data size compile the same programs: compile them once, keep them on disk.
    jax.config.update("jax_compilation_cache_dir", str(out / "jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  logging.set_verbosity(logging.ERROR)  # one line per run from here, not the trainer's log of every run
  results: dict[str, Any] = {
      "models": [dataclasses.asdict(model) for model in models], "fractions": list(fractions),
      "seeds": list(seeds), "l2_grid": list(grid), "holdout_share": HOLDOUT_SHARE,
      "cpus": len(os.sched_getaffinity(0)),
      "corpora": {},
  }
  for name in chosen:
    steps = QUICK_STEPS if args.quick else getattr(args, f"{name}_steps")
    print(f"{name}: {available[name].note}, {steps} steps per run", flush=True)
    results["corpora"][name] = sweep_corpus(available[name], models, fractions, seeds, grid, steps, out,
                                            args.keep_runs)
    print(f"{name}: {results['corpora'][name]['seconds'] / 60:.1f} min", flush=True)
  results["seconds"] = time.perf_counter() - started
  paths = write(results, out)
  if args.write_docs:
    for path in paths:
      shutil.copyfile(path, REPO / "docs" / path.name)
  print(f"wrote {', '.join(map(str, paths))}{' and docs/when_to_tie.*' if args.write_docs else ''}; "
        f"wall time {results['seconds'] / 60:.1f} min")
  return results


if __name__ == "__main__":
  main()
