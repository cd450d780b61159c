"""The context transformer's train step at configs/context_transformer.py's shape beside the same model in PyTorch.

Run: `python benchmarks/context_step.py` (prints the numbers as JSON); `measure()` returns them for benchmarks/run.py
(section `context_step`).

The JAX step is the trainer's own: `tied_embed.train.run_step.train_step_for` on configs/context_transformer.py (V=8192,
D=128, B=32 windows of L=64 tokens = 2,048 a step, 4 pre-norm blocks of 4 heads, learned positions, a final
LayerNorm, one tied table; AdamW, warmup + cosine, clipping at 1.0; the chunked loss, provenance, the fused AdamW
kernel, the blocks' products on the GEMM kernel (tied_embed/fast/block_dots.py)), compiled ahead from the abstract
state as the trainer compiles it, on the (B, L) windows the trainer feeds it; in float32, and where the CPU has
bfloat16 matrix hardware (AMX or avx512_bf16) again with `model.dtype = "bfloat16"`, the project's bf16 option: the
loss's vocabulary matmuls take bfloat16 operands, everything else (the blocks, the parameters, AdamW) stays float32.
Beside it, the plain step (`nnx.value_and_grad` of the full-logits loss of `model(ids)`, then the optimizer: no
provenance, no chunks, XLA's dots), which says what the trainer's speed paths and bookkeeping cost at this shape; and
the float32 step's two parts jitted alone, to say where its time goes: the chunked loss with both gradients (the
vocabulary's three (T, D)·(D, V)-sized products) and the blocks forward and backward.

The PyTorch model is written as a user would write it: `nn.Embedding` whose weight is also the output projection,
hand-written pre-norm blocks (`nn.LayerNorm`, one qkv `nn.Linear`, `F.scaled_dot_product_attention(is_causal=True)`,
an MLP of 4·D with tanh GELU: `jax.nn.gelu`'s default), learned positions, a final LayerNorm; `torch.optim.AdamW`
(`fused=True`, as in benchmarks/torch_step.py; its defaults otherwise) with the config's learning rate schedule
(`LambdaLR`), weight decay and `clip_grad_norm_`. It starts from the JAX model's initial parameters, copied, so both
see the same numbers: the two parameter counts and the step-0 losses are checked equal before anything is timed (to
1e-4 in float32; the bfloat16 steps to BF16_LOSS_TOLERANCE). It runs eagerly and with the model and loss under
`torch.compile`, in float32 and under `torch.autocast("cpu", dtype=torch.bfloat16)` (every matmul in bfloat16, the
peer a PyTorch user would pick), on as many threads as XLA's pool has.

All are timed in turns in one process on the same windows (uniform random ids: with context every position's logits
are formed, so the ids' distribution does not change the work), each timed call right after an untimed one of its
own, as in training (`workload.interleaved_times`).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import statistics
import sys
from collections.abc import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks import workload  # noqa: E402
from benchmarks.torch_step import ADAMW_OPTIONS  # noqa: E402
from benchmarks.workload import with_dtype  # noqa: E402
from configs import context_transformer  # noqa: E402
from tied_embed.core import optim  # noqa: E402
from tied_embed.core.model import MLP_WIDTH, build_model  # noqa: E402
from tied_embed.fast import block_dots, chunked_loss, compilation  # noqa: E402
from tied_embed.fast.kernels import gemm as mkl  # noqa: E402
from tied_embed.train import mesh as mesh_lib  # noqa: E402
from tied_embed.train import run_step  # noqa: E402
from tied_embed.train import state as state_lib

ROUNDS = 11  # a step is 0.1-1 s and nine of them take turns: enough turns for a median in a few minutes
CALLS_PER_TURN = 2  # as benchmarks/throughput.py: time the second of two back-to-back calls
JAX_STEPS = ("step", "step_bf16", "plain_step")
PIECES = ("loss_piece", "blocks_piece")  # the float32 step's two parts, each jitted alone
TORCH_STEPS = {"torch_step": "eager", "torch_compile_step": "compile"}  # and each with `_bf16` (autocast)
ALL_ROWS = (*JAX_STEPS, *PIECES, *TORCH_STEPS, *(f"{name}_bf16" for name in TORCH_STEPS))
TORCH_VARIANTS = ("eager", "compile", "eager_bf16", "compile_bf16")
LOSS_TOLERANCE = 1e-4  # step-0 losses of the two frameworks at the same parameters and windows (float32, ~9 nats)
BF16_LOSS_TOLERANCE = 0.02  # the bfloat16 steps' step-0 loss against the float32 one (bf16 operands: ~8 bits)


def bench_config(**overrides) -> ml_collections.ConfigDict:
  """configs/context_transformer.py, with `overrides` (e.g. a tiny shape for tests) as {'model.d_model': 16, ...}."""
  config = context_transformer.get_config()
  for dotted, value in overrides.items():
    section, name = dotted.split(".")
    config[section][name] = value
  return config


def shape(config: ml_collections.ConfigDict) -> dict:
  """V, D, L, B, layers, heads of a context-transformer config."""
  model = config.model
  return {"V": int(model.vocab_size), "D": int(model.d_model), "L": int(config.data.context_length),
          "B": int(config.train.batch_size), "layers": int(model.layers), "heads": int(model.heads)}


def param_count(vocab_size: int, d_model: int, length: int, layers: int) -> int:
  """Parameters of the tied context transformer: the table, the positions, each block (two LayerNorms, q/k/v/out
  projections with biases, an MLP of MLP_WIDTH·D with biases), the final LayerNorm. The same for both frameworks."""
  d, width = d_model, MLP_WIDTH * d_model
  block = 2 * (2 * d) + 4 * (d * d + d) + (d * width + width) + (width * d + d)
  return vocab_size * d + length * d + layers * block + 2 * d


def jax_param_count(model) -> int:
  """Entries of every nnx.Param of a model (the tied table once)."""
  return sum(leaf.size for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))


def window_batch(config: ml_collections.ConfigDict, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """(ids, next_ids), each (B, L) int32: B windows of L + 1 uniform tokens, next_ids the same windows shifted by one."""
  s = shape(config)
  tokens = np.random.default_rng(seed).integers(0, s["V"], (s["B"], s["L"] + 1), dtype=np.int32)
  return tokens[:, :-1], tokens[:, 1:]


def trainer_step(config: ml_collections.ConfigDict):
  """What the trainer builds before compiling: (build, graphdef, abstract state, the train step, abstract (B, L)
  windows), on config.mesh (one device here); nothing compiled, nothing allocated."""
  mesh = mesh_lib.make_mesh(config.mesh)
  build = state_lib.state_builder(config)
  graphdef, abstract = state_lib.abstract_state(build, mesh)
  s = shape(config)
  abstract_ids = jax.ShapeDtypeStruct((s["B"], s["L"]), jnp.int32, sharding=mesh_lib.batch_sharding(mesh))
  return build, graphdef, abstract, run_step.train_step_for(config, graphdef, abstract), abstract_ids


class JaxStep:
  """The trainer's step on the context transformer, set up as tied_embed/train/run_setup.py sets it up (mesh,
  abstract state, `run_step.train_step_for`, compiled ahead for the (B, L) windows the trainer feeds it). Callable
  repeatedly; blocks on each step's loss. `params`: the model's Params before any step, as numpy arrays by
  `flat_params` name."""

  def __init__(self, config: ml_collections.ConfigDict, batch: tuple[np.ndarray, np.ndarray]):
    build, self.graphdef, abstract, self._step, abstract_ids = trainer_step(config)
    compilation.compile_ahead(self._step, abstract, abstract_ids, abstract_ids)
    self.state = jax.block_until_ready(state_lib.fresh_state(build, abstract))
    self.batch = jax.device_put(tuple(jnp.asarray(part) for part in batch), abstract_ids.sharding)
    self.params = {name: np.asarray(value) for name, value in flat_params(self.model()).items()}

  def model(self):
    return nnx.merge(self.graphdef, self.state).model

  def __call__(self) -> float:
    self.state, metrics = self._step(self.state, *self.batch, with_stats=False)  # as compiled ahead
    return float(jax.block_until_ready(metrics["loss"]))


def plain_loss(model, ids: jax.Array, next_ids: jax.Array) -> jax.Array:
  """The mean next-token cross-entropy of `model(ids)`, full logits: what the PyTorch step computes."""
  return optax.softmax_cross_entropy_with_integer_labels(model(ids), next_ids).mean()


def make_plain_step(graphdef: nnx.GraphDef):
  """jit(state, ids, next_ids) → (new state, loss): `nnx.value_and_grad` of `plain_loss`, then the optimizer
  (clipping, AdamW): no path gradients, no provenance, no chunks, optax's update."""

  def step(state, ids, next_ids):
    train_state = nnx.merge(graphdef, state)
    loss, grads = nnx.value_and_grad(plain_loss)(train_state.model, ids, next_ids)
    train_state.optimizer.update(train_state.model, grads)
    return nnx.state(train_state), loss

  return jax.jit(step, donate_argnums=0, compiler_options=compilation.compiler_options())


