"""The when-to-tie controls as models: the output bias (model.output_bias, logits h·Eᵀ + b) and the symmetric map
(model.hidden = "symmetric", logits E·S·Eᵀ with S = (W + Wᵀ)/2). Their logits, loss and path gradients against a
NumPy float64 derivation by hand, the split check below 1e-5, the speed paths equal to the plain one, and the
config's refusals. Each model's Params are moved off their initial values (b = 0, W = I) first, where a dropped
bias or an unsymmetrised W would give the same numbers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx
from helpers import lookup_dense

from tied_embed.core import loss as loss_lib
from tied_embed.core import paths as plain_paths
from tied_embed.core import step as step_lib
from tied_embed.core.model import WithOutputBias, WithSymmetricMap, build_model, param_counts
from tied_embed.fast import choose
from tied_embed.train import config as config_lib
from tied_embed.util import UsageError

VOCAB, D_MODEL, L2 = 12, 5, 0.1
IDS = np.array([0, 3, 3, 7, 1, 11, 3, 0])  # repeats: the distinct-row speed path forms each once
NEXT = (IDS * 5 + 2) % VOCAB
BF16_BOUND = 2e-2  # tests/fast/test_precision.py's: about 10 times bfloat16's rounding u = 2^-9
CONTROLS = {"bias": {"output_bias": True}, "symmetric": {"hidden": "symmetric", "hidden_l2": L2}}


def _smoke(*fields):
  """configs/smoke.py with each (dotted path, value) of `fields` set, unchecked."""
  from configs import smoke  # noqa: PLC0415
  from tied_embed.train import config_file  # noqa: PLC0415

  config = smoke.get_config()
  for path, value in fields:
    config_file.set_unchecked(config, path, value)
  return config


def _model(control: str, tied: bool = True, seed: int = 0):
  """The control, its table and extra Param drawn away from their starting values (b = 0, W = I)."""
  model = build_model(ml_collections.ConfigDict({
      "seed": seed, "data": {"context_length": 1},
      "model": {"vocab_size": VOCAB, "d_model": D_MODEL, "tied": tied, **CONTROLS[control]}}))
  rng = np.random.default_rng(seed + 1)
  if control == "bias":
    model.bias[...] = jnp.asarray(rng.standard_normal(VOCAB), jnp.float32)
  else:
    model.hidden_map.kernel[...] = jnp.asarray(np.eye(D_MODEL) + 0.5 * rng.standard_normal((D_MODEL, D_MODEL)),
                                               jnp.float32)
  return model


def _softmax_grad(logits: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
  """Mean cross-entropy of (T, V) float64 logits and its gradient d loss / d logits, by hand."""
  shifted = logits - logits.max(axis=1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
  rows = np.arange(len(targets))
  dlogits = np.exp(log_probs)
  dlogits[rows, targets] -= 1.0
  return -log_probs[rows, targets].mean(), dlogits / len(targets)


def _hand(control: str, model) -> dict[str, np.ndarray]:
  """Logits, loss and every gradient of the control in float64, from its Params' values alone."""
  lookup_table, projection_table = (np.asarray(t, np.float64) for t in model.tables())
  rows = lookup_table[IDS]
  if control == "bias":
    bias = np.asarray(model.bias[...], np.float64)
    logits = rows @ projection_table.T + bias[None, :]
    loss, dlogits = _softmax_grad(logits, NEXT)
    drows, projection, extra = dlogits @ projection_table, dlogits.T @ rows, {"bias": dlogits.sum(axis=0)}
  else:
    kernel = np.asarray(model.hidden_map.kernel[...], np.float64)
    symmetric = (kernel + kernel.T) / 2
    hidden = rows @ symmetric
    logits = hidden @ projection_table.T
    loss, dlogits = _softmax_grad(logits, NEXT)
    loss += L2 * np.sum((kernel - np.eye(D_MODEL)) ** 2)
    dhidden = dlogits @ projection_table
    dsymmetric = rows.T @ dhidden  # d loss / d S; S = (W + Wᵀ)/2 gives d W = (dS + dSᵀ)/2
    drows, projection = dhidden @ symmetric.T, dlogits.T @ hidden
    extra = {"kernel": (dsymmetric + dsymmetric.T) / 2 + 2 * L2 * (kernel - np.eye(D_MODEL))}
  lookup = np.zeros_like(lookup_table)
  np.add.at(lookup, IDS, drows)
  return {"logits": logits, "loss": loss, "lookup": lookup, "projection": projection, **extra}


