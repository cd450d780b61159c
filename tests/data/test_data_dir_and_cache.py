"""The dataset cache and the data.* fields under attack: damaged caches are rebuilt, bad values refused up front."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import tracemalloc

import numpy as np
import pytest
from helpers import make_config

from tied_embed import util
from tied_embed import workdir as workdir_lib
from tied_embed.data import bigram as data
from tied_embed.data import cache, sources
from tied_embed.train import config as config_lib
from tied_embed.util import UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository


@pytest.fixture()
def cached(tmp_path):
  """(workdir, config, first load, version dir) of a freshly generated small planted dataset."""
  config = make_config()
  loaded = data.load_bigram_data(config, tmp_path)
  return tmp_path, config, loaded, cache.version_folder(data.builder_config(config), tmp_path / "data")


def test_building_a_dataset_leaves_nothing_in_the_temporary_directory(tmp_path, monkeypatch):
  system_temp = tmp_path / "system_temp"
  system_temp.mkdir()
  monkeypatch.setattr("tempfile.tempdir", str(system_temp))
  data.load_bigram_data(make_config(), tmp_path / "run")
  assert sorted(path.name for path in system_temp.iterdir()) == []
  assert tempfile.gettempdir() == str(system_temp)  # the system's temporary directory is given back


def test_a_load_makes_no_temporary_folder_and_keeps_the_process_temporary_directory(tmp_path, monkeypatch):
  """Neither a build nor a load of the cache makes a folder in any temporary directory, nor points the process's
  `tempfile.tempdir` elsewhere, even for a moment (another thread's temporary files would follow it)."""
  made, seen = [], set()
  real_mkdtemp = tempfile.mkdtemp

  def mkdtemp(*args, **kwargs):
    made.append(real_mkdtemp(*args, **kwargs))
    return made[-1]

  def builder_init(self, *args, **kwargs):  # where TFDS looks for a dataset's metadata
    seen.add(tempfile.tempdir)
    real_init(self, *args, **kwargs)

  real_init = cache.BigramPairs.__init__
  monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
  monkeypatch.setattr(cache.BigramPairs, "__init__", builder_init)
  before = tempfile.tempdir
  for _ in ("build", "cached"):
    data.load_bigram_data(make_config(), tmp_path)
  assert (made, seen, tempfile.tempdir) == ([], {before}, before)


def _damage_info(version_dir):
  (version_dir / "dataset_info.json").write_text("{x")


def _truncate_train(version_dir):
  record = next(version_dir.glob("*-train.array_record-*"))
  record.write_bytes(record.read_bytes()[:100])


def _delete_validation(version_dir):
  next(version_dir.glob("*-validation.array_record-*")).unlink()


@pytest.mark.parametrize("damage", [_damage_info, _truncate_train, _delete_validation])
def test_damaged_cache_is_rebuilt_with_a_warning(cached, damage, caplog):
  workdir, config, first, version_dir = cached
  damage(version_dir)
  with caplog.at_level(logging.WARNING):
    again = data.load_bigram_data(config, workdir)
  assert any("deleting it and generating it again" in record.getMessage() for record in caplog.records)
  np.testing.assert_array_equal(again.train_next, first.train_next)
  np.testing.assert_array_equal(again.eval_ids, first.eval_ids)


def test_cache_with_ids_outside_the_vocabulary_is_rebuilt(cached, caplog):
  workdir, config, first, version_dir = cached
  wide = make_config()
  wide.model.vocab_size = 64  # same pair counts, ids up to 63
  data.load_bigram_data(wide, workdir)
  wide_dir = cache.version_folder(data.builder_config(wide), workdir / "data")
  shutil.rmtree(version_dir)
  shutil.copytree(wide_dir, version_dir)
  with caplog.at_level(logging.WARNING):
    again = data.load_bigram_data(config, workdir)
  assert any("outside [0, 16)" in record.getMessage() for record in caplog.records)
  assert again.train_ids.max() < 16 and again.train_next.max() < 16
  np.testing.assert_array_equal(again.train_next, first.train_next)


def test_generation_holds_the_data_dir_lock(tmp_path, monkeypatch):
  seen = []
  task_splits = cache.task_splits

  def watched(bc):
    seen.append(util.is_locked(tmp_path / "data"))
    return task_splits(bc)

  monkeypatch.setattr(cache, "task_splits", watched)
  data.load_bigram_data(make_config(), tmp_path)
  assert seen == [True]
  assert not util.is_locked(tmp_path / "data")


def test_generating_into_a_locked_data_dir_is_one_line_naming_the_holder(tmp_path):
  (tmp_path / "data").mkdir()
  with util.exclusive(tmp_path / "data", "the test"):
    with pytest.raises(UsageError) as error:
      data.load_bigram_data(make_config(), tmp_path)
  message = str(error.value)
  assert "in use by another run" in message and f"pid {os.getpid()}" in message and "\n" not in message
  assert not list((tmp_path / "data").glob("bigram_pairs"))


_LOAD = textwrap.dedent("""
    import sys
    from tests.helpers import make_config
    from tied_embed.data import bigram as data
    from tied_embed.util import UsageError
    try:
      data.load_bigram_data(make_config(num_train_pairs=1_000_000), sys.argv[1])
    except UsageError as error:
      print(f"error: {error}", file=sys.stderr)
      sys.exit(2)
""")


def test_two_runs_generating_into_one_data_dir_never_give_a_traceback(tmp_path):
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT}
  runs = [subprocess.Popen([sys.executable, "-c", _LOAD, str(tmp_path)], cwd=ROOT, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
  results = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
  for status, stderr in results:
    assert "Traceback" not in stderr and "FileExistsError" not in stderr
    assert status == 0 or (status == 2 and "in use by another run" in stderr)
  assert 0 in [status for status, _ in results]
  again = data.load_bigram_data(make_config(num_train_pairs=1_000_000), tmp_path)  # the cache is whole
  assert len(again.train_ids) == 1_000_000


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("num_train_pairs", 2**31, "an integer in [1, 100,000,000]"),
    ("num_eval_pairs", 10**23, "an integer in [1, 100,000,000]"),
    ("num_train_pairs", 1e23, "an integer in [1, 100,000,000]"),
    ("logit_scale", float("inf"), "a finite number >= 0"),
    ("logit_scale", float("nan"), "a finite number >= 0"),
    ("zipf_exponent", float("inf"), "a finite number >= 0"),
])
def test_huge_or_non_finite_task_fields_are_refused(tmp_path, field, value, allowed):
  with pytest.raises(UsageError) as error:  # a run's checks, then its load (which takes the config as checked)
    config_lib.validate_data(make_config(**{field: value}))
    data.load_bigram_data(make_config(**{field: value}), tmp_path)
  assert str(error.value).startswith(f"data.{field}={value!r} is not allowed") and allowed in str(error.value)
  assert list(tmp_path.iterdir()) == []


