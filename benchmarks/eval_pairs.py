"""How long one evaluation of a held-out split of pairs takes: each pair scored against the whole vocabulary (one
(1, V) row a pair, what a windows-of-one evaluation does) against each distinct input's logsumexp once and each
distinct pair once, weighed by its count (train/evaluation.py's `Evaluator` for pairs).

  .venv/bin/python benchmarks/eval_pairs.py            # Vim's subword shape: V = 2048, D = 64, 463,000 pairs
  .venv/bin/python benchmarks/eval_pairs.py --pairs 100000 --vocab 8192 --d_model 256

The pairs are drawn Zipf-like (skewed like text), the table at random; both paths score the same pairs, and the
script checks that their means agree within float32 rounding before printing the medians of --repeats timed evals,
taken in turns, with the machine and its load average."""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time
import types

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--pairs", type=int, default=463_000)
  parser.add_argument("--vocab", type=int, default=2048)
  parser.add_argument("--d_model", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()

  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415
  from flax import nnx  # noqa: PLC0415

  from configs import subword  # noqa: PLC0415
  from science import common  # noqa: PLC0415
  from tied_embed import TiedEmbed  # noqa: PLC0415
  from tied_embed.train import evaluation  # noqa: PLC0415
  from tied_embed.train import mesh as mesh_lib  # noqa: PLC0415

  rng = np.random.default_rng(0)
  ids, next_ids = (np.minimum(rng.zipf(1.2, args.pairs) - 1, args.vocab - 1).astype(np.int32) for _ in range(2))

  class Holder(nnx.Module):
    def __init__(self):
      self.model = TiedEmbed(vocab_size=args.vocab, d_model=args.d_model, rngs=nnx.Rngs(0))

  graphdef, state = nnx.split(Holder())
  config = subword.get_config()
  data = types.SimpleNamespace(context_length=1, input_counts=np.bincount(ids, minlength=args.vocab))
  evaluator = evaluation.Evaluator(graphdef, ids, next_ids, data, config, mesh_lib.make_mesh(config.mesh,
                                                                                             jax.devices()[:1]))
  per_pair = evaluation.make_eval_losses(graphdef, int(config.loss.chunk_size))  # (E, 1) windows: a row a pair
  size = int(config.train.eval_batch_size)

  def each_pair() -> float:
    total = sum(float(per_pair(state, ids[s : s + size, None], next_ids[s : s + size, None]).sum())
                for s in range(0, len(ids), size))
    return total / len(ids)

  def by_distinct_inputs() -> float:
    return evaluator(state)[0]

  first, second = each_pair(), by_distinct_inputs()  # compiles, and the check
  assert abs(first - second) <= 1e-5 * abs(first), (first, second)
  times = {"each pair": [], "distinct inputs": []}
  for _ in range(args.repeats):
    for name, evaluate in (("each pair", each_pair), ("distinct inputs", by_distinct_inputs)):
      started = time.perf_counter()
      evaluate()
      times[name].append(time.perf_counter() - started)
  medians = {name: statistics.median(values) for name, values in times.items()}
  print(f"{args.pairs:,} pairs, {len(np.unique(ids)):,} distinct inputs, V = {args.vocab}, D = {args.d_model}; "
        f"{common.cpu()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; median of {args.repeats}:")
  for name, seconds in medians.items():
    print(f"  {name:16s} {seconds * 1000:9.1f} ms")
  print(f"  ratio {medians['each pair'] / medians['distinct inputs']:.0f}x; mean loss {second:.6f} (each pair "
        f"{first:.6f})")


if __name__ == "__main__":
  main()