def _close(got, want, **tolerance):
  np.testing.assert_allclose(np.asarray(got, np.float64), want, **({"rtol": 1e-5, "atol": 1e-6} | tolerance))


def _extra_grad(control: str, hidden: dict) -> np.ndarray:
  return hidden["bias"] if control == "bias" else hidden["hidden_map"]["kernel"]


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("tied", [True, False])
def test_the_logits_loss_and_path_gradients_are_the_float64_hand_derivation(control, tied):
  model = _model(control, tied)
  want = _hand(control, model)
  _close(model(jnp.asarray(IDS)), want["logits"])
  _close(loss_lib.model_loss(model, jnp.asarray(IDS), jnp.asarray(NEXT)), want["loss"])
  paths = plain_paths.path_gradients(model, jnp.asarray(IDS), jnp.asarray(NEXT))
  _close(paths.loss, want["loss"])
  _close(paths.lookup, want["lookup"])
  _close(paths.projection, want["projection"])
  _close(_extra_grad(control, paths.hidden), want["bias" if control == "bias" else "kernel"])
  if tied:  # the one table's gradient is the sum of the two paths
    grads = plain_paths.param_gradients(model, paths)
    _close(grads["embedder"]["embedding"][...], want["lookup"] + want["projection"])


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("tied", [True, False])
def test_the_split_error_is_below_1e_5(control, tied):
  model = _model(control, tied)
  ids, next_ids = jnp.asarray(IDS), jnp.asarray(NEXT)
  grads = plain_paths.param_gradients(model, plain_paths.path_gradients(model, ids, next_ids))
  assert float(step_lib.split_error(model, grads, ids, next_ids)) < 1e-5


def _graph_and_state(control: str):
  from tied_embed.core import optim  # noqa: PLC0415

  tx = optim.make_optimizer(ml_collections.ConfigDict({
      "learning_rate": 0.01, "warmup_steps": 0, "num_steps": 10, "weight_decay": 0.0, "optimizer": "adamw",
      "grad_clip_norm": 1.0}))
  return nnx.split(step_lib.TrainState(_model(control), tx))


@pytest.mark.parametrize("control", CONTROLS)
def test_the_speed_steps_split_check_reads_below_1e_5_and_catches_a_1_percent_error(control):
  graphdef, state = _graph_and_state(control)
  fast = choose.paths_function(chunk_size=3)

  def wrong(model, ids, next_ids):
    paths = fast(model, ids, next_ids)
    return paths._replace(projection=1.01 * paths.projection)

  errors = {}
  for name, paths_fn in [("correct", fast), ("injected", wrong)]:
    step = step_lib.make_train_step(graphdef, paths_fn)
    _, metrics = step(jax.tree.map(jnp.copy, state), jnp.asarray(IDS), jnp.asarray(NEXT), with_stats=True)
    errors[name] = float(metrics["split_error"])
  assert errors["correct"] < 1e-5 < 1e-3 < errors["injected"], errors


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("chunk_size", [3, 100])  # several chunks of distinct rows, and one chunk
def test_the_speed_paths_serve_the_controls_as_the_plain_paths_do(control, chunk_size):
  model = _model(control)
  ids, next_ids = jnp.asarray(IDS), jnp.asarray(NEXT)
  plain = plain_paths.path_gradients(model, ids, next_ids)
  want = _hand(control, model)
  for shards in (1, 2):
    fast = choose.paths_function(chunk_size=chunk_size, shards=shards)(model, ids, next_ids)
    _close(fast.loss, want["loss"])
    _close(lookup_dense(fast), plain.lookup)
    _close(fast.projection, plain.projection)
    _close(_extra_grad(control, fast.hidden), _extra_grad(control, plain.hidden))


@pytest.mark.parametrize("control", CONTROLS)
def test_the_scoring_tables_give_the_models_logits(control):
  model = _model(control)
  lookup, projection = (np.asarray(t, np.float64) for t in model.scoring_tables())
  _close(lookup[IDS] @ projection.T, _hand(control, model)["logits"])


