"""What a trained text run says follows a string: the next-token distribution after a prompt, and samples.

A bigram model: only the prompt's last token matters, P(next | prompt) = softmax(S[last]), S = lookup · projectionᵀ
as in the report. The prompt is tokenized with the run's own tokenizer, read from WORKDIR/report_data.npz.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from tied_embed.data.base import log_softmax
from tied_embed.inspection.text import printable
from tied_embed.util import UsageError

MAX_GENERATE = 10_000  # sampled tokens at most: a few seconds at V = 8192, a continuation a person still reads
MAX_SEED = 2**31 - 1  # as for the config's seed


def next_token_probs(lookup_table: np.ndarray, projection_table: np.ndarray, token: int) -> np.ndarray:
  """P(next | current = token) of a table pair: (V, D), (V, D), id → (V,) float64 summing to 1."""
  lookup, projection = np.asarray(lookup_table, np.float64), np.asarray(projection_table, np.float64)
  return np.exp(log_softmax((lookup[token] @ projection.T)[None]))[0]


def sample_tokens(lookup_table: np.ndarray, projection_table: np.ndarray, start: int, num_tokens: int,
                  temperature: float, seed: int) -> list[int]:
  """`num_tokens` ids drawn one after another from softmax(S[current] / temperature), starting after `start`.

  temperature 0 takes the likeliest token each time. The draws depend only on (tables, start, seed). The scores are
  shifted by their maximum before the division, so any temperature > 0 samples (among the likeliest tokens when the
  others fall to -inf, as the limit T → 0 does).
  """
  lookup, projection = np.asarray(lookup_table, np.float64), np.asarray(projection_table, np.float64)
  rng = np.random.default_rng(seed)
  token, drawn = start, []
  for _ in range(num_tokens):
    scores = lookup[token] @ projection.T
    if temperature == 0:
      token = int(np.argmax(scores))
    else:
      with np.errstate(over="ignore"):  # scores far below the maximum become -inf: probability 0
        probs = np.exp(log_softmax(((scores - scores.max()) / temperature)[None]))[0]
      token = int(rng.choice(len(probs), p=probs / probs.sum()))
    drawn.append(token)
  return drawn


def continue_prompt(
    workdir: str | pathlib.Path, prompt: str, top_k: int = 5, generate: int = 0, temperature: float = 1.0,
    seed: int = 0, step: int | str | None = None,
) -> dict[str, Any]:
  """The top-k next tokens after `prompt` and, with `generate` > 0, a sampled continuation: → JSON-ready dict.

  Keys: workdir, step, prompt, prompt_tokens ([{id, label}]), next ([{id, label, prob}]), warnings, and with
  `generate` also generated ([{id, label}]), text (prompt and continuation, decoded), temperature and seed.
  UsageError for a run without text tokens, a prompt with no tokens, top_k outside [1, V], generate outside
  [0, MAX_GENERATE], a seed outside [0, MAX_SEED], or a temperature < 0.
  """
  from tied_embed.inspection.inspector import open_run  # noqa: PLC0415 (Orbax only when a run is opened)

  if not 0 <= generate <= MAX_GENERATE:
    raise UsageError.bad_value("--generate", generate, f"an integer in [0, {MAX_GENERATE:_}] (tokens to sample)")
  if not 0 <= seed <= MAX_SEED:
    raise UsageError.bad_value("--seed", seed, "an integer in [0, 2**31 - 1]")
  if not np.isfinite(temperature) or temperature < 0:
    raise UsageError.bad_value("--temperature", temperature, "a finite number >= 0 (0 = always the likeliest)")
  warnings: list[str] = []
  restored, facts, _ = open_run(workdir, step, warnings)
  tokenizer = facts.tokenizer
  if tokenizer is None:
    raise UsageError.bad_value("--next", prompt, f"a run on text (this one's source, {facts.source!r}, has no text)")
  if not 1 <= top_k <= facts.vocab_size:
    raise UsageError.bad_value("--top-k", top_k, f"an integer in [1, {facts.vocab_size}]")
  ids = tokenizer.encode(prompt)
  if not ids:
    raise UsageError.bad_value("--next", prompt, "a prompt with at least one token")
  lookup, projection = (np.asarray(table) for table in restored.model.scoring_tables())  # logits = A[ids] · Bᵀ
  probs = next_token_probs(lookup, projection, ids[-1])
  order = np.argsort(-probs, kind="stable")[:top_k]
  result = {
      "workdir": str(workdir), "step": restored.step, "prompt": prompt,
      "prompt_tokens": [{"id": int(i), "label": tokenizer.label(i)} for i in ids],
      "next": [{"id": int(j), "label": tokenizer.label(j), "prob": float(probs[j])} for j in order],
      "warnings": warnings,
  }
  if generate:
    drawn = sample_tokens(lookup, projection, ids[-1], generate, temperature, seed)
    result.update(generated=[{"id": i, "label": tokenizer.label(i)} for i in drawn],
                  text=tokenizer.decode(ids + drawn), temperature=temperature, seed=seed)
  return result


def format_continuation(result: dict[str, Any]) -> str:
  """The CLI's text for `continue_prompt`'s dict: control characters from the training text shown escaped
  (`text.printable`); the sampled text keeps its line breaks, each following line indented as the first."""
  tokens = " ".join(printable(token["label"]) for token in result["prompt_tokens"])
  last = result["prompt_tokens"][-1]
  lines = [f"prompt   {result['prompt']!r} → tokens {tokens}  (step {result['step']})",
           f"after {printable(last['label'])} (id {last['id']}):", f"  {'next':>12}  {'prob':>7}"]
  lines += [f"  {printable(entry['label']):>12}  {entry['prob']:7.4f}" for entry in result["next"]]
  if "generated" in result:
    shown = printable(result["text"], keep="\n").replace("\n", "\n  ")
    lines += ["", f"sampled  {len(result['generated'])} tokens, temperature {result['temperature']:g},"
              f" seed {result['seed']}:", f"  {shown}"]
  return "\n".join(lines)
