"""The Kneser-Ney n-gram of science/kneser_ney.py against a plain dictionary implementation of the textbook formula,
against its bigram on count_bigram's PairCounts at order 2, and as a distribution (it sums to 1 over the next token)."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from science import kneser_ney
from tied_embed.data.text import count_bigram


def documents(ids, next_ids, document_ends):
  """The token lists of each document of a pair stream."""
  ends = [e for e in (document_ends if document_ends is not None else []) if 0 < e < len(ids)] + [len(ids)]
  starts = [0] + ends[:-1]
  return [list(ids[s:e]) + [next_ids[e - 1]] for s, e in zip(starts, ends, strict=True) if e > s]


def reference_probability(train_docs, order, vocab_size, discount, context, token):
  """Interpolated Kneser-Ney, written from the formula with dictionaries: raw counts at the query's top order,
  continuation counts below it, the continuation unigram mixed with 1/V at the bottom."""
  raw = collections.Counter()
  preceders = collections.defaultdict(set)  # (shorter n-gram) → distinct tokens seen before it
  for doc in train_docs:
    for end in range(1, len(doc)):
      for length in range(1, order):
        if end - length < 0:
          break
        gram = tuple(doc[end - length:end + 1])
        raw[gram] += 1
        preceders[gram[1:]].add(gram[0])
  def level(history, top):
    if not history:
      counts = {(w,): len(preceders[(w,)]) for w in range(vocab_size)}
      total = sum(counts.values())
      kinds = sum(1 for c in counts.values() if c > 0)
      return lambda w: max(counts[(w,)] - discount, 0) / total + discount * kinds / total / vocab_size
    lower = level(history[1:], False)
    counts = {w: (raw[history + (w,)] if top else len(preceders[history + (w,)])) for w in range(vocab_size)}
    total = sum(counts.values())
    if total == 0:
      return lower
    types = sum(1 for c in counts.values() if c > 0)
    return lambda w: (max(counts[w] - discount, 0) + discount * types * lower(w)) / total
  return level(tuple(context), True)(token)


def random_stream(rng, count, vocab_size):
  tokens = rng.integers(0, vocab_size, count + 1)
  tokens[rng.random(count + 1) < 0.3] = 1  # repeats, so longer n-grams recur
  return tokens[:-1], tokens[1:]


@pytest.mark.parametrize("order,window", [(2, 1), (3, 4), (4, 3), (4, 100)])
def test_each_pairs_probability_is_the_textbook_formula(order, window):
  rng = np.random.default_rng(order * 10 + window)
  vocab_size, discount = 5, 0.6
  ids, next_ids = random_stream(rng, 300, vocab_size)
  train_ends = np.array([120, 200])
  eval_ids, eval_next = random_stream(rng, 40, vocab_size)
  eval_ends = np.array([9, 25])
  counts = kneser_ney.NgramCounts.of(ids, next_ids, train_ends, order, vocab_size)
  got = counts.probabilities(eval_ids, eval_next, eval_ends, window, discount)
  train_docs = documents(ids, next_ids, train_ends)
  expected = []
  for i in range(len(eval_ids)):
    start = max(e for e in [0, *eval_ends] if e <= i)
    seen = min((i - start) % window + 1, order - 1)
    expected.append(reference_probability(train_docs, order, vocab_size, discount, eval_ids[i - seen + 1:i + 1],
                                          eval_next[i]))
  np.testing.assert_allclose(got, np.array(expected), rtol=1e-12)


def test_order_2_is_count_bigrams_kneser_ney():
  rng = np.random.default_rng(0)
  ids, next_ids = random_stream(rng, 2000, 40)
  eval_ids, eval_next = random_stream(rng, 500, 40)
  counts = kneser_ney.NgramCounts.of(ids, next_ids, None, 2, 40)
  bigram = count_bigram.PairCounts.of(ids, next_ids, 40)
  for discount in (0.1, 0.75):
    np.testing.assert_allclose(counts.probabilities(eval_ids, eval_next, None, 1, discount),
                               kneser_ney.kneser_ney_probs(bigram, eval_ids, eval_next, discount), rtol=1e-12)


@pytest.mark.parametrize("order", [3, 5])
def test_the_next_tokens_probabilities_sum_to_one_after_seen_and_unseen_contexts(order):
  rng = np.random.default_rng(order)
  vocab_size = 7
  ids, next_ids = random_stream(rng, 1500, vocab_size)
  counts = kneser_ney.NgramCounts.of(ids, next_ids, np.array([700]), order, vocab_size)
  for context in (list(ids[100:100 + order - 1]), [6, 6, 6, 5][:order - 1], [1] * (order - 1)):
    sequence = np.array([*context, 0])
    totals = []
    for token in range(vocab_size):
      sequence[-1] = token
      totals.append(counts.probabilities(sequence[:-1], sequence[1:], None, 100, 0.7)[-1])
    assert sum(totals) == pytest.approx(1.0, abs=1e-12)


def test_a_longer_context_helps_on_text_with_structure_and_the_held_out_choice_finds_it():
  """A stream where every token at 2 and 3 (mod 4) repeats the one two back: a trigram predicts half the next
  tokens, a bigram cannot."""
  tokens = np.random.default_rng(3).integers(0, 40, 8001)
  for i in range(len(tokens)):
    if i % 4 >= 2:
      tokens[i] = tokens[i - 2]
  ids, next_ids = tokens[:-1], tokens[1:]
  counts, discount = kneser_ney.held_out_fit(ids[:6000], next_ids[:6000], None, (2, 3), 50, 40)
  assert counts.order == 3
  bigram = kneser_ney.NgramCounts.of(ids[:6000], next_ids[:6000], None, 2, 40)
  assert counts.loss(ids[6000:], next_ids[6000:], None, 50, discount) < bigram.loss(
      ids[6000:], next_ids[6000:], None, 50, discount) - 0.5


def test_a_fit_of_a_higher_order_scores_as_each_lower_order_fitted_alone():
  rng = np.random.default_rng(9)
  ids, next_ids = random_stream(rng, 3000, 12)
  eval_ids, eval_next = random_stream(rng, 400, 12)
  high = kneser_ney.NgramCounts.of(ids, next_ids, np.array([1000, 2500]), 5, 12)
  statistics = high.statistics(eval_ids, eval_next, np.array([150]), 6)
  for order in (2, 3, 4):
    alone = kneser_ney.NgramCounts.of(ids, next_ids, np.array([1000, 2500]), order, 12)
    np.testing.assert_allclose(high.mix(statistics, 0.8, order),
                               alone.probabilities(eval_ids, eval_next, np.array([150]), 6, 0.8), rtol=1e-12)


def test_the_held_out_part_is_scored_with_its_own_document_ends_from_its_start(monkeypatch):
  # N = 1000 pairs, documents ending at 300, 930 and 1000; the held-out part is the last HELD_OUT_FRACTION: its ends,
  # counted from its own start, by hand
  rng = np.random.default_rng(4)
  ids, next_ids = random_stream(rng, 1000, 12)
  ends = np.array([300, 930, 1000])
  cut = 1000 - int(1000 * count_bigram.HELD_OUT_FRACTION)
  assert 300 < cut < 930
  scored = []
  real_choose = kneser_ney.choose
  monkeypatch.setattr(kneser_ney, "choose", lambda counts, statistics, orders: scored.append(statistics)
                      or real_choose(counts, statistics, orders))
  kneser_ney.held_out_fit(ids, next_ids, ends, (2, 3), 4, 12)
  fit = kneser_ney.NgramCounts.of(ids[:cut], next_ids[:cut], np.array([300]), 3, 12)
  expected = fit.statistics(ids[cut:], next_ids[cut:], np.array([930 - cut, 1000 - cut]), 4)
  (statistics,) = scored
  for got, want in zip(statistics[:2], expected[:2], strict=True):
    np.testing.assert_array_equal(got, want)