class PlainStep:
  """`make_plain_step` on a fresh train state of `config`; blocks on each step's loss."""

  def __init__(self, config: ml_collections.ConfigDict, batch: tuple[np.ndarray, np.ndarray]):
    self.graphdef, self.state = workload.train_state(config)
    self.batch = tuple(jnp.asarray(part) for part in batch)
    self._step = make_plain_step(self.graphdef)

  def __call__(self) -> float:
    self.state, loss = self._step(self.state, *self.batch)
    return float(jax.block_until_ready(loss))


def flat_params(model) -> dict[str, jax.Array]:
  """The context transformer's Params by dotted name ('blocks.0.attention.query.kernel', 'embedding', ...)."""
  out = {}
  leaves = jax.tree_util.tree_flatten_with_path(nnx.state(model, nnx.Param),
                                                is_leaf=lambda leaf: isinstance(leaf, nnx.Variable))[0]
  for path, variable in leaves:
    keys = [str(getattr(key, "key", getattr(key, "idx", key))) for key in path]
    out[".".join(key for key in keys if key != "embedder")] = variable[...]
  return out


# --- PyTorch ---------------------------------------------------------------------------------------------------


def _torch():
  try:
    import torch  # noqa: PLC0415 (optional dependency)
  except ImportError:
    return None
  return torch


