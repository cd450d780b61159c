"""The asymmetry budget: the share of a table no symmetric one fits, and a fitted tied table of width D."""

from __future__ import annotations

import types

import numpy as np
import pytest

from tied_embed.data import asymmetry
from tied_embed.data.sources.synthetic import Directed, Planted
from tied_embed.data.text import count_bigram

# Hand-made 3 x 3 parts: both have zero row sums, so no row constant can absorb any of either.
SYMMETRIC = np.array([[2.0, -1.0, -1.0], [-1.0, 2.0, -1.0], [-1.0, -1.0, 2.0]])  # ‖S‖² = 4·3 + 1·6 = 18
ANTISYMMETRIC = np.array([[0.0, 1.0, -1.0], [-1.0, 0.0, 1.0], [1.0, -1.0, 0.0]])  # ‖K‖² = 6
ROW_CONSTANTS = np.array([[5.0], [-2.0], [0.5]])  # the softmax ignores these


def _synthetic_log_probs(source, vocab_size: int = 64, d_model: int = 8):
  settings = dict(vocab_size=vocab_size, d_model=d_model, task_seed=0, num_train_pairs=10, num_eval_pairs=10,
                  logit_scale=8.0, zipf_exponent=1.0)
  current_probs, _ = source.task(settings)
  return source.reference(settings, None, None).log_probs, current_probs


def test_a_symmetric_table_with_row_constants_has_no_antisymmetric_share():
  rng = np.random.default_rng(0)
  base = rng.standard_normal((6, 6))
  table = base + base.T + rng.standard_normal((6, 1))  # symmetric logits, any row normalisation
  assert asymmetry.antisymmetric_share(table) == pytest.approx(0.0, abs=1e-12)
  assert asymmetry.antisymmetric_share(SYMMETRIC + ROW_CONSTANTS) == pytest.approx(0.0, abs=1e-12)


def test_a_row_centred_antisymmetric_table_is_all_antisymmetric():
  assert asymmetry.antisymmetric_share(ANTISYMMETRIC) == pytest.approx(1.0)
  assert asymmetry.antisymmetric_share(ANTISYMMETRIC + ROW_CONSTANTS) == pytest.approx(1.0)


def test_a_mix_has_the_share_computed_by_hand():
  # ‖K‖² / (‖S‖² + ‖K‖²) = 6 / 24, as the parts are orthogonal and both survive row centring.
  assert asymmetry.antisymmetric_share(SYMMETRIC + ANTISYMMETRIC + ROW_CONSTANTS) == pytest.approx(0.25)
  assert asymmetry.antisymmetric_share(SYMMETRIC + 2 * ANTISYMMETRIC) == pytest.approx(24 / 42)


def test_unseen_pairs_and_tokens_never_current_are_handled_as_documented():
  table = np.array([[np.log(0.5), np.log(0.5), -np.inf, np.log(0.25)],
                    [np.nan, np.nan, np.nan, np.nan],
                    [np.log(0.75), -np.inf, np.log(0.25), -np.inf],
                    [-np.inf, -np.inf, np.log(0.1), np.log(0.9)]])
  prepared, ids = asymmetry.prepared_table(table)
  np.testing.assert_array_equal(ids, [0, 2, 3])  # token 1 is never current: dropped as a row and a column
  low = np.log(0.1)  # the smallest finite entry left
  want = np.array([[np.log(0.5), low, np.log(0.25)],
                   [np.log(0.75), np.log(0.25), low],
                   [low, np.log(0.1), np.log(0.9)]])
  np.testing.assert_allclose(prepared, want)
  assert 0 < asymmetry.antisymmetric_share(prepared) < 1


def test_planted_is_symmetric_and_directed_largely_antisymmetric():
  planted, _ = _synthetic_log_probs(Planted())
  directed, _ = _synthetic_log_probs(Directed())
  assert asymmetry.antisymmetric_share(asymmetry.prepared_table(planted)[0]) < 1e-12
  assert asymmetry.antisymmetric_share(asymmetry.prepared_table(directed)[0]) > 0.4


