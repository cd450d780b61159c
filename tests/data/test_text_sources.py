"""The text source: local corpora, SentencePiece, the count bigram reference, and text-aware inspection."""

from __future__ import annotations

import collections
import math
import random

import ml_collections
import numpy as np
import pytest

from tied_embed.data import bigram as data
from tied_embed.data import sources
from tied_embed.data.text import corpus, count_bigram
from tied_embed.data.text import tokenizer as tokenizer_lib
from tied_embed.train import config as config_lib
from tied_embed.util import UsageError

WORDS = ("the king queen cat dog sat ran on under a mat house river stone bright dark old young and but then "
         "when where why who spoke sang walked slept quickly slowly green red blue over into from with of to "
         "castle garden forest bread wine song night morning evening tower bridge horse rider sword shield").split()
SUBWORD_V = 64  # the generated corpus supports at most about 80 unigram pieces


def make_text(lines: int = 1500, seed: int = 0) -> str:
  rng = random.Random(seed)
  return "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(lines)) + "\n"


def text_config(text_path, tmp_path, tokenizer="sentencepiece", vocab_size=SUBWORD_V, **data_fields):
  fields = dict(source="text", text_path=str(text_path), tokenizer=tokenizer, data_dir=str(tmp_path / "data"))
  fields.update(data_fields)
  return ml_collections.ConfigDict(
      {"seed": 0, "model": {"vocab_size": vocab_size, "d_model": 4, "tied": True}, "data": fields})


def one_line_error(config, field: str) -> str:
  with pytest.raises(UsageError) as error:  # a run's checks, then its load (which takes the config as checked)
    config_lib.validate_data(config)
    data.load_bigram_data(config, config.data.data_dir)
  message = str(error.value)
  assert message.startswith(field) and "\n" not in message, message
  return message


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("corpus") / "tale.txt"
  path.write_text(make_text())
  return path


# --- corpora --------------------------------------------------------------------------------------------------


def test_a_directory_is_read_recursively_in_path_order_and_a_glob_picks_files(tmp_path):
  (tmp_path / "b").mkdir()
  (tmp_path / "a.txt").write_text("first\n")
  (tmp_path / "b" / "c.txt").write_text("second\n")
  (tmp_path / "b" / "empty.txt").write_text("")
  (tmp_path / ".hidden.txt").write_text("never\n")
  files = corpus.resolve(str(tmp_path), tmp_path)
  assert [p.name for p in files] == ["a.txt", "c.txt"]
  assert "".join(corpus.read_lines(files)) == "firstsecond"
  assert [p.name for p in corpus.resolve(str(tmp_path / "**" / "*.txt"), tmp_path)] == ["a.txt", "c.txt"]
  assert b"".join(corpus.read_bytes(files, 3, 9)) == b"st\nsec"


def test_bytes_of_a_directory_are_its_files_concatenated(tmp_path):
  (tmp_path / "docs").mkdir()
  parts = [make_text(20, seed).encode() for seed in range(3)]
  for index, part in enumerate(parts):
    (tmp_path / "docs" / f"{index}.txt").write_bytes(part)
  loaded = data.load_bigram_data(text_config(tmp_path / "docs", tmp_path, "bytes", 256), tmp_path / "work")
  whole = np.frombuffer(b"".join(parts), np.uint8)
  np.testing.assert_array_equal(np.concatenate([loaded.train_ids, loaded.train_next[-1:]]),
                                whole[:corpus.split_point(len(whole))])
  assert loaded.identity.startswith("text-v256-sha")


# --- SentencePiece --------------------------------------------------------------------------------------------


def test_sentencepiece_is_deterministic_has_exactly_v_pieces_and_is_cached(corpus_file, tmp_path, monkeypatch):
  first = data.load_bigram_data(text_config(corpus_file, tmp_path / "one"), tmp_path / "w1")
  second = data.load_bigram_data(text_config(corpus_file, tmp_path / "two"), tmp_path / "w2")
  models = [sorted((tmp_path / name / "data" / "tokenizers").glob("*.model")) for name in ("one", "two")]
  assert len(models[0]) == 1 and models[0][0].name == models[1][0].name
  assert models[0][0].read_bytes() == models[1][0].read_bytes()  # byte for byte
  assert tokenizer_lib.SentencePieceTokenizer(models[0][0].read_bytes()).vocab_size == SUBWORD_V
  np.testing.assert_array_equal(first.train_ids, second.train_ids)

  def refuse(*args, **kwargs):
    raise AssertionError("trained or tokenized again although the corpus did not change")

  monkeypatch.setattr(tokenizer_lib, "train_sentencepiece", refuse)
  monkeypatch.setattr(tokenizer_lib, "encode_stream", refuse)
  again = data.load_bigram_data(text_config(corpus_file, tmp_path / "one"), tmp_path / "w1")
  np.testing.assert_array_equal(again.eval_next, first.eval_next)


