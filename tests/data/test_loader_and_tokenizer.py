"""The data loader and tokenizer where a sample of data/'s mutants went unkilled (docs/testing.md): reading a built
dataset back with its windows, the float64 of the reference rows, the synthetic reference rebuilt from its record, a
table with no finite entry left, the tokenizer's sample windows, a byte's label looked up, and the streamed encoding's
log lines. Expected values are hand arithmetic or NumPy on the inputs."""

from __future__ import annotations

import logging
import pathlib
import random

import ml_collections
import numpy as np
import pytest

from tied_embed.data import asymmetry, base, sources
from tied_embed.data import bigram as data
from tied_embed.data.text import tokenizer as tokenizer_lib
from tied_embed.util import UsageError


def _corpus(directory: pathlib.Path) -> pathlib.Path:
  """Six files of 40-115 short lines each: documents for a by-document split."""
  directory.mkdir()
  for index in range(6):
    rng = random.Random(index)
    words = ["the", "cat", "sat", "on", "a", "mat"]
    lines = (" ".join(rng.choice(words) for _ in range(5)) for _ in range(40 + 15 * index))
    (directory / f"doc{index}.txt").write_text("\n".join(lines) + "\n")
  return directory


def _config(text_path, tmp_path, **data_fields):
  fields = dict(source="text", text_path=str(text_path), tokenizer="bytes", data_dir=str(tmp_path / "data"))
  fields.update(data_fields)
  return ml_collections.ConfigDict({"seed": 0, "model": {"vocab_size": 256, "d_model": 4, "tied": True},
                                    "data": fields})


def test_a_dataset_not_built_is_named_then_read_back_with_every_window_inside_one_document(tmp_path):
  config = _config(_corpus(tmp_path / "corpus"), tmp_path, split="by_document", context_length=8)
  with pytest.raises(UsageError) as error:
    data.load_existing_bigram_data(config, tmp_path / "work")
  assert str(error.value).startswith(str(tmp_path / "data")) and str(error.value).endswith(" is missing")
  built = data.load_bigram_data(config, tmp_path / "work")
  existing = data.load_existing_bigram_data(config, tmp_path / "work")
  np.testing.assert_array_equal(existing.train_ids, built.train_ids)
  # by hand: in each train document [previous end, end), a window of 8 pairs starts at every position up to end − 8
  ends = existing.train_document_ends
  assert len(ends) >= 2 and ends[-1] == len(existing.train_ids)
  expected = [start for first, end in zip([0, *ends[:-1]], ends, strict=True) for start in range(first, end - 7)]
  np.testing.assert_array_equal(existing.train_starts, expected)
  np.testing.assert_array_equal(built.train_starts, expected)


def test_dense_rows_are_float64_whatever_the_tables_dtype():
  table = np.log(np.array([[0.25, 0.75], [0.5, 0.5]], np.float32))
  rows = base.dense_rows(table)[np.array([1, 0])]
  assert rows.dtype == np.float64
  np.testing.assert_array_equal(rows, table[[1, 0]].astype(np.float64))


def test_the_synthetic_reference_is_rebuilt_from_its_record():
  source = sources.get("directed")
  settings = dict(vocab_size=12, d_model=3, task_seed=5, num_train_pairs=10, num_eval_pairs=10, logit_scale=2.0,
                  zipf_exponent=1.1)
  reference = source.reference(settings, None, None)
  rebuilt = source.log_probs_from_record(12, reference.record)
  ids = np.arange(12)
  np.testing.assert_array_equal(rebuilt[ids], reference.log_probs[ids])
  np.testing.assert_allclose(np.exp(rebuilt[ids]).sum(axis=1), 1.0, rtol=1e-12)


def test_a_table_whose_kept_rows_have_no_finite_entry_left_becomes_zeros():
  # row 1 has no finite entry and is dropped; row 0's only finite entry was in column 1, dropped with it
  table, ids = asymmetry.prepared_table(np.array([[-np.inf, 0.0], [-np.inf, -np.inf]]))
  np.testing.assert_array_equal(table, [[0.0]])
  np.testing.assert_array_equal(ids, [0])


def test_the_tokenizer_trains_on_its_sample_windows_alone(tmp_path, monkeypatch):
  whole = [f"line {index:04d} of the corpus" for index in range(100)]  # 100 lines of 23 bytes with the newline
  (tmp_path / "corpus.txt").write_text("".join(line + "\n" for line in whole))
  monkeypatch.setattr(tokenizer_lib, "SAMPLE_BYTES", 200)
  monkeypatch.setattr(tokenizer_lib, "SAMPLE_WINDOWS", 2)  # two windows of 100 bytes, half the train split apart
  settings = data.builder_config(_config(tmp_path / "corpus.txt", tmp_path)).settings
  lines = list(sources.get("text").sample_lines(settings))
  assert lines[:4] == whole[:4]  # the first window: bytes [0, 100), four whole lines and the start of a fifth
  assert all(any(full.startswith(line) for full in whole) for line in lines)  # whole lines, or a line cut at the end
  assert sum(len(line) + 1 for line in lines) <= 200  # the windows' bytes, not the train split's 2,000 or more


@pytest.mark.parametrize(("text", "token"), [("a", 97), ("'a'", 97), ("'\\n'", 10), ("\\n", 10), ("\n", 10),
                                             ("\x00", 0), ("'\\xff'", 255), ("\\xff", 255), ("ab", None), ("é", None)])
def test_a_bytes_label_or_character_is_looked_up(text, token):
  assert tokenizer_lib.ByteTokenizer().lookup(text) == token


def test_every_byte_label_looks_up_its_byte():
  tokenizer = tokenizer_lib.ByteTokenizer()
  assert [tokenizer.lookup(tokenizer.label(byte)) for byte in range(256)] == list(range(256))


def test_a_streamed_encoding_logs_its_progress_and_no_document_count(monkeypatch, caplog):
  monkeypatch.setattr(tokenizer_lib, "PROGRESS_BYTES", 1000)
  monkeypatch.setattr(tokenizer_lib, "ENCODE_BATCH", 10)
  lines = ["x" * 99] * 50  # 5,000 bytes with the newlines, in batches of 10 lines
  with caplog.at_level(logging.INFO, logger=tokenizer_lib.__name__):
    ids = tokenizer_lib.encode_stream(tokenizer_lib.ByteTokenizer(), lines, "the text")
  assert len(ids) == 50 * 99 and set(ids.tolist()) == {ord("x")}  # the lines' bytes, without their newlines
  messages = [record.getMessage() for record in caplog.records]
  assert sum(message.startswith("Tokenized ") and " MB of the text " in message for message in messages) >= 4
  assert messages[-1].startswith("Tokenized the text: ") and "documents" not in messages[-1]


def test_the_selection_windows_end_where_the_selection_files_do(tmp_path):
  # by hand: each selection file holds (its bytes − 1) pairs, so its end within the selection split is the running
  # total of those; the windows (L = 8) of a context model never cross one
  config = _config(_corpus(tmp_path / "corpus"), tmp_path, split="by_document", context_length=8,
                   selection_fraction=0.3)
  loaded = data.load_bigram_data(config, tmp_path / "work")
  train_files = sources.get("text").documents(data.builder_config(config).settings, "train")
  sizes = [len(path.read_bytes()) - 1 for path in train_files]
  selected = next(count for count in range(1, len(sizes)) if sum(sizes[-count:]) == len(loaded.select_ids))
  assert selected >= 2  # at least one end inside the selection split
  np.testing.assert_array_equal(loaded.select_document_ends, np.cumsum(sizes[-selected:]))
