"""What gradient provenance costs per train step: the provenance step vs the plain one, and a log step's extra.

  python benchmarks/train_step.py [--vocab_size=1024 --d_model=32 --batch_size=1024 --steps=50 --rounds=15]

The provenance step differentiates the two uses of the table separately and adds their row norms to the (V,)
totals; the plain step takes one gradient of the tied model. Diagnostics (split statistics and the direct
nnx.grad for split_error) run only at log steps, so their cost is divided by log_every in practice. Each timed
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
from tied_embed import train_step as step_lib  # noqa: E402

flags.DEFINE_integer("vocab_size", 1024, "V")
flags.DEFINE_integer("d_model", 32, "D")
flags.DEFINE_integer("batch_size", 1024, "token pairs per step")
flags.DEFINE_integer("steps", 50, "calls per timed run")
flags.DEFINE_integer("rounds", 15, "interleaved timing rounds")
flags.DEFINE_bool("tied", True, "tied or untied model")
FLAGS = flags.FLAGS


def _repeated(fn, state, batch, donates: bool):
  """A timed run: `steps` calls of `fn` on the same batch, carrying the state if `fn` donates it."""

  def run():
    nonlocal state
    for _ in range(FLAGS.steps):
      out = fn(state, *batch)
      if donates:
        state = out[0]
    jax.block_until_ready(out)

  return run


def main(argv) -> None:
  del argv
  config = workload.bench_config(FLAGS.vocab_size, FLAGS.d_model, FLAGS.batch_size, chunk_size=0)
  config.model.tied = FLAGS.tied
  batch = workload.random_batch(FLAGS.vocab_size, FLAGS.batch_size)
  graphdef, _ = workload.train_state(config)
  runs = {
      "plain step": _repeated(step_lib.make_train_step(graphdef, 0, track_provenance=False),
                              workload.train_state(config)[1], batch, donates=True),
      "provenance step": _repeated(step_lib.make_train_step(graphdef, 0), workload.train_state(config)[1], batch,
                                   donates=True),
      "log-step diagnostics": _repeated(step_lib.make_diagnostics(graphdef, 0), workload.train_state(config)[1],
                                        batch, donates=False),
  }
  medians = workload.interleaved_medians(runs, FLAGS.rounds)
  ms = {name: 1e3 * seconds / FLAGS.steps for name, seconds in medians.items()}
  print(f"V={FLAGS.vocab_size} D={FLAGS.d_model} B={FLAGS.batch_size} tied={FLAGS.tied}, "
        f"{workload.cpu_threads()} CPU threads")
  for name, value in ms.items():
    print(f"  {name:22s} {value:8.3f} ms  (median of {FLAGS.rounds} rounds of {FLAGS.steps})")
  print(f"  provenance overhead per step: {100 * (ms['provenance step'] / ms['plain step'] - 1):+.1f}%")


if __name__ == "__main__":
  app.run(main)
