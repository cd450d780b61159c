"""What each part of a train step costs: gradient provenance, the run's device-side tally, a log step's extra.

  python benchmarks/train_step.py [--vocab_size=1024 --d_model=32 --batch_size=1024 --steps=50 --rounds=15]

The provenance step differentiates the two uses of the table separately and adds their row norms to the (V,)
totals; the plain step takes one gradient of the tied model; the guarded step is the provenance step plus the
tally the loop runs it with (non-finite check and train-loss sum, tied_embed/guard.py). Diagnostics (split
statistics and the direct nnx.grad for split_error) run only at log steps, so their cost is divided by log_every
in practice. Each timed
call runs `steps` calls back to back and blocks once, as the training loop does between log steps; rounds
alternate between the variants and the medians are reported.
"""

import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # for `configs` and `benchmarks`

import jax  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import workload  # noqa: E402
from tied_embed import guard  # noqa: E402
from tied_embed import train_step as step_lib  # noqa: E402

flags.DEFINE_integer("vocab_size", 1024, "V")
flags.DEFINE_integer("d_model", 32, "D")
flags.DEFINE_integer("batch_size", 1024, "token pairs per step")
flags.DEFINE_integer("steps", 50, "calls per timed run")
flags.DEFINE_integer("rounds", 15, "interleaved timing rounds")
flags.DEFINE_bool("tied", True, "tied or untied model")
FLAGS = flags.FLAGS


def _repeated(fn, carry: tuple, batch, donates: bool):
  """A timed run: `steps` calls `fn(*carry, *batch)`, carrying what `fn` returns if it donates its inputs."""

  def run():
    nonlocal carry
    for _ in range(FLAGS.steps):
      out = fn(*carry, *batch)
      if donates:  # (state, loss) for a step, (state, tally) for the guarded one
        carry = out[: len(carry)]
    jax.block_until_ready(out)

  return run


def main(argv) -> None:
  del argv
  config = workload.bench_config(FLAGS.vocab_size, FLAGS.d_model, FLAGS.batch_size, chunk_size=0)
  config.model.tied = FLAGS.tied
  batch = workload.random_batch(FLAGS.vocab_size, FLAGS.batch_size)
  graphdef, _ = workload.train_state(config)
  provenance_step = step_lib.make_train_step(graphdef, 0)
  variants = {  # name: (function, what it takes before the batch, whether it donates that)
      "plain step": (step_lib.make_train_step(graphdef, 0, track_provenance=False), (), True),
      "provenance step": (provenance_step, (), True),
      "guarded step": (guard.guarded_step(provenance_step), (guard.new_tally(0),), True),
      "log-step diagnostics": (step_lib.make_diagnostics(graphdef, 0), (), False),
  }
  runs = {
      name: _repeated(fn, (workload.train_state(config)[1], *extra), batch, donates)
      for name, (fn, extra, donates) in variants.items()
  }
  medians = workload.interleaved_medians(runs, FLAGS.rounds)
  ms = {name: 1e3 * seconds / FLAGS.steps for name, seconds in medians.items()}
  print(f"V={FLAGS.vocab_size} D={FLAGS.d_model} B={FLAGS.batch_size} tied={FLAGS.tied}, "
        f"{workload.cpu_threads()} CPU threads")
  for name, value in ms.items():
    print(f"  {name:22s} {value:8.3f} ms  (median of {FLAGS.rounds} rounds of {FLAGS.steps})")
  print(f"  provenance overhead per step: {100 * (ms['provenance step'] / ms['plain step'] - 1):+.1f}%")
  print(f"  tally overhead per step:      {100 * (ms['guarded step'] / ms['provenance step'] - 1):+.1f}%")


if __name__ == "__main__":
  app.run(main)