def test_data_dir_that_is_a_file_is_refused_before_anything_is_written(tmp_path):
  a_file = tmp_path / "a_file"
  a_file.write_text("not a directory")
  for data_dir, allowed in ((a_file, "a directory"), (a_file / "below", "a path that can be created")):
    with pytest.raises(UsageError, match=f"data.data_dir=.* is not allowed: expected {allowed}"):
      config_lib.validate_data(make_config(data_dir=str(data_dir)))
    with pytest.raises(UsageError):  # a run's checks, then its load (which takes the config as checked)
      config_lib.validate_data(make_config(data_dir=str(data_dir)))
      data.load_bigram_data(make_config(data_dir=str(data_dir)), tmp_path / "work")
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_unwritable_data_dir_is_refused(tmp_path, monkeypatch):
  real_access = os.access
  monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == str(tmp_path) else real_access(path, mode))
  with pytest.raises(UsageError, match="expected a writable directory"):
    config_lib.validate_data(make_config(data_dir=str(tmp_path / "new")))


def test_validation_imports_no_tensorflow():
  code = textwrap.dedent("""
      import sys
      from configs import smoke
      from tied_embed.train import config as config_lib
      from tied_embed.util import UsageError
      config = smoke.get_config()
      config_lib.validate_data(config)
      config.data.logit_scale = float("inf")
      try:
        config_lib.validate_data(config)
        raise AssertionError("inf accepted")
      except UsageError:
        pass
      assert not [m for m in sys.modules if m.startswith(("tensorflow", "tensorflow_datasets"))], "TF imported"
  """)
  subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": ROOT})


