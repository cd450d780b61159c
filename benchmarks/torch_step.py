"""What a user would otherwise write: the same tied bigram step in PyTorch on the CPU.

`nn.Embedding` whose weight is also the output projection (`F.linear(emb(ids), emb.weight)`), `F.cross_entropy`,
gradient-norm clipping and AdamW, configured like the JAX step (configs/default.py's optimizer settings).
PyTorch is optional (requirements-bench.txt); `make_torch_step` returns None when it is not installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import ml_collections
import numpy as np


def make_torch_step(config: ml_collections.ConfigDict, num_threads: int) -> Callable[[], float] | None:
  """A callable running one PyTorch train step of `config`'s size on `num_threads` threads, or None without torch."""
  try:
    import torch  # noqa: PLC0415 (optional dependency)
    import torch.nn.functional as F  # noqa: N812, PLC0415
  except ImportError:
    return None
  torch.set_num_threads(num_threads)
  vocab_size, d_model = int(config.model.vocab_size), int(config.model.d_model)
  num_tokens, train = int(config.train.batch_size), config.train
  embedding = torch.nn.Embedding(vocab_size, d_model)
  with torch.no_grad():  # the same scale as tied_embed.model.init_table
    embedding.weight.normal_(0.0, 1.0 / math.sqrt(d_model))
  optimizer = torch.optim.AdamW(
      embedding.parameters(), lr=float(train.learning_rate), weight_decay=float(train.weight_decay)
  )
  rng = np.random.default_rng(0)
  ids, next_ids = (torch.from_numpy(a) for a in rng.integers(0, vocab_size, (2, num_tokens), dtype=np.int64))

  def step() -> float:
    optimizer.zero_grad(set_to_none=True)
    logits = F.linear(embedding(ids), embedding.weight)  # (T, V), the tied projection
    loss = F.cross_entropy(logits, next_ids)
    loss.backward()
    if train.grad_clip_norm > 0:
      torch.nn.utils.clip_grad_norm_(embedding.parameters(), float(train.grad_clip_norm))
    optimizer.step()
    return loss.item()

  return step


def make_torch_matmul(num_tokens: int, d_model: int, vocab_size: int) -> Callable[[], object] | None:
  """One (T, D)×(D, V) float32 matmul in PyTorch, to tell its BLAS apart from the rest of its step."""
  try:
    import torch  # noqa: PLC0415
  except ImportError:
    return None
  x, table = torch.randn(num_tokens, d_model), torch.randn(vocab_size, d_model)
  return lambda: x @ table.T
