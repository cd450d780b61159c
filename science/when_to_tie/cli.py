"""The command line: `python -m science.when_to_tie [flags]` (the package's docstring says what the sweep does)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import science.when_to_tie
from science import common
from science.when_to_tie import checks, report
from science.when_to_tie.plan import (
  BLOCK_SECONDS,
  CONTEXT_MAX_STEPS,
  CONVERGENCE_FACTOR,
  EDGE_EXTENSIONS,
  EDGE_RATIO,
  FAMILIES,
  FRACTIONS,
  GRIDS,
  PATIENCE,
  PLANS,
  QUICK_GRIDS,
  QUICK_PLAN,
  RECHECK_EVALS,
  REPO,
  SEEDS,
  TUNE_SEED,
  UNFIT_BLOCKS,
  Plan,
  UsageError,
  block_plan,
  block_seconds,
  context_length,
  corpora,
  corpus_grids,
  split_of,
  unavailable,
)
from science.when_to_tie.sweep import (
  FINISHED,
  Sweep,
  check_sitting,
  convergence_check,
  read_finished,
  repeat_references,
  sweep_corpus,
)
from tied_embed import util


def machine() -> str:
  """'Intel(R) Xeon(R) Processor, 2 cores (AVX-512 + AMX)' from /proc/cpuinfo, and the load average at the start."""
  model, flags = common.cpu()
  extensions = [name for flag, name in (("avx512f", "AVX-512"), ("amx_tile", "AMX")) if flag in flags]
  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
  return (f"{model}, {len(os.sched_getaffinity(0))} cores" + (f" ({' + '.join(extensions)})" if extensions else "")
          + f", load average {load:.1f} at the start")


class _Parser(argparse.ArgumentParser):
  def error(self, message: str):  # one line, exit 2: the project's answer to bad input
    raise UsageError(message)


def _parser() -> _Parser:
  parser = _Parser(prog="python -m science.when_to_tie",
                   description=science.when_to_tie.__doc__.splitlines()[0])
  parser.add_argument("--out", default=str(REPO / "runs" / "when_to_tie"), help="writes <out>/when_to_tie.*")
  parser.add_argument("--write-docs", action="store_true",
                      help="also copy the results to docs/when_to_tie.*, rewrite docs/results.md's picks and the "
                           "README's and docs/results.md's table of tying's cost with and without context")
  parser.add_argument("--quick", action="store_true",
                      help=f"a tiny sweep for tests: {QUICK_PLAN.max_steps} steps, 1 size, 1 seed, one setting "
                           "per model")
  parser.add_argument("--corpora", default="bytes,subword", help="comma-separated: bytes, subword")
  parser.add_argument("--family", default="bigram",
                      help=f"comma-separated model families to run: {', '.join(FAMILIES)} (default: bigram); one "
                           "(corpus, family) block is --corpora=<corpus> --family=<family>")
  parser.add_argument("--subword-corpus", default="", help="the subword corpus (default: Vim's help files)")
  for name, plan in PLANS.items():
    capped = ", ".join(f"{steps} for --family={family}" for (corpus, family), steps in CONTEXT_MAX_STEPS.items()
                       if corpus == name)
    parser.add_argument(f"--{name}-steps", type=int, default=None,
                        help=f"at most this many steps per {name} run (default {plan.max_steps}"
                             + (f"; {capped}" if capped else "") + ")")
  parser.add_argument("--fractions", default=",".join(f"{f:g}" for f in FRACTIONS),
                      help="comma-separated train data sizes in (0, 1] "
                           f"(default: {','.join(f'{f:g}' for f in FRACTIONS)})")
  parser.add_argument("--from-json", default="",
                      help="train nothing: rewrite the tables, plot (and with --write-docs the docs) from this JSON; "
                           "comma-separated JSONs of one family's blocks on different corpora are read as one")
  parser.add_argument("--convergence-factor", type=int, default=CONVERGENCE_FACTOR,
                      help="the convergence check at the largest size: this many times the steps, an integer ≥ 2 "
                           f"(0: no check; default {CONVERGENCE_FACTOR})")
  parser.add_argument("--add-convergence", action="store_true",
                      help="with --from-json: train only the convergence check and add it to that JSON's results")
  parser.add_argument("--recheck-ends", action="store_true",
                      help=f"with --from-json: rerun each run whose best step is at the end of its schedule as it "
                           f"was, with {RECHECK_EVALS}× the evals, and add them to that JSON's results")
  parser.add_argument("--recount-repeats", action="store_true",
                      help="with --from-json: recount each size's repeat shares (the data's, the count model's own "
                           "self-argmax) over its scored data draws, training nothing, into that JSON's results")
  parser.add_argument("--asymmetry", action="store_true",
                      help="train nothing: the asymmetry budget of each chosen corpus's train pairs at each size and "
                           "draw (budget.py) into <out>/when_to_tie_asymmetry.json; with --write-docs also docs/ "
                           "and its table in docs/when_to_tie.md's notes")
  parser.add_argument("--keep-runs", action="store_true",
                      help="keep every run's workdir under <out>/runs/ for inspection")
  parser.add_argument("--no-compile-cache", action="store_true",
                      help="leave JAX's persistent compilation cache alone (tests: it is one per process)")
  return parser


def parse(argv: list[str] | None) -> argparse.Namespace:
  """The command line, checked before any work: UsageError (one line) for a bad value."""
  args = _parser().parse_args(argv)
  for name in PLANS:
    steps = getattr(args, f"{name}_steps")
    if steps is not None and steps < 1:
      raise UsageError(f"--{name}-steps={steps}: expected a positive number of steps")
  if args.convergence_factor < 0 or args.convergence_factor == 1:
    raise UsageError(f"--convergence-factor={args.convergence_factor}: expected 0 (no check) or an integer ≥ 2")
  if args.add_convergence and not args.from_json:
    raise UsageError("--add-convergence: needs --from-json, the sweep to add the check to")
  if args.recheck_ends and not args.from_json:
    raise UsageError("--recheck-ends: needs --from-json, the sweep whose runs it rechecks")
  if args.recount_repeats and not args.from_json:
    raise UsageError("--recount-repeats: needs --from-json, the sweep whose repeat shares it recounts")
  if args.asymmetry and (args.from_json or args.add_convergence or args.recheck_ends or args.recount_repeats):
    raise UsageError("--asymmetry: trains nothing and reads no sweep's JSON; expected without --from-json, "
                     "--add-convergence, --recheck-ends and --recount-repeats")
  if args.add_convergence and args.convergence_factor == 0:
    raise UsageError("--add-convergence with --convergence-factor=0: expected a factor ≥ 2")
  if not args.out.strip():
    raise UsageError(f"--out={args.out!r}: expected a folder for the sweep's files (an empty one would put them in "
                     "the current directory)")
  out = pathlib.Path(args.out)
  existing = next((p for p in (out, *out.parents) if p.exists()), None)
  if existing is not None and not existing.is_dir():
    raise UsageError(f"--out={args.out}: {existing} exists and is not a directory")
  args.chosen = args.corpora.split(",")
  unknown = [name for name in args.chosen if name not in ("bytes", "subword")]
  if unknown:
    raise UsageError(f"--corpora={args.corpora!r}: {unknown[0]!r} is not one of bytes, subword")
  args.families = tuple(dict.fromkeys(args.family.split(",")))
  unknown = [name for name in args.families if name not in FAMILIES]
  if unknown:
    raise UsageError(f"--family={args.family!r}: {unknown[0]!r} is not one of {', '.join(FAMILIES)}")
  args.models = tuple(model for name in args.families for model in FAMILIES[name])
  waiting = next(((model, why) for model in args.models if (why := unavailable(model))), None)
  if waiting is not None:
    raise UsageError(f"--family={args.family!r}: {waiting[0].key} cannot run yet ({waiting[1]})")
  try:
    args.fraction_list = tuple(float(f) for f in args.fractions.split(","))
  except ValueError:
    raise UsageError(f"--fractions={args.fractions!r}: expected comma-separated numbers in (0, 1]") from None
  bad = [f for f in args.fraction_list if not 0 < f <= 1]
  if bad:
    raise UsageError(f"--fractions={args.fractions!r}: {bad[0]:g} is not in (0, 1]")
  reads_or_measures = args.from_json or args.asymmetry  # writes no when_to_tie.json: replaces no block's report
  other = None if reads_or_measures else other_block(out / "when_to_tie.json", args.chosen, args.families)
  if other:
    raise UsageError(f"--out={args.out}: it holds the report of {other}, which this sweep would replace: "
                     "use one --out per (corpus, family) block")
  problem = checks.link_problem(out, [out / f"when_to_tie.{suffix}" for suffix in report.SUFFIXES]
                                + [out / FINISHED, out / "jax_cache"]
                                + [out / folder / name for folder in ("runs", "data") for name in args.chosen])
  if problem:
    raise UsageError(f"--out={args.out}: {problem}")
  if out.is_dir():  # a sitting on it now: refused before anything else is read (`main` takes the lock itself)
    util.refuse_if_held(out, f"--out={args.out}")
  args.results = read_results(args.from_json) if args.from_json else None
  publishes_only = args.from_json and not (args.add_convergence or args.recheck_ends or args.recount_repeats)
  if not publishes_only:  # it reads the record of finished runs back: checked whole before any work
    check_sitting(out, args.chosen)
  args.available = corpora(args.quick, args.subword_corpus)
  return args


def other_block(written: pathlib.Path, chosen: list[str], families: tuple[str, ...]) -> str:
  """The block (`--corpora=… --family=…`) whose report `written` holds where it is not the one asked for; '' where
  there is none, it is the same block (a rerun or a resume), or the file is not a sweep's report."""
  try:  # never a read that waits: a FIFO there is no report
    results = checks.read_json(written)
    theirs = (sorted(results["corpora"]), sorted(results.get("families", ["bigram"])))
  except (ValueError, KeyError, TypeError, AttributeError):
    return ""
  if theirs == (sorted(chosen), sorted(families)):
    return ""
  return f"--corpora={','.join(theirs[0])} --family={','.join(theirs[1])}"