def test_large_vocabulary_generation_needs_no_dense_table():
  source = sources.get("planted")
  config = make_config(num_train_pairs=20_000, num_eval_pairs=2_000)
  config.model.vocab_size = 4096
  settings = source.settings(config)
  tracemalloc.start()
  try:
    splits = source.splits(settings)
    reference = source.reference(settings, *splits["validation"])
    row = reference.log_probs[7]
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  assert peak < 4096**2 * 8 / 4  # a (V, V) float64 table would be 128 MB
  assert row.shape == (4096,) and np.exp(row).sum() == pytest.approx(1.0)
  assert reference.loss_floor > 0


# --- Text corpora: long lines, a vocabulary the corpus cannot support, links that reach one file twice. ---


def _subword_smoke(text_path, vocab_size):
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  config.data.source, config.data.text_path, config.data.tokenizer = "text", str(text_path), "sentencepiece"
  config.model.vocab_size = vocab_size
  return config


def test_a_corpus_of_lines_longer_than_sentencepiece_takes_trains_like_any_other(tmp_path):
  from tied_embed.data.text import tokenizer as tokenizer_lib  # noqa: PLC0415

  rng = np.random.default_rng(0)
  words = ["".join(rng.choice(list("abcdefghij"), size=rng.integers(2, 7))) for _ in range(300)]
  line = " ".join(rng.choice(words, size=40_000))  # one line of about 190 KB: SentencePiece drops lines > 64 KiB
  corpus = tmp_path / "one_line.txt"
  corpus.write_text(line)
  loaded = data.load_bigram_data(text_config_for(corpus, tmp_path, vocab_size=64), tmp_path / "work")
  assert loaded.vocab_size == 64 and len(loaded.train_ids) > 10_000
  pieces = list(tokenizer_lib.bounded_sentences([line, "short"]))
  assert "".join(pieces[:-1]) == line and pieces[-1] == "short"
  assert all(piece.startswith(" ") for piece in pieces[1:-1])  # cut before a space: every word stays whole
  assert all(len(piece.encode()) <= tokenizer_lib.SENTENCE_BYTES for piece in pieces) and len(pieces) > 2


def test_cuts_in_a_line_without_spaces_fall_on_character_boundaries():
  from tied_embed.data.text import tokenizer as tokenizer_lib  # noqa: PLC0415

  line = "é" * 50_001 + "x" + "ü" * 20_000  # two-byte characters, no space to cut at
  pieces = list(tokenizer_lib.bounded_sentences([line], limit=1001))
  assert "".join(pieces) == line and all(len(piece.encode()) <= 1001 for piece in pieces)


def test_a_corpus_sentencepiece_cannot_train_on_is_named_with_the_reason(tmp_path):
  corpus = tmp_path / "blank.txt"
  corpus.write_text(" \t " * 4000)  # passes the size bound, but holds nothing but whitespace
  with pytest.raises(UsageError) as refused:
    data.load_bigram_data(text_config_for(corpus, tmp_path, vocab_size=16), tmp_path / "work")
  message = str(refused.value)
  assert message.startswith("model.vocab_size=16 is not allowed") and f"data.text_path={str(corpus)!r}" in message
  assert "whitespace" in message and "\n" not in message


def text_config_for(text_path, tmp_path, vocab_size):
  import ml_collections  # noqa: PLC0415

  return ml_collections.ConfigDict({
      "seed": 0, "model": {"vocab_size": vocab_size, "d_model": 4, "tied": True},
      "data": {"source": "text", "text_path": str(text_path), "tokenizer": "sentencepiece",
               "data_dir": str(tmp_path / "data")}})


def test_a_refused_sentencepiece_vocabulary_creates_no_workdir(tmp_path):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  corpus = tmp_path / "abab.txt"
  corpus.write_text("ab ab ab ab\n" * 20000)  # 240 KB pass the size bound; its text has a handful of pieces
  workdir = tmp_path / "run"
  with pytest.raises(UsageError, match=r"model.vocab_size=8192 is not allowed: .*abab.txt.*too high"):
    train_and_evaluate(_subword_smoke(corpus, 8192), workdir)
  assert not workdir.exists()


