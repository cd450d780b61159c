"""The inspection report of a context model: its model column, own scores and fit are the model run on each token
alone (a window of one token, as --next runs it), not its table's E·Eᵀ, and its header names the context model."""

from __future__ import annotations

import numpy as np
import pytest

from configs import smoke
from tied_embed.data import record as record_lib
from tied_embed.inspection.inspector import continue_prompt, inspect_run
from tied_embed.inspection.text import format_text
from tied_embed.train import checkpoint
from tied_embed.train.trainer import train_and_evaluate

WORDS = "the cursor moves to the next line and the window scrolls when the text is longer than the screen".split()
LENGTH = 16


@pytest.fixture(scope="module")
def context_workdir(tmp_path_factory):
  """A byte-level causal transformer over windows of 16 tokens, trained for 4 steps on 8 small documents."""
  root = tmp_path_factory.mktemp("context_report")
  rng = np.random.default_rng(0)
  (root / "corpus").mkdir()
  for index in range(8):
    (root / "corpus" / f"doc{index}.txt").write_text(" ".join(rng.choice(WORDS, 300)) + "\n")
  config = smoke.get_config()
  config.data.source, config.data.text_path, config.data.split = "text", str(root / "corpus"), "by_document"
  config.data.tokenizer, config.model.vocab_size = "bytes", 256
  config.model.context, config.data.context_length, config.model.heads = "transformer", LENGTH, 2
  config.train.batch_size, config.train.num_steps = 8, 4
  config.train.log_every = config.train.eval_every = config.train.checkpoint_every = 4
  train_and_evaluate(config, root / "run")
  return root / "run"


def _probabilities(logits: np.ndarray) -> np.ndarray:
  logits = np.asarray(logits, np.float64)
  exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return exp / exp.sum(axis=-1, keepdims=True)


def test_the_model_column_is_the_model_run_on_the_token(context_workdir):
  model = checkpoint.restore(context_workdir).model
  report = inspect_run(context_workdir, tokens=[" ", "t"], top_k=5, pictures=False)
  assert [token["id"] for token in report["tokens"]] == [ord(" "), ord("t")]
  for token in report["tokens"]:
    logits = np.asarray(model(np.array([[token["id"]]], np.int32))[0, 0], np.float64)  # (1, 1) window → (V,)
    probs = _probabilities(logits)
    order = np.argsort(-probs, kind="stable")[:5]
    assert [entry["id"] for entry in token["top"]] == list(order)
    np.testing.assert_allclose([entry["model_prob"] for entry in token["top"]], probs[order], rtol=1e-5)
    assert token["own_score"] == pytest.approx(logits[token["id"]], rel=1e-5)
    assert token["own_rank"] == 1 + int(np.sum(logits > logits[token["id"]]))
  after_space = continue_prompt(context_workdir, " ", top_k=5)["next"]  # --next on the one-token prompt agrees
  np.testing.assert_allclose([entry["prob"] for entry in after_space],
                             [entry["model_prob"] for entry in report["tokens"][0]["top"]], rtol=1e-5)
  assert "E·Eᵀ" not in report["scores"] and "one token" in report["scores"]


def test_the_fit_compares_the_model_run_on_each_token_with_the_truth(context_workdir):
  model = checkpoint.restore(context_workdir).model
  vocab_size = model.vocab_size
  learned = np.asarray(model(np.arange(vocab_size, dtype=np.int32)[:, None])[:, 0], np.float64)  # (V, V)
  truth = np.asarray(record_lib.read(context_workdir).true_log_probs, np.float64)
  xs, ys = [], []
  for row in range(vocab_size):  # each row centred over its finite true entries, rows with at least two
    seen = np.isfinite(truth[row])
    if seen.sum() >= 2:
      xs.append(learned[row, seen] - learned[row, seen].mean())
      ys.append(truth[row, seen] - truth[row, seen].mean())
  x, y = np.concatenate(xs), np.concatenate(ys)
  fit = inspect_run(context_workdir, tokens=[" "], pictures=False)["fit"]
  assert (fit["entries"], fit["rows"]) == (x.size, len(xs))
  assert fit["correlation"] == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-5)
  assert fit["mean_abs_error"] == pytest.approx(np.abs(x - y).mean(), rel=1e-5)


def test_the_header_names_the_context_model(context_workdir):
  text = format_text(inspect_run(context_workdir, tokens=[" "], pictures=False))
  context = [line for line in text.splitlines() if line.startswith("context ")]
  assert len(context) == 1, text[:600]
  assert f"transformer over windows of {LENGTH} tokens" in context[0]
  assert "layers=2" in context[0] and "heads=2" in context[0]
