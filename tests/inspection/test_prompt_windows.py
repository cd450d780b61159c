"""`--next` and `--generate` on a run trained on windows of L tokens: a prompt longer than L is read by its LAST L
tokens, a shorter one whole, one of exactly L as it is; each sampled token extends the window the next one reads.
The run is a stand-in (a built context model and a tokenizer of one character per id), so no training is needed."""

from __future__ import annotations

import types

import ml_collections
import numpy as np
import pytest

from tied_embed.core.model import build_model
from tied_embed.inspection import inspector
from tied_embed.util import UsageError

VOCAB, LENGTH = 12, 4


def _restored(context: str = "transformer", length: int = LENGTH, bias: bool = False):
  config = ml_collections.ConfigDict({
      "seed": 0, "data": {"context_length": length},
      "model": {"vocab_size": VOCAB, "d_model": 8, "tied": True, "context": context, "context_k": 2, "layers": 1,
                "heads": 2, "hidden": "none", "output_bias": bias}})
  model = build_model(config)
  if bias:
    model.bias[...] = np.linspace(-1, 1, VOCAB).astype(np.float32)
  return types.SimpleNamespace(config=config, model=model, step=7)


def _last_position(model, window: list[int]) -> np.ndarray:
  """The model's (V,) scores at the last position of one window given by hand."""
  return np.asarray(model(np.asarray([window], np.int32))[0, -1], np.float64)


@pytest.mark.parametrize(("prompt", "window"), [
    ([3, 1, 4, 1, 5, 9, 2], [1, 5, 9, 2]),  # longer than L: the last L
    ([3, 1, 4, 1, 5], [1, 4, 1, 5]),  # one longer
    ([2, 7, 1, 8], [2, 7, 1, 8]),  # exactly L
    ([6, 0], [6, 0]),  # shorter: the whole prompt from position 0
    ([11], [11]),
])
def test_next_scores_read_the_last_l_tokens_of_the_prompt(prompt, window):
  restored = _restored()
  np.testing.assert_allclose(inspector.next_scores(restored)(prompt), _last_position(restored.model, window),
                             rtol=1e-6, atol=1e-6)


def test_a_longer_prompts_first_tokens_change_nothing_and_its_last_l_do():
  scores = inspector.next_scores(_restored())
  base = scores([3, 1, 4, 1, 5, 9, 2])
  np.testing.assert_array_equal(scores([0, 0, 0, 1, 5, 9, 2]), base)  # only positions before the last L differ
  assert not np.allclose(scores([3, 1, 4, 0, 5, 9, 2]), base)  # the first of the last L is read


def test_a_run_on_pairs_scores_the_last_token_with_its_tables():
  restored = _restored(context="none", length=1, bias=True)
  table = np.asarray(restored.model.embedder.embedding[...], np.float64)
  bias = np.asarray(restored.model.bias[...], np.float64)
  np.testing.assert_allclose(inspector.next_scores(restored)([5, 2, 9]), table[9] @ table.T + bias, rtol=1e-6)


class _Characters:
  """A tokenizer of one letter per id: 'a' is 0."""

  def encode(self, text: str) -> list[int]:
    return [ord(c) - ord("a") for c in text]

  def decode(self, ids: list[int]) -> str:
    return "".join(chr(ord("a") + i) for i in ids)

  def label(self, i: int) -> str:
    return chr(ord("a") + i)


def _continue(monkeypatch, prompt: str, **kwargs):
  restored = _restored()
  facts = types.SimpleNamespace(tokenizer=_Characters(), source="text", vocab_size=VOCAB)
  monkeypatch.setattr(inspector, "open_run", lambda workdir, step, warnings: (restored, facts, None))
  return restored.model, inspector.continue_prompt("unused", prompt, **kwargs)


def test_next_reads_the_last_l_tokens_of_a_longer_prompt(monkeypatch):
  model, result = _continue(monkeypatch, "dbebfjc", top_k=VOCAB)  # ids 3 1 4 1 5 9 2
  scores = _last_position(model, [1, 5, 9, 2])
  probs = np.exp(scores - scores.max())
  probs /= probs.sum()
  got = {entry["id"]: entry["prob"] for entry in result["next"]}
  np.testing.assert_allclose([got[j] for j in range(VOCAB)], probs, rtol=1e-5)
  assert [entry["id"] for entry in result["prompt_tokens"]] == [3, 1, 4, 1, 5, 9, 2]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generate_slides_the_window_over_the_prompt_and_what_it_drew(monkeypatch, temperature):
  restored = _restored()
  model, windows = restored.model, []
  compiled = inspector.window_scores

  def recording(model, length):  # the compiled scores, each call's last L tokens recorded
    scores = compiled(model, length)

    def recorded(tokens):
      windows.append(list(tokens[-length:]))
      return scores(tokens)

    return recorded

  facts = types.SimpleNamespace(tokenizer=_Characters(), source="text", vocab_size=VOCAB)
  monkeypatch.setattr(inspector, "open_run", lambda workdir, step, warnings: (restored, facts, None))
  monkeypatch.setattr(inspector, "window_scores", recording)
  result = inspector.continue_prompt("unused", "dbebfjc", generate=5, temperature=temperature, seed=3)
  drawn = [entry["id"] for entry in result["generated"]]
  tokens = [3, 1, 4, 1, 5, 9, 2] + drawn
  # one call for --next, then one per drawn token: each on the last L tokens of the prompt and what was drawn before
  want = [tokens[:7][-LENGTH:]] + [tokens[:7 + i][-LENGTH:] for i in range(5)]
  assert windows == want
  if temperature == 0.0:  # greedy: each drawn token is the model's own argmax on that window
    for window, token in zip(want[1:], drawn, strict=True):
      assert token == int(np.argmax(_last_position(model, window)))
  assert result["text"] == _Characters().decode(tokens)


def test_an_empty_prompt_is_refused_naming_what_next_needs(monkeypatch):
  with pytest.raises(UsageError) as refused:
    _continue(monkeypatch, "")
  assert str(refused.value) == "--next='' is not allowed: expected a prompt with at least one token"