def test_a_tied_table_of_the_planted_width_fits_planted_exactly():
  log_probs, current_probs = _synthetic_log_probs(Planted())
  table, _ = asymmetry.prepared_table(log_probs)
  fit = asymmetry.psd_rank_fit(table, rank=8)
  assert fit.table.shape == (64, 8)
  assert fit.residual_share < 1e-9
  assert asymmetry.excess_loss(table, fit.table @ fit.table.T, current_probs) < 1e-9


def test_the_rank_fit_of_directed_leaves_at_least_the_antisymmetric_share():
  log_probs, current_probs = _synthetic_log_probs(Directed())
  table, _ = asymmetry.prepared_table(log_probs)
  share = asymmetry.antisymmetric_share(table)
  fit = asymmetry.psd_rank_fit(table, rank=8)
  assert share < fit.residual_share < 1
  assert asymmetry.excess_loss(table, fit.table @ fit.table.T, current_probs) > 0.1
  # More width can only help the truncation; it cannot go below what no symmetric table fits.
  assert share <= asymmetry.psd_rank_fit(table, rank=64).residual_share <= fit.residual_share + 1e-12


def test_summary_of_run_data_reports_the_share_and_the_fit():
  log_probs, current_probs = _synthetic_log_probs(Directed())
  data = types.SimpleNamespace(true_log_probs=log_probs, vocab_size=64, input_counts=np.round(current_probs * 1e4))
  result = asymmetry.summary(data, d_model=8)
  assert set(result) == {"antisymmetric_share", "tokens", "sampled", "psd_rank_residual_share",
                         "psd_rank_excess_loss"}
  assert result["tokens"] == 64 and result["sampled"] == 0
  assert 0.4 < result["antisymmetric_share"] < result["psd_rank_residual_share"]
  assert set(asymmetry.summary(data)) == {"antisymmetric_share", "tokens", "sampled"}  # no width, no fit


def test_summary_of_a_text_table_drops_tokens_never_current():
  tokens = np.frombuffer(b"the cat sat on the mat; the rat ate the hat. " * 4, np.uint8).astype(np.int32)
  ids, next_ids = tokens[:-1], tokens[1:]
  counts = count_bigram.PairCounts.of(ids, next_ids, 256)
  data = types.SimpleNamespace(true_log_probs=np.asarray(count_bigram.empirical_rows(counts)), vocab_size=256,
                               input_counts=np.bincount(ids, minlength=256))
  result = asymmetry.summary(data, d_model=4)
  assert result["tokens"] == len(np.unique(ids))
  assert 0 < result["antisymmetric_share"] < 1
  assert np.isfinite(result["psd_rank_excess_loss"]) and result["psd_rank_excess_loss"] > 0


def test_a_large_vocabulary_is_estimated_on_a_sample_without_the_fit(monkeypatch):
  monkeypatch.setattr(asymmetry, "MAX_DENSE", 16)
  log_probs, _ = _synthetic_log_probs(Planted())
  result = asymmetry.summary(types.SimpleNamespace(true_log_probs=log_probs, vocab_size=64), d_model=8)
  assert result == {"antisymmetric_share": pytest.approx(0.0, abs=1e-12), "tokens": 16.0, "sampled": 1.0}


def test_the_excess_loss_is_the_weighted_mean_of_the_rows_kl_whatever_the_weights_scale():
  # row 0: P = (1/2, 1/2) against softmax(0, ln 3) = (1/4, 3/4): KL = ½ ln 2 + ½ ln(2/3); row 1: P = (1, 0) against
  # (1/2, 1/2): KL = ln 2. Weights 3 : 1 → (3 KL₀ + KL₁) / 4, the same for weights 30 : 10.
  log_probs = np.array([[np.log(0.5), np.log(0.5)], [0.0, -np.inf]])
  logits = np.array([[0.0, np.log(3.0)], [0.0, 0.0]])
  kl0, kl1 = 0.5 * np.log(2.0) + 0.5 * np.log(2.0 / 3.0), np.log(2.0)
  for weights in ([3.0, 1.0], [30.0, 10.0]):
    value = asymmetry.excess_loss(log_probs, logits, np.array(weights))
    assert value == pytest.approx((3 * kl0 + kl1) / 4, rel=1e-12)
