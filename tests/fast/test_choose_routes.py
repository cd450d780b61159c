"""fast/choose.py's routes, read without running them: which loss and which settings each config's step hands the
sparse paths (the bigram's distinct-row shortcut for pairs only), the story's code where nothing asks for speed, the
one log line, and the mesh's sizes and the model's Params read from a state's pytree."""

from __future__ import annotations

import logging

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

from tied_embed.core import optim
from tied_embed.core import paths as plain_paths
from tied_embed.core.model import build_model
from tied_embed.fast import choose, chunked_loss, sparse_paths
from tied_embed.train import run_step

LOG_LINE = "The chunked loss's matmuls run as XLA's dots: the oneMKL kernel runs on one device only."


@pytest.fixture
def handed(monkeypatch):
  """What the fast paths hand sparse_paths.path_gradients: (model, ids, next_ids, loss_fn), instead of running it."""
  calls = []
  monkeypatch.setattr(sparse_paths, "path_gradients", lambda *args: calls.append(args) or "paths")
  return calls


def test_float32_without_chunks_is_the_storys_code_and_nothing_else_is():
  assert choose.paths_function(0) is plain_paths.path_gradients
  assert choose.paths_function(0, "float32") is plain_paths.path_gradients
  for chunk_size, dtype in ((256, "float32"), (1, "float32"), (0, "bfloat16"), (256, "bfloat16")):
    assert choose.paths_function(chunk_size, dtype) is not plain_paths.path_gradients, (chunk_size, dtype)


@pytest.mark.parametrize("shape", [(6,), (2, 3)])
def test_the_chunked_loss_gets_every_setting_and_pairs_alone_their_ids_as_row_keys(handed, shape):
  model, ids, next_ids = object(), np.arange(6).reshape(shape), np.arange(1, 7).reshape(shape)
  assert choose.paths_function(256, "bfloat16", shards=2, mkl_kernel=False)(model, ids, next_ids) == "paths"
  (args,) = handed
  assert args[:3] == (model, ids, next_ids)
  loss_fn = args[3]
  assert loss_fn.func is chunked_loss.chunked_cross_entropy
  assert set(loss_fn.keywords) == {"chunk_size", "row_keys", "groups", "compute_dtype", "mkl_kernel"}
  assert (loss_fn.keywords["chunk_size"], loss_fn.keywords["groups"], loss_fn.keywords["compute_dtype"],
          loss_fn.keywords["mkl_kernel"]) == (256, 2, "bfloat16", False)
  # pairs: a hidden vector is its id's alone, so equal ids share one row of logits; windows carry context
  assert loss_fn.keywords["row_keys"] is (ids if len(shape) == 1 else None)


def test_the_chunked_losss_defaults_are_float32_one_shard_and_the_kernel(handed):
  ids = np.arange(4)
  choose.paths_function(128)(None, ids, ids)
  keywords = handed[0][3].keywords
  assert (keywords["compute_dtype"], keywords["groups"], keywords["mkl_kernel"]) == ("float32", 1, True)


def test_bfloat16_without_chunks_is_the_full_loss_in_bfloat16(handed):
  ids = np.arange(4)
  choose.paths_function(0, "bfloat16")(None, ids, ids)
  loss_fn = handed[0][3]
  assert loss_fn.func is chunked_loss.full_cross_entropy and loss_fn.keywords == {"compute_dtype": "bfloat16"}


def test_the_log_line_says_xlas_dots_only_where_the_chunked_loss_is_denied_the_kernel(caplog):
  settings = {(256, False): True, (256, True): False, (0, False): False, (0, True): False}
  for (chunk_size, kernel), logged in settings.items():
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=choose.__name__):
      choose.paths_function(chunk_size, "bfloat16", mkl_kernel=kernel)
    assert [record.getMessage() for record in caplog.records] == ([LOG_LINE] if logged else []), (chunk_size, kernel)


def test_the_mesh_sizes_are_read_from_the_states_shardings():
  mesh = AbstractMesh((4, 2), ("data", "model"))
  shardings = {"a": NamedSharding(mesh, PartitionSpec()), "b": NamedSharding(mesh, PartitionSpec("model"))}
  assert (choose.data_shards(shardings), choose.mesh_devices(shardings)) == (4, 8)  # 4 data rows of 2: 8 devices
  assert (choose.data_shards(None), choose.mesh_devices(None)) == (1, 1)


@pytest.mark.parametrize("dropout", [False, True])
def test_the_model_params_of_a_train_state_are_its_models_params_whatever_its_leaves(dropout):
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  if dropout:  # a transformer with dropout also holds its masks' key: state, not a Param, so it has no gradient
    config.model.update(context="transformer", heads=2, dropout=0.1)
    config.data.context_length = 4
  model = build_model(config)
  assert len(jax.tree.leaves(nnx.state(model))) > len(jax.tree.leaves(nnx.state(model, nnx.Param))) or not dropout
  graphdef, state = nnx.split(run_step.RunState(model, optim.make_optimizer(config.train)))
  want = {path: tuple(leaf.shape) for path, leaf in jax.tree.leaves_with_path(nnx.state(model, nnx.Param))}
  assert want, "the model has Params"
  for leaves in (state, jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), state)):
    got = {path: tuple(leaf.shape) for path, leaf in jax.tree.leaves_with_path(choose.model_params(graphdef, leaves))}
    assert got == want
