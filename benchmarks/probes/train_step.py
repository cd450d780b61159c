"""What each part of a train step costs: gradient provenance with the step's own tally, and a log step's extra.

  python benchmarks/probes/train_step.py [--vocab_size=1024 --d_model=32 --batch_size=1024 --steps=50 --rounds=15]

The plain step takes one gradient of the tied model and applies it (`workload.make_plain_step`, defined for
this comparison only). The train step is the trainer's: it differentiates the two uses of the table separately,
adds their row norms to the (V,) totals, sums the train loss and checks the new state is finite. A log step is
the same step with `with_stats=True`: it adds the split statistics and the direct `nnx.grad` for split_error, so
its extra cost is divided by log_every in practice. Each timed call runs `steps` calls back to back and blocks
once, as the training loop does between log steps; rounds alternate between the variants and medians are reported.
"""

import functools
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # for `configs` and `benchmarks`

from absl import app, flags  # noqa: E402

from benchmarks import workload  # noqa: E402
from tied_embed.train import run_step

flags.DEFINE_integer("vocab_size", 1024, "V")
flags.DEFINE_integer("d_model", 32, "D")
flags.DEFINE_integer("batch_size", 1024, "token pairs per step")
flags.DEFINE_integer("chunk_size", 0, "loss.chunk_size (0 = full logits)")
flags.DEFINE_integer("steps", 50, "calls per timed run")
flags.DEFINE_integer("rounds", 15, "interleaved timing rounds")
flags.DEFINE_bool("tied", True, "tied or untied model")
FLAGS = flags.FLAGS


def main(argv) -> None:
  del argv
  config = workload.bench_config(FLAGS.vocab_size, FLAGS.d_model, FLAGS.batch_size, FLAGS.chunk_size)
  config.model.tied = FLAGS.tied
  batch = workload.random_batch(FLAGS.vocab_size, FLAGS.batch_size)
  graphdef, _ = workload.train_state(config)
  train_step = run_step.make_run_step(graphdef, FLAGS.chunk_size)
  variants = {
      "plain step": workload.make_plain_step(graphdef, FLAGS.chunk_size),
      "train step": train_step,
      "log step": functools.partial(train_step, with_stats=True),
  }
  runs = {
      name: workload.repeated_steps(step, workload.train_state(config)[1], batch, FLAGS.steps)
      for name, step in variants.items()
  }
  medians = workload.interleaved_medians(runs, FLAGS.rounds)
  ms = {name: 1e3 * seconds / FLAGS.steps for name, seconds in medians.items()}
  print(f"V={FLAGS.vocab_size} D={FLAGS.d_model} B={FLAGS.batch_size} chunk={FLAGS.chunk_size} tied={FLAGS.tied}, "
        f"{workload.cpu_threads()} CPU threads")
  for name, value in ms.items():
    print(f"  {name:12s} {value:8.3f} ms  (median of {FLAGS.rounds} rounds of {FLAGS.steps})")
  print(f"  provenance + tally + guard, per step: {100 * (ms['train step'] / ms['plain step'] - 1):+.1f}%")
  print(f"  a log step's extra:                   {100 * (ms['log step'] / ms['train step'] - 1):+.1f}%")


if __name__ == "__main__":
  app.run(main)
