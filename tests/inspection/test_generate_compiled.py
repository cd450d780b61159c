"""--next and --generate on a context model run one compiled program for every window (a shorter one padded to
data.context_length, which a causal model's earlier positions never see), not the model op by op per token: the
scores are the model's own at the window's last token, and the sampled tokens for a seed are those the model called
directly gives. On untrained models built from a config, in this process."""

from __future__ import annotations

import logging

import jax
import numpy as np
import pytest
from configs import smoke

from tied_embed.core.model import build_model
from tied_embed.inspection import report as report_lib
from tied_embed.inspection.inspector import window_scores

LENGTH = 16
PROMPT = list(b"the cursor m")  # 12 ids: the first windows are padded, later ones full (the model's own, slow to
# call directly on each new shape, so few of them)


def _model(context: str):
  config = smoke.get_config()
  config.model.vocab_size, config.model.context, config.data.context_length = 256, context, LENGTH
  config.model.heads = 2
  return build_model(config)


def _direct(model):
  """scores(tokens) as the model called on exactly the last window gives them: (1, n ≤ L) ids → logits at n - 1."""
  return lambda tokens: np.asarray(model(np.asarray(tokens[-LENGTH:], np.int32)[None])[0, -1], np.float64)


@pytest.mark.parametrize("context", ["transformer", "mlp"])
def test_each_windows_scores_are_the_models_own(context):
  model = _model(context)
  scores, direct = window_scores(model, LENGTH), _direct(model)
  tokens = list(np.random.default_rng(0).integers(0, 256, LENGTH + 3))
  for end in (1, LENGTH + 3):  # a padded window, and a full one past the first tokens
    np.testing.assert_allclose(scores(tokens[:end]), direct(tokens[:end]), rtol=1e-5, atol=1e-5, err_msg=str(end))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_generated_continuation_is_the_direct_ones_and_compiles_once(temperature):
  model = _model("transformer")
  messages = []
  handler = logging.Handler()
  handler.emit = lambda record: messages.append(record.getMessage())
  logger = logging.getLogger("jax._src.interpreters.pxla")
  logger.addHandler(handler)
  try:
    with jax.log_compiles(True):
      drawn = report_lib.sample_after(window_scores(model, LENGTH), PROMPT, 10, temperature, seed=3)
  finally:
    logger.removeHandler(handler)
  assert drawn == report_lib.sample_after(_direct(model), PROMPT, 10, temperature, seed=3)
  assert len([m for m in messages if m.startswith("Compiling jit(scores_at)")]) == 1