LAYER_NORM_EPS = 1e-6  # nnx.LayerNorm's default (PyTorch's is 1e-5)


def torch_model(vocab_size: int, d_model: int, length: int, layers: int, heads: int):
  """The tied context transformer as a PyTorch user would write it (an nn.Module; None without PyTorch)."""
  torch = _torch()
  if torch is None:
    return None
  nn, F = torch.nn, torch.nn.functional  # noqa: N806

  class Block(nn.Module):
    def __init__(self):
      super().__init__()
      self.attention_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
      self.qkv = nn.Linear(d_model, 3 * d_model)
      self.out = nn.Linear(d_model, d_model)
      self.mlp_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
      self.mlp_in = nn.Linear(d_model, MLP_WIDTH * d_model)
      self.mlp_out = nn.Linear(MLP_WIDTH * d_model, d_model)

    def forward(self, x):
      b, t, d = x.shape
      q, k, v = (part.view(b, t, heads, d // heads).transpose(1, 2)
                 for part in self.qkv(self.attention_norm(x)).split(d, dim=-1))
      attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
      x = x + self.out(attended)
      return x + self.mlp_out(F.gelu(self.mlp_in(self.mlp_norm(x)), approximate="tanh"))

  class ContextTransformer(nn.Module):
    def __init__(self):
      super().__init__()
      self.embedding = nn.Embedding(vocab_size, d_model)
      self.positions = nn.Parameter(torch.zeros(length, d_model))
      self.blocks = nn.ModuleList(Block() for _ in range(layers))
      self.final_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)

    def forward(self, ids):
      x = self.embedding(ids) + self.positions[: ids.shape[1]]
      for block in self.blocks:
        x = block(x)
      return F.linear(self.final_norm(x), self.embedding.weight)  # the tied projection

  return ContextTransformer()


