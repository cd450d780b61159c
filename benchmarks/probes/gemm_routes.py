"""The chunked loss's three dots on each route: XLA's dot, tied_embed/fast/kernels/gemm.py, and PyTorch's matmul.

  python benchmarks/probes/gemm_routes.py [--rounds=5] [--json=runs/bench/gemm_routes.json]
  python benchmarks/probes/gemm_routes.py --routes=gemm-f32,gemm-bf16   # oneMKL's routes on any CPU, AMD's too

For each shape of benchmarks/run.py's sections (V, D, T) and the step's chunk of C=256 tokens, the three dots of one
chunk (tied_embed/fast/chunked_loss.py's `_chunk_step`):
  logits  (V, D)·(C, D)ᵀ → (V, C)     the table against the chunk's rows
  dx      (V, C)ᵀ·(V, D) → (C, D)     the exponentials against the table
  dtable  (V, C)·(C, D) + (V, D)      the exponentials against the scaled rows, added onto the accumulator
each in float32 and with bfloat16 operands (float32 results), timed in turns, REPEATS calls back to back per timing
(as the step's loop calls them; a lone call after a pause also times the threads' wake-up); the fastest of `rounds`
timings per call, and its GFLOP/s. PyTorch's rows are `torch.matmul` on the same shapes (its bfloat16 matmul is
oneDNN's, on AMX where the CPU has it): what a PyTorch step's dots cost on this CPU. Rows a CPU cannot run (the
kernel without AMX) are left out.

The script runs itself under GLIBC_TUNABLES=UNFAULTED_MALLOC: malloc then keeps freed memory for reuse, so no call
pays for the page faults of a fresh output buffer (at these sizes glibc otherwise maps and unmaps each one), and the
rows time the multiplications alone. In a step those faults are paid once per step for all chunks (see
docs/performance.md), by JAX and PyTorch alike.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

UNFAULTED_MALLOC = "glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
if __name__ == "__main__" and os.environ.get("GLIBC_TUNABLES") != UNFAULTED_MALLOC:  # read at start-up only: again
  os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "GLIBC_TUNABLES": UNFAULTED_MALLOC})

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import memory, throughput, workload  # noqa: E402
from tied_embed.fast.kernels import gemm as mkl  # noqa: E402
from tied_embed.fast.precision import dot  # noqa: E402

CHUNK = throughput.CHUNK_SIZE
REPEATS = 8  # calls per timing
SHAPES = {**throughput.SHAPES, "memory": (memory.VOCAB_SIZE, memory.D_MODEL, memory.NUM_TOKENS)}  # section → (V, D, T)
flags.DEFINE_integer("rounds", 5, "interleaved timing rounds")
flags.DEFINE_string("json", None, "also write the results here")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "operand dtypes to time (PyTorch's bfloat16 matmul on a CPU "
                  "without avx512_bf16 runs a scalar loop: minutes a shape)")
flags.DEFINE_list("routes", [], "time the kernel on these routes (tied_embed/fast/kernels/gemm.py's ROUTES, one per "
                  "dtype) in place of this CPU's own: the measurement that decides a CPU's route")
FLAGS = flags.FLAGS


def _jax_dots(vocab_size: int, d_model: int, dtype: str, kernel: bool) -> dict:
  """{dot name: callable} for one chunk's three dots on XLA (kernel=False) or tied_embed/fast/kernels/gemm.py."""
  keys = jax.random.split(jax.random.key(0), 3)
  table = jax.random.normal(keys[0], (vocab_size, d_model)).astype(dtype)
  rows = jax.random.normal(keys[1], (CHUNK, d_model)).astype(dtype)
  exp = jax.random.uniform(keys[2], (vocab_size, CHUNK)).astype(dtype)
  accumulator = jnp.zeros((vocab_size, d_model), jnp.float32)
  if kernel:
    fns = {"logits": lambda e, x: mkl.gemm(e, x, trans_b=True, dtype=dtype),
           "dx": lambda p, e: mkl.gemm(p, e, trans_a=True, dtype=dtype),
           "dtable": lambda p, x, acc: mkl.gemm(p, x, add_to=acc, dtype=dtype)}
  else:
    fns = {"logits": lambda e, x: dot(e, x.T, jnp.dtype(dtype)),
           "dx": lambda p, e: dot(p, e, jnp.dtype(dtype), (((0,), (0,)), ((), ()))),
           "dtable": lambda p, x, acc: acc + dot(p, x, jnp.dtype(dtype))}
  jitted = {"logits": jax.jit(fns["logits"]), "dx": jax.jit(fns["dx"]),
            "dtable": jax.jit(fns["dtable"], donate_argnums=2)}  # accumulates in place, as in the step's loop
  state = {"accumulator": accumulator}

  def add_dtable():
    state["accumulator"] = jax.block_until_ready(jitted["dtable"](exp, rows, state["accumulator"]))

  return {"logits": lambda: jax.block_until_ready(jitted["logits"](table, rows)),
          "dx": lambda: jax.block_until_ready(jitted["dx"](exp, table)), "dtable": add_dtable}


