"""Every model the configs can build, as a table: each hidden map and output bias over each context mixer, tied and
untied. Each forward pass is checked against a NumPy float64 computation of the same architecture from the model's
Params, and its two path gradients (core/paths.py), summed where the table is one, against `nnx.grad` of the plain
loss (core/loss.py). The variants are read from core/model.py's declared values, so a new value is covered here."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from tied_embed.core import loss as loss_lib
from tied_embed.core import model as model_lib
from tied_embed.core import paths as paths_lib


def declared_variants() -> list[tuple[str, bool, str, bool]]:
  """(context, tied, hidden map, output bias) for every value core/model.py declares: the one place to repoint."""
  return list(itertools.product(model_lib.VARIANTS["context"], (True, False), model_lib.VARIANTS["hidden"],
                                (False, True)))


VOCAB, D_MODEL, LENGTH, BATCH, CONTEXT_K, HEADS, LAYERS, HIDDEN_L2 = 11, 4, 5, 2, 3, 2, 1, 0.05
VARIANTS = declared_variants()


def _config(context: str, tied: bool, hidden: str, bias: bool) -> ml_collections.ConfigDict:
  from configs import default  # noqa: PLC0415

  config = default.get_config()
  config.seed = 1
  config.data.context_length = LENGTH
  config.model.update(vocab_size=VOCAB, d_model=D_MODEL, tied=tied, context=context, context_k=CONTEXT_K,
                      layers=LAYERS, heads=HEADS, hidden=hidden, hidden_l2=HIDDEN_L2, output_bias=bias)
  return config


def _built(variant) -> nnx.Module:
  """The variant's model with every Param drawn afresh (W far from I, biases and norms far from 0 and 1), so a
  dropped or transposed part changes the logits."""
  model = model_lib.build_model(_config(*variant))
  rng = np.random.default_rng(7)
  params = nnx.state(model, nnx.Param)
  nnx.update(model, jax.tree.map(lambda value: rng.normal(0, 0.6, value.shape).astype(np.float32), params))
  return model


def _ids(windows: bool):
  rng = np.random.default_rng(3)
  shape = (BATCH, LENGTH) if windows else (BATCH * LENGTH,)
  ids = rng.integers(0, VOCAB, shape)
  ids.reshape(-1)[:3] = [4, 4, 4]  # repeated ids: the lookup path adds up
  return jnp.asarray(ids, jnp.int32), jnp.asarray(rng.integers(0, VOCAB, shape), jnp.int32)


def _params(model) -> dict[str, np.ndarray]:
  """Every Param as float64 by its dotted path in the model's graph."""
  return {".".join(map(str, path)): np.asarray(leaf, np.float64)
          for path, leaf in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def _one(params: dict, suffix: str) -> np.ndarray:
  (found,) = [value for name, value in params.items() if name.endswith(suffix)]
  return found


def _layer_norm(x, scale, bias):
  centred = x - x.mean(-1, keepdims=True)
  return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-6) * scale + bias


def _numpy_context_mlp(p: dict, x: np.ndarray) -> np.ndarray:
  """(B, L, D) rows → x_t + W2 tanh(W1 [x_t, x_t-1, ..., x_t-k+1] + b1) + b2, zeros before the window."""
  padded = np.concatenate([np.zeros(x.shape[:-2] + (CONTEXT_K - 1, D_MODEL)), x], axis=-2)
  length = x.shape[-2]
  context = np.concatenate([padded[..., CONTEXT_K - 1 - j:CONTEXT_K - 1 - j + length, :] for j in range(CONTEXT_K)],
                           -1)
  inner = np.tanh(context @ _one(p, "layer.kernel") + _one(p, "layer.bias"))
  return x + inner @ _one(p, "out.kernel") + _one(p, "out.bias")


