"""Context models (model.context = mlp | transformer): the two path gradients, routed by which Param each table is,
against nnx.grad of the plain loss; each forward pass against NumPy float64's; the speed paths equal to the plain one
on windows; causality; and a 1% error in the fast path caught by the split check."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx
from helpers import lookup_dense

from tied_embed.core import model as model_lib
from tied_embed.core import loss as loss_lib
from tied_embed.core import optim
from tied_embed.core import paths as plain_paths
from tied_embed.core import step as step_lib
from tied_embed.core.model import build_model
from tied_embed.fast import choose

VOCAB, D_MODEL, LENGTH, BATCH = 24, 8, 6, 4
# Every declared context mixer: a new one is covered by each test below without a new parametrization.
CONTEXT_MIXERS = [name for name in model_lib.VARIANTS["context"] if name != "none"]
FORMS = [(context, tied, hidden) for context in CONTEXT_MIXERS for tied, hidden in
         ((True, "none"), (False, "none"), (True, "linear"))]


def _model(context: str, tied: bool = True, hidden: str = "none", seed: int = 0):
  config = ml_collections.ConfigDict({
      "seed": seed, "data": {"context_length": LENGTH},
      "model": {"vocab_size": VOCAB, "d_model": D_MODEL, "tied": tied, "context": context, "context_k": 3,
                "conv_width": 3, "layers": 2, "heads": 2, "hidden": hidden, "hidden_l2": 0.1}})
  return build_model(config)


def _windows(seed: int = 0, batch: int = BATCH):
  rng = np.random.default_rng(seed)
  ids = rng.zipf(1.5, (batch, LENGTH)) % VOCAB  # repeats within and across windows
  return jnp.asarray(ids, jnp.int32), jnp.asarray(rng.integers(0, VOCAB, (batch, LENGTH)), jnp.int32)


def _flat(state) -> dict:
  return {path: np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(state)}


@pytest.mark.parametrize(("context", "tied", "hidden"), FORMS)
def test_the_paths_routed_into_the_params_are_nnx_grad_of_the_whole_model(context, tied, hidden):
  model = _model(context, tied, hidden)
  ids, next_ids = _windows()
  paths = plain_paths.path_gradients(model, ids, next_ids)
  grads = plain_paths.param_gradients(model, paths)
  assert float(step_lib.split_error(model, grads, ids, next_ids)) < 1e-5
  direct = _flat(nnx.grad(loss_lib.model_loss)(model, ids, next_ids))
  got = _flat(grads)
  assert got.keys() == direct.keys()
  for path, want in direct.items():
    np.testing.assert_allclose(got[path], want, rtol=1e-4, atol=1e-6, err_msg=str(path))
  lookup_path, projection_path = plain_paths.table_paths(model)
  assert (lookup_path == projection_path) == tied  # tied: the one Param receives both paths
  assert paths.hidden, "a context model has Params besides its tables"


@pytest.mark.parametrize("context", CONTEXT_MIXERS)
def test_a_tied_context_model_holds_one_table_that_both_paths_update(context):
  model = _model(context)
  tables = [v for v in jax.tree.leaves(nnx.state(model, nnx.Param)) if v.shape == (VOCAB, D_MODEL)]
  assert len(tables) == 1
  ids, next_ids = _windows()
  paths = plain_paths.path_gradients(model, ids, next_ids)
  grads = _flat(plain_paths.param_gradients(model, paths))
  table_grad = [g for g in grads.values() if g.shape == (VOCAB, D_MODEL)]
  assert len(table_grad) == 1
  np.testing.assert_allclose(table_grad[0], np.asarray(paths.lookup + paths.projection), rtol=1e-6, atol=1e-8)
  assert np.abs(np.asarray(paths.lookup)).sum() > 0 and np.abs(np.asarray(paths.projection)).sum() > 0


def _numpy_mlp_logits(model, ids: np.ndarray) -> np.ndarray:
  """ContextMLP's logits in float64 from its Params: h_t = x_t + W2 tanh(W1 [x_t, x_t-1, x_t-2] + b1) + b2."""
  table = np.asarray(model.embedder.embedding[...], np.float64)
  w1, b1 = (np.asarray(model.layer.kernel[...], np.float64), np.asarray(model.layer.bias[...], np.float64))
  w2, b2 = (np.asarray(model.out.kernel[...], np.float64), np.asarray(model.out.bias[...], np.float64))
  logits = np.zeros(ids.shape + (VOCAB,))
  for b in range(ids.shape[0]):
    for t in range(ids.shape[1]):
      rows = [table[ids[b, t - j]] if t - j >= 0 else np.zeros(D_MODEL) for j in range(3)]
      hidden = table[ids[b, t]] + np.tanh(np.concatenate(rows) @ w1 + b1) @ w2 + b2
      logits[b, t] = hidden @ table.T
  return logits


