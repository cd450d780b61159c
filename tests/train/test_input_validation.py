"""Every input is checked before anything is written: seeds, sizes, config files, field names, memory, --workdir.

Each refusal is one line naming the field, the value and what is allowed. Most tests call the validation
functions in this process; two run train.py, one for each of its own checks (the config file, --workdir).
"""

from __future__ import annotations

import os
import subprocess
import sys

import ml_collections
import pytest
from conftest import ROOT
from helpers import smoke_with

from tied_embed.data import sources
from tied_embed.train import config as config_lib
from tied_embed.train.config import RUNTIME_BYTES, available_memory, check_memory, memory_estimate
from tied_embed.train.config import validate as validate_config
from tied_embed.train.config_file import load_config_file
from tied_embed.util import UsageError

GIB = 2**30


def _refusal(config, memory_bytes: int = 2**50) -> str:
  with pytest.raises(UsageError) as raised:
    validate_config(config, num_devices=1, memory_bytes=memory_bytes)
  message = str(raised.value)
  assert "\n" not in message
  return message


# Values outside what the run can take.


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("seed", -5),  # NumPy's SeedSequence refuses it after data/ and events exist
        ("seed", 2**31),
        ("seed", 2**64),
        ("model.vocab_size", 2**31),
        ("model.vocab_size", 1e23),
        ("model.d_model", 2**31),
        ("train.batch_size", 2**31),
        ("train.eval_batch_size", 2**31),
        ("train.eval_batch_size", 10**23),
        ("train.num_steps", 2**31),
        ("loss.chunk_size", 2**31),
    ],
)
def test_values_beyond_the_range_the_run_can_take_are_refused(path, value):
  message = _refusal(smoke_with(path, value))
  assert message.startswith(f"{path}={value!r} is not allowed: expected an integer in [")


def test_tied_must_be_a_bool():
  assert _refusal(smoke_with("model.tied", "no")) == "model.tied='no' is not allowed: expected True or False"


def test_seeds_at_both_ends_of_the_range_are_accepted():
  for seed in (0, 2**31 - 1):
    validate_config(smoke_with("seed", seed), num_devices=1, memory_bytes=2**50)


# Field names: the schema of configs/default.py.


SHIPPED_CONFIGS = sorted(path for path in (ROOT / "configs").glob("*.py") if path.stem != "__init__")


def test_every_config_has_the_required_fields_and_only_known_ones():
  known = config_lib.known_fields()
  assert len(SHIPPED_CONFIGS) >= 8
  for path in SHIPPED_CONFIGS:
    fields = set(config_lib.leaf_paths(load_config_file(str(path))))
    assert config_lib.REQUIRED_FIELDS <= fields <= known, path.name
  default = load_config_file(str(ROOT / "configs" / "default.py"))
  assert set(config_lib.leaf_paths(default)) == known  # default.py names every source's fields


def test_a_new_sources_fields_are_known_fields(monkeypatch):
  class Toy:
    fields = ("toy_length",)

  monkeypatch.setitem(sources.REGISTRY, "toy", Toy())
  assert "data.toy_length" in config_lib.known_fields()


def test_a_misspelt_field_in_a_config_file_is_refused_with_a_suggestion():
  config = smoke_with("seed", 0)
  config.train.learnig_rate = 0.1
  message = _refusal(config)
  assert message.startswith("train.learnig_rate=0.1 is not allowed: expected a known config field")
  assert message.endswith("did you mean train.learning_rate?")


def test_an_unknown_group_and_a_missing_field_are_refused():
  config = smoke_with("seed", 0)
  config.optimiser = ml_collections.ConfigDict({"name": "adam"})
  assert _refusal(config).startswith("optimiser.name='adam' is not allowed")
  config = smoke_with("seed", 0)
  del config.loss["chunk_size"]
  assert _refusal(config) == "loss.chunk_size is missing from the config: expected every field of configs/default.py"


# Memory.


def test_memory_estimate_is_the_documented_sum():
  config = smoke_with("model.vocab_size", 32)  # smoke: D=8, B=128, eval 512, 20,000 + 2,000 pairs, tied
  config.loss.chunk_size = 0  # full logits
  assert [term.bytes for term in memory_estimate(config)] == [
      32 * 8 * 4 * 6,  # one float32 table six times
      32 * 8 * 8,  # the planted task's float64 hidden table (V, data.task_d_model)
      128 * 32 * 4 * 3,  # train logits
      128 * 8 * 4 * 2,  # hidden vectors
      512 * 32 * 4 * 2,  # eval logits
      22_000 * 32,  # pairs
  ]
  config.model.tied = False
  config.loss.chunk_size = 16
  assert [term.bytes for term in memory_estimate(config)] == [
      32 * 8 * 2 * 4 * 6, 32 * 8 * 8, 16 * 32 * 4 * 3, 128 * 8 * 4 * 2, 16 * 32 * 4 * 2, 22_000 * 32,
  ]
  config.data.context_length = 16  # a batch is 128 windows of 16 tokens: 2,048 hidden vectors, train logits by chunk
  config.loss.chunk_size = 0
  assert [term.bytes for term in memory_estimate(config)][2:4] == [128 * 16 * 32 * 4 * 3, 128 * 16 * 8 * 4 * 2]