def test_the_pairs_are_the_token_stream_of_each_split(corpus_file, tmp_path):
  loaded = data.load_bigram_data(text_config(corpus_file, tmp_path), tmp_path / "work")
  model = next((tmp_path / "data" / "tokenizers").glob("*.model")).read_bytes()
  sp = tokenizer_lib.SentencePieceTokenizer(model)
  text = corpus_file.read_text()
  train_text = text[:corpus.split_point(len(text.encode()))]  # ASCII: bytes and characters agree
  stream = [t for line in train_text.split("\n") if line.strip() for t in sp.encode(line)]
  np.testing.assert_array_equal(loaded.train_ids, stream[:-1])
  np.testing.assert_array_equal(loaded.train_next, stream[1:])
  assert set(loaded.eval_references) == {"count_bigram_loss"}
  assert loaded.loss_floor < loaded.eval_references["count_bigram_loss"]


def test_a_given_model_file_is_used_as_it_is(corpus_file, tmp_path):
  data.load_bigram_data(text_config(corpus_file, tmp_path), tmp_path / "work")
  model = next((tmp_path / "data" / "tokenizers").glob("*.model"))
  loaded = data.load_bigram_data(text_config(corpus_file, tmp_path, tokenizer=str(model)), tmp_path / "work")
  assert "-model" in loaded.identity and loaded.train_ids.max() < SUBWORD_V
  with pytest.raises(UsageError, match=f"model.vocab_size=65 .*{SUBWORD_V}, the pieces"):
    config_lib.validate_data(text_config(corpus_file, tmp_path, tokenizer=str(model), vocab_size=65))


# --- bad input --------------------------------------------------------------------------------------------------


def test_bad_corpora_are_one_line_naming_the_field_and_write_nothing(tmp_path):
  (tmp_path / "empty.txt").write_bytes(b"")
  (tmp_path / "blank").mkdir()
  (tmp_path / "blank" / "nothing.txt").write_bytes(b"")
  (tmp_path / "latin1.txt").write_bytes(b"caf\xe9 " * 40)
  assert "no such file" in one_line_error(text_config(tmp_path / "missing.txt", tmp_path), "data.text_path")
  assert "no non-empty file" in one_line_error(text_config(tmp_path / "empty.txt", tmp_path), "data.text_path")
  assert "no non-empty file" in one_line_error(text_config(tmp_path / "blank", tmp_path), "data.text_path")
  assert "matches none" in one_line_error(text_config(tmp_path / "*.md", tmp_path), "data.text_path")
  message = one_line_error(text_config(tmp_path / "latin1.txt", tmp_path), "data.text_path")
  assert "byte 3 is not UTF-8" in message  # refused, not replaced
  assert one_line_error(text_config(tmp_path / "x", tmp_path, tokenizer="no/such.model"), "data.tokenizer")
  assert not (tmp_path / "data").exists()
  # Bytes need no decoding: the same file is fine as byte tokens.
  config_lib.validate_data(text_config(tmp_path / "latin1.txt", tmp_path, "bytes", 256))
  config_lib.validate_data(text_config(tmp_path / "latin1.txt", tmp_path, "", 256))  # '' is bytes too


def test_a_vocabulary_the_corpus_cannot_support_is_refused_with_nothing_half_written(corpus_file, tmp_path):
  message = one_line_error(text_config(corpus_file, tmp_path, vocab_size=512), "model.vocab_size=512")
  assert "Please set it to a value <=" in message
  assert not list((tmp_path / "data").rglob("*.model")) and not (tmp_path / "data" / "bigram_pairs").exists()
  one_line_error(text_config(corpus_file, tmp_path, vocab_size=4), "model.vocab_size=4")
  with pytest.raises(UsageError, match=r"model.vocab_size=8192 is not allowed: expected at most \d+ pieces"):
    config_lib.validate_data(text_config(corpus_file, tmp_path, vocab_size=8192))  # before any training


# --- the count bigram reference ------------------------------------------------------------------------------------


def test_add_k_bigram_matches_a_hand_computation():
  # train pairs: 0→1 twice, 0→2 once, 1→0 once; V = 3; k = 0.5.
  train = count_bigram.PairCounts.of(np.array([0, 0, 0, 1]), np.array([1, 1, 2, 0]), 3)
  eval_ids, eval_next = np.array([0, 1, 2]), np.array([1, 2, 0])
  hand = -(math.log(2.5 / 4.5) + math.log(0.5 / 2.5) + math.log(0.5 / 1.5)) / 3
  assert count_bigram.add_k_loss(train, eval_ids, eval_next, 0.5) == pytest.approx(hand, rel=1e-12)


