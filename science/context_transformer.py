"""configs/context_transformer.py against the count n-gram: its learning curves at three widths, the untied model at
the tied one's parameter count, and what each lever bought, from the runs' own event files.

  .venv/bin/python science/context_transformer.py --runs runs/context_transformer --train    # trains what is missing
  .venv/bin/python science/context_transformer.py --runs runs/context_transformer --write-docs
  python3 science/context_transformer.py --runs runs/ct --train --seeded-only --here   # the seeds, on an accelerator

`--train` runs train.py for each run below whose workdir under --runs has not reached its last step (a stopped run
resumes from its checkpoint), one after another; `--here` trains them in this process instead, at float32 matmul
precision 'highest' (how the seeded runs were trained on one TPU v5e chip: 50–120 s a run). Without --train the
script reads every run's eval/loss and select/loss from its TensorBoard events, picks each run's best step by
select/loss (the trainer's own rule), fits Kneser-Ney n-grams of orders 2–8 on the same train pairs
(science/kneser_ney.py's `held_out_fit`: order and discount chosen on the train pairs' last share) and scores the
same validation pairs, each from the up to n − 1 tokens before it in its document. It writes <out>.json and <out>.png
(--out; docs/context_transformer.* with --write-docs) and prints the tables docs/results.md quotes. A run's wall and
CPU seconds come from `/usr/bin/time -v` in <workdir>.log, if any.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from science import common  # noqa: E402

CONFIG = "configs/context_transformer.py"
DOCS_STEM = REPO / "docs" / "context_transformer"
# The levers, each measured alone from the config at a quarter of its schedule (1,000 steps, an eval every 250), so
# that all of them fit one afternoon on 2 cores: what each buys early in training, not at the end of a long one.
SHORT = {"train.num_steps": 1000, "train.eval_every": 250, "train.checkpoint_every": 250}
LEVERS = {
    "base": {},
    "dropout0.1": {"model.dropout": 0.1},
    "lr0.001": {"train.learning_rate": 0.001},
    "lr0.01": {"train.learning_rate": 0.01},
    "wd0.1": {"train.weight_decay": 0.1},
    "layers2": {"model.layers": 2},
    "window32": {"data.context_length": 32, "train.batch_size": 64, "train.eval_stride": 16},  # 2,048 tokens a step
}
KN_ORDERS = (2, 3, 4, 5, 6, 7, 8)
RESULTS_PAGE = REPO / "docs" / "results.md"
BLOCK = ("<!-- CONTEXT_TRANSFORMER:START (written by science/context_transformer.py --write-docs) -->",
         "<!-- CONTEXT_TRANSFORMER:END -->")


@dataclasses.dataclass(frozen=True)
class Run:
  key: str  # the name in the JSON and the tables
  workdir: str  # under --runs
  flags: dict[str, Any]  # config overrides beyond configs/context_transformer.py


RUNS = (
    Run("tied", "tied", {}),
    Run("untied", "untied", {"model.tied": False}),
    Run("untied_d88", "untied_d88", {"model.tied": False, "model.d_model": 88}),  # tied D = 128's parameter count
    Run("tied_d64", "tied_d64", {"model.d_model": 64}),
    # the fixed-budget pair again at learning rate 0.01 (the lever that bought most at 1,000 steps): whether the
    # untied model's deficit is a learning rate the config chose for the tied one
    Run("tied_lr0.01", "lr/tied_lr0.01", {"train.learning_rate": 0.01}),
    Run("untied_d88_lr0.01", "lr/untied_d88_lr0.01",
        {"model.tied": False, "model.d_model": 88, "train.learning_rate": 0.01}),
    *(Run(f"lever_{name}", f"levers/{name}", {**SHORT, **flags}) for name, flags in LEVERS.items()),
)

# Five seeds of each model (initialisation and batch order; the data is all of it, so no draw), for tied against untied
# at the same width and at the same parameter count, at two widths: the untied model shrunk to the tied one's count
# (D = 88 beside tied D = 128, D = 40 beside tied D = 64: within 1.5%) and the tied model grown to untied D = 128's
# (D = 176, 1.8% more). Listed in the order they train: the comparisons at a fixed budget first.
SEEDS = (0, 1, 2, 3, 4)
SEEDED = {
    "tied": {},
    "untied_d88": {"model.tied": False, "model.d_model": 88},
    "untied": {"model.tied": False},
    "tied_d64": {"model.d_model": 64},
    "untied_d40": {"model.tied": False, "model.d_model": 40},
    "untied_d64": {"model.tied": False, "model.d_model": 64},
    "tied_d176": {"model.d_model": 176},
}
SEEDED_ORDER = (("tied", "untied_d88"), ("untied",), ("tied_d64", "untied_d40"), ("untied_d64", "tied_d176"))
# (a, b, what the comparison asks): b − a over the seeds, paired by seed (the same batches)
COMPARISONS = (
    ("tied", "untied_d88", "same parameters (1.8 M)"),
    ("tied_d64", "untied_d40", "same parameters (0.73 M)"),
    ("tied_d176", "untied", "same parameters (2.9 M)"),
    ("tied", "untied", "same width (D = 128)"),
    ("tied_d64", "untied_d64", "same width (D = 64)"),
)
SEEDED_RUNS = tuple(Run(f"{name}/seed{seed}", f"seeds/{name}/seed{seed}", {**SEEDED[name], "seed": seed})
                    for group in SEEDED_ORDER for seed in SEEDS for name in group)


def run_config(run: Run):
  """configs/context_transformer.py with the run's overrides."""
  from configs import context_transformer  # noqa: PLC0415

  config = context_transformer.get_config()
  config.update_from_flattened_dict(run.flags)
  return config