def test_a_vocabulary_trained_before_the_workdir_exists_is_trained_once(tmp_path, monkeypatch):
  from tied_embed.data.text import tokenizer as tokenizer_lib  # noqa: PLC0415

  corpus = tmp_path / "corpus.txt"
  corpus.write_text("the cat sat on the mat and the dog sat on the log\n" * 400)
  config = _subword_smoke(corpus, 16)
  trainings = []
  real = tokenizer_lib.train_sentencepiece
  monkeypatch.setattr(tokenizer_lib, "train_sentencepiece", lambda *a, **k: trainings.append(1) or real(*a, **k))
  data.check_preparable(data.DataPlan.of(config, tmp_path / "run"))
  assert not (tmp_path / "run").exists() and len(trainings) == 1
  loaded = data.load_bigram_data(config, tmp_path / "run")
  assert loaded.vocab_size == 16 and len(trainings) == 1
  assert len(list((tmp_path / "run" / "data" / "tokenizers").glob("*.model"))) == 1


def test_a_glob_through_a_symlink_loop_reads_each_file_once(tmp_path):
  from tied_embed.data.text import corpus  # noqa: PLC0415

  root = tmp_path / "texts"
  (root / "sub").mkdir(parents=True)
  (root / "a.txt").write_text("alpha beta gamma\n" * 20)
  (root / "sub" / "b.txt").write_text("delta epsilon\n" * 20)
  (root / "self").symlink_to(".")  # a loop: texts/self/self/.../a.txt
  (root / "also_a.txt").symlink_to("a.txt")  # one file by two names
  expected = [root / "a.txt", root / "sub" / "b.txt"]
  assert corpus.resolve(f"{root}/**/*.txt", root) == expected
  assert corpus.resolve(str(root), root) == expected
  config = make_config(source="text", text_path=f"{root}/**/*.txt")
  assert data.builder_config(config).settings["files"] == [str(p) for p in expected]


# Files written whole, and never through a link (`util.write_atomically`, behind report_data.npz, tokenizer.model,
# the cached SentencePiece model and inspection's report files).


def test_a_write_replaces_a_link_and_leaves_its_target_untouched(tmp_path):
  outside = tmp_path / "outside"
  outside.write_bytes(b"precious")
  directory = tmp_path / "workdir"
  directory.mkdir()
  (directory / "tokenizer.model").symlink_to(outside)
  mask = os.umask(0o027)
  try:
    written = util.write_atomically(directory / "tokenizer.model", b"model bytes")
  finally:
    os.umask(mask)
  assert outside.read_bytes() == b"precious" and not written.is_symlink()
  assert written.read_bytes() == b"model bytes" and written.stat().st_mode & 0o777 == 0o640  # as open() makes it
  assert sorted(p.name for p in directory.iterdir()) == ["tokenizer.model"]


def test_a_failed_write_names_the_target_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
  import errno  # noqa: PLC0415

  target = tmp_path / "report_data.npz"
  target.write_bytes(b"the old record")
  (tmp_path / ".report_data.npz.killed.tmp").write_bytes(b"what a killed writer left")

  def full_disk(f):
    f.write(b"half")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  with pytest.raises(OSError) as failed:
    util.write_atomically(target, full_disk, remove_stale=True)
  assert (failed.value.errno, failed.value.filename) == (errno.ENOSPC, str(target))
  assert target.read_bytes() == b"the old record"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["report_data.npz"]


def test_the_inspection_record_replaces_links_in_the_workdir(tmp_path):
  from tied_embed.data import record  # noqa: PLC0415

  outside = tmp_path / "outside"
  outside.write_bytes(b"precious")
  workdir = tmp_path / "run"
  workdir.mkdir()
  for name in (workdir_lib.REPORT_DATA, workdir_lib.TOKENIZER):
    (workdir / name).symlink_to(outside)
  facts = record.InspectionData(source="planted", identity="x", vocab_size=2, loss_floor=0.5, reference_name="true",
                                true_log_probs=None, input_counts=np.array([1, 2]))
  model = np.frombuffer(b"model bytes", np.uint8)
  record.write(workdir, facts, {"table": np.zeros((2, 2), np.float32), "tokenizer_model": model})
  assert outside.read_bytes() == b"precious"
  assert not any((workdir / name).is_symlink() for name in (workdir_lib.REPORT_DATA, workdir_lib.TOKENIZER))
  assert (workdir / workdir_lib.TOKENIZER).read_bytes() == b"model bytes"