def test_count_bigram_k_is_chosen_on_held_out_train_then_refitted_on_all_of_it():
  rng = np.random.default_rng(0)
  tokens = rng.choice(5, size=401, p=[0.4, 0.3, 0.15, 0.1, 0.05])
  ids, next_ids = tokens[:-1], tokens[1:]
  eval_ids, eval_next = np.array([0, 4, 2]), np.array([4, 4, 1])
  loss, k = count_bigram.count_bigram_loss(ids, next_ids, eval_ids, eval_next, 5)

  def counted_loss(fit_ids, fit_next, test_ids, test_next, k):
    pairs, rows = collections.Counter(zip(fit_ids, fit_next, strict=True)), collections.Counter(fit_ids)
    return -np.mean([math.log((pairs[i, j] + k) / (rows[i] + 5 * k)) for i, j in zip(test_ids, test_next,
                                                                                       strict=True)])

  held = [counted_loss(ids[:360], next_ids[:360], ids[360:], next_ids[360:], c) for c in count_bigram.K_GRID]
  assert k == count_bigram.K_GRID[int(np.argmin(held))]
  assert loss == pytest.approx(counted_loss(ids, next_ids, eval_ids, eval_next, k), rel=1e-12)


def test_sparse_empirical_rows_equal_counting():
  ids, next_ids = np.array([3, 3, 3, 1, 1]), np.array([0, 0, 2, 3, 3])
  counts = count_bigram.PairCounts.of(ids, next_ids, 4)
  rows = np.asarray(count_bigram.empirical_rows(counts))
  np.testing.assert_allclose(rows[3], [math.log(2 / 3), -np.inf, math.log(1 / 3), -np.inf])
  assert rows[1, 3] == 0.0 and np.isnan(rows[0]).all()
  hand = -(2 * math.log(2 / 3) + math.log(1 / 3)) / 5
  assert count_bigram.empirical_entropy(counts) == pytest.approx(hand, rel=1e-12)


# --- inspection of a text run ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def subword_run(tmp_path_factory, corpus_file):
  """A short SentencePiece run trained in-process; its corpus and data dir are deleted afterwards."""
  import shutil

  from configs import smoke
  from tied_embed.train.trainer import train_and_evaluate

  root = tmp_path_factory.mktemp("subword_run")
  text = root / "corpus.txt"
  shutil.copy(corpus_file, text)
  config = smoke.get_config()
  config.data.update(source="text", text_path=str(text), tokenizer="sentencepiece", data_dir=str(root / "data"))
  config.model.vocab_size = SUBWORD_V
  config.train.num_steps = 40
  train_and_evaluate(config, root / "work")
  model = next((root / "data" / "tokenizers").glob("*.model")).read_bytes()
  text.unlink()
  shutil.rmtree(root / "data")  # inspection must need nothing but the workdir
  return root / "work", model


def test_the_workdir_carries_the_tokenizer(subword_run):
  workdir, model = subword_run
  assert (workdir / "tokenizer.model").read_bytes() == model
  from tied_embed.data import record

  facts = record.read(workdir)
  assert facts.tokenizer.vocab_size == SUBWORD_V and facts.tokenizer.label(facts.tokenizer.lookup("the")) == "▁the"


def test_the_report_shows_pieces_and_takes_token_strings(subword_run):
  import json

  from tied_embed.inspection.inspector import inspect_run

  workdir, _ = subword_run
  report = inspect_run(workdir, tokens=["▁the", "king", 3], top_k=3, pictures=False)
  labels = [token["label"] for token in report["tokens"]]
  assert labels[:2] == ["▁the", "▁king"] and report["tokens"][2]["id"] == 3
  assert all(isinstance(entry["label"], str) and entry["label"] != str(entry["id"])
             for token in report["tokens"] for entry in token["top"])
  json.dumps(report, ensure_ascii=False, allow_nan=False)
  with pytest.raises(UsageError, match="--tokens='zzqx' is not allowed: .*not one token") as error:
    inspect_run(workdir, tokens=["zzqx"], pictures=False)
  assert "\n" not in str(error.value)


