"""Config validation: each bad value is a UsageError naming its field path, raised before anything is done."""

from __future__ import annotations

import pytest
from helpers import BAD_VALUES, smoke_with

from tied_embed.train.config import validate as validate_config
from tied_embed.util import UsageError


def test_smoke_config_is_valid():
  from configs import default, directed, smoke, text, untied  # noqa: PLC0415

  for module in (default, untied, directed, text, smoke):
    validate_config(module.get_config(), num_devices=1)


@pytest.mark.parametrize(("path", "value"), BAD_VALUES)
def test_bad_value_names_its_field(path, value):
  with pytest.raises(UsageError) as raised:
    validate_config(smoke_with(path, value), num_devices=1)
  message = str(raised.value)
  assert path in message and "\n" not in message


def test_vocab_wrong_for_text_source_is_refused():
  config = smoke_with("data.source", "text")
  with pytest.raises(UsageError, match="model.vocab_size"):
    validate_config(config, num_devices=1)


def test_missing_text_path_is_refused(tmp_path):
  config = smoke_with("data.source", "text")
  config.model.vocab_size = 256
  config.data.text_path = str(tmp_path / "missing.txt")
  with pytest.raises(UsageError, match="data.text_path"):
    validate_config(config, num_devices=1)


@pytest.mark.parametrize(
    ("data", "model", "field"),
    [(1, 3, "mesh.model"), (3, 1, "mesh.data"), (-1, -1, "mesh.model"), (4, 4, "mesh")],
)
def test_mesh_must_fit_devices_vocab_and_batch(data, model, field):
  config = smoke_with("mesh.data", data)  # smoke: V=32, B=128; 8 devices assumed
  config.mesh.model = model
  with pytest.raises(UsageError, match=field):
    validate_config(config, num_devices=8)


def test_mesh_minus_one_takes_the_remaining_devices():
  config = smoke_with("mesh.data", -1)
  config.mesh.model = 2
  validate_config(config, num_devices=8)  # 4 x 2


def test_make_optimizer_called_directly_with_an_unknown_name_raises_value_error():
  from tied_embed.core.optim import make_optimizer  # noqa: PLC0415

  config = smoke_with("train.optimizer", "adagrad")
  with pytest.raises(ValueError, match="'adagrad'"):
    make_optimizer(config.train)


def test_unknown_compute_dtype_is_refused_naming_the_allowed_ones():
  with pytest.raises(UsageError) as raised:
    validate_config(smoke_with("model.dtype", "float16"), num_devices=1)
  assert str(raised.value).startswith("model.dtype='float16' is not allowed: expected float32 | bfloat16")
  assert UsageError.exit_status == 2


@pytest.mark.parametrize("stride", [0, 2, -2, 1.0, True])
def test_without_windows_an_eval_stride_is_minus_one_or_one(stride):
  validate_config(smoke_with("train.eval_stride", 1), num_devices=1)  # windows of 1: pairs, as -1 scores them
  with pytest.raises(UsageError) as refused:
    validate_config(smoke_with("train.eval_stride", stride), num_devices=1)
  assert str(refused.value) == (f"train.eval_stride={stride!r} is not allowed: expected -1 (the window length) or an "
                                "integer in [1, data.context_length=1]")