def test_each_control_is_one_class_around_the_table_with_its_params_at_their_start():
  bias = build_model(_smoke(("model.output_bias", True)))
  assert isinstance(bias, WithOutputBias)
  np.testing.assert_array_equal(bias.bias[...], np.zeros(bias.vocab_size, np.float32))
  symmetric = build_model(_smoke(("model.hidden", "symmetric")))
  assert isinstance(symmetric, WithSymmetricMap)
  np.testing.assert_array_equal(symmetric.hidden_map.kernel[...], np.eye(symmetric.d_model, dtype=np.float32))
  both = build_model(_smoke(("model.hidden", "symmetric"), ("model.output_bias", True)))
  for model, hidden, output_bias in ((bias, "none", True), (symmetric, "symmetric", False),
                                     (both, "symmetric", True)):
    counts = param_counts(model.vocab_size, model.d_model, hidden, output_bias)
    assert sum(leaf.size for leaf in jax.tree.leaves(nnx.state(model, nnx.Param))) == counts.tied
  # the bias around the symmetric map keeps the map's penalty and scalars (configs/smoke.py: V = 32, D = 8)
  both.embedder.hidden_map.kernel[...] = 2 * jnp.eye(8, dtype=jnp.float32)
  both.embedder.l2 = 0.5
  assert float(both.penalty()) == 0.5 * 8  # λ‖2I − I‖² = λ · D
  assert set(both.hidden_stats()) == {"identity_distance", "min_eigenvalue", "bias_spread"}
  # by hand, V = 32, D = 8: V·D + V and V·D + D²
  assert param_counts(32, 8, output_bias=True).tied == 288 and param_counts(32, 8, "symmetric").tied == 320


def test_the_symmetric_maps_gradient_is_symmetric_so_w_stays_s():
  model = build_model(_smoke(("model.hidden", "symmetric"), ("model.hidden_l2", 0.01)))
  rng = np.random.default_rng(0)
  ids, next_ids = (jnp.asarray(rng.integers(0, model.vocab_size, 64), jnp.int32) for _ in range(2))
  kernel = np.asarray(plain_paths.path_gradients(model, ids, next_ids).hidden["hidden_map"]["kernel"])
  np.testing.assert_array_equal(kernel, kernel.T)
  assert np.abs(kernel).max() > 0


def _refusal(config) -> str:
  with pytest.raises(UsageError) as refused:
    config_lib.validate(config, num_devices=1, memory_bytes=2**50)
  return str(refused.value)


def test_the_config_takes_the_controls_in_either_dtype_and_refuses_a_bias_that_is_not_a_bool():
  for config in (_smoke(("model.output_bias", True)), _smoke(("model.output_bias", True), ("model.tied", False)),
                 _smoke(("model.output_bias", True), ("model.dtype", "bfloat16")),
                 _smoke(("model.hidden", "symmetric"), ("model.hidden_l2", 0.01))):
    config_lib.validate(config, num_devices=1, memory_bytes=2**50)
  message = _refusal(_smoke(("model.output_bias", 1)))
  assert message.startswith("model.output_bias=1 is not allowed") and "\n" not in message
  assert "symmetric" in _refusal(_smoke(("model.hidden", "diagonal")))


@pytest.mark.parametrize("windows", [False, True])
def test_a_bfloat16_evaluation_scores_the_bias_within_its_rounding_of_float64(windows):
  """The bfloat16 evaluation of a bias model against its biased logits' per-token loss recomputed in NumPy float64
  (pairs, and the same pairs as two windows of 4): within tests/fast/test_precision.py's bfloat16 bound, and the
  logits without b are farther than that bound, so an evaluation that drops the bias fails here."""
  from tied_embed.core import optim  # noqa: PLC0415
  from tied_embed.train import evaluation, run_step  # noqa: PLC0415

  model = _model("bias")
  model.bias[...] = 4 * model.bias[...]  # b moves each pair's loss by far more than bfloat16's rounding
  optimizer = optim.make_optimizer(_smoke().train)
  graphdef, state = nnx.split(run_step.RunState(model, optimizer))
  ids, next_ids = (IDS.reshape(2, 4), NEXT.reshape(2, 4)) if windows else (IDS, NEXT)
  got = np.asarray(evaluation.make_eval_losses(graphdef, 0, "bfloat16")(state, jnp.asarray(ids),
                                                                         jnp.asarray(next_ids)), np.float64)
  table = np.asarray(model.tables()[1], np.float64)

  def losses(bias: np.ndarray) -> np.ndarray:  # each pair's cross-entropy of E[ids] · Eᵀ + bias, float64
    logits = table[IDS] @ table.T + bias
    top = logits.max(axis=1)
    return top + np.log(np.exp(logits - top[:, None]).sum(axis=1)) - logits[np.arange(len(IDS)), NEXT]

  def error(want: np.ndarray) -> float:
    return float(np.linalg.norm(got.reshape(-1) - want) / np.linalg.norm(want))

  assert error(losses(np.asarray(model.bias[...], np.float64))) < BF16_BOUND
  assert error(losses(np.zeros(VOCAB))) > 5 * BF16_BOUND


