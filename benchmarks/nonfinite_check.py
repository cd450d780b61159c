"""What the run's device-side tally (non-finite check + train-loss sum, tied_embed/guard.py) costs per train step.

  python benchmarks/nonfinite_check.py [--vocab_size=1024 --d_model=32 --batch_size=1024 --steps=50 --rounds=15]

Both variants run `steps` steps back to back and block once at the end, as the training loop does between log
steps; rounds alternate between them and the medians are reported.
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
flags.DEFINE_integer("steps", 50, "steps per timed call")
flags.DEFINE_integer("rounds", 15, "interleaved timing rounds")
FLAGS = flags.FLAGS


def main(argv) -> None:
  del argv
  config = workload.bench_config(FLAGS.vocab_size, FLAGS.d_model, FLAGS.batch_size, chunk_size=0)
  batch = workload.random_batch(FLAGS.vocab_size, FLAGS.batch_size)
  graphdef, plain_state = workload.train_state(config)
  _, guarded_state = workload.train_state(config)
  plain = step_lib.make_train_step(graphdef, 0)
  guarded = guard.guarded_step(step_lib.make_train_step(graphdef, 0))
  tally = guard.new_tally(0)

  def run_plain():
    nonlocal plain_state
    for _ in range(FLAGS.steps):
      plain_state, loss = plain(plain_state, *batch)
    jax.block_until_ready(loss)

  def run_guarded():
    nonlocal guarded_state, tally
    for _ in range(FLAGS.steps):
      guarded_state, tally = guarded(guarded_state, tally, *batch)
    jax.block_until_ready(tally)

  medians = workload.interleaved_medians({"plain": run_plain, "guarded": run_guarded}, FLAGS.rounds)
  plain_ms, guarded_ms = (1e3 * medians[name] / FLAGS.steps for name in ("plain", "guarded"))
  print(
      f"V={FLAGS.vocab_size} D={FLAGS.d_model} B={FLAGS.batch_size}: step {plain_ms:.3f} ms, with the tally "
      f"{guarded_ms:.3f} ms ({100 * (guarded_ms / plain_ms - 1):+.1f}%), {workload.cpu_threads()} CPU threads"
  )


if __name__ == "__main__":
  app.run(main)
