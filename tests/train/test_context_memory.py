"""The memory check weighs a context model's own Params and activations (a transformer's (B, heads, L, L) attention
weights included) and names the field that makes a run too large, before anything is built."""

from __future__ import annotations

import pytest
from helpers import smoke_with

from tied_embed.train.config import check_memory, memory_estimate
from tied_embed.util import UsageError

GIB = 2**30


def _context(context: str, **model):
  """configs/smoke.py (D = 8) with a context mixer over 8 windows of 16 tokens (memory_estimate validates nothing)."""
  config = smoke_with("model.context", context)
  config.data.context_length, config.train.batch_size = 16, 8
  config.model.update(**model)
  return config


def _own_terms(config) -> dict[str, int]:
  """The terms a bigram model of the same shape does not have."""
  bigram = {term.what for term in memory_estimate(smoke_with("seed", 0))}
  return {term.what: term.bytes for term in memory_estimate(config) if term.what not in bigram}


def test_a_transformers_params_activations_and_attention_weights_are_counted_by_hand():
  terms = _own_terms(_context("transformer", layers=2, heads=2))
  # a block: q, k, v, out (4·D²) and the MLP's 2·4·D², their biases and two LayerNorms (13·D); positions (L, D)
  params = 2 * (12 * 8 * 8 + 13 * 8) + 16 * 8
  assert terms == {
      "the transformer's Params": params * 16,  # float32, with its gradient and two Adam moments
      "the transformer's activations": 8 * 16 * 2 * 16 * 8 * 4,  # B·L tokens, 2 blocks, ~16·D floats each
      "the attention weights (B, heads, L, L) of every block": 8 * 2 * 16 * 16 * 2 * 4 * 3,
  }


def test_an_mlps_and_a_convolutions_own_terms_are_counted_by_hand():
  assert _own_terms(_context("mlp", context_k=3)) == {
      "the context MLP's Params": (3 * 8 * 32 + 32 + 32 * 8 + 8) * 16,
      "the context MLP's activations": 8 * 16 * (3 + 8) * 8 * 4 * 2,
  }
  assert _own_terms(_context("conv", conv_width=4)) == {
      "the convolution's Params": 5 * 8 * 8 * 16,
      "the convolution's activations": 8 * 16 * 6 * 8 * 4 * 2,
  }
  assert _own_terms(smoke_with("seed", 0)) == {}  # a bigram model adds nothing


def test_a_window_too_long_for_attention_is_refused_naming_the_window_length():
  config = _context("transformer", layers=2, heads=4)
  config.data.context_length = 8192  # (8, 4, 8192, 8192) float32 weights, 3 times, in 2 blocks: 48 GiB
  check_memory(_context("transformer", layers=2, heads=4), 2 * GIB)  # windows of 16 fit
  with pytest.raises(UsageError) as refused:
    check_memory(config, 16 * GIB)
  message = str(refused.value)
  assert message.startswith("data.context_length=8192 is not allowed: expected a config that fits"), message
  assert "for the attention weights (B, heads, L, L) of every block" in message


def test_a_long_window_that_grows_the_logits_names_the_window_length_not_the_batch():
  config = _context("mlp", context_k=3)
  # 2**25 tokens a step: 22 GiB of the MLP's activations. B is the larger number, but L is the field turned up furthest
  # from its default (4096 times 1, against 8 times 1024)
  config.train.batch_size, config.data.context_length = 8192, 4096
  config.loss.chunk_size = 0
  with pytest.raises(UsageError) as refused:
    check_memory(config, 4 * GIB)
  assert str(refused.value).startswith("data.context_length=4096 is not allowed"), str(refused.value)
  assert "for the context MLP's activations" in str(refused.value)