def parameters(run: Run) -> int:
  """The run's model's parameter count, from its config (shapes only, nothing computed)."""
  import jax  # noqa: PLC0415
  from flax import nnx  # noqa: PLC0415

  from tied_embed.core.model import build_model  # noqa: PLC0415

  model = nnx.eval_shape(lambda: build_model(run_config(run)))
  return int(sum(leaf.size for leaf in jax.tree.leaves(nnx.state(model, nnx.Param))))


def curve(workdir: pathlib.Path) -> list[tuple[int, float, float]]:
  """[(step, eval/loss, select/loss)] at every eval the run's events hold, by step."""
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: PLC0415
  from tensorboard.util import tensor_util  # noqa: PLC0415

  if not workdir.is_dir():
    return []
  events = EventAccumulator(str(workdir), size_guidance={"tensors": 0}).Reload()
  tags = events.Tags()["tensors"]
  if "eval/loss" not in tags or "select/loss" not in tags:
    return []
  def by_step(tag):
    return {e.step: float(tensor_util.make_ndarray(e.tensor_proto)) for e in events.Tensors(tag)}
  evals, selects = by_step("eval/loss"), by_step("select/loss")
  return [(step, evals[step], selects[step]) for step in sorted(evals) if step in selects]


def finished(points: list[tuple[int, float, float]], steps: int) -> bool:
  """Whether a run's events reach its last step (a run still training, or stopped, is left out of the tables)."""
  return bool(points) and points[-1][0] >= steps


def best(points: list[tuple[int, float, float]]) -> tuple[int, float, float]:
  """The (step, eval, select) with the lowest select/loss, the earliest on a tie: the trainer's best checkpoint."""
  return min(points, key=lambda point: (point[2], point[0]))


def timing(log: pathlib.Path) -> dict[str, float]:
  """{'wall_s', 'user_s'} from `/usr/bin/time -v`'s lines in a run's log; {} without them."""
  if not log.is_file():
    return {}
  text = log.read_text(errors="replace")
  wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", text)
  user = re.search(r"User time \(seconds\): ([\d.]+)", text)
  if not wall or not user:
    return {}
  hours, minutes, seconds = int(wall.group(1) or 0), int(wall.group(2)), float(wall.group(3))
  return {"wall_s": round(hours * 3600 + minutes * 60 + seconds, 1), "user_s": float(user.group(1))}


