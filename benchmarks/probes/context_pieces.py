"""Where the context transformer's step spends its time: each piece jitted alone, in turns, beside PyTorch's.

  python benchmarks/probes/context_pieces.py [--rounds=7] [--dtypes=float32,bfloat16] [--profile]

At configs/context_transformer.py's shape (benchmarks/context_step.py's windows), for each dtype (`model.dtype`, the
loss's matmul operands; PyTorch's bf16 pieces under `torch.autocast`), timed in turns in one process (medians, and the
fastest call of each):

- `vocab_dot`: one (T, D)×(D, V) logits matmul on the route the chunked loss takes (tied_embed/fast/kernels/gemm.py);
- `loss`: the chunked loss with both of its gradients (x and the table), as the trainer's step calls it;
- `blocks`: the transformer alone, forward and backward (the looked-up rows → the final LayerNorm's output, its
  gradient for a fixed cotangent, with respect to the rows and every block Param);
- `step`: the trainer's step (benchmarks/context_step.py's `JaxStep`);
- the same pieces in PyTorch (the logits matmul, the full-logits loss with its backward, the blocks), and its steps.

`--profile` adds `torch.profiler`'s table over a few eager and compiled steps.
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
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks import context_step, workload  # noqa: E402
from tied_embed.core.model import build_model  # noqa: E402
from tied_embed.fast import chunked_loss, compilation  # noqa: E402
from tied_embed.fast.kernels import gemm as mkl  # noqa: E402

flags.DEFINE_integer("rounds", 7, "interleaved timing rounds")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "the loss's matmul dtypes")
flags.DEFINE_list("only", [], "time only these pieces (names as printed)")
flags.DEFINE_bool("profile", False, "torch.profiler's table over a few PyTorch steps")
FLAGS = flags.FLAGS


def jax_pieces(config, batch, dtype: str) -> dict:
  s = context_step.shape(config)
  tokens = s["B"] * s["L"]
  model = build_model(config)
  table = model.tables()[1]
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(tokens, s["D"])).astype(np.float32))
  targets = jnp.asarray(batch[1].reshape(-1))
  compute = jnp.dtype(dtype)
  kernel = mkl.available(compute) and mkl.pays_off(table.shape, compute)
  options = compilation.compiler_options()
  if kernel:
    by_token = mkl.route(compute) in mkl.LOGITS_BY_TOKEN
    dot = jax.jit(lambda x, t: mkl.gemm(x, t, trans_b=True, dtype=compute) if by_token
                  else mkl.gemm(t, x, trans_b=True, dtype=compute))
  else:
    dot = jax.jit(lambda x, t: jnp.matmul(x.astype(compute), t.T.astype(compute), preferred_element_type=jnp.float32),
                  compiler_options=options)
  loss = jax.jit(jax.value_and_grad(lambda x, t: chunked_loss.chunked_cross_entropy(
      x, t, targets, int(config.loss.chunk_size), compute_dtype=dtype), argnums=(0, 1)), compiler_options=options)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  rows = jnp.asarray(rng.normal(size=(s["B"], s["L"], s["D"])).astype(np.float32)) * 0.1
  cotangent = jnp.asarray(rng.normal(size=(s["B"], s["L"], s["D"])).astype(np.float32))

  def blocks_loss(params, rows):
    return jnp.sum(nnx.merge(graphdef, params, rest).hidden(rows) * cotangent)

  blocks = jax.jit(jax.grad(blocks_loss, argnums=(0, 1)), compiler_options=options)
  blocks_fwd = jax.jit(blocks_loss, compiler_options=options)
  fns = {"vocab_dot": lambda: dot(x, table), "loss": lambda: loss(x, table), "blocks": lambda: blocks(params, rows),
         "blocks_forward": lambda: blocks_fwd(params, rows)}
  return {f"jax_{name}_{dtype}": (lambda fn=fn: jax.block_until_ready(fn())) for name, fn in fns.items()}


def torch_pieces(config, batch, bf16: bool) -> dict:
  import torch  # noqa: PLC0415

  s = context_step.shape(config)
  tokens = s["B"] * s["L"]
  model = context_step.torch_model(s["V"], s["D"], s["L"], s["layers"], s["heads"])
  weight = model.embedding.weight
  x = torch.randn(tokens, s["D"], requires_grad=True)
  targets = torch.from_numpy(batch[1].reshape(-1).astype(np.int64))
  rows = (0.1 * torch.randn(s["B"], s["L"], s["D"])).requires_grad_(True)
  cotangent = torch.randn(s["B"], s["L"], s["D"])
  autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else torch.no_grad
  ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else (lambda: torch.autocast("cpu",
                                                                                                      enabled=False))

  def dot():
    with torch.no_grad(), ctx():
      return torch.nn.functional.linear(x, weight)

  def loss():
    with ctx():
      value = torch.nn.functional.cross_entropy(torch.nn.functional.linear(x, weight), targets)
    value.backward()
    x.grad = weight.grad = None
    return value.item()

  def blocks():
    with ctx():
      h = rows
      for block in model.blocks:
        h = block(h)
      out = (model.final_norm(h) * cotangent).sum()
    out.backward()
    model.zero_grad(set_to_none=True)
    rows.grad = None
    return out.item()

  del autocast
  tag = "bf16" if bf16 else "float32"
  return {f"torch_vocab_dot_{tag}": dot, f"torch_loss_{tag}": loss, f"torch_blocks_{tag}": blocks}


def main(argv):
  del argv
  config = context_step.bench_config()
  batch = context_step.window_batch(config)
  threads = workload.cpu_threads()
  fns = {}
  first = None
  for dtype in FLAGS.dtypes:
    dconfig = context_step.bench_config(**{"model.dtype": dtype})
    step = context_step.JaxStep(dconfig, batch)
    first = first or step
    fns[f"jax_step_{dtype}"] = step
    fns.update(jax_pieces(dconfig, batch, dtype))
  if context_step._torch() is not None:
    import torch  # noqa: PLC0415

    torch.set_num_threads(threads)
    for dtype in FLAGS.dtypes:
      bf16 = dtype == "bfloat16"
      fns.update(torch_pieces(config, batch, bf16))
      for variant in ("eager", "compile"):
        name = f"torch_{variant}_step_{'bf16' if bf16 else 'float32'}"
        fns[name] = context_step.make_torch_step(config, batch, first.params, threads, variant + ("_bf16" if bf16
                                                                                                  else ""))
  if FLAGS.only:
    fns = {name: fn for name, fn in fns.items() if any(piece in name for piece in FLAGS.only)}
  times = workload.interleaved_times(fns, FLAGS.rounds, warmup=1, calls_per_turn=2)
  print(f"threads {threads}, load average {os.getloadavg()}")
  for name, values in times.items():
    print(f"{name:<34} median {statistics.median(values) * 1e3:9.1f} ms   fastest {min(values) * 1e3:9.1f} ms")
  if FLAGS.profile and context_step._torch() is not None:
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    for name in [n for n in fns if n.startswith("torch_") and n.endswith("step_float32")]:
      with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
          fns[name]()
      print(f"\n{name}\n" + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))


if __name__ == "__main__":
  app.run(main)