# what blocks merged by --from-json=a.json,b.json share: the same models, tuned and scored the same way (each corpus
# entry holds its own sizes: a block may have run fewer of them)
SHARED_KEYS = ("families", "models", "seeds", "tune_seed", "grids", "patience")


def read_results(paths: str) -> dict[str, Any]:
  """The sweep's results in the comma-separated JSON files `paths`, one (corpus, family) block's each, merged into
  one: the corpora side by side, each merged-in entry naming its own machine, the times summed. UsageError where a
  file is missing, not JSON or not a sweep's, or where two disagree on a SHARED_KEYS value or share a corpus."""
  first, *others = paths.split(",")
  results = _read_one(first)
  for path in others:
    block = _read_one(path)
    differs = next((key for key in SHARED_KEYS if block.get(key) != results.get(key)), None)
    if differs:
      raise UsageError(f"--from-json={paths}: {path}'s {differs!r} differs from {first}'s: expected blocks of one "
                       "family, tuned and scored the same way")
    shared = next((name for name in block["corpora"] if name in results["corpora"]), None)
    if shared:
      raise UsageError(f"--from-json={paths}: {path} and another file both hold the {shared!r} corpus")
    for name, entry in block["corpora"].items():
      results["corpora"][name] = {**entry, "machine": entry.get("machine", block["machine"])}
    results["fractions"] = sorted({*results["fractions"], *block["fractions"]})
    results["seconds"] += block["seconds"]
    results["cpu_seconds"] += block["cpu_seconds"]
  return results


