"""data.split='drawn-<seed>': selection and validation are whole documents (files, with a long one among them in
blocks, or blocks of one long file) drawn from one seeded shuffle; a smaller train size is a subset of a larger one
within a draw; the draw is in the dataset identity; the other split values are untouched."""

from __future__ import annotations

import ml_collections
import numpy as np
import pytest

from tied_embed.data import bigram as data
from tied_embed.data import sources
from tied_embed.data.text import draw
from tied_embed.train import config as config_lib
from tied_embed.util import UsageError


def _config(text_path, tmp_path, split, **data_fields):
  fields = dict(source="text", text_path=str(text_path), tokenizer="bytes", data_dir=str(tmp_path / "data"),
                split=split, **data_fields)
  return ml_collections.ConfigDict({"seed": 0, "model": {"vocab_size": 256, "d_model": 4, "tied": True},
                                    "data": fields})


def _documents(tmp_path, count=12):
  """`count` files whose every byte names its file: file k holds the letter 'a' + k, k + 20 times, and a newline."""
  folder = tmp_path / "docs"
  folder.mkdir()
  for k in range(count):
    (folder / f"doc{k:02d}.txt").write_bytes(bytes([97 + k]) * (k + 20) + b"\n")
  return folder


def _letters(ids):
  return {chr(int(i)) for i in ids} - {"\n"}


def test_a_draw_splits_whole_documents_and_another_seed_draws_others(tmp_path):
  folder = _documents(tmp_path)
  loaded = {}
  for seed in (0, 1, 2):
    config = _config(folder, tmp_path, f"drawn-{seed}", selection_fraction=0.2)
    config_lib.validate_data(config)
    got = data.load_bigram_data(config, tmp_path)
    train, select, valid = _letters(got.train_ids), _letters(got.select_ids), _letters(got.eval_ids)
    # Whole documents: no letter (document) is in two splits, and every document is in one.
    assert not (train & select or train & valid or select & valid)
    assert train | select | valid == {chr(97 + k) for k in range(12)}
    assert f"draw{seed}" in got.identity
    loaded[seed] = (select, valid)
  assert len({frozenset(valid) for _, valid in loaded.values()}) > 1  # the draws differ in what they hold out
  # The same seed draws the same documents.
  again = data.load_bigram_data(_config(folder, tmp_path, "drawn-1", selection_fraction=0.2), tmp_path)
  assert (_letters(again.select_ids), _letters(again.eval_ids)) == loaded[1]


def test_smaller_train_sizes_are_prefixes_of_larger_ones_within_a_draw(tmp_path):
  folder = _documents(tmp_path, 30)
  by_size = {fraction: data.load_bigram_data(_config(folder, tmp_path, "drawn-3", selection_fraction=0.1,
                                                     train_fraction=fraction), tmp_path)
             for fraction in (0.1, 0.3, 1.0)}
  for small, large in ((0.1, 0.3), (0.3, 1.0)):
    n = len(by_size[small].train_ids)
    assert 0 < n < len(by_size[large].train_ids)
    np.testing.assert_array_equal(by_size[small].train_ids, by_size[large].train_ids[:n])
    np.testing.assert_array_equal(by_size[small].eval_ids, by_size[large].eval_ids)  # one validation split per draw
    np.testing.assert_array_equal(by_size[small].select_ids, by_size[large].select_ids)


def test_one_long_file_is_cut_into_blocks_at_line_ends_that_cover_it(tmp_path):
  path = tmp_path / "long.txt"
  lines = [f"line {k} " + "x" * (k % 97) for k in range(3000)]
  text = ("\n".join(lines) + "\n").encode()
  path.write_bytes(text)
  pieces = draw.documents([path])
  assert pieces[0][1] == 0 and pieces[-1][2] == len(text)
  assert all(stop == start for (_, _, stop), (_, start, _) in zip(pieces, pieces[1:], strict=False))
  assert all(text[start - 1:start] == b"\n" for _, start, _ in pieces[1:])  # each block begins a line
  assert all(draw.BLOCK_BYTES <= stop - start < draw.BLOCK_BYTES + 200 for _, start, stop in pieces[:-1])
  drawn, count, validation = draw.draw([path], 5)
  assert sorted(drawn) == pieces and 1 <= count < len(drawn)
  assert validation == sum(stop - start for _, start, stop in drawn[-count:])
  assert abs(validation - 0.1 * len(text)) <= draw.BLOCK_BYTES  # about a tenth of the bytes