def copy_jax_params(module, params: dict[str, np.ndarray]) -> None:
  """Sets the PyTorch model's parameters to the JAX model's (`flat_params`, as numpy): q/k/v kernels (D, H, D/H)
  become one (3D, D) weight, Linear kernels (in, out) are transposed, LayerNorm scales are weights."""
  torch = _torch()

  def linear(name: str) -> tuple[np.ndarray, np.ndarray]:  # nnx.Linear: kernel (in, out) → weight (out, in)
    return params[f"{name}.kernel"].T, params[f"{name}.bias"]

  def attention_part(name: str) -> tuple[np.ndarray, np.ndarray]:  # query/key/value: (D, H, hd) → (H·hd, D)
    kernel, bias = params[f"{name}.kernel"], params[f"{name}.bias"]
    return kernel.reshape(kernel.shape[0], -1).T, bias.reshape(-1)

  values = {"embedding.weight": params["embedding"], "positions": params["positions"],
            "final_norm.weight": params["final_norm.scale"], "final_norm.bias": params["final_norm.bias"]}
  for i in range(len(module.blocks)):
    prefix = f"blocks.{i}"
    parts = [attention_part(f"{prefix}.attention.{name}") for name in ("query", "key", "value")]
    values[f"{prefix}.qkv.weight"] = np.concatenate([w for w, _ in parts])
    values[f"{prefix}.qkv.bias"] = np.concatenate([b for _, b in parts])
    out_kernel = params[f"{prefix}.attention.out.kernel"]  # (H, hd, D)
    values[f"{prefix}.out.weight"] = out_kernel.reshape(-1, out_kernel.shape[-1]).T
    values[f"{prefix}.out.bias"] = params[f"{prefix}.attention.out.bias"]
    for norm in ("attention_norm", "mlp_norm"):
      values[f"{prefix}.{norm}.weight"] = params[f"{prefix}.{norm}.scale"]
      values[f"{prefix}.{norm}.bias"] = params[f"{prefix}.{norm}.bias"]
    for name in ("mlp_in", "mlp_out"):
      values[f"{prefix}.{name}.weight"], values[f"{prefix}.{name}.bias"] = linear(f"{prefix}.{name}")
  own = dict(module.named_parameters())
  missing = sorted(set(own) ^ set(values))
  if missing:
    raise KeyError(f"parameters not matched between the two models: {missing}")
  with torch.no_grad():
    for name, parameter in own.items():
      value = torch.tensor(np.asarray(values[name], dtype=np.float32))
      if value.shape != parameter.shape:
        raise ValueError(f"{name}: JAX's {tuple(value.shape)} against PyTorch's {tuple(parameter.shape)}")
      parameter.copy_(value)


def make_torch_step(config: ml_collections.ConfigDict, batch, params: dict[str, np.ndarray] | None, threads: int,
                    variant: str = "eager"):
  """A callable running one PyTorch train step (→ the loss as a float) of the context transformer, from the JAX
  model's initial `params` (None: PyTorch's own init), or None without PyTorch. `variant`: eager | compile."""
  torch = _torch()
  if torch is None:
    return None
  if variant not in TORCH_VARIANTS:
    raise ValueError(f"variant {variant!r} is not one of {TORCH_VARIANTS}")
  base, _, precision = variant.partition("_")
  torch.set_num_threads(threads)
  s, train = shape(config), config.train
  model = torch_model(s["V"], s["D"], s["L"], s["layers"], s["heads"])
  if params is not None:
    copy_jax_params(model, params)
  F = torch.nn.functional  # noqa: N806

  def loss_fn(ids, next_ids):
    return F.cross_entropy(model(ids).flatten(0, 1), next_ids.flatten())

  if precision == "bf16":  # bfloat16 matmuls, float32 parameters, AdamW and softmax, as benchmarks/torch_step.py
    full_precision_loss = loss_fn

    def loss_fn(ids, next_ids):
      with torch.autocast("cpu", dtype=torch.bfloat16):
        return full_precision_loss(ids, next_ids)

  if base == "compile":
    loss_fn = torch.compile(loss_fn)
  schedule = optim.learning_rate_schedule(train)  # the same warmup + cosine, a number per step
  peak = float(train.learning_rate)
  optimizer = torch.optim.AdamW(model.parameters(), lr=peak, betas=(optim.ADAM_B1, optim.ADAM_B2),
                                eps=optim.ADAM_EPS, weight_decay=float(train.weight_decay), **ADAMW_OPTIONS)
  scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: float(schedule(step)) / peak)
  clip = float(train.grad_clip_norm)
  ids, next_ids = (torch.from_numpy(np.asarray(part, dtype=np.int64)) for part in batch)

  def step() -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(ids, next_ids)
    loss.backward()
    if clip > 0:
      torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    scheduler.step()
    return loss.item()

  step.model, step.optimizer = model, optimizer
  return step


