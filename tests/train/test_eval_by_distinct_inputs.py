"""The evaluation of pairs without windows scores each distinct input's logsumexp once and each distinct pair once,
weighed by its count: its mean and its per-bucket means equal NumPy float64's over every pair of the split, for every
kind of model (tied, untied, a hidden map, an output bias), bfloat16 within its bound, any chunk size and a short last
batch; compiled ahead, an eval compiles nothing more."""

from __future__ import annotations

import types

import jax
import numpy as np
import pytest
from flax import nnx

from tied_embed.core.model import build_model
from tied_embed.data import frequency
from tied_embed.train import evaluation
from tied_embed.train import mesh as mesh_lib

V, D = 32, 8


class _Holder(nnx.Module):
  def __init__(self, model):
    self.model = model


def _config(**model):
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  config.model.update({"vocab_size": V, "d_model": D, **model})
  config.loss.chunk_size = 3  # distinct inputs in chunks of 3, the last one short
  config.train.eval_batch_size = 7  # pair batches of 7, the last one short
  return config


def _split(seed=0, pairs=200):
  """(ids, next_ids): a skewed split, so most pairs repeat, with the edge ids 0 and V − 1 among them."""
  rng = np.random.default_rng(seed)
  ids = np.minimum(rng.geometric(0.2, pairs) - 1, V - 1).astype(np.int32)
  next_ids = rng.integers(0, V, pairs).astype(np.int32)
  ids[:2], next_ids[:2] = (0, V - 1), (V - 1, 0)
  return ids, next_ids


def _randomized(config, seed=1):
  """The config's model with every parameter drawn at random (a hidden map far from I, an output bias far from 0)."""
  model = build_model(config)
  rng = np.random.default_rng(seed)
  params = nnx.state(model, nnx.Param)
  params = jax.tree.map(lambda value: rng.normal(0, 0.7, value.shape).astype(np.float32), params)
  nnx.update(model, params)
  return model


def _float64_losses(model, ids, next_ids):
  """Each pair's cross-entropy in float64, from the model's own tables (A[ids] · Bᵀ, B wider by a bias column)."""
  lookup, projection = (np.asarray(table, np.float64) for table in model.scoring_tables())
  logits = lookup[ids] @ projection.T
  top = logits.max(axis=1)
  return top + np.log(np.exp(logits - top[:, None]).sum(axis=1)) - logits[np.arange(len(ids)), next_ids]


def _evaluate(config, model, ids, next_ids):
  graphdef, state = nnx.split(_Holder(model))
  data = types.SimpleNamespace(context_length=1, input_counts=np.bincount(ids, minlength=V))
  mesh = mesh_lib.make_mesh(config.mesh, jax.devices()[:1])
  evaluator = evaluation.Evaluator(graphdef, ids, next_ids, data, config, mesh)
  evaluator.compile_ahead(state)
  return evaluator(state), data


@pytest.mark.parametrize("model", [
    {}, {"tied": False}, {"hidden": "linear"}, {"output_bias": True}, {"hidden": "symmetric", "output_bias": True},
])
def test_an_eval_equals_numpy_float64_over_every_pair(model):
  config = _config(**model)
  randomized = _randomized(config)
  ids, next_ids = _split()
  (loss, by_bucket), data = _evaluate(config, randomized, ids, next_ids)
  expected = _float64_losses(randomized, ids, next_ids)
  assert loss == pytest.approx(expected.mean(), rel=2e-6)
  buckets = frequency.input_buckets(data.input_counts)[ids]
  for k, name in enumerate(frequency.BUCKETS):
    if (buckets == k).any():
      assert by_bucket[name] == pytest.approx(expected[buckets == k].mean(), rel=2e-6), name
    else:
      assert name not in by_bucket


def test_a_hand_made_tied_split_scores_by_hand():
  # E = the rows (1, 0), (0, 1), (1, 1) of a V = 3 table: logits of input 2 are (1, 1, 2).
  config = _config(vocab_size=3, d_model=2)
  model = build_model(config)
  model.embedding[...] = np.array([[1, 0], [0, 1], [1, 1]], np.float32)
  ids, next_ids = np.array([2, 2, 2, 0], np.int32), np.array([2, 0, 2, 1], np.int32)
  (loss, _), _ = _evaluate(config, model, ids, next_ids)
  lse2, lse0 = np.log(2 * np.e + np.e**2), np.log(np.e + 1 + np.e)
  expected = ((lse2 - 2) + (lse2 - 1) + (lse2 - 2) + (lse0 - 0)) / 4
  assert loss == pytest.approx(expected, rel=1e-6)


def test_a_bfloat16_eval_is_float64_s_within_bfloat16_operands():
  config = _config(dtype="bfloat16")
  model = _randomized(config)
  ids, next_ids = _split(seed=3)
  (loss, _), _ = _evaluate(config, model, ids, next_ids)
  expected = _float64_losses(model, ids, next_ids).mean()
  assert loss == pytest.approx(expected, rel=2e-2) and loss != pytest.approx(expected, rel=1e-7)


