"""What `loss.chunk_size` does to a config's own train step and evaluation, to choose the configs' value.

  python benchmarks/config_chunks.py configs/default.py [--chunks=0,128,256,512,1024 --steps=20 --rounds=9]

For each chunk size: the real train step (`make_train_step`, at the config's V, D and batch size), `steps` calls
back to back as the loop runs them between log steps, and one evaluation of `num_eval_pairs` tokens in batches of
`eval_batch_size` (`make_eval_total`, as the trainer's evaluator chains them). Rounds alternate between the chunk
sizes; medians are printed, per step and per evaluation.
"""

import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # for `configs` and `benchmarks`

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import workload  # noqa: E402
from tied_embed.fast import choose
from tied_embed.train import evaluation  # noqa: E402
from tied_embed.train.config_schema import load_config_file  # noqa: E402

flags.DEFINE_list("chunks", ["0", "128", "256", "512", "1024"], "loss.chunk_size values (0 = full logits)")
flags.DEFINE_integer("steps", 20, "train steps per timed run")
flags.DEFINE_integer("rounds", 9, "interleaved timing rounds")
FLAGS = flags.FLAGS


def _train_run(config, chunk: int):
  graphdef, state = workload.train_state(config)
  step = choose.make_train_step(graphdef, chunk)
  batch = workload.random_batch(int(config.model.vocab_size), int(config.train.batch_size))
  return workload.repeated_steps(step, state, batch, FLAGS.steps)


def _eval_run(config, chunk: int):
  graphdef, state = workload.train_state(config)
  add_batch = evaluation.make_eval_total(graphdef, chunk)
  size, count = int(config.train.eval_batch_size), int(config.data.num_eval_pairs)
  ids, next_ids = workload.random_batch(int(config.model.vocab_size), count)
  batches = [(ids[s : s + size], next_ids[s : s + size]) for s in range(0, count, size)]

  def run():
    total = jnp.float32(0)
    for batch in batches:
      total = add_batch(state, total, *batch)
    jax.block_until_ready(total)

  return run


def main(argv) -> None:
  config = load_config_file(argv[1] if len(argv) > 1 else "configs/default.py")
  chunks = [int(c) for c in FLAGS.chunks]
  runs = {}
  for chunk in chunks:
    runs[("train", chunk)] = _train_run(config, chunk)
    runs[("eval", chunk)] = _eval_run(config, chunk)
  seconds = workload.interleaved_medians(runs, FLAGS.rounds)
  print(f"V={config.model.vocab_size} D={config.model.d_model} B={config.train.batch_size} "
        f"eval {config.data.num_eval_pairs} in batches of {config.train.eval_batch_size}, "
        f"{workload.cpu_threads()} CPU threads, medians of {FLAGS.rounds} rounds")
  for chunk in chunks:
    step_ms = 1e3 * seconds[("train", chunk)] / FLAGS.steps
    eval_ms = 1e3 * seconds[("eval", chunk)]
    print(f"  chunk {chunk or 'full':>5}: train step {step_ms:8.3f} ms   evaluation {eval_ms:8.1f} ms")


if __name__ == "__main__":
  app.run(main)
