"""The interpolated Kneser-Ney bigram against hand arithmetic on a tiny corpus, a dense float64 table of the same
formula written out, and the discount chosen on held-out pairs."""

import numpy as np
import pytest

from science import kneser_ney
from tied_embed.data.text.count_bigram import PairCounts

# V = 4. Train pairs: 0→1 twice, 0→2, 1→0, 2→1. Token 3 is never current and never next.
TRAIN = (np.array([0, 0, 0, 1, 2]), np.array([1, 1, 2, 0, 1]))


def test_continuation_probabilities_by_hand():
  # Distinct pairs: (0,1), (0,2), (1,0), (2,1): 4 types. Preceders N1+(·, j): 0: 1, 1: 2, 2: 1, 3: 0.
  # d = 0.5: max(N − d, 0) / 4 plus d · 3 (tokens with a preceder) / 4 spread as 1/4 each: 0.09375.
  fit = PairCounts.of(*TRAIN, 4)
  got = kneser_ney.continuation_probs(fit, 0.5)
  assert got == pytest.approx([0.125 + 0.09375, 0.375 + 0.09375, 0.125 + 0.09375, 0.09375], abs=1e-15)
  assert got.sum() == pytest.approx(1.0, abs=1e-15)


def test_kneser_ney_probabilities_by_hand():
  fit = PairCounts.of(*TRAIN, 4)
  # Row 0: c(0) = 3, two distinct followers, so the back-off weight is 0.5 · 2 / 3 = 1/3.
  #   P(1 | 0) = (2 − 0.5) / 3 + 1/3 · 0.46875 = 0.5 + 0.15625;  P(2 | 0) = 0.5 / 3 + 1/3 · 0.21875
  #   P(0 | 0) = 1/3 · 0.21875;  P(3 | 0) = 1/3 · 0.09375
  # Row 1: c(1) = 1, one follower: P(0 | 1) = 0.5 + 0.5 · 0.21875; P(1 | 1) = 0.5 · 0.46875
  # Row 3: never current: the continuation probabilities themselves.
  ids, nexts = np.array([0, 0, 0, 0, 1, 1, 3, 3]), np.array([1, 2, 0, 3, 0, 1, 1, 3])
  expected = [0.65625, 0.5 / 3 + 0.21875 / 3, 0.21875 / 3, 0.09375 / 3, 0.5 + 0.109375, 0.234375, 0.46875, 0.09375]
  assert kneser_ney.kneser_ney_probs(fit, ids, nexts, 0.5) == pytest.approx(expected, abs=1e-15)
  assert kneser_ney.kneser_ney_loss(fit, ids, nexts, 0.5) == pytest.approx(-np.mean(np.log(expected)), rel=1e-14)


def _dense_kneser_ney(train, vocab_size, discount):
  """The same model as a dense (V, V) float64 table, from counts written out by np.add.at."""
  counts = np.zeros((vocab_size, vocab_size))
  np.add.at(counts, train, 1.0)
  seen = counts > 0
  preceders = seen.sum(axis=0)
  lower = np.maximum(preceders - discount, 0) / seen.sum() + discount * (preceders > 0).sum() / seen.sum() / vocab_size
  table = np.tile(lower, (vocab_size, 1))
  for i in range(vocab_size):
    if counts[i].sum() > 0:
      table[i] = (np.maximum(counts[i] - discount, 0) + discount * seen[i].sum() * lower) / counts[i].sum()
  return table


def test_rows_sum_to_one_and_match_a_dense_table_and_the_discount_fits_held_out_pairs():
  rng = np.random.default_rng(5)
  vocab_size = 9
  prefs = rng.dirichlet(np.full(vocab_size, 0.2), size=vocab_size)

  def pairs(count):
    ids = rng.integers(0, vocab_size - 1, count)  # the last token is never current in any split
    return ids, np.array([rng.choice(vocab_size, p=prefs[i]) for i in ids])

  train, held = pairs(80), pairs(500)
  fit = PairCounts.of(*train, vocab_size)
  every = np.repeat(np.arange(vocab_size), vocab_size), np.tile(np.arange(vocab_size), vocab_size)
  by_discount = {}
  for discount in kneser_ney.DISCOUNT_GRID:
    table = _dense_kneser_ney(train, vocab_size, discount)
    got = kneser_ney.kneser_ney_probs(fit, *every, discount).reshape(vocab_size, vocab_size)
    assert got == pytest.approx(table, rel=1e-12)
    assert got.sum(axis=1) == pytest.approx(np.ones(vocab_size), rel=1e-12)
    by_discount[discount] = -np.mean(np.log(table[held]))
  best = min(by_discount, key=by_discount.get)
  assert kneser_ney.best_discount(fit, *held) == best
  assert kneser_ney.kneser_ney_loss(fit, *held, best) == pytest.approx(by_discount[best], rel=1e-12)
