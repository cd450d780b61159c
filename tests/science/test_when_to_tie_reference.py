"""The sweep's references, on hand-made data: the count model's k chosen on the selection pairs, and the share of
pairs a model predicts to repeat their current token."""

import math

import numpy as np
import pytest

from science.when_to_tie import sweep
from tied_embed.data.text.count_bigram import K_GRID


def test_count_model_k_is_the_one_that_fits_the_selection_pairs_by_hand():
  # Train: token 0 is followed by 0 nine times and never by 1. Selection: 0 → 0 31 times, 0 → 1 once. Add-k gives
  # P(1 | 0) = k / (9 + 2k), and the selection pairs are fitted best where that is 1/32: k = 9/30 = 0.3.
  train = (np.zeros(9, np.int64), np.zeros(9, np.int64))
  selection = (np.zeros(32, np.int64), np.array([0] * 31 + [1]))
  evaluation = (np.array([0, 1]), np.array([1, 0]))  # token 1 never current in train: P = k / 2k = 1/2
  reference = sweep.count_reference(train, selection, evaluation, vocab_size=2)
  assert reference["k"] == 0.3
  assert reference["select_loss"] == pytest.approx(-(31 * math.log(9.3 / 9.6) + math.log(0.3 / 9.6)) / 32, rel=1e-12)
  assert reference["eval_loss"] == pytest.approx((-math.log(0.3 / 9.6) + math.log(2)) / 2, rel=1e-12)


def test_count_model_k_matches_a_dense_float64_search():
  rng = np.random.default_rng(3)
  vocab_size = 6
  prefs = rng.dirichlet(np.full(vocab_size, 0.3), size=vocab_size)  # peaked rows, so the best k is small

  def pairs(count):
    ids = rng.integers(0, vocab_size, count)
    return ids, np.array([rng.choice(vocab_size, p=prefs[i]) for i in ids])

  train, selection, evaluation = pairs(60), pairs(400), pairs(300)
  counts = np.zeros((vocab_size, vocab_size))
  np.add.at(counts, train, 1.0)

  def loss(ids, next_ids, k):
    return -np.mean(np.log((counts[ids, next_ids] + k) / (counts[ids].sum(axis=1) + k * vocab_size)))

  by_k = {k: loss(*selection, k) for k in K_GRID}
  best = min(by_k, key=by_k.get)
  reference = sweep.count_reference(train, selection, evaluation, vocab_size)
  assert reference["k"] == best
  assert reference["select_loss"] == pytest.approx(by_k[best], rel=1e-12)
  assert reference["eval_loss"] == pytest.approx(loss(*evaluation, best), rel=1e-12)


def test_self_argmax_of_a_tied_table_and_of_a_permuting_untied_one():
  # Tied rows of equal norm: E·Eᵀ = 4·I, so every token's likeliest successor is itself.
  table = 2 * np.eye(3)
  ids, next_ids = np.array([0, 1, 2, 2, 0]), np.array([0, 2, 2, 1, 1])
  rare = np.array([False, False, True])
  scores = sweep.best_step_scores(table, table, ids, next_ids, rare)
  assert scores["predicts_self"] == 1.0 and scores["predicts_self_rare"] == 1.0
  stay, move = -(4 - math.log(math.exp(4) + 2)), math.log(math.exp(4) + 2)
  assert scores["eval_loss"] == pytest.approx((2 * stay + 3 * move) / 5, rel=1e-12)
  assert scores["loss_rare_inputs"] == pytest.approx((stay + move) / 2, rel=1e-12)
  # Untied, projection rows permuted 0 → 1 → 0 and 2 → 2: only token 2 predicts itself (2 of the 5 pairs).
  projection = 2 * np.eye(3)[[1, 0, 2]]
  scores = sweep.best_step_scores(table, projection, ids, next_ids, rare)
  assert scores["predicts_self"] == pytest.approx(2 / 5) and scores["predicts_self_rare"] == 1.0
  shares = sweep.repeat_shares(ids, next_ids, rare)
  assert shares == {"repeats": 2 / 5, "repeats_rare": 1 / 2, "rare_pair_share": 2 / 5}


