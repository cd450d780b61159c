"""The tie holds in every form: for the tied bigram, each tied context model and each tied control (an output bias,
a symmetric map), one (V, D) table, whichever way the model is carried (docs/models.md, "The tie holds" lists what
each row checks).

A tie can break without an error: a save that writes the table twice, a restore or a transform that reads it
back as two arrays, an optimizer holding moments per use. Each test names one such road; the last shows that the
check fails for a model whose two Params merely start equal."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from tied_embed.core import optim
from tied_embed.core import paths as paths_lib
from tied_embed.core import step as step_lib
from tied_embed.core.model import UntiedEmbed, build_model

VOCAB, D_MODEL, LENGTH = 20, 8, 5
# Each tied model in the table: its model.* fields beyond the tied bigram's (the context models, and the when-to-tie
# controls: an output bias, a symmetric map S between the two uses).
TIED = {"none": {}, "mlp": {"context": "mlp"}, "transformer": {"context": "transformer"},
        "output_bias": {"output_bias": True}, "symmetric": {"hidden": "symmetric"}}


def _model(form: str):
  return build_model(ml_collections.ConfigDict({
      "seed": 0, "data": {"context_length": LENGTH},
      "model": {"vocab_size": VOCAB, "d_model": D_MODEL, "tied": True, "context": "none", "context_k": 2,
                "layers": 1, "heads": 2, "hidden": "none", **TIED[form]}}))


def _tables(tree) -> list[np.ndarray]:
  """The (V, D) arrays among a pytree's leaves."""
  return [np.asarray(leaf) for leaf in jax.tree.leaves(tree) if getattr(leaf, "shape", None) == (VOCAB, D_MODEL)]


def tie_holds(model) -> bool:
  """One Param read by both uses, and one (V, D) array among the model's Params."""
  lookup, projection = model.table_params()
  return lookup is projection and len(_tables(nnx.state(model, nnx.Param))) == 1


def _train_state(model):
  train = ml_collections.ConfigDict({"learning_rate": 0.01, "warmup_steps": 0, "num_steps": 10, "weight_decay": 0.0,
                                     "optimizer": "adamw", "grad_clip_norm": 1.0})
  return step_lib.TrainState(model, optim.make_optimizer(train))


def _windows(form: str):
  rng = np.random.default_rng(0)
  shape = (4,) if TIED[form].get("context", "none") == "none" else (4, LENGTH)
  return tuple(jnp.asarray(rng.integers(0, VOCAB, shape), jnp.int32) for _ in range(2))


@pytest.mark.parametrize("form", TIED)
def test_one_table_among_the_params(form):
  model = _model(form)
  assert tie_holds(model)
  (path,) = set(paths_lib.table_paths(model))  # the one Param both uses read, named `embedding`
  assert path[-1] == "embedding"


@pytest.mark.parametrize("form", TIED)
def test_one_pair_of_adam_moments_for_the_table(form):
  train_state = _train_state(_model(form))
  moments = nnx.state(train_state.optimizer, nnx.OptState)
  tables = _tables(moments)
  assert len(tables) == 2  # mu and nu of the one table
  adam = [s for s in jax.tree.leaves(train_state.optimizer.opt_state, is_leaf=lambda x: isinstance(
      x, optax.ScaleByAdamState)) if isinstance(s, optax.ScaleByAdamState)]
  assert len(adam) == 1 and len(_tables(adam[0].mu)) == len(_tables(adam[0].nu)) == 1


@pytest.mark.parametrize("form", TIED)
def test_the_tie_holds_after_a_step_under_nnx_jit(form):
  model = _model(form)
  ids, next_ids = _windows(form)
  optimizer = nnx.Optimizer(model, optax.adam(0.01), wrt=nnx.Param)

  @nnx.jit
  def step(model, optimizer, ids, next_ids):
    grads = nnx.grad(lambda m: jnp.mean(optax.softmax_cross_entropy_with_integer_labels(m(ids), next_ids)))(model)
    optimizer.update(model, grads)

  before = np.asarray(model.table_params()[0][...])
  step(model, optimizer, ids, next_ids)
  assert tie_holds(model)
  assert not np.array_equal(before, model.table_params()[0][...])  # the step did update the one table


@pytest.mark.parametrize("form", TIED)
def test_the_tie_holds_through_jax_jit_over_split_and_merge(form):
  graphdef, state = nnx.split(_train_state(_model(form)))
  ids, next_ids = _windows(form)
  step = step_lib.make_train_step(graphdef)  # jax.jit of merge, the step, split
  state, _ = step(state, ids, next_ids)
  merged = nnx.merge(graphdef, state)
  assert tie_holds(merged.model)
  assert len(_tables(nnx.state(merged.model, nnx.Param))) == 1


@pytest.mark.parametrize("form", TIED)
def test_one_table_in_the_orbax_checkpoint_read_as_plain_arrays(form, tmp_path):
  state = nnx.state(_train_state(_model(form)))
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(tmp_path / "state", state)
  checkpointer.wait_until_finished()
  raw = ocp.StandardCheckpointer().restore(tmp_path / "state")  # no target: what the files hold, as nested dicts
  assert len(_tables(raw["model"])) == 1
  assert len(_tables(raw["optimizer"])) == 2  # its two Adam moments


def test_two_params_that_start_equal_fail_the_check():
  model = UntiedEmbed(VOCAB, D_MODEL, rngs=nnx.Rngs(0))
  model.output_embedding[...] = model.input_embedding[...]
  np.testing.assert_array_equal(model.input_embedding[...], model.output_embedding[...])
  assert not tie_holds(model)
