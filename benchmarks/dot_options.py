"""XLA:CPU's dot-fusion options and the chunk size for the trainer's float32 step, side by side at each shape.

Run: `python benchmarks/dot_options.py [--shapes=gpt2,v8192] [--rounds=5] [--chunks=128,256,512]
[--json=runs/bench/dot_options.json]`.

For each shape (V, D, T), the real step (`tied_embed.fast.select.make_train_step` on configs/default.py, uniform
ids, as benchmarks/throughput.py builds it) is compiled once per variant of `compilation.CPU_COMPILER_OPTIONS`
(`OPTION_VARIANTS`) and, with `--chunks`, once per chunk size under the current options; all are timed in turns in
one process (medians and fastest calls; small shapes time `steps_per_call` steps per call). Prints and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
from unittest import mock

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import workload  # noqa: E402
from tied_embed.fast import compilation  # noqa: E402

REGION = {"xla_cpu_copy_insertion_use_region_analysis": True}
OPTION_VARIANTS = {
    "ynn_dot_reduce": dict(compilation.CPU_COMPILER_OPTIONS),
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
  """A callable running `steps` float32 train steps at SHAPES[shape], compiled with XLA:CPU `options`."""
  vocab_size, d_model, num_tokens, _ = SHAPES[shape]
  config = workload.bench_config(vocab_size, d_model, num_tokens, chunk_size=chunk)
  with mock.patch.object(compilation, "CPU_COMPILER_OPTIONS", options):
    step = workload.Stepper(config)
  first_loss = float(step())

  def run():
    for _ in range(steps):
      step()

  return run, first_loss


def measure(shape: str, rounds: int, variants: list[str], chunks: list[int]) -> dict:
  """{variant or 'chunk_<C>': {median_ms, fastest_ms, first_loss}} per step, all timed in turns."""
  steps = SHAPES[shape][3]
  fns, losses = {}, {}
  for name in variants:
    fns[name], losses[name] = stepper(shape, OPTION_VARIANTS[name], steps=steps)
  for chunk in chunks:
    if chunk != 256 or "ynn_dot_reduce" not in variants:
      name = f"chunk_{chunk}"
      fns[name], losses[name] = stepper(shape, OPTION_VARIANTS["ynn_dot_reduce"], chunk, steps)
  times = workload.interleaved_times(fns, rounds)
  vocab_size, d_model, num_tokens, _ = SHAPES[shape]
  result = {"V": vocab_size, "D": d_model, "T": num_tokens, "rounds": rounds, "threads": workload.cpu_threads()}
  for name, values in times.items():
    result[name] = {"median_ms": 1e3 * statistics.median(values) / steps,
                    "fastest_ms": 1e3 * min(values) / steps, "first_loss": losses[name]}
  if "ynn_dot_reduce" in times:
    base = times["ynn_dot_reduce"]
    for name, values in times.items():
      # per-round ratio current / variant (> 1: the variant is faster), robust to load drifting between rounds
      ratios = [b / v for b, v in zip(base, values)]
      result[name]["speedup_per_round"] = ratios
      result[name]["speedup_median"] = statistics.median(ratios)
  return result


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--shapes", default=",".join(SHAPES))
  parser.add_argument("--variants", default=",".join(OPTION_VARIANTS))
  parser.add_argument("--chunks", default="")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--json", default="runs/bench/dot_options.json")
  args = parser.parse_args()
  variants = [v for v in args.variants.split(",") if v]
  chunks = [int(c) for c in args.chunks.split(",") if c]
  results = {}
  path = pathlib.Path(args.json)
  path.parent.mkdir(parents=True, exist_ok=True)
  for shape in args.shapes.split(","):
    results[shape] = measure(shape, args.rounds, variants, chunks)
    for name, row in results[shape].items():
      if isinstance(row, dict):
        print(f"{shape:8} {name:22} median {row['median_ms']:9.2f} ms  fastest {row['fastest_ms']:9.2f} ms  "
              f"speedup {row.get('speedup_median', float('nan')):.3f}  loss {row['first_loss']:.6f}", flush=True)
    path.write_text(json.dumps(results, indent=1))  # after each shape: a cut-short run keeps what it measured


if __name__ == "__main__":
  main()