def kneser_ney(data_dir: str, workdir: pathlib.Path) -> dict[str, float]:
  """The best Kneser-Ney n-gram of orders 2–8 (uncapped context within a document) and the bigram, on the runs'
  dataset: {'order', 'discount', 'eval_loss', 'bigram_eval_loss'}."""
  from absl import logging as absl_logging  # noqa: PLC0415

  from science import kneser_ney as kn  # noqa: PLC0415
  from tied_embed.data import bigram as data_lib  # noqa: PLC0415

  absl_logging.set_verbosity(absl_logging.ERROR)  # TFDS names the dataset's every file at WARNING
  config = run_config(RUNS[0])
  config.data.data_dir = data_dir
  data = data_lib.load_bigram_data(config, workdir)
  uncapped = 10**9
  def fit(orders):
    counts, discount = kn.held_out_fit(data.train_ids, data.train_next, data.train_document_ends, orders, uncapped,
                                       data.vocab_size)
    loss = counts.loss(data.eval_ids, data.eval_next, data.eval_document_ends, uncapped, discount)
    return counts.order, discount, float(loss)
  order, discount, loss = fit(KN_ORDERS)
  return {"order": order, "discount": discount, "eval_loss": loss, "bigram_eval_loss": fit((2,))[2]}


def train(runs: pathlib.Path, overrides: dict[str, str], *, seeded_only: bool = False, here: bool = False) -> None:
  """Each run not yet at its last step, one after another (the seeded runs alone with `seeded_only`), `overrides`
  (config field → value, e.g. data.data_dir) on top of its own flags: train.py under `/usr/bin/time -v` when present,
  or with `here` in this process (`train_here`)."""
  for run in SEEDED_RUNS if seeded_only else (*RUNS, *SEEDED_RUNS):
    workdir = runs / run.workdir
    if finished(curve(workdir), int(run_config(run).train.num_steps)):
      continue
    workdir.parent.mkdir(parents=True, exist_ok=True)
    if here:
      train_here(run, runs, overrides)
      continue
    timer = ["/usr/bin/time", "-v"] if os.path.exists("/usr/bin/time") else []
    flags = [f"--config.{field}={value}" for field, value in {**run.flags, **overrides}.items()]
    command = [*timer, sys.executable, str(REPO / "train.py"), "--config", str(REPO / CONFIG), "--workdir",
               str(workdir), *flags]
    print(f"{run.key}: {' '.join(command[len(timer):])}", flush=True)
    with open(f"{workdir}.log", "a") as log:
      subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=REPO)


def train_here(run: Run, runs: pathlib.Path, overrides: dict[str, str]) -> None:
  """Trains `run` in this process at float32 matmul precision 'highest' (an accelerator's default rounds float32
  products through bfloat16), so that a device opened once and one compilation cache serve every run; adds its
  seconds to <runs>/seeds/times.json and writes the device to its workdir's machine.txt."""
  workdir = runs / run.workdir
  import time  # noqa: PLC0415

  import jax  # noqa: PLC0415

  from tied_embed.train import trainer  # noqa: PLC0415

  jax.config.update("jax_default_matmul_precision", "highest")
  config = run_config(run)
  config.update_from_flattened_dict(overrides)
  device = jax.devices()[0]
  where = machine() if device.platform == "cpu" else f"one {device.device_kind} ({device.platform})"
  (workdir / "machine.txt").parent.mkdir(parents=True, exist_ok=True)
  (workdir / "machine.txt").write_text(f"{where}, jax {jax.__version__}, float32 at matmul precision 'highest'\n"
                                       if device.platform != "cpu" else f"{where}\n")
  began = time.time()
  trainer.train_and_evaluate(config, workdir)
  times_path = runs / "seeds" / "times.json"
  times = json.loads(times_path.read_text()) if times_path.is_file() else {}
  times[run.key] = round(times.get(run.key, 0.0) + time.time() - began, 1)
  times_path.write_text(json.dumps(times, indent=1) + "\n")
  print(f"{run.key}: {times[run.key]:.0f} s, eval at the best step {best(curve(workdir))[1]:.4f}", flush=True)


def collect(runs: pathlib.Path, data_dir: str) -> dict[str, Any]:
  """The JSON: the machine, the Kneser-Ney reference and, for every run with events, its curve and best step."""
  out: dict[str, Any] = {"config": CONFIG, "date": datetime.date.today().isoformat(), "machine": machine(), "runs": {}}
  for run in RUNS:
    points = curve(runs / run.workdir)
    if not finished(points, int(run_config(run).train.num_steps)):
      continue
    step, eval_loss, select_loss = best(points)
    out["runs"][run.key] = {
        "flags": run.flags, "parameters": parameters(run), "steps": int(run_config(run).train.num_steps),
        "curve": [list(point) for point in points], "best_step": step, "eval_at_best": eval_loss,
        "select_at_best": select_loss, **timing(pathlib.Path(f"{runs / run.workdir}.log"))}
  first = next(run for run in RUNS if run.key in out["runs"])
  out["kneser_ney"] = kneser_ney(data_dir, runs / first.workdir)
  out["seeded"] = seeded(runs, out["kneser_ney"]["eval_loss"])
  return out