def test_the_context_mlp_reads_the_previous_k_rows_as_numpy_does():
  model = _model("mlp")
  ids, _ = _windows()
  np.testing.assert_allclose(np.asarray(model(ids), np.float64), _numpy_mlp_logits(model, np.asarray(ids)),
                             rtol=1e-4, atol=1e-5)


def _numpy_conv_logits(model, ids: np.ndarray) -> np.ndarray:
  """ContextConv's logits in float64 from its Params: h_t = x_t + Σ_j x_(t−j) · K[w−1−j] + c (Flax's kernel (w, D, D)
  is a cross-correlation: its last tap reads the current row), zeros before the window."""
  table = np.asarray(model.embedder.embedding[...], np.float64)
  kernel, bias = np.asarray(model.conv.kernel[...], np.float64), np.asarray(model.conv.bias[...], np.float64)
  width = kernel.shape[0]
  logits = np.zeros(ids.shape + (VOCAB,))
  for b in range(ids.shape[0]):
    for t in range(ids.shape[1]):
      mixed = bias + sum(table[ids[b, t - j]] @ kernel[width - 1 - j] for j in range(width) if t - j >= 0)
      logits[b, t] = (table[ids[b, t]] + mixed) @ table.T
  return logits


def test_the_context_conv_reads_the_previous_width_rows_as_numpy_does():
  model = _model("conv")
  assert model.conv.kernel.shape == (3, D_MODEL, D_MODEL)
  model.conv.bias[...] = jnp.linspace(-1, 1, D_MODEL)  # a bias away from its zeros, so a dropped bias shows
  ids, _ = _windows()
  np.testing.assert_allclose(np.asarray(model(ids), np.float64), _numpy_conv_logits(model, np.asarray(ids)),
                             rtol=1e-4, atol=1e-5)


def _numpy_layer_norm(x: np.ndarray, norm) -> np.ndarray:
  """LayerNorm over the last axis, ε = 1e-6 (Flax's default), then its scale and bias."""
  centred = x - x.mean(-1, keepdims=True)
  return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-6) * _f64(norm.scale) + _f64(norm.bias)


def _f64(param) -> np.ndarray:
  return np.asarray(param[...], np.float64)


