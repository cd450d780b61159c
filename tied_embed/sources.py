"""The bigram tasks, in pure NumPy: their transition tables, samples and exact loss floors.

A bigram task is a distribution of current tokens `p` (V,) and a transition table `log P(next | current)` (V, V).
The best any model can do on it is the conditional entropy H(next | current) = -Σ_i p_i Σ_j P(j|i) log P(j|i),
the loss floor that training is measured against.

- planted: P(j|i) = softmax_j(e*_i · e*_j) for a hidden table e* (V, D). Symmetric logits: a tied model of
  width D represents it exactly.
- directed: P(j|i) = softmax_j(e*_i · e*_{j-1}), the planted logits shifted by one column. The peak sits on the
  cycle i → i+1 (and the reverse step is as unlikely as any other token): strongly one-way. An untied model of
  width D represents it exactly (input row e*_i, output row e*_{j-1}); a tied one cannot, as E·Eᵀ is symmetric.
- text: byte bigrams of a file; its floor is the empirical conditional entropy of the validation bytes.

Current tokens of the synthetic tasks follow a Zipf law p_i ∝ (i + 1)^-s, so high ids are rarely looked up and
get most of their gradient through the output projection.
"""

from __future__ import annotations

import numpy as np

TEXT_VOCAB_SIZE = 256  # one token per byte value
SYNTHETIC_SOURCES = ("planted", "directed")
SOURCES = (*SYNTHETIC_SOURCES, "text")


def zipf_probs(vocab_size: int, exponent: float) -> np.ndarray:
  """Current-token distribution p_i ∝ (i + 1)^-exponent: () → (V,) float64 summing to 1 (exponent 0: uniform)."""
  weights = np.arange(1, vocab_size + 1, dtype=np.float64) ** -exponent
  return weights / weights.sum()


def hidden_table(vocab_size: int, d_model: int, logit_scale: float, seed: int) -> np.ndarray:
  """The hidden table e* (V, D) float64, with E|e*_i|² = logit_scale.

  Entries are N(0, logit_scale / D), so a self (planted) or next (directed) logit is about `logit_scale` and
  the other logits spread with standard deviation logit_scale / sqrt(D).
  """
  rng = np.random.default_rng([seed, 0])
  return rng.standard_normal((vocab_size, d_model)) * np.sqrt(logit_scale / d_model)


def log_softmax(logits: np.ndarray) -> np.ndarray:
  """Row-wise log-softmax: (V, V) → (V, V) float64."""
  shifted = logits - logits.max(axis=1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def transition_log_probs(source: str, table: np.ndarray) -> np.ndarray:
  """log P(next=j | current=i) of a synthetic source from its hidden table: (V, D) → (V, V) float64."""
  if source == "planted":
    return log_softmax(table @ table.T)
  if source == "directed":
    return log_softmax(table @ np.roll(table, 1, axis=0).T)  # column j scores against row j-1
  raise ValueError(f"not a synthetic source: {source!r}")


def conditional_entropy(current_probs: np.ndarray, log_probs: np.ndarray) -> float:
  """H(next | current) in nats: p (V,), log P (V, V) → float. Zero-probability entries contribute 0."""
  probs = np.exp(log_probs)
  plogp = probs * np.where(probs > 0, log_probs, 0.0)
  return float(-(current_probs * plogp.sum(axis=1)).sum())


def synthetic_task(
    source: str, vocab_size: int, d_model: int, logit_scale: float, zipf_exponent: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
  """A synthetic task's current-token distribution p (V,) and log P(next | current) (V, V), both float64."""
  table = hidden_table(vocab_size, d_model, logit_scale, seed)
  return zipf_probs(vocab_size, zipf_exponent), transition_log_probs(source, table)


def sample_pairs(
    current_probs: np.ndarray, log_probs: np.ndarray, num_pairs: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
  """Draws i ~ p, then j ~ P(·|i): (V,), (V, V) → ids (N,) int32, next_ids (N,) int32.

  Inverse-CDF sampling, one `searchsorted` per current token over its rows (found by one argsort), so the cost
  is O(N log N) with no (N, V) array.
  """
  vocab_size = len(current_probs)
  ids = rng.choice(vocab_size, size=num_pairs, p=current_probs).astype(np.int32)
  uniforms = rng.random(num_pairs)
  cdf = np.cumsum(np.exp(log_probs), axis=1)
  order = np.argsort(ids, kind="stable")
  bounds = np.searchsorted(ids[order], np.arange(vocab_size + 1))
  next_ids = np.empty(num_pairs, dtype=np.int32)
  for token in range(vocab_size):
    rows = order[bounds[token]:bounds[token + 1]]
    # Scaling by the row total keeps rounding in the cumulative sum from ever indexing past V - 1.
    next_ids[rows] = np.searchsorted(cdf[token], uniforms[rows] * cdf[token, -1], side="right")
  return ids, np.minimum(next_ids, vocab_size - 1)


def synthetic_splits(
    current_probs: np.ndarray, log_probs: np.ndarray, num_train: int, num_eval: int, seed: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Independent train and validation samples: → {'train': (ids, next_ids), 'validation': (ids, next_ids)}."""
  rng = np.random.default_rng([seed, 1])  # a stream apart from the hidden table's
  train = sample_pairs(current_probs, log_probs, num_train, rng)
  return {"train": train, "validation": sample_pairs(current_probs, log_probs, num_eval, rng)}


def text_pairs(data: bytes, validation_fraction: float = 0.1) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Byte bigrams of a file split by position: the last `validation_fraction` of the bytes is validation.

  bytes (n,) → {'train': (ids, next_ids), 'validation': (ids, next_ids)}, int32 arrays of n_split - 1 pairs.
  No pair straddles the split point, so the two splits share no bytes.
  """
  values = np.frombuffer(data, dtype=np.uint8).astype(np.int32)
  split_at = len(values) - int(len(values) * validation_fraction)
  train, validation = values[:split_at], values[split_at:]
  return {"train": (train[:-1], train[1:]), "validation": (validation[:-1], validation[1:])}


def empirical_log_probs(ids: np.ndarray, next_ids: np.ndarray, vocab_size: int) -> np.ndarray:
  """log(count(i, j) / count(i)) of observed pairs: (N,), (N,) → (V, V) float64.

  -inf where a pair never occurs; a row whose token never occurs as current is all nan.
  """
  counts = np.zeros((vocab_size, vocab_size), dtype=np.float64)
  np.add.at(counts, (ids, next_ids), 1.0)
  totals = counts.sum(axis=1, keepdims=True)
  with np.errstate(divide="ignore", invalid="ignore"):
    return np.log(counts / totals)


def empirical_conditional_entropy(ids: np.ndarray, next_ids: np.ndarray, vocab_size: int) -> float:
  """Empirical H(next | current) of observed pairs, the best a bigram model can score on them: → float nats."""
  log_probs = empirical_log_probs(ids, next_ids, vocab_size)
  return float(-log_probs[ids, next_ids].mean())
