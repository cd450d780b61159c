"""How fast the chunked step could be on this CPU's GEMM library: the step's dots alone, beside the step and PyTorch's.

  python benchmarks/probes/dot_bound.py [--section=gpt2] [--dtypes=float32,bfloat16] [--rounds=5]

For one of benchmarks/run.py's shapes (uniform ids, the configs' chunk of C=256 distinct rows) and each dtype, in turns
in one process (`rounds` timings of 2 back-to-back calls each; medians, and the fastest call of each, the least
disturbed on a loaded machine):

- the dots alone: one jitted loop over the step's chunks making each chunk's three dots on the kernel's route
  (tied_embed/fast/kernels/gemm.py), in the orientation the chunked loss uses: the (V, C) or (C, V) logits, dx from
  them and d table added in place; nothing else but bfloat16's cast of the logits to the dots' operand type;
- the train step (`workload.Stepper`, as `make bench` times it);
- PyTorch's fastest step of that dtype (eager, `torch.compile`, `F.linear_cross_entropy`; bf16 under autocast).

The step can be no faster than its dots, so PyTorch's step over the dots alone is the most the step's ratio can
reach on this GEMM library, were everything else (the softmax passes, provenance, AdamW, the guard) free.
"""

from __future__ import annotations

import os
import pathlib
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import throughput, workload  # noqa: E402
from tied_embed.fast.kernels import gemm as mkl  # noqa: E402

flags.DEFINE_enum("section", "gpt2", list(throughput.SHAPES), "benchmarks/run.py's shape")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "the steps' dtypes")
flags.DEFINE_integer("rounds", 5, "interleaved timing rounds")
FLAGS = flags.FLAGS


def dots_alone(vocab_size: int, d_model: int, rows: int, dtype: str):
  """A callable running the chunked step's dots for `rows` distinct rows (ceil(rows / C) chunks), blocking."""
  chunk = throughput.CHUNK_SIZE
  num_chunks = -(-rows // chunk)
  by_token = mkl.route(dtype) in mkl.LOGITS_BY_TOKEN
  keys = jax.random.split(jax.random.key(0), 2)
  # Scaled down to about a trained table's size; the GEMMs do the same work whatever the values.
  table = jax.random.normal(keys[0], (vocab_size, d_model)).astype(dtype) / d_model
  chunks = jax.random.normal(keys[1], (num_chunks, chunk, d_model)).astype(dtype)

  def body(i, carry):
    d_table, dx_sum = carry
    x = chunks[i]
    logits = mkl.gemm(x, table, trans_b=True, dtype=dtype) if by_token else mkl.gemm(table, x, trans_b=True,
                                                                                      dtype=dtype)
    exp = logits.astype(dtype)  # the dots' operand: (C, V) by token, else (V, C)
    d_table = mkl.gemm(exp, x, trans_a=by_token, add_to=d_table, dtype=dtype)
    dx = mkl.gemm(exp, table, trans_a=not by_token, dtype=dtype)
    return d_table, dx_sum + dx

  @jax.jit
  def run(d_table):
    return jax.lax.fori_loop(0, num_chunks, body, (d_table, jnp.zeros((chunk, d_model), jnp.float32)))

  d_table = jnp.zeros((vocab_size, d_model), jnp.float32)
  return lambda: jax.block_until_ready(run(d_table))


def main(argv) -> None:
  del argv
  vocab_size, d_model, num_tokens = throughput.SHAPES[FLAGS.section]
  config = workload.bench_config(vocab_size, d_model, num_tokens, throughput.CHUNK_SIZE)
  batch = workload.random_batch(vocab_size, num_tokens)
  rows = round(workload.distinct_fraction(batch[0]) * num_tokens)
  fns, fastest = {}, {}
  for dtype in FLAGS.dtypes:
    if not mkl.available(dtype):
      print(f"{dtype}: the kernel does not run here ({mkl.unavailable_reason(dtype)}); skipped")
      continue
    fns[f"{dtype} dots alone"] = dots_alone(vocab_size, d_model, rows, dtype)
    fns[f"{dtype} step"] = workload.Stepper(workload.with_dtype(config, dtype), batch=batch)
    names = throughput.TORCH_F32_STEPS if dtype == "float32" else throughput.TORCH_BF16_STEPS
    torch = throughput.torch_steps(workload.bench_config(vocab_size, d_model, num_tokens, 0), workload.cpu_threads(),
                                   names)
    fns.update({f"{dtype} {name}": step for name, step in torch.items()})
    fastest[dtype] = [f"{dtype} {name}" for name in torch]
  times = workload.interleaved_times(fns, FLAGS.rounds, calls_per_turn=throughput.CALLS_PER_TURN)
  print(f"V={vocab_size} D={d_model} T={num_tokens}: {rows} distinct rows, chunks of {throughput.CHUNK_SIZE}; "
        f"{workload.cpu_threads()} threads; {FLAGS.rounds} rounds, ms: median / fastest call")
  for name, values in times.items():
    print(f"  {name:40s} {1e3 * statistics.median(values):9.1f} / {1e3 * min(values):9.1f}")
  for stat in (statistics.median, min):
    ms = {name: 1e3 * stat(values) for name, values in times.items()}
    for dtype, torch_names in fastest.items():
      if not torch_names:
        continue
      torch_ms = min(ms[name] for name in torch_names)
      dots, step = ms[f"{dtype} dots alone"], ms[f"{dtype} step"]
      print(f"{dtype}, {stat.__name__}: step / fastest PyTorch {torch_ms / step:.2f}x; at most {torch_ms / dots:.2f}x "
            f"were all but the dots free (the dots alone take {100 * dots / step:.0f}% of the step's time)")


if __name__ == "__main__":
  app.run(main)