def _read_one(path: str) -> dict[str, Any]:
  """The sweep's results in the JSON file at `path`; UsageError where it is missing, not JSON, or not a sweep's."""
  try:  # says what is there where it is no file of JSON: nothing, a directory, a device, a FIFO
    results = checks.read_json(pathlib.Path(path))
  except ValueError as error:
    raise UsageError(f"--from-json={path}: {str(error)[:1].lower()}{str(error)[1:]}") from None
  problem = report.results_problem(results)
  if problem:
    raise UsageError(f"--from-json={path}: not the sweep's results: {' '.join(problem.split())}")
  return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
  """The command line: one line and exit 2 for bad input (a second sitting on the same --out too), one line and exit 1
  for a failure (a full disk, a run that failed); on SIGTERM or SIGINT, one line and exit 128 + the signal, the
  finished runs kept in <out>/finished_runs.json for the same command to resume from."""
  from tied_embed.train import signals  # noqa: PLC0415

  out = None
  try:
    with signals.StopSignals(interrupting=True):  # a trainer run installs its own while it runs
      args = parse(argv)
      out = pathlib.Path(args.out)
      out.mkdir(parents=True, exist_ok=True)
      with util.exclusive(out, f"--out={args.out}"):  # one sitting per --out: a second is refused, naming this one
        return _act(args, argv)
  except UsageError as error:
    _fail(str(error), 2)
  except (signals.Interrupted, signals.Preempted) as stop:  # in our own set-up, or in a run (saved first)
    _fail(stopped_line(stop, out), 128 + stop.signum)
  except util.RunStopped as stopped:  # a run that failed, and said why in one line
    _fail(str(stopped), stopped.exit_status)
  except OSError as error:  # a full disk under --out, say: the finished runs are in the record already
    where = f"{error.filename}: " if error.filename else ""
    _fail(f"{where}{error.strerror or util.first_line(error)}: fix that, then rerun the same command", 1)
  except Exception as error:
    if not type(error).__module__.startswith(("tied_embed.", "science.")):
      raise  # not the project's own: a bug, whose traceback is what finds it
    _fail(util.first_line(error), 1)