@pytest.mark.parametrize(("control", "stat"), [("bias", "bias_spread"), ("symmetric", "min_eigenvalue")])
def test_a_controls_run_checks_its_split_below_1e_5_and_evaluates_its_own_logits(control, stat, tmp_path):
  """configs/smoke.py through the project's loop (the chunked, distinct-row speed paths): the logged split check, the
  model's own scalar, and the final eval loss against the restored checkpoint's logits recomputed in NumPy."""
  from helpers import all_series  # noqa: PLC0415

  from tied_embed.data import bigram as data_lib  # noqa: PLC0415
  from tied_embed.train import checkpoint  # noqa: PLC0415
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  fields = {"bias": [("model.output_bias", True)], "symmetric": [("model.hidden", "symmetric"),
                                                                 ("model.hidden_l2", 0.01)]}[control]
  config = _smoke(*fields, ("train.num_steps", 20), ("train.eval_every", 20), ("train.checkpoint_every", 20))
  assert config.loss.chunk_size > 0  # the speed paths, not the plain ones
  summary = train_and_evaluate(config, tmp_path)
  series = all_series(tmp_path)
  assert sorted(series["grad/split_error"]) == [10, 20]
  assert max(series["grad/split_error"].values()) < 1e-5
  assert sorted(series[f"train/hidden_{stat}"]) == [10, 20]
  model = checkpoint.restore(tmp_path).model
  if control == "bias":
    assert summary.param_count == 32 * 8 + 32 and np.abs(np.asarray(model.bias[...])).max() > 1e-3
  else:
    assert summary.param_count == 32 * 8 + 8 * 8
  data = data_lib.load_existing_bigram_data(config, tmp_path)
  lookup, projection = (np.asarray(t, np.float64) for t in model.tables())
  rows = lookup[data.eval_ids]
  if control == "bias":
    logits = rows @ projection.T + np.asarray(model.bias[...], np.float64)
  else:
    kernel = np.asarray(model.hidden_map.kernel[...], np.float64)
    logits = rows @ ((kernel + kernel.T) / 2) @ projection.T
  top = logits.max(axis=1, keepdims=True)
  lse = (top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True)))[:, 0]
  want = np.mean(lse - logits[np.arange(len(data.eval_ids)), data.eval_next])
  assert summary.eval_loss == pytest.approx(want, rel=1e-5)


def test_an_output_bias_around_a_context_model_routes_and_serves_its_windows():
  model = build_model(ml_collections.ConfigDict({
      "seed": 0, "data": {"context_length": 4},
      "model": {"vocab_size": VOCAB, "d_model": D_MODEL, "tied": True, "context": "mlp", "context_k": 2,
                "output_bias": True}}))
  model.bias[...] = jnp.asarray(np.random.default_rng(3).standard_normal(VOCAB), jnp.float32)
  ids, next_ids = jnp.asarray(IDS.reshape(2, 4)), jnp.asarray(NEXT.reshape(2, 4))
  hidden = np.asarray(model.hidden(model.embed(ids)), np.float64)  # the context mixer's own output, then by hand:
  _close(model(ids), hidden @ np.asarray(model.tables()[1], np.float64).T + np.asarray(model.bias[...], np.float64))
  plain = plain_paths.path_gradients(model, ids, next_ids)
  assert float(step_lib.split_error(model, plain_paths.param_gradients(model, plain), ids, next_ids)) < 1e-5
  fast = choose.paths_function(chunk_size=3)(model, ids, next_ids)
  _close(fast.loss, plain.loss)
  _close(lookup_dense(fast), plain.lookup)
  _close(fast.projection, plain.projection)
  _close(fast.hidden["bias"], plain.hidden["bias"])


