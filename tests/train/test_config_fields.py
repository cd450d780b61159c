"""The config field table: configs/default.py equals it, every check reads it, and NumPy scalars pass as numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import smoke_with

from tied_embed.data import sources
from tied_embed.train import checkpoint
from tied_embed.train import config as config_lib
from tied_embed.util import UsageError


def _validate(config) -> None:
  config_lib.validate(config, num_devices=1, memory_bytes=2**50)


def test_default_config_is_the_tables_defaults():
  from configs import default  # noqa: PLC0415

  leaves = config_lib.leaf_paths(default.get_config())
  for path, value in config_lib.defaults().items():
    assert leaves[path] == value and type(leaves[path]) is type(value), path


def test_the_fields_that_may_change_on_resume():
  # How the run is carried out or watched; nothing that changes the model, the data or the optimizer.
  assert config_lib.RESUMABLE == {
      "train.num_steps", "train.log_every", "train.eval_every", "train.checkpoint_every", "train.keep_checkpoints",
      "train.eval_batch_size", "loss.chunk_size", "model.dtype", "mesh.data", "mesh.model", "data.data_dir",
      "train.early_stopping_patience",  # how long the run goes on, like train.num_steps
      "train.eval_stride",  # how the held-out splits are scored, never what is trained
  }


def test_every_default_passes_its_own_check():
  from configs import default  # noqa: PLC0415

  config = default.get_config()
  _validate(config)  # every field against its check, and the rest of the config
  for field in config_lib.FIELDS:
    assert field.check is None or field.check(field.default), field.path


HIDDEN_L2_ALLOWED = "a finite number >= 0 (0 = off), within float32 (at most 3.4e38; 0 or at least 1.4e-45)"


@pytest.mark.parametrize(
    ("path", "value", "allowed"),
    [
        ("model.hidden", "conv", '"none" | "linear" | "symmetric"'),
        ("model.output_bias", "yes", "True or False"),
        ("model.hidden_l2", -0.5, HIDDEN_L2_ALLOWED),
        ("model.hidden_l2", float("nan"), HIDDEN_L2_ALLOWED),
        ("data.train_fraction", 0.0, "a finite number in (0, 1]"),
        ("data.train_fraction", 1.5, "a finite number in (0, 1]"),
        ("data.train_fraction", "half", "a finite number in (0, 1]"),
        ("data.task_d_model", 0, "an integer in [1, 2**31 - 1]"),
        ("data.task_d_model", 8.0, "an integer in [1, 2**31 - 1]"),
    ],
)
def test_the_new_fields_are_refused_outside_their_range(path, value, allowed):
  with pytest.raises(UsageError) as refused:
    _validate(smoke_with(path, value))
  assert str(refused.value) == f"{path}={value!r} is not allowed: expected {allowed}"


@pytest.mark.parametrize(("path", "value"), [("model.hidden", "linear"), ("model.hidden_l2", 0.0),
                                             ("data.train_fraction", 0.5), ("data.task_d_model", 3)])
def test_the_new_fields_accept_their_range(path, value):
  _validate(smoke_with(path, value))


def test_numpy_scalars_are_validated_as_the_python_numbers_they_equal():
  config = smoke_with("train.batch_size", np.int64(128))
  with config.ignore_type():
    config.train.learning_rate = np.float32(0.05)
    config.model.tied = np.bool_(True)
  _validate(config)
  assert type(config.train.batch_size) is int and config.train.batch_size == 128
  assert type(config.train.learning_rate) is float and config.train.learning_rate == float(np.float32(0.05))
  assert config.model.tied is True
  json.dumps(config.to_dict())  # what a checkpoint's config item is written as


def test_a_run_whose_config_holds_numpy_scalars_saves_its_checkpoints(tmp_path):
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  config = smoke_with("train.batch_size", np.int64(128))
  with config.ignore_type():
    config.train.learning_rate = np.float32(0.05)
    config.train.num_steps = np.int64(20)
  train_and_evaluate(config, tmp_path)
  assert checkpoint.available_steps(tmp_path) == [20]
  assert checkpoint.restore(tmp_path, arrays=False).config.train.batch_size == 128


def test_the_synthetic_tasks_width_is_data_task_d_model():
  config = smoke_with("data.task_d_model", 5)
  source = sources.get("planted")
  _, table = source.task(source.settings(config))
  assert table.shape == (config.model.vocab_size, 5)
  with config.ignore_type():
    config.model.d_model = 16  # the model's width: not the task's
  _, table = source.task(source.settings(config))
  assert table.shape == (config.model.vocab_size, 5)


def test_the_dataset_identity_names_the_task_width_and_the_train_fraction():
  from tied_embed.data.bigram import dataset_identity  # noqa: PLC0415 (TFDS)

  base = dataset_identity(smoke_with("data.task_d_model", 8))
  assert "-d8-" in base
  assert dataset_identity(smoke_with("model.d_model", 16)) == base
  assert dataset_identity(smoke_with("data.task_d_model", 5)) != base
  assert dataset_identity(smoke_with("data.train_fraction", 0.5)) == f"{base}-train0.5"


def test_hparams_are_the_table_and_the_fields_of_the_run_source():
  config = smoke_with("seed", 3)
  hparams = config_lib.hparams(config)
  planted = {f"data.{name}" for name in sources.get("planted").fields}
  assert set(hparams) == {field.path for field in config_lib.FIELDS} | planted
  assert hparams["seed"] == 3 and hparams["data.num_train_pairs"] == config.data.num_train_pairs


def test_the_markdown_table_has_one_row_per_field():
  from scripts.config_fields import markdown_table  # noqa: PLC0415

  lines = markdown_table().splitlines()
  rows = [line for line in lines if line.startswith("| `")]
  assert [row.split("`")[1] for row in rows] == [field.path for field in config_lib.FIELDS]
  resumable = {row.split("`")[1] for row in rows if row.split(" | ")[3] == "yes"}
  assert resumable == config_lib.RESUMABLE
  assert {row.split("`")[1] for row in rows if row.split(" | ")[4] == "yes"} == {
      "data.train_fraction", "data.selection_fraction", "data.task_d_model"}
  assert "`data.text_path`" in lines[-1]  # the sources' own fields, named after the table


def test_the_docs_field_list_is_the_tables():
  from conftest import ROOT  # noqa: PLC0415

  from scripts.config_fields import markdown_table  # noqa: PLC0415

  page = (ROOT / "docs" / "configs.md").read_text()
  start = page.index("<!-- fields (python scripts/config_fields.py) -->\n")
  listed = page[start:page.index("<!-- /fields -->")].split("\n", 1)[1]
  assert listed.strip() == markdown_table().strip()