def _numpy_transformer_logits(model, ids: np.ndarray) -> np.ndarray:
  """ContextTransformer's logits in float64 from its Params, one window at a time: x = E[ids] + P; per block
  x += Attn(LN(x)) with H heads of D/H, scores q·k/√(D/H) over positions ≤ t; x += W2 gelu(W1 LN(x) + b1) + b2
  (gelu's tanh form, JAX's default); logits = LN(x)·Eᵀ."""
  table, length = _f64(model.embedder.embedding), ids.shape[1]
  later = np.triu(np.ones((length, length), bool), k=1)  # [t, s]: s after t
  logits = np.zeros(ids.shape + (VOCAB,))
  for b in range(ids.shape[0]):
    x = table[ids[b]] + _f64(model.positions)[:length]  # (L, D)
    for block in model.blocks:
      attention, normed = block.attention, _numpy_layer_norm(x, block.attention_norm)
      q, k, v = (np.einsum("ld,dhe->lhe", normed, _f64(dense.kernel)) + _f64(dense.bias)
                 for dense in (attention.query, attention.key, attention.value))
      scores = np.einsum("the,she->hts", q, k) / np.sqrt(q.shape[-1])
      scores = np.where(later, -np.inf, scores)
      weights = np.exp(scores - scores.max(-1, keepdims=True))
      weights /= weights.sum(-1, keepdims=True)
      heads = np.einsum("hts,she->the", weights, v)
      x = x + np.einsum("the,hed->td", heads, _f64(attention.out.kernel)) + _f64(attention.out.bias)
      inner = _numpy_layer_norm(x, block.mlp_norm) @ _f64(block.mlp_in.kernel) + _f64(block.mlp_in.bias)
      gelu = 0.5 * inner * (1 + np.tanh(np.sqrt(2 / np.pi) * (inner + 0.044715 * inner**3)))
      x = x + gelu @ _f64(block.mlp_out.kernel) + _f64(block.mlp_out.bias)
    logits[b] = _numpy_layer_norm(x, model.final_norm) @ table.T
  return logits