def test_inspection_reads_each_control_in_its_own_words_and_at_the_tables_d():
  """The report names what each control scores with (not a hidden map W for S, not a bare E·Eᵀ for the bias), and
  its D is the table's, not the bias-widened scoring tables' D + 1."""
  from tied_embed.inspection import report as report_lib  # noqa: PLC0415

  assert "+ b" in _model("bias").scores_in_words() and "E·Eᵀ" in _model("bias").scores_in_words()
  assert "input·outputᵀ" in _model("bias", tied=False).scores_in_words()
  assert "symmetric" in _model("symmetric").scores_in_words() and "W·" not in _model("symmetric").scores_in_words()
  model = _model("bias")
  lookup, projection = (np.asarray(table) for table in model.scoring_tables())
  assert lookup.shape == (VOCAB, D_MODEL + 1)
  built = report_lib.build_report(
      lookup, projection, tied=True, source="planted", true_log_probs=np.zeros((VOCAB, VOCAB)),
      lookup_total=np.zeros(VOCAB), projection_total=np.zeros(VOCAB), tokens=[0], top_k=2, other_params=VOCAB,
      scores=model.scores_in_words(), d_model=int(model.d_model))
  assert built["parameters"]["table_shape"] == [VOCAB, D_MODEL]
  assert built["parameters"]["tied"] == VOCAB * D_MODEL + VOCAB  # the table and b, by hand


def test_the_symmetric_maps_logged_statistics_are_numpys():
  model = _model("symmetric")  # W = I + 0.5·noise, so S = (W + Wᵀ)/2 is far from I
  kernel = np.asarray(model.hidden_map.kernel[...], np.float64)
  symmetric = (kernel + kernel.T) / 2
  stats = model.hidden_stats()
  np.testing.assert_allclose(float(stats["identity_distance"]), np.linalg.norm(symmetric - np.eye(D_MODEL)),
                             rtol=1e-5)
  eigenvalues = np.linalg.eigvalsh(symmetric)  # ascending
  assert eigenvalues[1] - eigenvalues[0] > 0.1  # the smallest is not its neighbour
  np.testing.assert_allclose(float(stats["min_eigenvalue"]), eigenvalues[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("tied", [True, False])
def test_every_vocabulary_param_is_annotated_to_split_along_v(tied):
  # On a mesh each (V,) or (V, D) Param is split along V by its annotation (tests/train/test_sharding.py checks the
  # split itself); one without it would be replicated whole on every device.
  model = build_model(ml_collections.ConfigDict({
      "seed": 0, "data": {"context_length": 1},
      "model": {"vocab_size": VOCAB, "d_model": D_MODEL, "tied": tied, "hidden": "linear", "output_bias": True}}))
  annotations = {path: (variable.shape, variable.get_metadata().get("out_sharding"))
                 for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param))}
  vocabulary = {path: axes for path, (shape, axes) in annotations.items() if shape[0] == VOCAB}
  assert len(vocabulary) == (2 if tied else 3)  # the table(s) and the bias
  assert all(axes is not None and axes[0] == "vocab" for axes in vocabulary.values()), vocabulary
  assert vocabulary[("bias",)] == ("vocab",)


_BIAS = " + b (an output bias: one learned score per next token)"
_SYMMETRIC = " with a symmetric map S = (W + Wᵀ)/2: S = Sᵀ, so no direction, but indefinite)"


