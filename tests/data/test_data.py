"""The bigram sources and their TFDS dataset, checked against hand arithmetic and direct NumPy counts."""

import collections
import math

import numpy as np
import pytest
from helpers import make_config

from tied_embed.data import base, cache, sources
from tied_embed.data import bigram as data
from tied_embed.data.sources import synthetic
from tied_embed.train import config as config_lib
from tied_embed.train.trainer import train_batch
from tied_embed.util import UsageError

# A 3-token table small enough to push through softmax by hand.
HAND_TABLE = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
HAND_ZIPF = [6 / 11, 3 / 11, 2 / 11]  # (1, 1/2, 1/3) / (11/6)


def transition_log_probs(name: str, table: np.ndarray) -> np.ndarray:
  """log P(next=j | current=i) of a synthetic source from its hidden table: (V, D) → (V, V) float64."""
  return np.asarray(synthetic.table_rows(table, sources.get(name).output_table(table)))


def synthetic_task(name: str, vocab_size: int, d_model: int, logit_scale: float, zipf_exponent: float,
                   seed: int) -> tuple[np.ndarray, np.ndarray]:
  """A synthetic task's current-token distribution p (V,) and log P(next | current) (V, V), both float64."""
  table = synthetic.hidden_table(vocab_size, d_model, logit_scale, seed)
  return base.zipf_probs(vocab_size, zipf_exponent), transition_log_probs(name, table)


def hand_entropy(logit_rows: list[list[float]]) -> float:
  """Σ_i p_i H(softmax(row_i)) with plain `math`, for the 3-token hand case."""
  total = 0.0
  for p_i, row in zip(HAND_ZIPF, logit_rows, strict=True):
    norm = sum(math.exp(v) for v in row)
    total -= p_i * sum(math.exp(v) / norm * (v - math.log(norm)) for v in row)
  return total


def test_planted_floor_matches_hand_computation():
  # e·eᵀ for the rows (1,0), (0,1), (1,1).
  logits = [[1, 0, 1], [0, 1, 1], [1, 1, 2]]
  floor = synthetic.conditional_entropy(base.zipf_probs(3, 1.0),
                                      transition_log_probs("planted", HAND_TABLE))
  assert floor == pytest.approx(hand_entropy(logits), rel=1e-12)


def test_directed_floor_matches_hand_computation():
  # Column j scores e_i against e_{j-1}: columns use rows 2, 0, 1.
  logits = [[1, 1, 0], [1, 0, 1], [2, 1, 1]]
  floor = synthetic.conditional_entropy(base.zipf_probs(3, 1.0),
                                      transition_log_probs("directed", HAND_TABLE))
  assert floor == pytest.approx(hand_entropy(logits), rel=1e-12)


@pytest.mark.parametrize("source", sources.SYNTHETIC_SOURCES)
def test_transition_rows_sum_to_one(source):
  _, log_probs = synthetic_task(source, 50, 8, 8.0, 1.0, seed=1)
  np.testing.assert_allclose(np.exp(log_probs).sum(axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("source", sources.SYNTHETIC_SOURCES)
def test_sampled_pairs_follow_the_table_and_average_to_the_floor(source):
  current_probs, log_probs = synthetic_task(source, 8, 4, 4.0, 1.0, seed=2)
  ids, next_ids = synthetic.sample_pairs(current_probs, log_probs, 400_000, np.random.default_rng(0))
  counts = np.zeros((8, 8))
  np.add.at(counts, (ids, next_ids), 1)
  expected = current_probs[:, None] * np.exp(log_probs) * len(ids)
  assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected) + 5)
  nll = -log_probs[ids, next_ids]
  floor = synthetic.conditional_entropy(current_probs, log_probs)
  assert abs(nll.mean() - floor) < 4 * nll.std() / np.sqrt(len(nll))


def test_zipf_current_tokens_make_high_ids_rare():
  probs = base.zipf_probs(4, 1.0)
  np.testing.assert_allclose(probs, np.array([12, 6, 4, 3]) / 25)