def seeded(runs: pathlib.Path, ngram: float) -> dict[str, Any]:
  """The seeded runs that reached their last step: per model its parameters and, per seed, the best step by
  select/loss, the eval loss there, the machine and the seconds it trained (from seeds/times.json, where the runs'
  driver wrote it); then each of COMPARISONS as untied − tied paired by seed with its 95% t-interval and which wins
  (the interval above 0: tied; below: untied; across 0: unresolved). A run's machine is its workdir's machine.txt,
  else seeds/machine.txt, else this one's."""
  from science.when_to_tie import stats  # noqa: PLC0415

  folder = runs / "seeds"
  times = json.loads((folder / "times.json").read_text()) if (folder / "times.json").is_file() else {}
  default = (folder / "machine.txt").read_text().strip() if (folder / "machine.txt").is_file() else machine()
  models: dict[str, Any] = {}
  for run in SEEDED_RUNS:
    points = curve(runs / run.workdir)
    if not finished(points, int(run_config(run).train.num_steps)):
      continue
    name, seed = run.key.split("/")[0], int(run.flags["seed"])
    step, eval_loss, select_loss = best(points)
    own = runs / run.workdir / "machine.txt"
    model = models.setdefault(name, {"flags": SEEDED[name], "parameters": parameters(run), "seeds": {}})
    model["seeds"][str(seed)] = {
        "best_step": step, "eval_at_best": eval_loss, "select_at_best": select_loss,
        "machine": own.read_text().strip() if own.is_file() else default, "seconds": times.get(run.key)}
  comparisons = []
  for tied, untied, what in COMPARISONS:
    if tied not in models or untied not in models:
      continue
    a, b = ([{**run, "seed": int(seed)} for seed, run in models[name]["seeds"].items()] for name in (tied, untied))
    both = sorted({run["seed"] for run in a} & {run["seed"] for run in b})
    spread = stats.paired(a, b, "eval_at_best")
    winner = "tied" if spread.n >= 2 and spread.low > 0 else "untied" if spread.n >= 2 and spread.high < 0 else \
        "unresolved"
    comparisons.append({"tied": tied, "untied": untied, "what": what, "seeds": both,
                        "mean": spread.mean, "low": spread.low, "high": spread.high, "winner": winner})
  for model in models.values():
    model["mean_eval"], model["sd_eval"] = stats.mean_sd(list(model["seeds"].values()), "eval_at_best")
    model["minus_ngram"] = model["mean_eval"] - ngram
  return {"default_machine": default, "models": models, "comparisons": comparisons}


def machine() -> str:
  """This machine in words: the CPU, its cores and vector extensions, and JAX's version."""
  import jax  # noqa: PLC0415

  model, flags = common.cpu()
  extensions = " ".join(flag for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if flag in flags)
  return f"{model}, {os.cpu_count()} cores ({extensions}), jax {jax.__version__}"


def tables(results: dict[str, Any]) -> str:
  """The markdown tables docs/results.md quotes: the full-length runs against Kneser-Ney, and the levers."""
  runs, ngram = results["runs"], results["kneser_ney"]
  lines = [*textwrap.wrap(
      f"Measured on {results['machine']}, {results['date']}, from {results['config']}; Kneser-Ney "
      f"{ngram['order']}-gram (the best of orders 2–8, discount {ngram['discount']}): {ngram['eval_loss']:.4f}, "
      f"bigram {ngram['bigram_eval_loss']:.4f}.", 120), ""]
  ngram = ngram["eval_loss"]
  lines += ["| run | parameters | best step (of) | eval loss there | − the best Kneser-Ney n-gram | minutes (of CPU) |",
            "|---|---|---|---|---|---|"]
  for key in ("tied", "untied", "untied_d88", "tied_d64", "tied_lr0.01", "untied_d88_lr0.01"):
    if key in runs:
      run = runs[key]
      minutes = f"{run['wall_s'] / 60:.1f} ({run['user_s'] / 60:.1f})" if "wall_s" in run else "—"
      lines.append(f"| {key} | {run['parameters']:,} | {run['best_step']} ({run['steps']}) | {run['eval_at_best']:.4f} "
                   f"| {run['eval_at_best'] - ngram:+.4f} | {minutes} |")
  lines += ["", "| lever (1,000 steps) | eval loss at the best step | − base |", "|---|---|---|"]
  base = runs.get("lever_base")
  for name in LEVERS:
    run = runs.get(f"lever_{name}")
    if run and base:
      lines.append(f"| {name} | {run['eval_at_best']:.4f} (step {run['best_step']}) | "
                   f"{run['eval_at_best'] - base['eval_at_best']:+.4f} |")
  seeds = seeded_tables(results)
  return "\n".join([*lines, "", *readings(results), *(["", *seeds] if seeds else [])])