def test_a_long_file_among_several_is_cut_into_blocks_so_no_one_file_makes_a_split(tmp_path, monkeypatch):
  monkeypatch.setattr(draw, "MAX_DOCUMENT_BYTES", 256)
  folder = _documents(tmp_path)  # 12 files of 21-32 bytes, then one of 40 lines of 'z' ≈ 3,300 bytes: 90% of the bytes
  long_text = b"".join(b"z" * (60 + k % 40) + b"\n" for k in range(40))
  (folder / "long.txt").write_bytes(long_text)
  files = sorted(folder.glob("*.txt"))
  pieces = draw.documents(files)
  long_index = files.index(folder / "long.txt")
  blocks = [(start, stop) for index, start, stop in pieces if index == long_index]
  assert blocks[0][0] == 0 and blocks[-1][1] == len(long_text) and len(blocks) > 10
  assert all(stop == start for (_, stop), (start, _) in zip(blocks, blocks[1:], strict=False))
  assert all(long_text[start - 1:start] == b"\n" for start, _ in blocks[1:])  # each block begins a line
  assert all(256 <= stop - start <= 256 + 100 for start, stop in blocks[:-1])  # the cap, then to the line's end
  assert [(start, stop) for index, start, stop in pieces if index != long_index] == [
      (0, k + 21) for k in range(12)]  # the short files whole
  assert draw.label(3, files) == "-draw3-max256" and draw.label(3, files[:1]) == "-draw3"
  # The selection split (20% of train) holds blocks of the long file and short files both, not the long one alone.
  got = data.load_bigram_data(_config(folder, tmp_path, "drawn-0", selection_fraction=0.2), tmp_path)
  assert "z" in _letters(got.select_ids) and len(_letters(got.select_ids)) >= 2
  assert "-draw0-max256" in got.identity


def test_the_split_values_and_seeds(tmp_path):
  assert [draw.seed_of(v) for v in ("drawn-0", "drawn-17", "drawn-01", "drawn--1", "drawn-x", "by_document", 3)] == [
      0, 17, None, None, None, None, None]
  one = tmp_path / "one.txt"
  one.write_bytes(b"short\n" * 10)  # one block: nothing to draw from
  with pytest.raises(UsageError, match="data.split"):
    config_lib.validate_data(_config(one, tmp_path, "drawn-0"))
  with pytest.raises(UsageError, match="drawn-<draw seed>"):
    config_lib.validate_data(_config(one, tmp_path, "drawn-first"))


def test_the_by_document_settings_are_unchanged(tmp_path):
  folder = _documents(tmp_path)
  settings = sources.get("text").settings(_config(folder, tmp_path, "by_document"))
  assert "draw_seed" not in settings and "pieces" not in settings
  assert settings["content"].endswith("-bydoc0")


def test_a_subword_draw_of_one_long_file_trains_its_tokenizer_on_train_blocks_alone(tmp_path):
  import random  # noqa: PLC0415

  rng = random.Random(0)
  words = "the king queen cat dog sat ran on under a mat house river stone bright dark old young".split()
  path = tmp_path / "long.txt"
  path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(6000)) + "\n")
  config = _config(path, tmp_path, "drawn-2", selection_fraction=0.1)
  config.data.tokenizer, config.model.vocab_size = "sentencepiece", 32
  config_lib.validate_data(config)
  got = data.load_bigram_data(config, tmp_path)
  assert "draw2" in got.identity and len(got.select_ids) > 0 and len(got.eval_ids) > 0
  assert got.train_ids.max() < 32 and got.eval_ids.max() < 32


def test_a_subword_draw_of_documents_reads_each_drawn_document_when_a_run_checks_its_splits(tmp_path):
  # The trainer checks that each split holds a pair of tokens document by document (`check_preparable`): a drawn
  # split's documents are pieces (file index, start, stop), read from the files, not paths.
  import random  # noqa: PLC0415

  rng = random.Random(1)
  words = "king queen cat dog sat ran on under a mat house river stone bright dark old young".split()
  folder = tmp_path / "docs"
  folder.mkdir()
  for k in range(12):
    (folder / f"doc{k:02d}.txt").write_text("".join("the " + " ".join(rng.choice(words) for _ in range(7)) + "\n"
                                                    for _ in range(40)))
  config = _config(f"{folder}/*.txt", tmp_path, "drawn-1", selection_fraction=0.1)
  config.data.tokenizer, config.model.vocab_size = "sentencepiece", 32
  config_lib.validate_data(config)
  data.load_bigram_data(config, tmp_path)
  data.check_preparable(data.DataPlan.of(config, tmp_path))  # reads each drawn document's lines: no error


def test_a_draw_counts_its_validation_documents_in_the_order_it_drew_them(tmp_path):
  # by hand: the documents in the seeded permutation's order, then the count of the last ones whose bytes come
  # nearest 10% of the whole (ties: fewer)
  files = []
  for index, size in enumerate([400, 30, 250, 90, 60, 700, 20, 150]):
    files.append(tmp_path / f"d{index}.txt")
    files[-1].write_text(("x" * 9 + "\n") * (size // 10))
  pieces = draw.documents(files)
  for seed in (0, 1, 2, 3):
    sizes = [pieces[i][2] - pieces[i][1] for i in np.random.default_rng(seed).permutation(len(pieces))]
    target = 0.1 * sum(sizes)
    gaps = [abs(sum(sizes[-count:]) - target) for count in range(1, len(sizes))]
    count = 1 + gaps.index(min(gaps))
    assert draw.draw(files, seed)[1:] == (count, sum(sizes[-count:])), seed


def test_a_window_of_every_byte_reads_every_line_of_the_drawn_documents(tmp_path):
  files = sorted(_documents(tmp_path).glob("*.txt"))
  pieces = draw.draw(files, 1)[0]
  total = sum(stop - start for _, start, stop in pieces)
  assert list(draw.window_lines(files, pieces, [(0, total)])) == list(draw.read_lines(files, pieces))