@pytest.mark.parametrize("context_length, model", [(1, {}), (4, {"context": "mlp", "context_k": 3})])
def test_an_eval_compiled_ahead_compiles_nothing_more(context_length, model):
  config = _config(**model)  # with context, the split is scored in windows of 4, without the inputs' logsumexps
  model = _randomized(config)
  ids, next_ids = _split()
  graphdef, state = nnx.split(_Holder(model))
  data = types.SimpleNamespace(context_length=context_length, input_counts=np.bincount(ids, minlength=V))
  evaluator = evaluation.Evaluator(graphdef, ids, next_ids, data, config, mesh_lib.make_mesh(config.mesh,
                                                                                             jax.devices()[:1]))
  evaluator.compile_ahead(state)
  compiles = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, _duration, **_: compiles.append(event) if event.endswith("backend_compile_duration") else None)
  evaluator(state)
  assert compiles == []


@pytest.mark.parametrize("model", [{"context": "mlp", "context_k": 3},
                                   {"context": "transformer", "layers": 1, "heads": 2}])
def test_a_windowed_eval_scores_each_document_on_its_own_and_skips_the_padding(model):
  # 3 validation documents of 13, 17 and 20 pairs in windows of L = 4: each document cut from its start, its last
  # window short. Reference: the model's own forward on each window's real pairs alone (a causal model's positions
  # see only the earlier ones), cross-entropy in float64, over the 50 pairs.
  config = _config(**model)
  config.data.context_length = 4
  randomized = _randomized(config)
  ids, next_ids = _split(pairs=50)
  ends = np.array([13, 30, 50])
  graphdef, state = nnx.split(_Holder(randomized))
  empty = np.zeros(0, np.int32)  # no selection split
  data = types.SimpleNamespace(context_length=4, input_counts=np.bincount(ids, minlength=V), eval_ids=ids,
                               eval_next=next_ids, eval_document_ends=ends, select_ids=empty, select_next=empty,
                               select_document_ends=None)
  held_out = evaluation.HeldOut(graphdef, data, config, mesh_lib.make_mesh(config.mesh, jax.devices()[:1]))
  loss, _ = held_out.evaluate(state)
  losses = []
  for start, end in zip([0, *ends[:-1]], ends, strict=True):
    for first in range(start, end, 4):
      last = min(first + 4, end)
      logits = np.asarray(randomized(ids[None, first:last]), np.float64)[0]  # (w, V)
      top = logits.max(axis=1)
      lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
      losses += list(lse - logits[np.arange(last - first), next_ids[first:last]])
  assert len(losses) == 50 and loss == pytest.approx(np.mean(losses), rel=2e-6)


def _document_eval(config, model, ids, next_ids, ends):
  """The validation split (ids, next_ids, documents ending at `ends`) scored by HeldOut at `config`: → mean loss."""
  graphdef, state = nnx.split(_Holder(model))
  empty = np.zeros(0, np.int32)  # no selection split
  data = types.SimpleNamespace(context_length=config.data.context_length, input_counts=np.bincount(ids, minlength=V),
                               eval_ids=ids, eval_next=next_ids, eval_document_ends=ends, select_ids=empty,
                               select_next=empty, select_document_ends=None)
  held_out = evaluation.HeldOut(graphdef, data, config, mesh_lib.make_mesh(config.mesh, jax.devices()[:1]))
  return held_out.evaluate(state)[0]


@pytest.mark.parametrize("model", [{"context": "conv", "conv_width": 3},
                                   {"context": "transformer", "layers": 1, "heads": 2}])
def test_a_stride_one_eval_scores_every_pair_with_its_whole_context(model):
  # 2 validation documents of 9 and 6 pairs, L = 4. Reference: each pair scored alone, as the last position of the
  # model's forward on its own document's tokens ending at it, L of them where the document has them (fewer at its
  # start), cross-entropy in float64, over the 15 pairs.
  config = _config(**model)
  config.data.context_length = 4
  randomized = _randomized(config, seed=2)
  ids, next_ids = _split(seed=3, pairs=15)
  ends = np.array([9, 15])
  losses = []
  for start, end in zip([0, *ends[:-1]], ends, strict=True):
    for position in range(start, end):
      first = max(start, position - 3)
      logits = np.asarray(randomized(ids[None, first : position + 1]), np.float64)[0, -1]  # (V,)
      top = logits.max()
      losses.append(top + np.log(np.exp(logits - top).sum()) - logits[next_ids[position]])
  config.train.eval_stride = 1
  strided = _document_eval(config, randomized, ids, next_ids, ends)
  assert len(losses) == 15 and strided == pytest.approx(np.mean(losses), rel=2e-6)
  config.train.eval_stride = -1  # tiled: windows start afresh at pairs 4, 8 and 13, so those after see less
  assert _document_eval(config, randomized, ids, next_ids, ends) != pytest.approx(strided, rel=1e-4)


@pytest.mark.parametrize("length", [1, 4])
def test_an_evals_batches_are_placed_split_along_the_mesh_data_axis(length):
  """Each batch of pairs or windows lies on the mesh, split along `data` (a length `data` divides: here 1)."""
  config = _config()
  ids, next_ids = _split(pairs=30)
  data = types.SimpleNamespace(context_length=length, input_counts=np.bincount(ids, minlength=V))
  mesh = mesh_lib.make_mesh(config.mesh, jax.devices()[:1])
  evaluator = evaluation.Evaluator(None, ids, next_ids, data, config, mesh, np.array([30]))
  assert evaluator._batches
  for batch in evaluator._batches:
    assert all(column.sharding == mesh_lib.batch_sharding(mesh) for column in batch)