def _numpy_context_transformer(p: dict, x: np.ndarray) -> np.ndarray:
  """(B, L, D) rows → LN(blocks(x + P[:L])): per block x += Attn(LN(x)) causal with HEADS heads, x += MLP(LN(x))."""
  length = x.shape[-2]
  x = x + _one(p, "positions")[:length]
  later = np.triu(np.ones((length, length), bool), k=1)
  for layer in range(LAYERS):
    def q(name, layer=layer):
      return _one(p, f"blocks.{layer}.{name}")
    normed = _layer_norm(x, q("attention_norm.scale"), q("attention_norm.bias"))
    qs, ks, vs = (np.einsum("bld,dhe->blhe", normed, q(f"attention.{n}.kernel")) + q(f"attention.{n}.bias")
                  for n in ("query", "key", "value"))
    scores = np.einsum("bthe,bshe->bhts", qs, ks) / np.sqrt(D_MODEL // HEADS)
    scores = np.where(later, -np.inf, scores)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    heads = np.einsum("bhts,bshe->bthe", weights, vs)
    x = x + np.einsum("bthe,hed->btd", heads, q("attention.out.kernel")) + q("attention.out.bias")
    inner = _layer_norm(x, q("mlp_norm.scale"), q("mlp_norm.bias")) @ q("mlp_in.kernel") + q("mlp_in.bias")
    gelu = 0.5 * inner * (1 + np.tanh(np.sqrt(2 / np.pi) * (inner + 0.044715 * inner**3)))
    x = x + gelu @ q("mlp_out.kernel") + q("mlp_out.bias")
  return _layer_norm(x, _one(p, "final_norm.scale"), _one(p, "final_norm.bias"))


def _numpy_context_conv(p: dict, x: np.ndarray) -> np.ndarray:
  """(B, L, D) rows → x_t + Σ_j x_(t−j) · K[w−1−j] + c over the conv_width rows up to t, zeros before the window."""
  kernel, width, length = _one(p, "conv.kernel"), _one(p, "conv.kernel").shape[0], x.shape[-2]
  padded = np.concatenate([np.zeros(x.shape[:-2] + (width - 1, D_MODEL)), x], axis=-2)
  mixed = sum(padded[..., width - 1 - j:width - 1 - j + length, :] @ kernel[width - 1 - j] for j in range(width))
  return x + mixed + _one(p, "conv.bias")


# The NumPy reference of each declared value: a value declared without one fails the first test below.
NUMPY_CONTEXTS = {"none": lambda p, x: x, "mlp": _numpy_context_mlp, "conv": _numpy_context_conv,
                  "transformer": _numpy_context_transformer}
NUMPY_HIDDEN_MAPS = {
    "none": lambda p, x: x,
    "linear": lambda p, x: x @ _one(p, "hidden_map.kernel"),
    "symmetric": lambda p, x: x @ ((_one(p, "hidden_map.kernel") + _one(p, "hidden_map.kernel").T) / 2),
}


def _numpy_logits(variant, model, ids: np.ndarray) -> np.ndarray:
  """The variant's logits in float64 from its Params, composed in the order the config describes: tables, the
  context mixer, the hidden map, the output bias. Pairs (B,) are windows of one token."""
  context, tied, hidden, bias = variant
  p = _params(model)
  lookup = _one(p, "embedding") if tied else _one(p, "input_embedding")
  projection = _one(p, "embedding") if tied else _one(p, "output_embedding")
  x = NUMPY_CONTEXTS[context](p, lookup[ids if ids.ndim == 2 else ids[:, None]])  # (B, L, D)
  x = NUMPY_HIDDEN_MAPS[hidden](p, x)
  logits = x @ projection.T + (p["bias"] if bias else 0.0)  # the outermost wrapper's own (V,)
  return logits if ids.ndim == 2 else logits[:, 0]


def _numpy_loss(variant, model, ids: np.ndarray, next_ids: np.ndarray) -> float:
  logits = _numpy_logits(variant, model, ids).reshape(-1, VOCAB)
  top = logits.max(-1, keepdims=True)
  log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
  value = -log_probs[np.arange(len(logits)), next_ids.reshape(-1)].mean()
  if variant[2] != "none":
    value += HIDDEN_L2 * np.sum((_one(_params(model), "hidden_map.kernel") - np.eye(D_MODEL))**2)
  return float(value)


def _name(variant) -> str:
  context, tied, hidden, bias = variant
  return f"{context}-{'tied' if tied else 'untied'}-{hidden}-{'bias' if bias else 'nobias'}"


def test_the_table_covers_every_declared_value_and_each_has_a_numpy_reference():
  contexts, tieds, hiddens, biases = (set(values) for values in zip(*VARIANTS, strict=True))
  assert contexts <= set(NUMPY_CONTEXTS) and hiddens <= set(NUMPY_HIDDEN_MAPS), "a declared value without a reference"
  assert contexts == set(model_lib.VARIANTS["context"]) and hiddens == set(model_lib.VARIANTS["hidden"])
  assert tieds == biases == {True, False}
  assert len(VARIANTS) == len(model_lib.VARIANTS["context"]) * len(model_lib.VARIANTS["hidden"]) * 4


@pytest.mark.parametrize("variant", VARIANTS, ids=_name)
def test_the_forward_pass_is_numpys_float64_composition(variant):
  model = _built(variant)
  for windows in (True, False):
    ids, _ = _ids(windows)
    got = np.asarray(model(ids), np.float64)
    assert got.shape == ids.shape + (VOCAB,)
    np.testing.assert_allclose(got, _numpy_logits(variant, model, np.asarray(ids)), rtol=1e-5, atol=2e-5,
                               err_msg=f"windows={windows}")


def _flat_grads(state) -> dict[str, np.ndarray]:
  return {".".join(map(str, path)): np.asarray(leaf, np.float64) for path, leaf in nnx.to_flat_state(state)}


@pytest.mark.parametrize("variant", VARIANTS, ids=_name)
def test_the_two_path_gradients_sum_to_nnx_grad_of_the_plain_loss(variant):
  context, tied, hidden, bias = variant
  model = _built(variant)
  ids, next_ids = _ids(windows=context != "none")  # windows where a mixer reads them, else the bigram's pairs
  paths = paths_lib.path_gradients(model, ids, next_ids)
  np.testing.assert_allclose(float(paths.loss), _numpy_loss(variant, model, np.asarray(ids), np.asarray(next_ids)),
                             rtol=1e-5)
  want = _flat_grads(nnx.grad(loss_lib.model_loss)(model, ids, next_ids))
  tables = {name for name in want if name.rsplit(".", 1)[-1] in ("embedding", "input_embedding", "output_embedding")}
  lookup, projection = np.asarray(paths.lookup, np.float64), np.asarray(paths.projection, np.float64)
  if tied:
    (table,) = tables
    np.testing.assert_allclose(lookup + projection, want[table], rtol=1e-4, atol=5e-6)
  else:
    (inp,) = [name for name in tables if name.endswith("input_embedding")]
    (out,) = [name for name in tables if name.endswith("output_embedding")]
    np.testing.assert_allclose(lookup, want[inp], rtol=1e-4, atol=5e-6)
    np.testing.assert_allclose(projection, want[out], rtol=1e-4, atol=5e-6)
  # the lookup path reaches only the rows looked up; each other Param's gradient is where nnx.grad puts it
  untouched = np.setdiff1d(np.arange(VOCAB), np.asarray(ids).reshape(-1))
  assert np.all(lookup[untouched] == 0)
  others = {name: value for name, value in want.items() if name not in tables}
  got = {".".join(map(str, path)): np.asarray(leaf, np.float64)
         for path, leaf in jax.tree_util.tree_flatten_with_path(paths.hidden)[0]
         for path in [[key.key for key in path]]}
  assert got.keys() == others.keys()
  for name, value in others.items():
    np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=5e-6, err_msg=name)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v[0] == "none"], ids=_name)
def test_the_scoring_tables_inspection_reads_give_numpys_logits(variant):
  model = _built(variant)
  ids, _ = _ids(windows=False)
  lookup, projection = (np.asarray(table, np.float64) for table in model.scoring_tables())
  np.testing.assert_allclose(lookup[np.asarray(ids)] @ projection.T, _numpy_logits(variant, model, np.asarray(ids)),
                             rtol=1e-5, atol=2e-5)