def seeded_tables(results: dict[str, Any]) -> list[str]:
  """The seeded runs: each model's mean and spread over its seeds, then untied − tied paired by seed, at the same
  parameter count and at the same width, with one sentence per size on which wins at a fixed budget."""
  block = results.get("seeded", {})
  models, comparisons = block.get("models", {}), block.get("comparisons", [])
  if not models:
    return []
  where = {(name, seed): run["machine"] for name, model in models.items() for seed, run in model["seeds"].items()}
  most = max(sorted(set(where.values())), key=list(where.values()).count)
  others = [f"{name} seed {seed} on {machine}" for (name, seed), machine in where.items() if machine != most]
  lines = [*textwrap.wrap(
      f"Seeds (initialisation and batch order; the data is all of it): the same config, each model at every seed "
      f"listed, on {most}{''.join(f'; {other}' for other in others)}. The runs above are seed 0 on this page's first "
      f"machine; seconds per run are the device's, the first run of each shape compiling.", 120), "",
      "| model | parameters | seeds | eval loss at the best step, mean ± sd | − Kneser-Ney | seconds per run |",
      "|---|---|---|---|---|---|"]
  for name in SEEDED:
    model = models.get(name)
    if model:
      seconds = [run["seconds"] for run in model["seeds"].values() if run["seconds"]]
      mean_seconds = f"{sum(seconds) / len(seconds):.0f}" if seconds else "—"
      lines.append(f"| {name} | {model['parameters']:,} | {', '.join(sorted(model['seeds'], key=int))} | "
                   f"{model['mean_eval']:.4f} ± {model['sd_eval']:.4f} | {model['minus_ngram']:+.4f} | "
                   f"{mean_seconds} |")
  lines += ["", "| untied − tied, paired by seed | at | seeds | mean | 95% t-interval | which wins |",
            "|---|---|---|---|---|---|"]
  for row in comparisons:
    lines.append(f"| {row['untied']} − {row['tied']} | {row['what']} | {len(row['seeds'])} | {row['mean']:+.4f} | "
                 f"{row['low']:+.4f} to {row['high']:+.4f} | {row['winner']} |")
  lines.append("")
  for row in comparisons:
    if row["what"].startswith("same parameters"):
      tied, untied = models[row["tied"]], models[row["untied"]]
      verdict = {"tied": f"tied wins by {row['mean']:.3f} nats (the interval excludes 0)",
                 "untied": f"untied wins by {-row['mean']:.3f} nats (the interval excludes 0)",
                 "unresolved": "unresolved (the interval includes 0)"}[row["winner"]]
      lines.append(f"- At {tied['parameters'] / 1e6:.2f} M parameters ({row['tied']} against {row['untied']}, "
                   f"{untied['parameters'] / 1e6:.2f} M; {len(row['seeds'])} seeds): {verdict}.")
  return lines


