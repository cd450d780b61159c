"""XLA:CPU's dot-fusion options and the chunk size for the trainer's float32 step, side by side at each shape.

Run: `python benchmarks/dot_options.py [--shapes=gpt2,v8192] [--rounds=5] [--chunks=128,256,512]
[--json=runs/bench/dot_options.json]`; `python benchmarks/dot_options.py --report A.json [B.json ...]` prints
benchmarks/README.md's table from such runs.

For each shape (V, D, T), the real step (`tied_embed.fast.choose.make_train_step` on configs/default.py, uniform
ids, as benchmarks/throughput.py builds it) is compiled once per variant of `compilation.CPU_COMPILER_OPTIONS`
(`OPTION_VARIANTS`) and, with `--chunks`, once per chunk size under the current options; all are timed in turns in
one process: wall and process CPU time (user + sys of all threads, steadier on a shared machine), medians and
fastest calls; small shapes time several steps per call. Each variant's optimised program is fingerprinted
(`same_program_as`): jaxlib 0.10.2 takes no XNNPACK or oneDNN dot fusion, so those variants compile to the
program of YNNPACK's reduce fusion alone, and are timed once. Prints and writes JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import re
import statistics
import sys
import time
from unittest import mock

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import workload  # noqa: E402
from tied_embed.fast import compilation  # noqa: E402

REGION = {"xla_cpu_copy_insertion_use_region_analysis": True}
OPTION_VARIANTS = {
    "ynn_dot_reduce": dict(compilation.CPU_COMPILER_OPTIONS),  # the trainer's
    "ynn_reduce": {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE", **REGION},  # no dot fusion
    "xnn_dot_ynn_reduce": {"xla_cpu_experimental_xnn_fusion_type": "LIBRARY_FUSION_TYPE_DOT",
                           "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE", **REGION},
    "onednn_dot_ynn_reduce": {"xla_cpu_experimental_onednn_fusion_type": "LIBRARY_FUSION_TYPE_DOT",
                              "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE", **REGION},
}
# name → (V, D, T, steps per timed call)
SHAPES = {
    "default": (1024, 32, 1024, 40),  # configs/default.py
    "text": (256, 32, 1024, 40),  # configs/text.py
    "subword": (8192, 64, 1024, 5),  # configs/subword.py
    "v8192": (8192, 256, 4096, 1),  # benchmarks/throughput.py's train_step section
    "v32768": (32768, 256, 8192, 1),  # benchmarks/memory.py's shape
    "gpt2": (50257, 768, 1024, 1),  # GPT-2's vocabulary and width
}


def stepper(shape: str, options: dict, chunk: int = 256, steps: int = 1):
  """(run `steps` float32 train steps at SHAPES[shape] compiled with XLA:CPU `options`, first loss, fingerprint)."""
  vocab_size, d_model, num_tokens, _ = SHAPES[shape]
  config = workload.bench_config(vocab_size, d_model, num_tokens, chunk_size=chunk)
  with mock.patch.object(compilation, "CPU_COMPILER_OPTIONS", options):
    step = workload.Stepper(config)
  program = step._step.lower(step.state, *step.batch, with_stats=False).compile().as_text()
  program = re.sub(r"metadata=\{[^}]*\}", "", program)  # source locations differ; the program does not
  first_loss = float(step())

  def run():
    for _ in range(steps):
      step()

  return run, first_loss, hashlib.sha256(program.encode()).hexdigest()[:12]


def interleaved_wall_and_cpu(fns: dict, rounds: int, settle_s: float = 0.2) -> dict[str, list[tuple[float, float]]]:
  """(wall s, process CPU s) of each call, in turns after one warm-up call each (as workload.interleaved_times)."""
  for fn in fns.values():
    fn()
  times = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      time.sleep(settle_s)
      wall, cpu = time.perf_counter(), time.process_time()
      fn()
      times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
  return times


def measure(shape: str, rounds: int, variants: list[str], chunks: list[int]) -> dict:
  """{variant or 'chunk_<C>': {median_ms, fastest_ms, first_loss}} per step, all timed in turns."""
  steps = SHAPES[shape][3]
  fns, losses, programs, same = {}, {}, {}, {}
  for name in variants:
    run, loss, program = stepper(shape, OPTION_VARIANTS[name], steps=steps)
    twin = next((other for other, seen in programs.items() if seen == program), None)
    if twin:
      same[name] = twin  # the identical program: timing it again would measure noise
      continue
    fns[name], losses[name], programs[name] = run, loss, program
  for chunk in chunks:
    if chunk != 256 or "ynn_dot_reduce" not in variants:
      name = f"chunk_{chunk}"
      fns[name], losses[name], programs[name] = stepper(shape, OPTION_VARIANTS["ynn_dot_reduce"], chunk, steps)
  times = interleaved_wall_and_cpu(fns, rounds)
  vocab_size, d_model, num_tokens, _ = SHAPES[shape]
  result = {"V": vocab_size, "D": d_model, "T": num_tokens, "rounds": rounds, "threads": workload.cpu_threads(),
            "same_program_as": same}
  for name, values in times.items():
    wall, cpu = [w for w, _ in values], [c for _, c in values]
    result[name] = {"median_ms": 1e3 * statistics.median(wall) / steps, "fastest_ms": 1e3 * min(wall) / steps,
                    "cpu_median_ms": 1e3 * statistics.median(cpu) / steps, "first_loss": losses[name],
                    "program": programs[name]}
  base_name = "ynn_dot_reduce" if "ynn_dot_reduce" in times else None
  for name, values in times.items():
    if base_name:
      # per-round ratios current / variant (> 1: the variant is faster): robust to load drifting between rounds
      base = times[base_name]
      ratios = [b[0] / v[0] for b, v in zip(base, values)]
      cpu_ratios = [b[1] / v[1] for b, v in zip(base, values)]
      result[name].update(speedup_per_round=ratios, speedup_median=statistics.median(ratios),
                          cpu_speedup_median=statistics.median(cpu_ratios))
  return result


def report(paths: list[str]) -> str:
  """A markdown table of runs' JSON: each timed variant's median ms, and its speedup over the trainer's options."""
  lines = ["| run | shape (V, D, T) | variant | step ms, median (fastest) | CPU ms, median | trainer's / variant, "
           "wall (CPU), median of rounds |", "|---|---|---|---|---|---|"]
  for path in paths:
    for shape, result in json.loads(pathlib.Path(path).read_text()).items():
      for name, row in result.items():
        if isinstance(row, dict) and "median_ms" in row:
          twins = [twin for twin, same in result["same_program_as"].items() if same == name]
          label = name + "".join(f" = {twin}" for twin in twins)
          speedup = (f"{row['speedup_median']:.2f}x ({row['cpu_speedup_median']:.2f}x)"
                     if "speedup_median" in row else "")
          lines.append(f"| {pathlib.Path(path).stem} | {shape} ({result['V']}, {result['D']}, {result['T']}) | {label} | "
                       f"{row['median_ms']:.4g} ({row['fastest_ms']:.4g}) | {row['cpu_median_ms']:.4g} | {speedup} |")
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--shapes", default=",".join(SHAPES))
  parser.add_argument("--variants", default=",".join(OPTION_VARIANTS))
  parser.add_argument("--chunks", default="")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--json", default="runs/bench/dot_options.json")
  parser.add_argument("--report", nargs="+", help="print the table of these runs' JSON files and exit")
  args = parser.parse_args()
  if args.report:
    print(report(args.report))
    return
  variants = [v for v in args.variants.split(",") if v]
  chunks = [int(c) for c in args.chunks.split(",") if c]
  results = {}
  path = pathlib.Path(args.json)
  path.parent.mkdir(parents=True, exist_ok=True)
  for shape in args.shapes.split(","):
    results[shape] = measure(shape, args.rounds, variants, chunks)
    for name, row in results[shape].items():
      if isinstance(row, dict) and "median_ms" in row:
        print(f"{shape:8} {name:22} median {row['median_ms']:9.2f} ms  fastest {row['fastest_ms']:9.2f} ms  "
              f"cpu {row['cpu_median_ms']:9.2f} ms  speedup wall {row.get('speedup_median', float('nan')):.3f} "
              f"cpu {row.get('cpu_speedup_median', float('nan')):.3f}  loss {row['first_loss']:.6f}", flush=True)
    print(f"{shape:8} identical programs: {results[shape]['same_program_as']}", flush=True)
    path.write_text(json.dumps(results, indent=1))  # after each shape: a cut-short run keeps what it measured


if __name__ == "__main__":
  main()