def test_a_config_that_cannot_fit_is_refused_with_the_estimate_and_the_memory():
  config = smoke_with("train.batch_size", 2**24)  # (B, V) train logits: 2**24 * 32 * 12 bytes = 6 GiB
  config.loss.chunk_size = 0  # full logits
  check_memory(config, 9 * GIB)  # + 1 GiB of (B, D) hidden vectors + 1 GiB of runtime, and a little more
  message = _refusal(config, memory_bytes=4 * GIB)
  assert message.startswith(f"train.batch_size={2**24} is not allowed: expected a config that fits in this "
                            "machine's 4.0 GiB of memory: it needs about 8.0 GiB,")
  assert "6.0 GiB of it for the train logits" in message


@pytest.mark.parametrize(
    ("path", "value", "blamed"),
    [
        ("model.vocab_size", 2**31 - 1, "model.vocab_size"),  # eval logits (512, V): V is the larger factor
        ("model.d_model", 2**31 - 1, "model.d_model"),  # the (V, D) tables
        ("data.num_train_pairs", 100_000_000, "data.num_train_pairs"),  # 3 GiB of pairs
    ],
)
def test_the_refusal_names_the_field_that_makes_the_run_too_large(path, value, blamed):
  message = _refusal(smoke_with(path, value), memory_bytes=2 * GIB)
  assert message.startswith(f"{blamed}=")


def test_shipped_configs_fit_in_a_few_gib_and_the_available_memory_is_the_machines():
  from configs import default, directed, smoke, text, untied  # noqa: PLC0415

  for module in (default, directed, smoke, text, untied):
    config = module.get_config()
    assert RUNTIME_BYTES + sum(term.bytes for term in memory_estimate(config)) < 1.5 * GIB
  physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  assert 0 < available_memory() <= physical


# Config files.

BROKEN_CONFIG_FILES = {
    "raises.py": ("def get_config():\n  raise RuntimeError('boom')\n", "get_config() raised RuntimeError: boom"),
    "import_fails.py": ("import no_such_module_xyz\n", "loading it raised ModuleNotFoundError"),
    "syntax.py": ("def get_config(:\n", "syntax error at line 1"),
    "no_get_config.py": ("x = 1\n", "it defines no get_config"),
    "returns_dict.py": ("def get_config():\n  return {'seed': 0}\n", "get_config() returned type dict"),
    "returns_none.py": ("def get_config():\n  return None\n", "get_config() returned type NoneType"),
}


@pytest.mark.parametrize("name", sorted(BROKEN_CONFIG_FILES))
def test_a_broken_config_file_is_one_line_naming_what_is_wrong(tmp_path, name):
  source, reason = BROKEN_CONFIG_FILES[name]
  path = tmp_path / name
  path.write_text(source)
  with pytest.raises(UsageError) as raised:
    load_config_file(str(path))
  message = str(raised.value)
  assert message.startswith(f"--config={str(path)!r} is not allowed: expected a Python file") and "\n" not in message
  assert reason in message
  assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # not even a __pycache__


def test_a_missing_or_empty_config_path_is_refused(tmp_path):
  for path in (str(tmp_path / "missing.py"), str(tmp_path), ""):
    with pytest.raises(UsageError, match="^--config="):
      load_config_file(path)


def test_shipped_config_files_load_and_validate():
  for path in SHIPPED_CONFIGS:
    config = load_config_file(str(path))
    assert isinstance(config, ml_collections.ConfigDict), path.name
    validate_config(config)


# train.py: its own checks, before anything is created.


def _train(cwd, *args) -> subprocess.CompletedProcess:
  return subprocess.run(
      [sys.executable, str(ROOT / "train.py"), *args], cwd=cwd, capture_output=True, text=True, timeout=120,
      env={**os.environ, "PYTHONPATH": str(ROOT)},
  )


def test_train_py_reports_a_missing_config_file_in_one_line(tmp_path):
  result = _train(tmp_path, "--config", str(tmp_path / "missing.py"), "--workdir", str(tmp_path / "run"))
  assert result.returncode == 2, result.stderr
  assert result.stderr.strip().count("\n") == 0
  assert result.stderr.startswith("error: --config=") and "No such file or directory" in result.stderr
  assert not any(tmp_path.iterdir())


