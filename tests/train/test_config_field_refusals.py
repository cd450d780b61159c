"""Each config field refuses, by its own name and range, what the run could not use as given.

A float beyond float32 (the step's dtype), a λ without the hidden map, a value the flag parser could not read
as the field's type, a bool for a number: one line each, exit 2, nothing created. The memory refusal names the
field that is large and counts only what the source reads; a train fraction leaving less than a batch warns.
Most tests call the checks in this process; two run train.py up to its refusal.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT
from helpers import smoke_with

from tied_embed.train import config as config_lib
from tied_embed.train import run_setup
from tied_embed.train.config import check_memory
from tied_embed.train.config import validate as validate_config
from tied_embed.train.config_file import load_config_file, unparsed_override
from tied_embed.util import UsageError

GIB = 2**30
FLOAT32_MAX = float(np.finfo(np.float32).max)  # 3.4028235e38
FLOAT_FIELDS = ("model.hidden_l2", "train.learning_rate", "train.weight_decay", "train.grad_clip_norm",
                "train.lookup_grad_scale", "train.projection_grad_scale")


def _refusal(config, memory_bytes: int = 2**50) -> str:
  with pytest.raises(UsageError) as raised:
    validate_config(config, num_devices=1, memory_bytes=memory_bytes)
  assert "\n" not in str(raised.value)
  return str(raised.value)


def _hidden(l2: float):
  config = smoke_with("model.hidden", "linear")
  config.model.hidden_l2 = l2
  return config


def _train(tmp_path, *flags: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, str(ROOT / "train.py"), "--config", str(ROOT / "configs" / "smoke.py"),
                         "--workdir", str(tmp_path / "run"), *flags], cwd=tmp_path, capture_output=True, text=True,
                        timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})


# Floats the step holds in float32.


@pytest.mark.parametrize("path", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [1e300, 3.5e38, 1e-50])
def test_a_float_beyond_float32_is_refused_by_its_field(path, value):
  config = _hidden(0.01) if path == "model.hidden_l2" else smoke_with(path, value)
  if path == "model.hidden_l2":
    config.model.hidden_l2 = value
  message = _refusal(config)
  assert message.startswith(f"{path}={value!r} is not allowed: expected a finite number ")
  assert "within float32 (at most 3.4e38" in message


@pytest.mark.parametrize("path", FLOAT_FIELDS)
def test_the_largest_float32_and_a_subnormal_pass(path):
  for value in (FLOAT32_MAX, 1e-44):
    config = _hidden(value) if path == "model.hidden_l2" else smoke_with(path, value)
    validate_config(config, num_devices=1, memory_bytes=2**50)
    assert np.isfinite(np.float32(value)) and np.float32(value) != 0  # what the step will hold


def test_train_py_refuses_a_huge_lambda_before_creating_the_workdir(tmp_path):
  result = _train(tmp_path, "--config.model.hidden=linear", "--config.model.hidden_l2=1e300")
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: model.hidden_l2=1e+300 is not allowed")
  assert not (tmp_path / "run").exists()


# Fields that do nothing without another.


def test_a_lambda_without_the_hidden_map_is_refused_and_with_it_accepted():
  message = _refusal(smoke_with("model.hidden_l2", 0.5))
  assert message.startswith("model.hidden_l2=0.5 is not allowed: expected 0 (off) unless model.hidden='linear' or "
                            "'symmetric'")
  validate_config(_hidden(0.5), num_devices=1, memory_bytes=2**50)


def test_a_field_that_does_nothing_in_both_configs_does_not_block_a_resume():
  dead_lambda = smoke_with("model.hidden_l2", 0.5)  # what an older checkpoint may hold
  assert run_setup.config_differences(dead_lambda, smoke_with("seed", 0)) == []
  assert run_setup.config_differences(_hidden(0.5), _hidden(0.0)) == [
      "model.hidden_l2: 0.5 in the checkpoints, 0.0 now"]  # with the hidden map, λ trains: a different run
  text = smoke_with("data.source", "text")
  text.model.vocab_size = 256
  other_width = text.copy_and_resolve_references()
  other_width.data.task_d_model = 64  # read by the synthetic tasks only
  other_width.data.task_seed = 7  # read by the synthetic tasks only
  assert run_setup.config_differences(text, other_width) == []
  unread = text.copy_and_resolve_references()
  unread.data.field_no_source_reads = "x"  # what a checkpoint of a source this code does not have may hold
  assert run_setup.config_differences(unread, text) == []
  assert run_setup.config_differences(smoke_with("data.task_d_model", 8), smoke_with("data.task_d_model", 64)) == [
      "data.task_d_model: 8 in the checkpoints, 64 now"]
  by_document = text.copy_and_resolve_references()
  by_document.data.split = "by_document"
  without_split = text.copy_and_resolve_references()
  del without_split.data["split"]  # a field the new config lacks is named as absent, not as its default
  assert run_setup.config_differences(by_document, without_split) == [
      "data.split: 'by_document' in the checkpoints, '<absent>' now"]
  before_tokenizers = text.copy_and_resolve_references()
  del before_tokenizers.data["tokenizer"]  # a field with no assumed default, which an older checkpoint lacks
  pieces = text.copy_and_resolve_references()
  pieces.data.tokenizer = "sentencepiece"
  assert run_setup.config_differences(before_tokenizers, pieces) == [
      "data.tokenizer: '<absent>' in the checkpoints, 'sentencepiece' now"]


def test_a_checkpoint_from_before_the_selection_split_resumes_as_if_it_had_none():
  # a saved config without data.selection_fraction (older checkpoints) is compared as its default, 0: no
  # selection split, so early stopping and min_delta do nothing on either side and block nothing
  before = smoke_with("seed", 0)
  del before.data["selection_fraction"]
  assert run_setup.config_differences(before, smoke_with("seed", 0)) == []
  assert run_setup.config_differences(before, smoke_with("data.selection_fraction", 0.1)) == [
      "data.selection_fraction: 0.0 in the checkpoints, 0.1 now"]


def test_inactive_fields_are_the_dependent_and_other_sources_fields():
  planted = config_lib.inactive_paths(smoke_with("seed", 0))
  assert "model.hidden_l2" in planted and "data.task_d_model" not in planted and "data.text_path" in planted
  hidden = config_lib.inactive_paths(_hidden(0.1))
  assert "model.hidden_l2" not in hidden


# Values the flag parser could not read as the field's type.


@pytest.mark.parametrize(
    ("path", "text", "allowed"),
    [
        ("model.hidden_l2", "abc",
         "a finite number >= 0 (0 = off), within float32 (at most 3.4e38; 0 or at least 1.4e-45)"),
        ("data.train_fraction", "abc", "a finite number in (0, 1]"),
        ("data.task_d_model", "8.5", "an integer in [1, 2**31 - 1]"),
        ("model.tied", "maybe", "True or False"),
        ("data.num_train_pairs", "1e5",
         "an integer in [1, 100,000,000] (pairs are held in memory, 8 bytes each and more while sampling)"),
        ("data.logit_scale", "abc", "a finite number >= 0"),
    ],
)
def test_an_unreadable_override_gets_the_fields_own_message(path, text, allowed):
  config = load_config_file(str(ROOT / "configs" / "smoke.py"))
  assert str(unparsed_override(config, path, text)) == f"{path}={text!r} is not allowed: expected {allowed}"


def test_train_py_gives_the_fields_message_for_a_non_numeric_value(tmp_path):
  result = _train(tmp_path, "--config.data.task_d_model=8.5")
  assert result.returncode == 2
  assert result.stderr == "error: data.task_d_model='8.5' is not allowed: expected an integer in [1, 2**31 - 1]\n"
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("path", ["data.train_fraction", "train.learning_rate", "model.hidden_l2", "seed"])
def test_a_bool_in_a_config_file_is_not_taken_for_a_number(tmp_path, path):
  config_file = tmp_path / "bool_config.py"
  config_file.write_text("from configs import smoke\n\n\ndef get_config():\n  config = smoke.get_config()\n"
                         f"  config.{path} = True\n  return config\n")
  config_file.with_name("configs").symlink_to(ROOT / "configs")
  config = load_config_file(str(config_file))
  assert config[path] is True
  assert _refusal(config).startswith(f"{path}=True is not allowed: expected ")


# Memory: the field that is large, and only what the source reads.


def test_the_memory_refusal_names_a_huge_task_width_and_a_text_run_does_not_count_it():
  planted = smoke_with("data.task_d_model", 10**8)
  planted.model.vocab_size = 4096
  message = _refusal(planted, memory_bytes=64 * GIB)  # 4096 · 1e8 · 8 bytes ≈ 3,052 GiB of hidden table
  assert message.startswith(f"data.task_d_model={10**8} is not allowed: expected a config that fits")
  assert "of it for the task's hidden table e*" in message
  text = smoke_with("data.source", "text")
  text.model.vocab_size = 256
  text.data.task_d_model = 10**8  # the text source reads no hidden table
  check_memory(text, 2 * GIB)


# A train fraction that leaves less than a batch.


def test_a_train_fraction_leaving_fewer_pairs_than_a_batch_warns_in_one_line(tmp_path, caplog):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  config = smoke_with("data.train_fraction", 1e-9)
  config.train.num_steps = 0
  with caplog.at_level(logging.INFO, logger="tied_embed"):
    train_and_evaluate(config, tmp_path / "run")
  ours = [record for record in caplog.records if record.name.startswith("tied_embed")]
  warnings = [record.getMessage() for record in ours if record.levelno == logging.WARNING]
  assert warnings == ["data.train_fraction=1e-09 leaves 1 train pairs, fewer than one batch (train.batch_size=128): "
                      "every batch draws the same few pairs again."]
