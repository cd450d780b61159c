"""Data identities that follow content, not names, and the split arithmetic at its edges, against hand counts.

Each test here fails on a small plausible bug (an identity built from the file's name, a rounding moved, a bound
off by one): docs/testing.md lists them."""

from __future__ import annotations

import pathlib

import pytest
from helpers import make_config

from tied_embed.data import bigram

_WORDS = ("the", "cat", "sat", "on", "a", "mat", "dog", "ran")


def _corpus(path: pathlib.Path, first: str = "t") -> pathlib.Path:
  """A 200 KB text file of words, its first character `first`: enough bytes for a byte-level text dataset."""
  text = " ".join(_WORDS[(i * 7 + i // 3) % len(_WORDS)] for i in range(50_000))
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(first + text[1:])
  return path


def _text_identity(path: pathlib.Path, **fields) -> str:
  config = make_config(source="text", text_path=str(path), **fields)
  config.data.tokenizer = "bytes"
  return bigram.dataset_identity(config)


def test_a_text_datasets_identity_follows_the_files_content_not_its_name(tmp_path):
  original = _text_identity(_corpus(tmp_path / "a" / "corpus.txt"))
  assert _text_identity(_corpus(tmp_path / "b" / "renamed.txt")) == original  # same bytes, another name
  assert _text_identity(_corpus(tmp_path / "c" / "corpus.txt", first="X")) != original  # one byte changed


def test_a_synthetic_datasets_identity_spells_out_each_setting():
  base = bigram.dataset_identity(make_config())
  assert base == "planted-v16-d4-seed3-n5000-m3000-scale6-zipf1"
  for field, value in [("task_seed", 4), ("num_train_pairs", 5001), ("num_eval_pairs", 2999), ("logit_scale", 6.5),
                       ("zipf_exponent", 1.25), ("task_d_model", 3), ("logit_scale", 6.0000001),
                       ("zipf_exponent", 1 + 1e-9)]:  # past :g's 6 digits: another task, another cache
    assert bigram.dataset_identity(make_config(**{field: value})) != base, field
  assert bigram.dataset_identity(make_config(logit_scale=0.1, zipf_exponent=1.5)).endswith("-scale0.1-zipf1.5")


@pytest.mark.parametrize("train_fraction, selection_fraction, suffix", [
    (1.0, 0.0, ""),
    (0.5, 0.0, "-train0.5"),
    (1.0, 0.1, "-select0.1"),
    (0.25, 0.2, "-select0.2-train0.25"),
])
def test_the_identity_names_a_fraction_only_where_it_changes_the_data(train_fraction, selection_fraction, suffix):
  config = make_config(train_fraction=train_fraction, selection_fraction=selection_fraction)
  assert bigram.dataset_identity(config) == "planted-v16-d4-seed3-n5000-m3000-scale6-zipf1" + suffix


@pytest.mark.parametrize("num_pairs, fraction, expected", [
    (100, 1.0, 100), (100, 0.29, 29), (100, 0.005, 1), (100, 0.004, 1), (3, 0.5, 2), (1, 0.5, 1), (7, 1 / 7, 1),
])
def test_train_pairs_used_rounds_and_keeps_at_least_one_and_at_most_all(num_pairs, fraction, expected):
  assert bigram.train_pairs_used(num_pairs, fraction) == expected


@pytest.mark.parametrize("num_pairs, fraction, expected", [
    (100, 0.0, 0), (100, 0.1, 10), (100, 0.004, 1), (100, 0.499, 50), (2, 0.4, 1), (2, 0.001, 1), (3, 0.49, 1),
])
def test_the_selection_share_is_rounded_and_leaves_pairs_on_both_sides(num_pairs, fraction, expected):
  assert bigram.selection_pairs(num_pairs, fraction) == expected


@pytest.mark.parametrize("ends, expected", [
    ([30, 60, 85, 100], 15),  # the cut at 90 moves to the nearest document end, 85
    ([30, 60, 95, 100], 5),  # ... or 95
    ([85, 95, 100], 15),  # a tie (85 and 95 both 5 away): the earlier end, the larger share
    ([100], 10),  # no document end inside the split: the plain count
    ([0, 100], 10),
    ([10, 100], 10),  # the only end would hold out 90 of 100: over half, so the plain count, mid-document
    ([50, 100], 50),  # half is the most it moves to
])
def test_the_selection_cut_moves_to_the_nearest_document_end(ends, expected):
  assert bigram.selection_pairs(100, 0.1, document_ends=ends) == expected