@pytest.mark.parametrize(("tied", "hidden", "output_bias", "words"), [
    (True, "none", False, None),
    (False, "none", False, None),
    (True, "linear", False, "E·W·Eᵀ (tied table with a hidden map W: W's antisymmetric part lets S differ from Sᵀ)"),
    (False, "linear", False, "input·W·outputᵀ (untied model with a hidden map W)"),
    (True, "symmetric", False, "E·S·Eᵀ (tied table" + _SYMMETRIC),
    (False, "symmetric", False, "input·S·outputᵀ (untied model" + _SYMMETRIC),
    (True, "none", True, "E·Eᵀ (tied table)" + _BIAS),
    (False, "none", True, "input·outputᵀ (untied model)" + _BIAS),
    (True, "symmetric", True, "E·S·Eᵀ (tied table" + _SYMMETRIC + _BIAS),
])
def test_each_model_names_what_its_scoring_tables_multiply(tied, hidden, output_bias, words):
  # The inspection report prints this beside the tables: it must name the model's own form, tied or not.
  model = build_model(ml_collections.ConfigDict({
      "seed": 0, "data": {"context_length": 1},
      "model": {"vocab_size": VOCAB, "d_model": D_MODEL, "tied": tied, "hidden": hidden, "output_bias": output_bias}}))
  assert model.scores_in_words() == words


@pytest.mark.parametrize("hidden", ["linear", "symmetric"])
def test_an_output_bias_around_a_hidden_map_keeps_the_map(hidden):
  # The bias wraps the map: its logits are E·W·Eᵀ + b (S for symmetric), the map applied, not skipped.
  model = build_model(ml_collections.ConfigDict({
      "seed": 0, "data": {"context_length": 1},
      "model": {"vocab_size": VOCAB, "d_model": D_MODEL, "tied": True, "hidden": hidden, "output_bias": True}}))
  rng = np.random.default_rng(5)
  kernel, bias = np.eye(D_MODEL) + 0.5 * rng.standard_normal((D_MODEL, D_MODEL)), rng.standard_normal(VOCAB)
  model.embedder.hidden_map.kernel[...] = jnp.asarray(kernel, jnp.float32)
  model.bias[...] = jnp.asarray(bias, jnp.float32)
  table = np.asarray(model.tables()[0], np.float64)
  kernel = np.asarray(model.embedder.hidden_map.kernel[...], np.float64)
  mapped = kernel if hidden == "linear" else (kernel + kernel.T) / 2
  expected = table[IDS] @ mapped @ table.T + np.asarray(model.bias[...], np.float64)
  np.testing.assert_allclose(np.asarray(model(jnp.asarray(IDS))), expected, rtol=1e-5, atol=1e-5)


def test_an_output_bias_around_a_context_model_keeps_the_context():
  config = ml_collections.ConfigDict({
      "seed": 0, "data": {"context_length": 4},
      "model": {"vocab_size": VOCAB, "d_model": D_MODEL, "tied": True, "context": "mlp", "context_k": 3,
                "output_bias": True}})
  model = build_model(config)
  model.bias[...] = jnp.asarray(np.random.default_rng(6).standard_normal(VOCAB), jnp.float32)
  windows = jnp.asarray(IDS.reshape(2, 4))
  with_bias = np.asarray(model(windows), np.float64)
  without = np.asarray(model.embedder(windows), np.float64)
  np.testing.assert_allclose(with_bias - without, np.broadcast_to(np.asarray(model.bias[...]), without.shape),
                             rtol=1e-5, atol=1e-5)
  # and the last position reads the tokens before it: another first token changes it
  changed = np.asarray(model(windows.at[:, 2].set((windows[:, 2] + 1) % VOCAB)))
  assert not np.allclose(changed[:, 3], with_bias[:, 3])


def test_a_config_without_the_optional_model_fields_builds_the_plain_model():
  # An older workdir's config holds no `context`, `hidden`, `hidden_l2` or `output_bias`: each reads as absent.
  def bare(**model):
    return ml_collections.ConfigDict({"seed": 0, "data": {}, "model": {"vocab_size": 8, "d_model": 4, "tied": True,
                                                                        **model}})

  plain = build_model(bare())
  assert type(plain).__name__ == "TiedEmbed"
  assert [path for path, _ in nnx.to_flat_state(nnx.state(plain, nnx.Param))] == [("embedding",)]
  mapped = build_model(bare(hidden="full"))  # W without its l2: no penalty, even with W away from I
  mapped.hidden_map.kernel[...] = 2 * jnp.eye(4)
  assert type(mapped).__name__ == "WithHiddenMap" and mapped.penalty() is None
  # a transformer with no data.context_length: windows of one position (bigram pairs)
  transformer = build_model(bare(context="transformer", layers=1, heads=2))
  assert transformer.positions[...].shape == (1, 4)