def readings(results: dict[str, Any]) -> list[str]:
  """The comparisons the tables hold, one bullet each, every number from the JSON: each full-length run against
  the n-gram, tied against untied at the same width and at the same parameter count, and what the steps bought."""
  runs, ngram = results["runs"], results["kneser_ney"]["eval_loss"]
  out = []
  beaten = [f"{key} {ngram - runs[key]['eval_at_best']:.3f}" for key in ("tied", "untied") if key in runs]
  if beaten:
    out.append(f"- Below the best Kneser-Ney n-gram by (nats): {', '.join(beaten)}.")
  if "tied" in runs and "untied" in runs:
    tied, untied = runs["tied"], runs["untied"]
    out.append(f"- At the same width (D = 128), untied − tied: {untied['eval_at_best'] - tied['eval_at_best']:+.3f}, "
               f"untied with {untied['parameters'] / tied['parameters']:.2f}x the parameters.")
  if "tied" in runs and "untied_d88" in runs:
    tied, small = runs["tied"], runs["untied_d88"]
    out.append(f"- At the same parameter count ({small['parameters'] / 1e6:.2f} M untied at D = 88, "
               f"{tied['parameters'] / 1e6:.2f} M tied at D = 128), untied − tied: "
               f"{small['eval_at_best'] - tied['eval_at_best']:+.3f}.")
  if "tied" in runs and "untied_d88_lr0.01" in runs:
    tied, small = runs["tied"], runs["untied_d88_lr0.01"]
    out.append(f"- The untied model at D = 88 at learning rate 0.01 instead of the config's 0.003: "
               f"{small['eval_at_best']:.3f}, {small['eval_at_best'] - tied['eval_at_best']:+.3f} against tied at "
               f"0.003.")
  if "tied_lr0.01" in runs and "untied_d88_lr0.01" in runs:
    tied, small = runs["tied_lr0.01"], runs["untied_d88_lr0.01"]
    out.append(f"- Both at learning rate 0.01: tied {tied['eval_at_best']:.3f}, untied at D = 88 "
               f"{small['eval_at_best']:.3f}, untied − tied: {small['eval_at_best'] - tied['eval_at_best']:+.3f}.")
  if "tied" in runs and "lever_base" in runs:
    short = runs["lever_base"]
    out.append(f"- Steps: the same model at {short['steps']:,} steps ends at {short['eval_at_best']:.3f}, at "
               f"{runs['tied']['steps']:,} at {runs['tied']['eval_at_best']:.3f}: the longer schedule bought "
               f"{short['eval_at_best'] - runs['tied']['eval_at_best']:.3f}.")
  return out


def figure(results: dict[str, Any], path: pathlib.Path) -> None:
  """Eval loss against steps for the full-length runs, the best Kneser-Ney n-gram as a dashed line."""
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  fig, ax = plt.subplots(figsize=(7, 4.2))
  for key in ("tied_d64", "untied_d88", "tied", "untied"):
    run = results["runs"].get(key)
    if run:
      steps, evals = [point[0] for point in run["curve"]], [point[1] for point in run["curve"]]
      ax.plot(steps, evals, marker="o", label=f"{key} ({run['parameters'] / 1e6:.2f} M parameters)")
  ngram = results["kneser_ney"]
  ax.axhline(ngram["eval_loss"], color="gray", linestyle="--", label=f"Kneser-Ney {ngram['order']}-gram")
  ax.set(xlabel="step (2,048 tokens each)", ylabel="validation loss (nats)", ylim=(3.7, 5.2),
         title="configs/context_transformer.py on Vim's help files")
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--runs", required=True, help="the folder holding every run's workdir")
  parser.add_argument("--data-dir", default="", help="data.data_dir for every run (one dataset shared)")
  parser.add_argument("--train", action="store_true", help="train the runs not yet at their last step")
  parser.add_argument("--seeded-only", action="store_true", help="with --train: the seeded runs alone")
  parser.add_argument("--here", action="store_true",
                      help="with --train: in this process at matmul precision 'highest' (an accelerator's way)")
  parser.add_argument("--text-path", default="", help="data.text_path for every run (the corpus elsewhere)")
  parser.add_argument("--out", default="runs/context_transformer/results", help="stem of the .json and .png")
  parser.add_argument("--write-docs", action="store_true", help=f"write {DOCS_STEM.relative_to(REPO)}.json/.png")
  args = parser.parse_args(argv)
  runs = pathlib.Path(args.runs).resolve()
  if args.train:
    overrides = {field: value for field, value in (("data.data_dir", args.data_dir), ("data.text_path", args.text_path))
                 if value}
    train(runs, overrides, seeded_only=args.seeded_only, here=args.here)
    return
  results = collect(runs, args.data_dir)
  stem = DOCS_STEM if args.write_docs else pathlib.Path(args.out)
  stem.parent.mkdir(parents=True, exist_ok=True)
  pathlib.Path(f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
  figure(results, pathlib.Path(f"{stem}.png"))
  print(tables(results))
  if args.write_docs:
    common.rewrite_block(RESULTS_PAGE, *BLOCK, "\n" + tables(results) + "\n")


if __name__ == "__main__":
  main()
