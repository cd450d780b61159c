"""Sweep the path gradient scales (a, b) on the planted, directed and text tasks; write the tables and the plot.

`.venv/bin/python science/path_scaling.py` writes runs/path_scaling/path_scaling.{json,md,png} (`--out` names
another stem); `--write-docs` writes docs/path_scaling.* instead, the tracked page the README links to.

The tied model trains with the update a·g_lookup + b·g_projection for a ∈ {0.5, 1, 2, 4} at b = 1 and
b ∈ {0.5, 2, 4} at a = 1; the untied model at a = b = 1 is the reference each tied gap is compared with. Every
run is the project's own step (`tied_embed.train.run_step.make_run_step`) and optimizer chain (`optim.make_optimizer`:
warmup and cosine schedule, clipping at 1.0), with AdamW (configs/default.py's) and with plain SGD, at a small
size, so the whole sweep takes a few minutes on 2 cores: V = 256, D = 16, batch 512, 1000 steps. The gap is
measured exactly, not on samples: the expected loss over the task's joint distribution (synthetic: the true
one; text: the validation split's pair counts) minus its floor. Each task's asymmetry budget
(`tied_embed.data.asymmetry`) goes beside its tied-minus-untied gap.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import sys
import sysconfig
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # NumPy's eigendecompositions; JAX keeps its own threads
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from configs import default  # noqa: E402
from science import report  # noqa: E402
from tied_embed.core import optim  # noqa: E402
from tied_embed.core.model import TiedEmbed, UntiedEmbed  # noqa: E402
from tied_embed.data import asymmetry  # noqa: E402
from tied_embed.data.sources.synthetic import Directed, Planted  # noqa: E402
from tied_embed.data.text.corpus import VALIDATION_FRACTION  # noqa: E402
from tied_embed.data.text.count_bigram import PairCounts, empirical_rows  # noqa: E402
from tied_embed.train import nonfinite, run_step

VOCAB_SIZE, D_MODEL, BATCH_SIZE = 256, 16, 512
SYNTHETIC_PAIRS = 300_000
TEXT_FILE = pathlib.Path(sysconfig.get_paths()["stdlib"]) / "pydoc_data" / "topics.py"  # ~750 KB, mostly English
SCALES = [(0.5, 1.0), (1.0, 1.0), (2.0, 1.0), (4.0, 1.0), (1.0, 0.5), (1.0, 2.0), (1.0, 4.0)]
# Adam divides each coordinate by its own running scale, so there only a / b matters; plain SGD (its learning rate
# picked from 0.5, 2 and 8 on planted and text at a = b = 1) shows what the scales do as per-path learning rates.
LEARNING_RATES = {"adamw": 0.05, "sgd": 8.0}


class Task:
  """A task's train pairs and its evaluation joint distribution W (V, V) (sums to 1), floor and rare tokens.

  rare / frequent: (V,) bool, the less / more frequent half of the tokens that occur as current in train.
  """

  def __init__(self, name: str, train: tuple[np.ndarray, np.ndarray], joint: np.ndarray, log_probs, note: str):
    self.name, self.note = name, note
    self.train_ids, self.train_next = train
    self.joint = joint
    self.true_log_probs, self.vocab_size = log_probs, VOCAB_SIZE  # what asymmetry.summary reads
    with np.errstate(divide="ignore", invalid="ignore"):
      conditional = np.where(joint > 0, joint / joint.sum(axis=1, keepdims=True), 0.0)
      self.floor = float(-np.sum(np.where(joint > 0, joint * np.log(conditional), 0.0)))
    counts = np.bincount(self.train_ids, minlength=VOCAB_SIZE)
    present = np.flatnonzero(counts)
    by_count = present[np.argsort(counts[present], kind="stable")]
    self.rare = np.isin(np.arange(VOCAB_SIZE), by_count[: len(by_count) // 2])
    self.frequent = np.isin(np.arange(VOCAB_SIZE), by_count[len(by_count) // 2:])
    self.input_counts = counts


def synthetic_task(source) -> Task:
  settings = dict(vocab_size=VOCAB_SIZE, d_model=D_MODEL, task_seed=0, num_train_pairs=SYNTHETIC_PAIRS,
                  num_eval_pairs=1, logit_scale=8.0, zipf_exponent=1.0)
  current_probs, _ = source.task(settings)
  log_probs = source.reference(settings, None, None).log_probs
  joint = current_probs[:, None] * np.exp(np.asarray(log_probs))
  note = f"true distribution, Zipf(1) current tokens, logit scale 8, hidden width {D_MODEL}, {SYNTHETIC_PAIRS:,} pairs"
  return Task(source.name, source.splits(settings)["train"], joint, log_probs, note)


def text_pairs(data: bytes, validation_fraction: float = VALIDATION_FRACTION) -> dict[str, tuple[np.ndarray, ...]]:
  """Byte bigrams, the last `validation_fraction` validation: bytes (n,) → {split: (ids, next_ids)} int32."""
  values = np.frombuffer(data, dtype=np.uint8).astype(np.int32)
  split_at = len(values) - int(len(values) * validation_fraction)
  train, validation = values[:split_at], values[split_at:]
  return {"train": (train[:-1], train[1:]), "validation": (validation[:-1], validation[1:])}


def text_task(path: pathlib.Path) -> Task:
  data = path.read_bytes()
  splits = text_pairs(data)
  ids, next_ids = splits["validation"]
  joint = np.zeros((VOCAB_SIZE, VOCAB_SIZE))
  np.add.at(joint, (ids, next_ids), 1.0)
  note = (f"bytes of {path.name} (Python's pydoc_data, {len(data):,} bytes, sha256 "
          f"{hashlib.sha256(data).hexdigest()[:12]}); last 10% is validation, its pair counts the distribution")
  log_probs = np.asarray(empirical_rows(PairCounts.of(ids, next_ids, VOCAB_SIZE)))  # -inf unseen, nan never current
  return Task("text", splits["train"], joint / joint.sum(), log_probs, note)


def make_config(steps: int, optimizer: str):
  config = default.get_config()
  config.model.update(vocab_size=VOCAB_SIZE, d_model=D_MODEL)
  config.data.task_d_model = D_MODEL
  config.train.update(num_steps=steps, batch_size=BATCH_SIZE, warmup_steps=steps // 20, optimizer=optimizer,
                      learning_rate=LEARNING_RATES[optimizer])
  return config


def model_log_probs(state: nnx.State, graphdef: nnx.GraphDef) -> jax.Array:
  lookup, projection = nnx.merge(graphdef, state).model.tables()
  return jax.nn.log_softmax(lookup @ projection.T, axis=-1)


def run(task: Task, config, tied: bool, scales: tuple[float, float], seed: int, eval_every: int, steps_cache: dict):
  """One training run → {'curve': [(step, gap)], 'final_gap', 'row_kl' (V,), 'row_norms' (V,)}."""
  cls = TiedEmbed if tied else UntiedEmbed
  model = cls(VOCAB_SIZE, D_MODEL, rngs=nnx.Rngs(seed))
  graphdef, state = nnx.split(run_step.RunState(model, optim.make_optimizer(config.train)))
  key = (config.train.optimizer, tied, scales)
  if key not in steps_cache:  # one compiled step per (optimizer, tied, scales), shared by every task and seed
    steps_cache[key] = (run_step.make_run_step(graphdef, 0, lookup_grad_scale=scales[0],
                                                 projection_grad_scale=scales[1]),
                        jax.jit(lambda s, g=graphdef: model_log_probs(s, g)))
  step, log_probs_of = steps_cache[key]
  joint = jnp.asarray(task.joint, jnp.float32)
  rng = np.random.default_rng([seed, 7])
  curve = []
  for done in range(1, config.train.num_steps + 1):
    rows = rng.integers(0, len(task.train_ids), size=BATCH_SIZE)
    state, _ = step(state, jnp.asarray(task.train_ids[rows]), jnp.asarray(task.train_next[rows]))
    if done % eval_every == 0 or done == config.train.num_steps:
      curve.append((done, float(-jnp.sum(joint * log_probs_of(state))) - task.floor))
  nonfinite.check_finite(state, None)
  log_q = np.asarray(log_probs_of(state), np.float64)
  marginal = task.joint.sum(axis=1)
  with np.errstate(divide="ignore", invalid="ignore"):
    conditional = np.where(task.joint > 0, task.joint / marginal[:, None], 0.0)
    row_kl = np.sum(np.where(conditional > 0, conditional * (np.log(conditional) - log_q), 0.0), axis=1)
  table = np.asarray(nnx.merge(graphdef, state).model.tables()[0])
  return {"curve": curve, "final_gap": curve[-1][1], "row_kl": row_kl, "row_norms": np.linalg.norm(table, axis=1),
          "lookup_total": np.asarray(state["lookup_total"][...]),
          "projection_total": np.asarray(state["projection_total"][...])}


def settle_step(curve: list[tuple[int, float]], tolerance: float = 0.05) -> int:
  """The first evaluated step from which the gap stays within `tolerance` (relative) of the final gap."""
  final = curve[-1][1]
  settled = curve[-1][0]
  for step, gap in reversed(curve):
    if abs(gap - final) > tolerance * abs(final):
      break
    settled = step
  return settled


def summarise(task: Task, result: dict) -> dict:
  """Scalars of one run: final gap, the gap a quarter of the way in, settle step, the lookup path's share of the
  accumulated (unweighted) gradient, and the rare rows' share of the gap, their mean KL, norms and lookup share."""
  weighted = task.joint.sum(axis=1) * result["row_kl"]
  evaluated = task.joint.sum(axis=1) > 0
  norms = result["row_norms"]
  lookup, projection = result["lookup_total"], result["projection_total"]
  curve = result["curve"]
  return {
      "final_gap": result["final_gap"],
      "early_gap": next(gap for step, gap in curve if step >= curve[-1][0] // 4),
      "settle_step": settle_step(curve),
      "lookup_share": float(lookup.sum() / (lookup + projection).sum()),
      "rare_lookup_share": float(lookup[task.rare].sum() / (lookup + projection)[task.rare].sum()),
      "rare_gap_share": float(weighted[task.rare].sum() / weighted.sum()),
      "rare_kl": float(result["row_kl"][task.rare & evaluated].mean()),
      "frequent_kl": float(result["row_kl"][task.frequent & evaluated].mean()),
      "rare_norm_ratio": float(norms[task.rare].mean() / norms[task.frequent].mean()),
  }


DEFAULT_OUT = pathlib.Path("runs/path_scaling/path_scaling")
DOCS_OUT = pathlib.Path(__file__).resolve().parents[1] / "docs" / "path_scaling"  # the tracked page


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  """The flags, with `out` the stem of the files to write: runs/ unless --out or --write-docs says otherwise."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=1000)
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--eval_every", type=int, default=20)
  parser.add_argument("--out", type=pathlib.Path,
                      help=f"writes <out>.json, <out>.md and <out>.png (default {DEFAULT_OUT})")
  parser.add_argument("--write-docs", action="store_true", help="write the tracked docs/path_scaling.*, not with --out")
  parser.add_argument("--report_only", action="store_true", help="rewrite <out>.md and .png from <out>.json")
  args = parser.parse_args(argv)
  if args.write_docs and args.out is not None:
    parser.error("--write-docs writes docs/path_scaling.*; it takes no --out")
  args.out = DOCS_OUT if args.write_docs else (args.out or DEFAULT_OUT)
  return args


def main() -> None:
  args = parse_args()
  out = args.out
  if args.report_only:
    report.write(json.loads(out.with_suffix(".json").read_text()), out)
    return
  out.parent.mkdir(parents=True, exist_ok=True)
  started = time.perf_counter()
  tasks = [synthetic_task(Planted()), synthetic_task(Directed()), text_task(TEXT_FILE)]
  results = {"sizes": dict(vocab_size=VOCAB_SIZE, d_model=D_MODEL, batch_size=BATCH_SIZE, steps=args.steps,
                           seeds=args.seeds, learning_rates=LEARNING_RATES,
                           schedule="5% linear warmup, cosine decay to 0, gradient clipping at global norm 1.0"),
             "tasks": {}}
  cache: dict = {}
  for task in tasks:
    entry = {"note": task.note, "floor": task.floor, "asymmetry": asymmetry.summary(task, d_model=D_MODEL),
             "runs": {}}
    for optimizer in LEARNING_RATES:
      config, runs = make_config(args.steps, optimizer), entry["runs"].setdefault(optimizer, {})
      for tied, scales in [(True, s) for s in SCALES] + [(False, (1.0, 1.0))]:
        name = f"{'tied' if tied else 'untied'} a={scales[0]:g} b={scales[1]:g}"
        runs[name] = [summarise(task, run(task, config, tied, scales, seed, args.eval_every, cache))
                      for seed in range(args.seeds)]
        gaps = [r["final_gap"] for r in runs[name]]
        print(f"{task.name:8s} {optimizer:5s} {name:22s} gap {np.mean(gaps):.4f} ± {np.std(gaps, ddof=1):.4f}   "
              f"[{time.perf_counter() - started:.0f} s]", flush=True)
    results["tasks"][task.name] = entry
  results["seconds"] = time.perf_counter() - started
  out.with_suffix(".json").write_text(json.dumps(results, indent=1))  # per-run summaries, no curves
  report.write(results, out)
  print(f"wrote {out}.json, .md, .png in {results['seconds']:.0f} s")


if __name__ == "__main__":
  main()