def test_next_tokens_are_the_softmax_of_the_prompts_last_row(subword_run):
  from tied_embed.inspection.inspector import continue_prompt
  from tied_embed.train import checkpoint

  workdir, _ = subword_run
  result = continue_prompt(workdir, "the old king", top_k=4)
  assert [token["label"] for token in result["prompt_tokens"]][-1] == "▁king"
  lookup, projection = (np.asarray(t, np.float64) for t in checkpoint.restore(workdir).model.tables())
  row = lookup[result["prompt_tokens"][-1]["id"]] @ projection.T
  probs = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
  ids = [entry["id"] for entry in result["next"]]
  # The 4 likeliest: their probabilities are the 4 largest, in order (two within rounding may come either way).
  np.testing.assert_allclose(probs[ids], np.sort(probs)[::-1][:4], rtol=1e-9)
  np.testing.assert_allclose([entry["prob"] for entry in result["next"]], probs[ids], rtol=1e-9)

  greedy = continue_prompt(workdir, "the old king", generate=3, temperature=0)
  chain, token = [], result["prompt_tokens"][-1]["id"]
  for _ in range(3):
    token = int(np.argmax(lookup[token] @ projection.T))
    chain.append(token)
  assert [entry["id"] for entry in greedy["generated"]] == chain
  assert greedy["text"].startswith("the old king")
  sampled = [continue_prompt(workdir, "the", generate=5, seed=7)["generated"] for _ in range(2)]
  assert sampled[0] == sampled[1]


def test_next_and_generate_on_the_command_line(subword_run, capsys):
  from tied_embed.inspection.cli import main

  workdir, _ = subword_run
  assert main(["--workdir", str(workdir), "--next", "the king", "--generate", "4", "--seed", "1"]) == 0
  out = capsys.readouterr().out
  assert "after ▁king" in out and "sampled  4 tokens" in out
  assert main(["--workdir", str(workdir), "--generate", "4"]) == 2
  assert capsys.readouterr().err.startswith("error: --generate=4 is not allowed")
  assert main(["--workdir", str(workdir), "--next", "   "]) == 2
  assert "at least one token" in capsys.readouterr().err


def test_heatmap_axes_are_labelled_with_the_tokens_text():
  from tied_embed.inspection import plots

  table = np.log(np.full((4, 4), 0.25))
  fig = plots.heatmaps_figure(table, table, "empirical", label=lambda t: "abcd"[t])
  assert [tick.get_text() for tick in fig.axes[0].get_yticklabels()] == ["a", "b", "c", "d"]
  assert [tick.get_text() for tick in fig.axes[1].get_xticklabels()] == ["a", "b", "c", "d"]


def test_undertrained_rows_are_the_least_looked_up_with_their_counts_shares_and_neighbours():
  from tied_embed.inspection.report import undertrained_summary

  table = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1], [0.0, 2.0]])
  summary = undertrained_summary(table, lookup_total=[5.0, 0.0, 3.0, 0.0], projection_total=[1.0, 2.0, 1.0, 0.0],
                                 input_counts=[10, 0, 4, 1], k=2, label="abcd".__getitem__)
  assert (summary["never_looked_up"], summary["of_them_never_in_train"]) == (2, 1)
  first, second = summary["rows"]
  assert (first["label"], first["train_count"], first["projection_share"], first["norm"]) == ("b", 0, 1.0, 1.0)
  assert (second["label"], second["projection_share"], second["norm"]) == ("d", None, 2.0)
  assert [n["label"] for n in first["neighbours"]] == ["d", "c", "a"]
  assert first["neighbours"][1]["cosine"] == pytest.approx(0.1 / math.sqrt(1.01))
  # Average ranks by hand: lookup totals (5, 0, 3, 0) → (4, 1.5, 3, 1.5); counts (10, 0, 4, 1) → (4, 1, 3, 2).
  assert summary["spearman"] == pytest.approx(np.corrcoef([4, 1.5, 3, 1.5], [4, 1, 3, 2])[0, 1])


def test_a_damaged_cached_model_is_trained_again_to_the_same_bytes(corpus_file, tmp_path):
  data.load_bigram_data(text_config(corpus_file, tmp_path), tmp_path / "work")
  model = next((tmp_path / "data" / "tokenizers").glob("*.model"))
  good = model.read_bytes()
  model.write_bytes(good[:100])
  data.load_bigram_data(text_config(corpus_file, tmp_path), tmp_path / "work")
  assert model.read_bytes() == good


def test_a_contiguous_split_moves_off_a_character_only_for_a_subword_tokenizer(tmp_path):
  # 101 bytes, 50 two-byte characters then 'a': the last 10% starts at byte 101 − 10 = 91, inside the 46th 'é'. Bytes
  # split there; a subword tokenizer reads characters, so the split moves back to the character's start, 90.
  path = tmp_path / "accents.txt"
  path.write_text("é" * 50 + "a", encoding="utf-8")
  assert len(path.read_bytes()) == 101
  text = sources.get("text")
  for tokenizer, split_at in (("sentencepiece", 90), ("bytes", 91)):
    config = text_config(path, tmp_path, tokenizer=tokenizer, split="contiguous")
    assert text._text_settings(config, utf8=tokenizer != "bytes")["split_at"] == split_at, tokenizer
