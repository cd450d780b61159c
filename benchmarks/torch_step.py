"""What a user would otherwise write: the same tied bigram step in PyTorch on the CPU, in six variants.

`nn.Embedding` whose weight is also the output projection, gradient-norm clipping and AdamW, configured like the
JAX step (configs/default.py's optimizer settings); AdamW with `fused=True` (ADAMW_OPTIONS), PyTorch's one-pass CPU
kernel, the fastest update it offers: its default path makes several passes over the table. The variants differ
only in the loss, each one line away for a PyTorch user:
  eager:   `F.cross_entropy(F.linear(emb(ids), emb.weight), next_ids)`, full (T, V) logits;
  compile: the same loss function under `torch.compile` (Inductor fuses the softmax and its gradient);
  chunked: PyTorch's own `F.linear_cross_entropy(..., options=LinearCrossEntropyOptions())`, which chunks the
           tokens and computes the gradients in the forward pass, as tied_embed.fast.chunked_loss' chunked loss does.
Each also runs under `torch.autocast("cpu", dtype=torch.bfloat16)` (`eager_bf16`, `compile_bf16`, `chunked_bf16`):
the matmuls take bfloat16 operands (oneDNN's AMX kernels on CPUs that have them), the parameters, AdamW's moments
and the softmax stay float32, the counterpart of `model.dtype = "bfloat16"`.
PyTorch is optional (requirements-bench.txt); the factories return None when it is not installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import ml_collections
import numpy as np

VARIANTS = ("eager", "compile", "chunked", "eager_bf16", "compile_bf16", "chunked_bf16")
# Every PyTorch step's `torch.optim.AdamW` options beyond the config's (recorded in the bench's JSON).
ADAMW_OPTIONS = {"fused": True}


def _torch():
  try:
    import torch  # noqa: PLC0415 (optional dependency)
  except ImportError:
    return None
  return torch


def _loss_fn(variant: str):
  """(x (T, D), table (V, D), targets (T,)) → scalar mean cross-entropy, as `variant` computes it."""
  import torch  # noqa: PLC0415
  import torch.nn.functional as F  # noqa: N812, PLC0415

  if variant not in VARIANTS:
    raise ValueError(f"variant {variant!r} is not one of {VARIANTS}")
  base, _, precision = variant.partition("_")
  if base == "chunked":
    options = torch.nn.LinearCrossEntropyOptions()
    loss = lambda x, table, targets: F.linear_cross_entropy(x, table, targets, options=options)  # noqa: E731
  else:
    loss = lambda x, table, targets: F.cross_entropy(F.linear(x, table), targets)  # noqa: E731
  if precision == "bf16":
    full_precision_loss = loss

    def loss(x, table, targets):
      with torch.autocast("cpu", dtype=torch.bfloat16):
        return full_precision_loss(x, table, targets)

  return torch.compile(loss) if base == "compile" else loss


class TorchState:
  """The tied table and its AdamW state, allocated up front (PyTorch would create the moments at step 1)."""

  def __init__(self, config: ml_collections.ConfigDict, num_threads: int):
    torch = _torch()
    torch.set_num_threads(num_threads)
    torch.manual_seed(0)
    vocab_size, d_model = int(config.model.vocab_size), int(config.model.d_model)
    self.train = config.train
    self.embedding = torch.nn.Embedding(vocab_size, d_model)
    with torch.no_grad():  # the same scale as tied_embed.core.model.init_table
      self.embedding.weight.normal_(0.0, 1.0 / math.sqrt(d_model))
    weight = self.embedding.weight
    self.optimizer = torch.optim.AdamW(
        [weight], lr=float(self.train.learning_rate), weight_decay=float(self.train.weight_decay), **ADAMW_OPTIONS
    )
    # What AdamW's first step would allocate, so a baseline process holds everything but the step's temporaries.
    self.optimizer.state[weight] = {
        "step": torch.tensor(0.0), "exp_avg": torch.zeros_like(weight), "exp_avg_sq": torch.zeros_like(weight),
    }
    rng = np.random.default_rng(0)
    num_tokens = int(config.train.batch_size)
    self.ids, self.next_ids = (
        torch.from_numpy(a) for a in rng.integers(0, vocab_size, (2, num_tokens), dtype=np.int64)
    )


def make_torch_step(
    config: ml_collections.ConfigDict, num_threads: int, variant: str = "eager"
) -> Callable[[], float] | None:
  """A callable running one PyTorch train step of `config`'s size on `num_threads` threads, or None without torch."""
  torch = _torch()
  if torch is None:
    return None
  state = TorchState(config, num_threads)
  loss_fn = _loss_fn(variant)
  weight, clip = state.embedding.weight, float(state.train.grad_clip_norm)

  def step() -> float:
    state.optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(state.embedding(state.ids), weight, state.next_ids)  # the tied projection
    loss.backward()
    if clip > 0:
      torch.nn.utils.clip_grad_norm_([weight], clip)
    state.optimizer.step()
    return loss.item()

  return step


def make_torch_matmul(
    num_tokens: int, d_model: int, vocab_size: int, dtype: str = "float32"
) -> Callable[[], object] | None:
  """One (T, D)×(D, V) matmul in PyTorch (`dtype` operands and result), to tell its BLAS apart from its step."""
  torch = _torch()
  if torch is None:
    return None
  x, table = (torch.randn(n, d_model).to(getattr(torch, dtype)) for n in (num_tokens, vocab_size))
  return lambda: x @ table.T
