"""benchmarks/context_step.py at a tiny shape: the trainer's step builds for (B, L) windows, and the PyTorch model
it is timed against has the JAX model's parameters, counted and valued alike."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from benchmarks import context_step
from tied_embed.core.model import build_model

TINY = {"model.vocab_size": 64, "model.d_model": 16, "model.layers": 2, "data.context_length": 4, "train.batch_size": 2}


def test_the_trainers_step_builds_for_windows_and_the_formula_counts_the_jax_model():
  config = context_step.bench_config(**TINY)
  _, _, abstract, step, abstract_ids = context_step.trainer_step(config)
  lowered = step.lower(abstract, abstract_ids, abstract_ids, with_stats=False)  # traced for (B, L), not compiled
  new_state, metrics = lowered.out_info[:2]
  assert metrics["loss"].shape == ()
  assert jax.tree.structure(new_state) == jax.tree.structure(abstract)
  model = nnx.eval_shape(lambda: build_model(config))
  assert context_step.jax_param_count(model) == context_step.param_count(64, 16, 4, 2)


def test_the_pytorch_model_has_the_jax_models_parameters_and_loss():
  torch = pytest.importorskip("torch")
  config = context_step.bench_config(**TINY)
  model = build_model(config)
  params = {name: np.asarray(value) for name, value in context_step.flat_params(model).items()}
  module = context_step.torch_model(64, 16, 4, 2, 4)
  assert context_step.torch_param_count(module) == context_step.param_count(64, 16, 4, 2)
  context_step.copy_jax_params(module, params)
  ids, next_ids = context_step.window_batch(config)
  expected = float(nnx.jit(context_step.plain_loss)(model, jnp.asarray(ids), jnp.asarray(next_ids)))  # one program
  with torch.no_grad():
    logits = module(torch.from_numpy(ids.astype(np.int64)))
  loss = float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), torch.from_numpy(next_ids.astype(np.int64))
                                                 .flatten()))
  assert loss == pytest.approx(expected, abs=1e-5)
