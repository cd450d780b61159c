"""Caps that depend on a batch's size count a batch of B windows of L tokens as B·L tokens: the split check's share of
the batch (run_step.train_step_for), the memory estimate's train logits and hidden vectors (config.memory_estimate)
and an eval batch's windows (evaluation.Evaluator), at the shipped sizes and above them, where the cap changes."""

from __future__ import annotations

import types

import pytest

from configs import context_mlp, default
from tied_embed.fast import choose
from tied_embed.train import config as config_lib
from tied_embed.train import run_step

CHECK_BYTES = 64 * 2**20  # the split check's logits: at most this many bytes of float32


def _split_check(monkeypatch, config) -> int | None:
  asked = {}
  monkeypatch.setattr(run_step, "make_run_step", lambda *args, **kwargs: asked.update(kwargs))
  run_step.train_step_for(config, None, {})
  return asked["split_check"]


@pytest.mark.parametrize(("batch", "length", "want"), [
    (32, 32, None),  # configs/context_mlp.py as shipped: 32 windows of 32 at V = 8192: (1024, 8192) logits fit
    (64, 32, None),  # 64 · 32 · 8192 · 4 bytes = 64 MiB: exactly the limit
    (65, 32, 64),  # one window more: the first 64 windows (their 2,048 · 8192 logits), not the whole batch
    (512, 32, 64),
    (2048, 1, None),  # pairs: 2,048 · 8192 · 4 = 64 MiB
    (4096, 1, 2048),
    (512, 4, None),  # 512 · 4 · 8192 · 4 = 64 MiB: exactly the limit
    (513, 4, 512),
])
def test_the_split_check_counts_a_windows_l_tokens(monkeypatch, batch, length, want):
  config = context_mlp.get_config()
  config.train.batch_size, config.data.context_length = batch, length
  assert CHECK_BYTES // (4 * 8192 * length) == (64 if length == 32 else 2048 if length == 1 else 512)  # by hand
  assert _split_check(monkeypatch, config) == want
  assert choose.split_check_tokens(batch, 8192 * length) == want


def _terms(batch: int, length: int, chunk: int) -> dict[str, config_lib.MemoryTerm]:
  config = default.get_config()  # V = 1024, D = 32 on the planted task (its settings alone are read)
  config.train.batch_size, config.data.context_length, config.loss.chunk_size = batch, length, chunk
  return {term.what.split(" (")[0]: term for term in config_lib.memory_estimate(config)}


@pytest.mark.parametrize(("batch", "length", "chunk", "rows", "field"), [
    (8, 32, 0, 256, "train.batch_size"),  # full logits: every one of the 8 · 32 tokens' rows
    (8, 32, 256, 256, "train.batch_size"),  # 256 tokens: one chunk holds them all
    (16, 32, 256, 256, "loss.chunk_size"),  # 512 tokens: the chunk bounds the logits
    (200, 1, 256, 200, "train.batch_size"),  # pairs: as before
    (300, 1, 256, 256, "loss.chunk_size"),
])
def test_the_memory_estimate_counts_a_windows_l_tokens(batch, length, chunk, rows, field):
  terms = _terms(batch, length, chunk)
  logits = terms["the train logits"]
  assert logits.bytes == rows * 1024 * 4 * 3
  assert logits.fields[0] == field
  assert terms["the hidden vectors of a batch"].bytes == batch * length * 32 * 4 * 2


def _eval_batches(eval_batch_size: int, length: int, pairs: int = 100) -> list[tuple[int, ...]]:
  """The shapes of the batches an Evaluator cuts `pairs` validation pairs (one document) into."""
  import ml_collections  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from tied_embed.train import evaluation  # noqa: PLC0415
  from tied_embed.train import mesh as mesh_lib  # noqa: PLC0415

  ids = np.arange(pairs, dtype=np.int32) % 16
  config = ml_collections.ConfigDict({"loss": {"chunk_size": 0}, "model": {"dtype": "float32"},
                                      "train": {"eval_batch_size": eval_batch_size},
                                      "mesh": {"data": 1, "model": 1}})
  data = types.SimpleNamespace(context_length=length, input_counts=np.ones(16, np.int64))
  evaluator = evaluation.Evaluator(None, ids, (ids + 1) % 16, data, config, mesh_lib.make_mesh(config.mesh))
  return [tuple(batch[0].shape) for batch in evaluator._batches]


@pytest.mark.parametrize(("eval_batch_size", "length", "want"), [
    (64, 8, [(8, 8), (5, 8)]),  # 13 windows of 8 (the last padded), 8 a batch
    (64, 1, None),  # pairs: distinct pairs, batches of 64 pairs
    (4, 8, [(1, 8)] * 13),  # fewer pairs than a window: one window a batch
    (200, 8, [(13, 8)]),  # 25 windows would fit: all 13 in one batch
])
def test_an_eval_batch_holds_about_eval_batch_size_pairs_in_windows(eval_batch_size, length, want):
  shapes = _eval_batches(eval_batch_size, length)
  if want is None:
    assert all(shape == (64,) for shape in shapes)
  else:
    assert shapes == want


def test_a_config_from_before_data_context_length_is_read_as_pairs(monkeypatch):
  """Without the field a config trains on pairs (L = 1): 4,096 pairs at V = 8192 hold 128 MiB of logits, so the check
  takes the first 64 MiB / (4 · 8192) = 2,048 of them (as the (4096, 1) row above)."""
  config = context_mlp.get_config()
  config.train.batch_size = 4096
  del config.data["context_length"]
  assert _split_check(monkeypatch, config) == 2048
