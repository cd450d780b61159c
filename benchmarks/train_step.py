"""What gradient provenance costs per train step: the provenance step vs the plain one, and a log step's extra.

  python benchmarks/train_step.py [--vocab_size=1024 --d_model=32 --batch_size=1024 --steps=300]

The provenance step differentiates the two uses of the table separately and adds their row norms to the (V,)
totals; the plain step takes one gradient of the tied model. Diagnostics (split statistics and the direct
nnx.grad for split_error) run only at log steps, so their cost is divided by log_every in practice.
"""

import os
import pathlib
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # for `configs`, as when run from the root

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
from flax import nnx  # noqa: E402

from configs import default  # noqa: E402
from tied_embed import optim  # noqa: E402
from tied_embed import train_step as step_lib  # noqa: E402

flags.DEFINE_integer("vocab_size", 1024, "V")
flags.DEFINE_integer("d_model", 32, "D")
flags.DEFINE_integer("batch_size", 1024, "token pairs per step")
flags.DEFINE_integer("steps", 300, "timed steps per variant")
flags.DEFINE_integer("repeats", 7, "interleaved timing rounds; the best round of each variant is reported")
flags.DEFINE_bool("tied", True, "tied or untied model")
FLAGS = flags.FLAGS


def _ms_per_call(fn, state, batches, steps: int, donates: bool) -> tuple[float, nnx.State]:
  """Mean wall time per call over `steps` calls, and the state after them (donated ones replaced)."""
  started = time.perf_counter()
  for i in range(steps):
    out = fn(state, *batches[i % len(batches)])
    if donates:
      state = out[0]
  jax.block_until_ready(out)
  return (time.perf_counter() - started) / steps * 1e3, state


def main(argv):
  del argv
  config = default.get_config()
  config.model.update(vocab_size=FLAGS.vocab_size, d_model=FLAGS.d_model, tied=FLAGS.tied)
  rng = np.random.default_rng(0)
  batches = [
      tuple(jax.numpy.asarray(rng.integers(0, FLAGS.vocab_size, FLAGS.batch_size), jax.numpy.int32) for _ in "ab")
      for _ in range(8)
  ]
  graphdef, state = nnx.split(step_lib.TrainState(step_lib.build_model(config), optim.make_optimizer(config.train)))
  variants = {
      "plain step": (step_lib.make_train_step(graphdef, 0, track_provenance=False), True),
      "provenance step": (step_lib.make_train_step(graphdef, 0), True),
      "log-step diagnostics": (step_lib.make_diagnostics(graphdef, 0), False),
  }
  for fn, donates in variants.values():  # compile
    _, state = _ms_per_call(fn, state, batches, 1, donates)
  # Interleaved rounds, best of each: the machine is shared, and load hits every variant alike this way.
  timings = {name: [] for name in variants}
  for _ in range(FLAGS.repeats):
    for name, (fn, donates) in variants.items():
      ms, state = _ms_per_call(fn, state, batches, FLAGS.steps, donates)
      timings[name].append(ms)
  results = {name: min(times) for name, times in timings.items()}
  print(f"V={FLAGS.vocab_size} D={FLAGS.d_model} B={FLAGS.batch_size} tied={FLAGS.tied} on {jax.devices()[0].platform}")
  for name, ms in results.items():
    print(f"  {name:22s} {ms:8.3f} ms  (best of {FLAGS.repeats} rounds of {FLAGS.steps})")
  overhead = results["provenance step"] / results["plain step"] - 1
  print(f"  provenance overhead per step: {100 * overhead:+.1f}%")


if __name__ == "__main__":
  app.run(main)
