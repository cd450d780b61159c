"""data.train_fraction: the first share of the train split only; the eval, floor, references and cache unchanged."""

import math

import numpy as np
import pytest
from helpers import smoke_with

from tied_embed.data import bigram as data
from tied_embed.data.sources import text
from tied_embed.train.config import validate as validate_config
from tied_embed.util import UsageError


@pytest.mark.parametrize(("num_pairs", "fraction", "expected"), [
    (100, 0.29, 29),  # 0.29 · 100 is 28.999999999999996 in floats
    (680_000, 0.01, 6800),
    (1001, 0.5, 500),  # 500.5 rounds to even
    (3, 0.01, 1),  # never empty
    (7, 1.0, 7),
])
def test_pairs_used_by_hand(num_pairs, fraction, expected):
  assert data.train_pairs_used(num_pairs, fraction) == expected


def _text_config(tmp_path, fraction):
  config = smoke_with("data.source", "text")
  corpus = tmp_path / "corpus.txt"
  if not corpus.exists():
    corpus.write_bytes(text.DEFAULT_CORPUS.read_bytes()[:40_000])
  config.model.vocab_size = 256
  config.data.update(text_path=str(corpus), data_dir=str(tmp_path / "data"), train_fraction=fraction)
  return config


def test_a_fraction_trains_on_the_first_pairs_and_keeps_the_eval(tmp_path):
  whole = data.load_bigram_data(_text_config(tmp_path, 1.0), tmp_path / "a")
  part = data.load_bigram_data(_text_config(tmp_path, 0.25), tmp_path / "b")
  used = round(0.25 * len(whole.train_ids))
  assert len(whole.train_ids) == 36_000 - 1  # the corpus's first 90% of 40,000 bytes, as pairs
  np.testing.assert_array_equal(part.train_ids, whole.train_ids[:used])
  np.testing.assert_array_equal(part.train_next, whole.train_next[:used])
  np.testing.assert_array_equal(part.input_counts, np.bincount(whole.train_ids[:used], minlength=256))
  # One eval for every size: the same validation pairs, floor and references (fitted on the whole train split).
  np.testing.assert_array_equal(part.eval_ids, whole.eval_ids)
  np.testing.assert_array_equal(part.eval_next, whole.eval_next)
  assert part.loss_floor == whole.loss_floor
  assert part.eval_references == whole.eval_references and "count_bigram_loss" in part.eval_references
  # One cached dataset for both, under names that differ only by the fraction.
  assert len(list((tmp_path / "data" / "bigram_pairs").iterdir())) == 1
  assert whole.identity == data.builder_config(_text_config(tmp_path, 1.0)).name
  assert part.identity == whole.identity + "-train0.25" == data.dataset_identity(_text_config(tmp_path, 0.25))


@pytest.mark.parametrize("value", [0.0, -0.1, 1.5, math.nan, math.inf, "half"])
def test_a_fraction_outside_0_1_is_refused(value):
  with pytest.raises(UsageError, match=r"^data.train_fraction=.*a finite number in \(0, 1\]"):
    validate_config(smoke_with("data.train_fraction", value))


def test_a_run_does_not_resume_on_another_fraction(tmp_path):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  config = smoke_with("train.num_steps", 2)
  config.train.update(log_every=2, eval_every=2, checkpoint_every=2)
  config.data.data_dir = str(tmp_path / "data")
  train_and_evaluate(config, tmp_path / "run")
  config.data.train_fraction = 0.5
  config.train.num_steps = 4
  with pytest.raises(UsageError, match=r"different run \(data.train_fraction: 1.0 in the checkpoints, 0.5 now\)"):
    train_and_evaluate(config, tmp_path / "run")