def test_the_context_transformer_is_numpys_float64_forward_pass():
  model = _model("transformer")
  assert len(model.blocks) == 2  # the config's model.layers
  rng = np.random.default_rng(3)  # every Param drawn afresh: norms' scales far from 1, biases far from 0
  params = nnx.state(model, nnx.Param)
  nnx.update(model, jax.tree.map(lambda value: rng.normal(0, 0.5, value.shape).astype(np.float32), params))
  ids, _ = _windows()
  np.testing.assert_allclose(np.asarray(model(ids), np.float64), _numpy_transformer_logits(model, np.asarray(ids)),
                             rtol=1e-4, atol=1e-4)
  short = np.asarray(ids)[:, :LENGTH - 2]  # a window shorter than the model's length reads the first positions
  np.testing.assert_allclose(np.asarray(model(jnp.asarray(short)), np.float64),
                             _numpy_transformer_logits(model, short), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("context", CONTEXT_MIXERS)
def test_a_position_never_reads_a_later_token(context):
  model = _model(context)
  ids, _ = _windows()
  changed = ids.at[:, 3].set((ids[:, 3] + 1) % VOCAB)
  before, after = np.asarray(model(ids)), np.asarray(model(changed))
  np.testing.assert_array_equal(before[:, :3], after[:, :3])
  assert not np.allclose(before[:, 3:], after[:, 3:])  # the changed token and those after it see the change


@pytest.mark.parametrize(("context", "tied", "hidden"), FORMS)
@pytest.mark.parametrize("chunk_size", [5, 100])  # several chunks, and one chunk of all 24 positions
def test_the_speed_paths_equal_the_plain_paths_on_windows(context, tied, hidden, chunk_size):
  model = _model(context, tied, hidden)
  ids, next_ids = _windows()  # the shapes the other tests compiled already
  plain = plain_paths.path_gradients(model, ids, next_ids)
  fast = choose.paths_function(chunk_size=chunk_size, shards=2)(model, ids, next_ids)
  np.testing.assert_allclose(fast.loss, plain.loss, rtol=1e-5)
  np.testing.assert_allclose(lookup_dense(fast), plain.lookup, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(fast.projection, plain.projection, rtol=1e-4, atol=1e-6)
  for path, want in _flat(plain.hidden).items():
    np.testing.assert_allclose(_flat(fast.hidden)[path], want, rtol=1e-4, atol=1e-6, err_msg=str(path))
  np.testing.assert_allclose(fast.lookup_row_norms(), plain.lookup_row_norms(), rtol=1e-4, atol=1e-6)


def _off_by_one_percent(paths_fn):
  def wrong(model, ids, next_ids):
    paths = paths_fn(model, ids, next_ids)
    return paths._replace(lookup_rows=1.01 * paths.lookup_rows)

  return wrong


@pytest.mark.parametrize("context", CONTEXT_MIXERS)
def test_the_split_check_catches_a_1_percent_error_in_a_context_models_fast_path(context):
  model = _model(context)
  tx = optim.make_optimizer(ml_collections.ConfigDict({
      "learning_rate": 0.01, "warmup_steps": 0, "num_steps": 10, "weight_decay": 0.0, "optimizer": "adamw",
      "grad_clip_norm": 1.0}))
  graphdef, state = nnx.split(step_lib.TrainState(model, tx))
  ids, next_ids = _windows()
  fast = choose.paths_function(chunk_size=5)
  errors = {}
  for name, paths_fn in [("correct", fast), ("injected", _off_by_one_percent(fast))]:
    step = step_lib.make_train_step(graphdef, paths_fn)
    _, metrics = step(jax.tree.map(jnp.copy, state), ids, next_ids, with_stats=True)
    errors[name] = float(metrics["split_error"])
  assert errors["correct"] < 1e-5, errors
  assert errors["injected"] > 1e-3, errors


def test_the_context_mixers_have_the_shapes_their_configs_ask_for():
  # layers 1, heads 4, D 8: one block of 4 heads of 8 / 4 = 2; every hidden layer 4 · D = 32 wide (MLP_WIDTH)
  config = ml_collections.ConfigDict({
      "seed": 0, "data": {"context_length": LENGTH},
      "model": {"vocab_size": VOCAB, "d_model": 8, "tied": True, "context": "transformer", "layers": 1, "heads": 4}})
  transformer = build_model(config)
  (block,) = transformer.blocks
  assert [dense.kernel.shape for dense in (block.attention.query, block.attention.key, block.attention.value)] == [
      (8, 4, 2)] * 3
  assert block.attention.out.kernel.shape == (4, 2, 8)
  assert block.mlp_in.kernel.shape == (8, 32) and block.mlp_out.kernel.shape == (32, 8)
  config.model.update(context="mlp", context_k=3)
  mlp = build_model(config)
  assert mlp.layer.kernel.shape == (3 * 8, 32) and mlp.out.kernel.shape == (32, 8)  # k rows of D in, 4 · D wide


def test_every_layer_norm_divides_by_the_root_of_the_variance_plus_1e_6():
  # rows whose variance is ~1e-6, where ε shows: ε = 1e-5 would scale them by about 1 / 2.3
  model = _model("transformer")
  rows = 1e-3 * np.random.default_rng(2).standard_normal((5, D_MODEL))
  for norm in (model.blocks[0].attention_norm, model.blocks[0].mlp_norm, model.final_norm):
    np.testing.assert_allclose(np.asarray(norm(jnp.asarray(rows, jnp.float32)), np.float64),
                               _numpy_layer_norm(rows, norm), rtol=1e-3, atol=1e-3)


def test_the_transformers_positions_start_as_gpt2s_normal_of_standard_deviation_0_02():
  config = ml_collections.ConfigDict({
      "seed": 0, "data": {"context_length": 64},
      "model": {"vocab_size": VOCAB, "d_model": 32, "tied": True, "context": "transformer", "layers": 1, "heads": 2}})
  positions = np.asarray(build_model(config).positions[...], np.float64)
  assert positions.shape == (64, 32)
  assert positions.std() == pytest.approx(0.02, rel=0.1)  # 2,048 draws: the sample's std within ~3% of 0.02
  assert abs(positions.mean()) < 0.002


@pytest.mark.parametrize("context", CONTEXT_MIXERS)
def test_pairs_to_a_context_model_are_windows_of_one_token(context):
  model = _model(context)
  ids = jnp.array([3, 5, 3], jnp.int32)
  logits = model(ids)
  assert logits.shape == (3, VOCAB)
  np.testing.assert_allclose(logits, model(ids[:, None])[:, 0], rtol=1e-6)
  if context == "mlp":  # a window of one token reads its own row and zeros before it, as NumPy's does
    np.testing.assert_allclose(np.asarray(logits, np.float64), _numpy_mlp_logits(model, np.asarray(ids)[:, None])[:, 0],
                               rtol=1e-4, atol=1e-5)