def test_the_count_models_own_self_argmax_share_by_hand():
  # V = 3, d = 0.5. Train: 0→0 three times, 0→1 once; 1→2 twice; 2 never current. Continuation: preceders
  # N1+(·, j) = (1, 1, 1) of 3 types, so P_cont = (0.5 / 3 + 0.5 / 3) each = 1/3: row 2's argmax is token 0 (ties:
  # the lowest id). Row 0: P(0|0) = (3 − 0.5)/4 + ... is the largest: itself. Row 1: token 2, not itself.
  train = (np.array([0, 0, 0, 0, 1, 1]), np.array([0, 0, 0, 1, 2, 2]))
  eval_ids = np.array([0, 0, 1, 2, 2])  # 0 predicts itself (2 pairs); 1 does not; 2 does not (argmax 0)
  rare = np.array([False, True, True])
  shares = sweep.count_self_shares(train, 0.5, eval_ids, rare, vocab_size=3)
  assert shares == {"count_self": 2 / 5, "count_self_rare": 0.0}


class _TwoDraws:
  """Stands in for a Sweep of V = 3 with two data draws: the same train pairs (those of the test above), each draw
  its own validation pairs and rare bucket (draw 1: none rare)."""

  corpus = type("Corpus", (), {"vocab_size": 3})
  train = (np.array([0, 0, 0, 0, 1, 1]), np.array([0, 0, 0, 1, 2, 2]))
  evals = {0: (np.array([0, 0, 1, 2, 2]), np.array([0, 1, 1, 2, 0])), 1: (np.array([1, 2]), np.array([2, 2]))}
  rare = {0: np.array([False, True, True]), 1: np.array([False, False, False])}

  def drawn(self, draw):
    return type("Data", (), {"eval_ids": self.evals[draw][0], "eval_next": self.evals[draw][1]})

  def rare_inputs(self, fraction, draw):
    return self.rare[draw]

  def train_pairs(self, fraction, draw):
    return self.train


def test_the_repeat_shares_are_averaged_over_the_scored_draws_each_on_its_own_pairs():
  shares = sweep.repeat_references(_TwoDraws(), 0.1, (0, 1), 0.5)
  # draw 0: repeats 3 of 5 pairs, of its 3 rare-input pairs 2; the count model (argmax 0→0, 1→2, 2→0) predicts
  # itself for 2 of 5, for none of the rare. Draw 1: 1 repeat of 2 pairs, the count model none, no rare pairs (nan:
  # left out of the mean, not counted as 0).
  assert shares["by_draw"]["0"]["repeats"] == 3 / 5 and shares["by_draw"]["1"]["repeats"] == 1 / 2
  expected = {"repeats": (3 / 5 + 1 / 2) / 2, "repeats_rare": 2 / 3, "rare_pair_share": (3 / 5 + 0) / 2,
              "count_self": (2 / 5 + 0) / 2, "count_self_rare": 0.0}
  assert {name: shares[name] for name in expected} == pytest.approx(expected, rel=1e-12)
  one = sweep.repeat_references(_TwoDraws(), 0.1, (1,), 0.5)  # one draw: its own shares, no by_draw
  assert "by_draw" not in one and one["repeats"] == 1 / 2 and math.isnan(one["repeats_rare"])


def test_recount_repeats_replaces_each_sizes_shares_with_those_over_the_draws_it_scored(monkeypatch):
  from science.when_to_tie import cli  # noqa: PLC0415

  entry = {"repeats": {"0.1": {"repeats": 0.9}, "1": {"repeats": 0.9}},
           "kneser_ney": {"0.1": {"discount": 0.5, "by_draw": {"0": 2.0, "1": 2.1}}, "1": {"discount": 0.5}}}
  monkeypatch.setattr(cli, "_existing_sweeps", lambda results, args: iter([("subword", entry, _TwoDraws())]))
  cli.recount_repeats({"corpora": {"subword": entry}}, None)
  assert entry["repeats"]["0.1"]["repeats"] == pytest.approx((3 / 5 + 1 / 2) / 2)  # draws 0 and 1, as scored
  assert entry["repeats"]["1"]["repeats"] == pytest.approx(3 / 5) and "by_draw" not in entry["repeats"]["1"]