def torch_param_count(module) -> int:
  """Entries of every distinct parameter of a PyTorch module (the tied table once, as `parameters()` counts it)."""
  return sum(parameter.numel() for parameter in module.parameters())


# --- the section ------------------------------------------------------------------------------------------------


def bf16_hardware() -> bool:
  """Whether this CPU has bfloat16 matrix hardware (AMX or avx512_bf16): where the bfloat16 rows are timed."""
  return mkl.route("bfloat16") is not None


def loss_piece(config: ml_collections.ConfigDict, batch) -> Callable[[], object]:
  """The vocabulary's part of the trainer's step, jitted alone: the chunked loss of (T, D) hidden vectors against
  the (V, D) table with both gradients, as the step calls it (its chunk, `model.dtype`, the GEMM kernel)."""
  s = shape(config)
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(s["B"] * s["L"], s["D"])).astype(np.float32))
  table = build_model(config).tables()[1]
  targets = jnp.asarray(batch[1].reshape(-1))
  grads = jax.jit(jax.value_and_grad(lambda x, table: chunked_loss.chunked_cross_entropy(
      x, table, targets, int(config.loss.chunk_size), compute_dtype=str(config.model.dtype)), argnums=(0, 1)),
      compiler_options=compilation.compiler_options())
  return lambda: jax.block_until_ready(grads(x, table))


def blocks_piece(config: ml_collections.ConfigDict) -> Callable[[], object]:
  """The transformer's part of the trainer's step, jitted alone: the looked-up rows (B, L, D) through the positions,
  the blocks and the final LayerNorm, forward and backward (for a fixed cotangent) to the rows and every block Param,
  on the products the step makes (fast/block_dots.py where the kernel runs)."""
  s = shape(config)
  model = build_model(config)
  if block_dots.available():
    model = block_dots.with_kernel_dots(model)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  rng = np.random.default_rng(1)
  rows, cotangent = (jnp.asarray(rng.normal(size=(s["B"], s["L"], s["D"])).astype(np.float32)) for _ in range(2))

  def forward(params, rows):
    return jnp.sum(nnx.merge(graphdef, params, rest).hidden(rows) * cotangent)

  grads = jax.jit(jax.grad(forward, argnums=(0, 1)), compiler_options=compilation.compiler_options())
  return lambda: jax.block_until_ready(grads(params, rows))