def _torch_dots(vocab_size: int, d_model: int, dtype: str) -> dict:
  import torch  # noqa: PLC0415

  torch.set_num_threads(workload.cpu_threads())
  kind = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
  table, rows = torch.randn(vocab_size, d_model, dtype=kind), torch.randn(CHUNK, d_model, dtype=kind)
  exp, accumulator = torch.rand(vocab_size, CHUNK, dtype=kind), torch.zeros(vocab_size, d_model)
  return {"logits": lambda: table @ rows.T, "dx": lambda: exp.T @ table,
          "dtable": lambda: accumulator.add_(exp @ rows)}


def _repeated(fn):
  def run():
    for _ in range(REPEATS):
      fn()
  return run


def measure(rounds: int = 5, dtypes: tuple[str, ...] = ("float32", "bfloat16")) -> list[dict]:
  """One row per (shape, dtype, route, dot): fastest ms and GFLOP/s."""
  results = []
  for section, (vocab_size, d_model, _) in SHAPES.items():
    for dtype in dtypes:
      routes = {"XLA dot": _jax_dots(vocab_size, d_model, dtype, kernel=False)}
      if mkl.available(dtype):
        routes[mkl.route(dtype)] = _jax_dots(vocab_size, d_model, dtype, kernel=True)  # the kernel, by its route
      try:
        routes["PyTorch matmul"] = _torch_dots(vocab_size, d_model, dtype)
      except ImportError:
        pass
      fns = {(route, name): _repeated(fn) for route, dots in routes.items() for name, fn in dots.items()}
      fastest = {key: seconds / REPEATS for key, seconds in workload.interleaved_medians(fns, rounds, stat=min).items()}
      flops = 2 * vocab_size * d_model * CHUNK
      for (route, name), seconds in fastest.items():
        results.append({"shape": section, "V": vocab_size, "D": d_model, "C": CHUNK, "dtype": dtype,
                        "route": route, "dot": name, "ms": seconds * 1e3, "gflops": flops / seconds / 1e9})
  return results


def main(argv) -> None:
  del argv
  if FLAGS.routes:  # the step's own routing stays as it is; only this process's probe takes others
    forced = {("float32" if "f32" in name else "bfloat16"): name for name in FLAGS.routes}
    own = mkl.route
    mkl.route = lambda dtype="float32", *args: forced.get(jax.numpy.dtype(dtype).name) or own(dtype, *args)
  results = measure(FLAGS.rounds, tuple(FLAGS.dtypes))
  print(f"one chunk's dots (C={CHUNK}), fastest of {FLAGS.rounds} calls, {workload.cpu_threads()} threads")
  for row in results:
    print(f"  {row['shape']:<10} V={row['V']:<6} D={row['D']:<4} {row['dtype']:<9} {row['route']:<16} "
          f"{row['dot']:<7} {row['ms']:7.2f} ms {row['gflops']:6.0f} GFLOP/s")
  if FLAGS.json:
    pathlib.Path(FLAGS.json).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(FLAGS.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
  app.run(main)