def test_directed_task_is_one_way_and_planted_is_symmetric():
  _, planted = synthetic_task("planted", 64, 16, 8.0, 1.0, seed=0)
  _, directed = synthetic_task("directed", 64, 16, 8.0, 1.0, seed=0)
  # Symmetric logits S give log P_ij - log P_ji = lse_j - lse_i, so that difference is c_j - c_i for some c.
  for log_probs, symmetric in [(planted, True), (directed, False)]:
    antisym = log_probs - log_probs.T
    assert np.allclose(antisym, antisym[0][None, :] - antisym[0][:, None], atol=1e-9) == symmetric
  probs, rows = np.exp(directed), np.arange(64)
  forward, backward = probs[rows, (rows + 1) % 64], probs[(rows + 1) % 64, rows]
  assert forward.mean() > 0.3 and forward.mean() > 20 * backward.mean()
  assert np.abs(probs - probs.T).max() > 0.5


@pytest.fixture(scope="module")
def planted_workdir(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("planted")
  return workdir, data.load_bigram_data(make_config(), workdir)


def test_dataset_round_trips_the_generated_pairs(planted_workdir):
  _, loaded = planted_workdir
  current_probs, log_probs = synthetic_task("planted", 16, 4, 6.0, 1.0, seed=3)
  splits = synthetic.synthetic_splits(current_probs, log_probs, 5000, 3000, seed=3)
  for got, want in [((loaded.train_ids, loaded.train_next), splits["train"]),
                    ((loaded.eval_ids, loaded.eval_next), splits["validation"])]:
    assert got[0].dtype == np.int32
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
  np.testing.assert_array_equal(loaded.input_counts, np.bincount(splits["train"][0], minlength=16))
  assert loaded.loss_floor == synthetic.conditional_entropy(current_probs, log_probs)
  np.testing.assert_array_equal(loaded.true_log_probs, log_probs)


def test_second_load_reuses_the_cache(planted_workdir, monkeypatch):
  workdir, first = planted_workdir
  files = sorted((workdir / "data").rglob("*.array_record*"))
  mtimes = [f.stat().st_mtime_ns for f in files]
  assert len(files) == 2  # one train and one validation shard

  def no_generation(_):
    raise AssertionError("regenerated a cached dataset")

  monkeypatch.setattr(cache, "task_splits", no_generation)
  second = data.load_bigram_data(make_config(), workdir)
  assert [f.stat().st_mtime_ns for f in files] == mtimes
  np.testing.assert_array_equal(second.train_next, first.train_next)


def test_a_different_task_gets_its_own_cache():
  names = {data.builder_config(make_config(**change)).name for change in
           [{}, {"task_seed": 4}, {"source": "directed"}, {"logit_scale": 5.0}, {"num_train_pairs": 10}]}
  assert len(names) == 5


def test_text_floor_is_the_validation_bigram_entropy(tmp_path):
  text = ("the cat sat on the mat; ünïcödé bytes too. " * 7).encode()
  path = tmp_path / "corpus.txt"
  path.write_bytes(text)
  loaded = data.load_bigram_data(make_config(source="text", text_path=str(path)), tmp_path / "work")
  validation = text[len(text) - len(text) // 10:]
  pairs = collections.Counter(zip(validation[:-1], validation[1:], strict=False))
  current = collections.Counter(validation[:-1])
  expected = -sum(n * math.log(n / current[i]) for (i, _), n in pairs.items()) / sum(pairs.values())
  assert loaded.loss_floor == pytest.approx(expected, rel=1e-12)
  assert len(loaded.train_ids) + len(loaded.eval_ids) == len(text) - 2
  (i, j), n = pairs.most_common(1)[0]
  assert loaded.true_log_probs[i, j] == pytest.approx(math.log(n / current[i]))
  unseen = next(b for b in range(256) if b not in current)
  assert np.isnan(loaded.true_log_probs[unseen]).all()


def test_text_cache_follows_the_file_contents(tmp_path):
  path = tmp_path / "corpus.txt"
  path.write_text("x" * 100)
  before = data.builder_config(make_config(source="text", text_path=str(path))).name
  path.write_text("y" * 100)
  assert data.builder_config(make_config(source="text", text_path=str(path))).name != before


def test_train_batch_is_a_function_of_seed_and_step(planted_workdir):
  _, loaded = planted_workdir
  ids, next_ids = train_batch(loaded, seed=7, step=11, batch_size=64)
  again = train_batch(loaded, seed=7, step=11, batch_size=64)
  assert ids.shape == (64,) and ids.dtype == np.int32
  np.testing.assert_array_equal(ids, again[0])
  np.testing.assert_array_equal(next_ids, again[1])
  assert not np.array_equal(ids, train_batch(loaded, seed=7, step=12, batch_size=64)[0])
  assert not np.array_equal(ids, train_batch(loaded, seed=8, step=11, batch_size=64)[0])
  # Every pair is a real train pair.
  train_pairs = set(zip(loaded.train_ids.tolist(), loaded.train_next.tolist(), strict=True))
  assert set(zip(ids.tolist(), next_ids.tolist(), strict=True)) <= train_pairs


@pytest.mark.parametrize("model_change, data_change, field", [
    ({}, {"source": "wiki"}, "data.source='wiki'"),
    ({"vocab_size": 512}, {"source": "text"}, "model.vocab_size=512"),
    ({"vocab_size": 1}, {}, "model.vocab_size=1"),
    ({}, {"source": "text", "text_path": "/no/such/file.txt"}, "data.text_path='/no/such/file.txt'"),
    ({}, {"num_train_pairs": 0}, "data.num_train_pairs=0"),
    ({}, {"logit_scale": -1.0}, "data.logit_scale=-1.0"),
    ({}, {"task_seed": -2}, "data.task_seed=-2"),
])
def test_bad_data_config_names_the_field_and_value(model_change, data_change, field):
  config = make_config(**data_change)
  config.model.update(model_change)
  with pytest.raises(UsageError) as error:
    config_lib.validate_data(config)
  assert str(error.value).startswith(field) and "\n" not in str(error.value)


def test_text_path_that_is_a_directory_or_tiny_is_rejected(tmp_path):
  with pytest.raises(UsageError, match="data.text_path"):
    config_lib.validate_data(make_config(source="text", text_path=str(tmp_path)))
  (tmp_path / "tiny.txt").write_text("hi")
  with pytest.raises(UsageError, match="at least"):
    config_lib.validate_data(make_config(source="text", text_path=str(tmp_path / "tiny.txt")))


class _Alternating(sources.Source):
  """A toy source for the test below: 0 1 0 1 ..., so every next token is certain and the floor is 0."""

  name = "alternating"
  fields = ("num_train_pairs",)

  def validate(self, config):
    if config.data.num_train_pairs < 1:
      raise UsageError.bad_value("data.num_train_pairs", config.data.num_train_pairs, "an integer >= 1")

  def settings(self, config):
    return {"vocab_size": int(config.model.vocab_size), "num_train_pairs": int(config.data.num_train_pairs)}

  def identity(self, settings):
    return f"alternating-v{settings['vocab_size']}-n{settings['num_train_pairs']}"

  def num_pairs(self, settings):
    return {"train": settings["num_train_pairs"], "validation": 10}

  def splits(self, settings):
    def pairs(n):
      ids = (np.arange(n) % 2).astype(np.int32)
      return ids, 1 - ids
    return {"train": pairs(settings["num_train_pairs"]), "validation": pairs(10)}

  def reference(self, settings, eval_ids, eval_next):
    table = np.full((settings["vocab_size"],) * 2, -np.inf)
    table[0, 1] = table[1, 0] = 0.0
    return sources.Reference("true", 0.0, base.dense_rows(table), {"table": table})

  def log_probs_from_record(self, vocab_size, record):
    return base.dense_rows(record["table"])


def test_a_new_source_is_one_class_registered(tmp_path, monkeypatch):
  monkeypatch.setitem(sources.REGISTRY, "alternating", _Alternating())
  config = make_config(source="alternating", num_train_pairs=100)
  config_lib.validate_data(config)
  loaded = data.load_bigram_data(config, tmp_path)
  assert data.dataset_identity(config) == loaded.identity == "alternating-v16-n100"
  np.testing.assert_array_equal(loaded.train_next[:4], [1, 0, 1, 0])
  assert loaded.loss_floor == 0.0 and loaded.true_log_probs[0, 1] == 0.0
  np.testing.assert_array_equal(loaded.input_counts[:3], [50, 50, 0])
  with pytest.raises(UsageError, match="data.num_train_pairs=0"):
    config_lib.validate_data(make_config(source="alternating", num_train_pairs=0))