def measure(rounds: int = ROUNDS, config: ml_collections.ConfigDict | None = None) -> dict:
  """Medians over `rounds` interleaved calls at configs/context_transformer.py's shape, float32 and (where the CPU
  has bf16 hardware) bfloat16: the JSON-ready section."""
  config = config or bench_config()
  threads = workload.cpu_threads()
  batch = window_batch(config)
  s = shape(config)
  precisions = ("float32", "bfloat16") if bf16_hardware() else ("float32",)
  jax_step = JaxStep(config, batch)
  expected = param_count(s["V"], s["D"], s["L"], s["layers"])
  jax_params = jax_param_count(jax_step.model())
  fns = {"step": jax_step}
  if "bfloat16" in precisions:
    fns["step_bf16"] = JaxStep(with_dtype(config, "bfloat16"), batch)
  fns["plain_step"] = PlainStep(config, batch)
  fns["loss_piece"], fns["blocks_piece"] = loss_piece(config, batch), blocks_piece(config)
  torch_fns = {}
  for precision in precisions:
    suffix = "_bf16" if precision == "bfloat16" else ""
    for name, variant in TORCH_STEPS.items():
      torch_fns[name + suffix] = make_torch_step(config, batch, jax_step.params, threads, variant + suffix)
  torch_fns = {name: fn for name, fn in torch_fns.items() if fn is not None}
  fns.update(torch_fns)
  # Step 0 of each, at the same parameters and windows (the timing's warm-up call), before anything is timed.
  first = {name: fn() for name, fn in fns.items() if not name.endswith("_piece")}
  torch_params = torch_param_count(torch_fns["torch_step"].model) if torch_fns else None
  if jax_params != expected or torch_params not in (None, expected):
    raise AssertionError(f"parameter counts: formula {expected}, JAX {jax_params}, PyTorch {torch_params}")
  far = {name: loss for name, loss in first.items()
         if abs(loss - first["step"]) > (BF16_LOSS_TOLERANCE if name.endswith("bf16") else LOSS_TOLERANCE)}
  if far:
    raise AssertionError(f"step-0 losses differ from the JAX step's {first['step']:.6f}: {far}")
  times = workload.interleaved_times(fns, rounds, warmup=1, calls_per_turn=CALLS_PER_TURN)
  seconds = {name: statistics.median(values) for name, values in times.items()}
  result = {**s, "tokens": s["B"] * s["L"], "threads": threads, "rounds": rounds, "calls_per_turn": CALLS_PER_TURN,
            "chunk_size": int(config.loss.chunk_size), "params": expected, "torch_params": torch_params,
            "log_vocab": math.log(s["V"]), "first_loss": first, "precisions": list(precisions),
            "block_dots": "the GEMM kernel" if block_dots.available() else "XLA's dot",
            "load_average": list(os.getloadavg())}
  for name in fns:
    result[f"{name}_ms"] = seconds[name] * 1e3
  for name in ALL_ROWS:
    result.setdefault(f"{name}_ms", None)
  result["fastest_ms"] = {name: min(values) * 1e3 for name, values in times.items()}
  for precision in precisions:  # PyTorch ms / JAX ms: above 1, the trainer's step is faster
    suffix = "_bf16" if precision == "bfloat16" else ""
    step = "step" + suffix
    for name in TORCH_STEPS:
      torch_ms = result[f"{name}{suffix}_ms"]
      result[f"{name}{suffix}_over_step"] = torch_ms / result[f"{step}_ms"] if torch_ms else None
      result[f"{name}{suffix}_over_step_by_fastest_call"] = (
          result["fastest_ms"][name + suffix] / result["fastest_ms"][step] if torch_ms else None)
    torch_names = [name + suffix for name in TORCH_STEPS if result[f"{name}{suffix}_ms"]]
    if torch_names:
      fastest = min(torch_names, key=lambda name: result[f"{name}_ms"])
      result[f"fastest_torch{suffix}"] = fastest
      result[f"fastest_torch{suffix}_over_step"] = result[f"{fastest}_ms"] / result[f"{step}_ms"]
      result[f"fastest_torch{suffix}_over_step_by_fastest_call"] = (
          min(result["fastest_ms"][name] for name in torch_names) / result["fastest_ms"][step])
  result["plain_over_step"] = result["plain_step_ms"] / result["step_ms"]
  # where the float32 step's time goes: the vocabulary (the loss's three (T, D)·(D, V)-sized products) and the blocks
  result["loss_share"] = result["loss_piece_ms"] / result["step_ms"]
  result["blocks_share"] = result["blocks_piece_ms"] / result["step_ms"]
  return result


if __name__ == "__main__":
  print(json.dumps(measure(), indent=2))