def test_train_py_refuses_an_empty_workdir_and_creates_nothing(tmp_path):
  result = _train(tmp_path, "--config", str(ROOT / "configs" / "smoke.py"), "--workdir=")
  assert result.returncode == 2, result.stderr
  assert result.stderr.strip() == "error: --workdir='' is not allowed: expected a directory path"
  assert not any(tmp_path.iterdir())


def test_validation_imports_no_tensorflow():
  heavy = ("tensorflow", "tensorflow_datasets", "clu", "orbax")
  code = f"import sys, tied_embed.train.config; print([m for m in {heavy!r} if m in sys.modules])"
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
  assert result.stdout.strip() == "[]"


# A selection split too small to use, and a synthetic task too large to generate: refused before anything is written.


@pytest.mark.parametrize(
    ("num_train_pairs", "fraction", "held_out"),
    [
        (1, 0.1, 0),  # round(0.1) = 0: the run trained, then divided by an empty selection split at its first eval
        (20_000, 1e-300, 0),  # round(2e-296) = 0, which a clip to one pair would hide
        (10, 0.05, 0),  # round(0.5) = 0: halves go to the even neighbour
        (3, 0.1, 0),
    ],
)
def test_a_selection_fraction_holding_out_no_pair_is_refused(num_train_pairs, fraction, held_out):
  assert round(fraction * num_train_pairs) == held_out
  config = smoke_with("data.num_train_pairs", num_train_pairs)
  config.data.selection_fraction = fraction
  assert _refusal(config) == (
      f"data.selection_fraction={fraction!r} is not allowed: expected 0, or a share holding out at least 1 of the "
      f"{num_train_pairs:,} train pairs (round({fraction!r} · {num_train_pairs:,}) = 0)")


@pytest.mark.parametrize(
    ("num_train_pairs", "fraction", "held_out"),
    [(10, 0.06, 1), (2, 0.4, 1), (20_000, 0.25, 5000), (20_000, 2.5e-5, 0)],  # the last: 0.5 rounds to 0, refused
)
def test_the_selection_split_is_round_f_n_pairs_and_leaves_pairs_to_train_on(num_train_pairs, fraction, held_out):
  from tied_embed.data import bigram  # noqa: PLC0415 (TFDS)

  config = smoke_with("data.num_train_pairs", num_train_pairs)
  config.data.selection_fraction = fraction
  if held_out == 0:
    assert _refusal(config).startswith(f"data.selection_fraction={fraction!r} is not allowed")
    return
  validate_config(config, num_devices=1, memory_bytes=2**50)
  assert bigram.selection_pairs(num_train_pairs, fraction) == held_out  # what docs/configs.md says: round(f·N)
  assert bigram.train_pairs_used(num_train_pairs - held_out, 1.0) == num_train_pairs - held_out >= 1


def test_train_py_refuses_an_empty_selection_split_before_writing_anything(tmp_path):
  result = _train(tmp_path, "--config", str(ROOT / "configs" / "smoke.py"), "--workdir", str(tmp_path / "run"),
                  "--config.data.num_train_pairs=1", "--config.data.selection_fraction=0.1")
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr == ("error: data.selection_fraction=0.1 is not allowed: expected 0, or a share holding out at "
                           "least 1 of the 1 train pairs (round(0.1 · 1) = 0)\n")
  assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("source", ["planted", "directed"])
def test_a_synthetic_vocabulary_too_large_to_generate_is_refused_naming_the_work(source):
  from configs import default  # noqa: PLC0415

  config = default.get_config()
  config.data.source = source
  config.model.vocab_size = 32_768  # the bound: 3 · 32,768² ≈ 3.2e9 table entries, minutes
  validate_config(config, num_devices=1, memory_bytes=2**50)
  config.model.vocab_size = 32_769
  assert _refusal(config).startswith(f"model.vocab_size=32769 is not allowed: expected at most 32,768 for "
                                     f"data.source={source!r} (generating its dataset computes the (V, V) table 3 "
                                     f"times, 3.2e+09 entries")
  config.model.vocab_size = 10**6  # fits in memory (about 2 GiB), but 3 · 10¹² entries: days
  assert "3.0e+12 entries" in _refusal(config)


def test_train_py_refuses_a_million_token_synthetic_task_at_once(tmp_path):
  result = _train(tmp_path, "--config", str(ROOT / "configs" / "default.py"), "--workdir", str(tmp_path / "run"),
                  "--config.model.vocab_size=1000000")
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.startswith("error: model.vocab_size=1000000 is not allowed: expected at most 32,768")
  assert result.stderr.count("\n") == 1
  assert not any(tmp_path.iterdir())