def _fail(message: str, status: int) -> None:
  print(f"error: {util.printable(message)}", file=sys.stderr)
  raise SystemExit(status) from None


def _act(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
  """What the checked command line asks for, with the sitting's lock held: → the results written."""
  out = pathlib.Path(args.out)
  if args.results is not None and args.add_convergence:
    add_convergence(args.results, args)
  if args.results is not None and args.recheck_ends:
    recheck_ends(args.results, args)
  if args.results is not None and args.recount_repeats:
    recount_repeats(args.results, args)
  if args.results is not None:
    report.publish(args.results, out, args.write_docs)
    return args.results
  if args.asymmetry:
    return measure_budget(args, sys.argv[1:] if argv is None else argv)
  return run_sweep(args)


def stopped_line(stop: BaseException, out: pathlib.Path | None) -> str:
  """The one line of a stopped sitting: the signal, how many runs finished and where they are kept, the run in
  progress (its workdir resumes from its checkpoint), and how to resume."""
  name = signal.Signals(stop.signum).name
  if out is None:
    return f"stopped by {name} before the sitting began: nothing was written; rerun the same command"
  try:
    count = len(read_finished(out / FINISHED))
    finished = f"{count} finished run{'' if count == 1 else 's'} kept in {out / FINISHED}"
  except UsageError:
    finished = f"the finished runs kept in {out / FINISHED}"
  workdir = getattr(stop, "run_in_progress", None)
  step = getattr(stop, "step", None)
  saved = ", if it saved one" if step is None else f" (step {step})"
  in_progress = "" if workdir is None else f"; the run in progress, {workdir}, resumes from its checkpoint{saved}"
  return f"stopped by {name}: {finished}{in_progress}: rerun the same command to resume"


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
  swept = {model["key"] for model in results["models"]}
  models = tuple(model for model in _known_models().values() if model.key in swept)
  for name, entry, sweep in _existing_sweeps(results, args):
    print(f"{name}: convergence check, {args.convergence_factor}× {sweep.plan.max_steps} steps at most", flush=True)
    entry["convergence"] = convergence_check(sweep, entry, models, args.convergence_factor)
  results["convergence_factor"] = args.convergence_factor


def recheck_ends(results: dict[str, Any], args: argparse.Namespace) -> None:
  """Each run of the chosen corpora in `results` whose best step is at the end of its schedule, rerun as it was
  (seed, settings, steps and so batches) with RECHECK_EVALS× the evals: where in the cosine decay its last
  interval's gain came. Added to the corpus entry as "recheck" (a corpus with no such run gets none)."""
  models = _known_models()
  for name, entry, sweep in _existing_sweeps(results, args):
    ends = [(key, fraction, run) for key, by_fraction in entry["runs"].items()
            for fraction, runs in by_fraction.items() for run in runs if report.at_the_end(run)]
    check = entry.get("convergence", {"runs": {}})  # its longer runs too
    ends += [(key, check["fraction"], run["long"]) for key, run in check["runs"].items()
             if report.at_the_end(run["long"])]
    print(f"{name}: {len(ends)} runs with their best step at the end, rerun with {RECHECK_EVALS}× the evals",
          flush=True)
    started, cpu_started, rechecked = time.perf_counter(), time.process_time(), []
    for key, fraction, run in ends:
      factor = run.get("steps_factor", 1)
      dense = sweep.train(models[key], float(fraction), run["seed"], run["settings"], steps_factor=factor,
                          evals_factor=RECHECK_EVALS, draw=run.get("draw", 0))  # the same data draw as the run
      base = {field: run[field] for field in ("eval_every", "best_step", "end_step", "select_loss", "eval_loss")}
      rechecked.append({"model": key, "fraction": fraction, "steps_factor": factor, "base": base, "dense": dense})
    if rechecked:
      entry["recheck"] = {"evals_factor": RECHECK_EVALS, "runs": rechecked, "seconds": time.perf_counter() - started,
                          "cpu_seconds": time.process_time() - cpu_started}


def recount_repeats(results: dict[str, Any], args: argparse.Namespace) -> None:
  """Each size's repeat shares of the chosen corpora in `results` recounted over the data draws its runs were scored
  on (sweep.repeat_references, the count model at the discount the sweep chose), replacing the entry's "repeats"."""
  for _, entry, sweep in _existing_sweeps(results, args):
    for key in entry["repeats"]:
      scored = tuple(sorted({int(draw) for draw in entry["kneser_ney"][key].get("by_draw", {"0": None})}))
      entry["repeats"][key] = repeat_references(sweep, float(key), scored, entry["kneser_ney"][key]["discount"])


def _known_models() -> dict[str, Any]:
  """Every planned model by key, across the families."""
  return {model.key: model for family in FAMILIES.values() for model in family}


def _existing_sweeps(results: dict[str, Any], args: argparse.Namespace) -> Iterator[tuple[str, dict[str, Any], Sweep]]:
  """(name, entry, Sweep) of each chosen corpus of `results`, on the sweep's own dataset (rebuilt under <out>/data/
  if absent); UsageError, before any training, for a corpus not in `results`, and where the data differs."""
  missing = [name for name in args.chosen if name not in results["corpora"]]
  if missing:
    raise UsageError(f"--corpora: {missing[0]!r} is not in {args.from_json}")
  out = pathlib.Path(args.out)
  setup_jax(args, out)
  swept = {model["key"] for model in results["models"]}
  windows = max((context_length(model) for model in _known_models().values() if model.key in swept), default=1)
  for name in args.chosen:
    entry = results["corpora"][name]
    corpus = dataclasses.replace(args.available[name], split=split_of(entry["dataset"]))  # as that sweep split it
    sweep = Sweep(corpus, Plan(**entry["plan"]), out, args.keep_runs, windows)
    if sweep.data.identity != entry["dataset"]:
      raise UsageError(f"--from-json={args.from_json}: its {name} dataset is {entry['dataset']!r}, the one under "
                       f"{sweep.data_dir} is {sweep.data.identity!r}")
    yield name, entry, sweep


def measure_budget(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
  """--asymmetry: the budget of each chosen corpus at each size (--quick: 10% of the quick sweep's data) written to
  <out>/when_to_tie_asymmetry.json; with --write-docs copied to docs/ and its table rewritten in the docs' notes.
  → the written results."""
  from absl import logging  # noqa: PLC0415

  from science.when_to_tie import budget  # noqa: PLC0415

  logging.set_verbosity(logging.ERROR)  # TFDS's 'custom data configuration' line per dataset
  out = pathlib.Path(args.out)
  chosen = {name: args.available[name] for name in args.chosen}
  plans = {name: QUICK_PLAN if args.quick else block_plan(name, args.families) for name in args.chosen}
  fractions = (0.1,) if args.quick else args.fraction_list
  path = budget.measure(chosen, plans, fractions, out, " ".join([report.COMMAND, *argv]), machine(), args.quick)
  if args.write_docs:
    report.write_budget_docs(path)
  print(f"wrote {path}" + (" and docs/" + path.name + ", docs/when_to_tie.md's notes" if args.write_docs else ""))
  return json.loads(path.read_text())


def run_sweep(args: argparse.Namespace) -> dict[str, Any]:
  """The sweep of a checked command line: → the results written."""
  started, cpu_started = time.perf_counter(), time.process_time()
  out = pathlib.Path(args.out)
  if args.quick:
    fractions, seeds, grids = (0.1,), SEEDS[:1], QUICK_GRIDS
  else:
    fractions, seeds, grids = args.fraction_list, SEEDS, GRIDS
  setup_jax(args, out)
  results: dict[str, Any] = {
      "families": list(args.families), "models": [dataclasses.asdict(model) for model in args.models],
      "fractions": list(fractions),
      "convergence_factor": args.convergence_factor,
      "seeds": list(seeds), "tune_seed": TUNE_SEED, "grids": {axis: list(values) for axis, values in grids.items()},
      "edge_rule": {"ratio": EDGE_RATIO, "extensions": EDGE_EXTENSIONS},  # tuning.search's, for every cell
      "patience": PATIENCE, "machine": machine(), "corpora": {},
  }
  for name in args.chosen:
    plan = QUICK_PLAN if args.quick else block_plan(name, args.families, getattr(args, f"{name}_steps"))
    print(f"{name}: {args.available[name].note}, at most {plan.max_steps} steps per run", flush=True)
    for family in args.families if not args.quick else ():
      if (name, family) in UNFIT_BLOCKS:  # said at the start: such a block is not one sitting of 2 hours
        print(f"{name} {family}: ~{block_seconds(name, family) / 3600:.1f} h by plan.block_seconds, over the "
              f"{BLOCK_SECONDS / 3600:g} h of a block (plan.UNFIT_BLOCKS)", flush=True)
    corpus = args.available[name]
    entry = sweep_corpus(corpus, args.models, fractions, seeds, corpus_grids(corpus, grids), plan, out, args.keep_runs,
                         convergence_factor=args.convergence_factor, quick=args.quick)
    results["corpora"][name] = entry
    print(f"{name}: {entry['seconds'] / 60:.1f} min, {entry['cpu_seconds'] / 60:.1f} min CPU", flush=True)
  resumed = [entry.get("resumed", {}) for entry in results["corpora"].values()]  # runs taken from the record
  results["seconds"] = time.perf_counter() - started + sum(part.get("seconds", 0.0) for part in resumed)
  results["cpu_seconds"] = time.process_time() - cpu_started + sum(part.get("cpu_seconds", 0.0) for part in resumed)
  paths = report.publish(results, out, args.write_docs)
  written = " and docs/when_to_tie.*, docs/results.md, README.md" if args.write_docs else ""
  print(f"wrote {', '.join(map(str, paths))}{written}; "
        f"wall time {results['seconds'] / 60:.1f} min, CPU time {results['cpu_seconds'] / 60:.1f} min")
  return results
