"""Checkpoints: the smoke run's restore to its in-memory final state; errors for missing and damaged ones; untied
round trip."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import re
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from tied_embed.core import optim
from tied_embed.core.model import TiedEmbed, UntiedEmbed, build_model
from tied_embed.train import checkpoint, run_step
from tied_embed.train import state as state_lib
from tied_embed.util import UsageError


def test_latest_checkpoint_restores_the_final_table_and_totals(smoke_run):
  final = smoke_run.summary.state
  restored = checkpoint.restore(smoke_run.workdir)
  assert restored.step == 60
  assert isinstance(restored.model, TiedEmbed)
  np.testing.assert_array_equal(restored.model.embedding[...], final["model"]["embedding"][...])
  for name in ("lookup_total", "projection_total"):
    np.testing.assert_array_equal(restored.provenance[name], final[name][...])
    assert restored.provenance[name].shape == (smoke_run.config.model.vocab_size,)
  assert restored.config.to_dict() == smoke_run.config.to_dict()


def test_only_the_newest_checkpoints_are_kept(smoke_run):
  assert checkpoint.available_steps(smoke_run.workdir) == [40, 60]  # every 20 steps, keep 2
  assert checkpoint.restore(smoke_run.workdir, step=40).step == 40
  assert checkpoint.restore(smoke_run.workdir, 40, arrays=False).config.train.num_steps == 60


def test_missing_checkpoints_are_usage_errors(smoke_run, tmp_path):
  with pytest.raises(UsageError, match="no checkpoints"):
    checkpoint.restore(tmp_path)
  with pytest.raises(UsageError, match=r"step=20 .*\[40, 60\]"):
    checkpoint.restore(smoke_run.workdir, step=20)
  assert checkpoint.available_steps(tmp_path) == []


def test_untied_state_round_trips_with_optimizer_and_totals(tmp_path):
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  config.model.tied = False
  _, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  state["lookup_total"][...] = np.arange(config.model.vocab_size, dtype=np.float32)
  saver = checkpoint.Checkpointer(tmp_path, keep=1, config=config)
  saver.save(7, state)
  saver.close()

  restored = checkpoint.restore(tmp_path)
  assert isinstance(restored.model, UntiedEmbed) and restored.step == 7
  assert restored.manifest["dataset"] == ""  # a Checkpointer given no dataset identity records none
  np.testing.assert_array_equal(restored.model.input_embedding[...], state["model"]["input_embedding"][...])
  np.testing.assert_array_equal(restored.model.output_embedding[...], state["model"]["output_embedding"][...])
  np.testing.assert_array_equal(restored.provenance["lookup_total"], np.arange(config.model.vocab_size))

  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
  _, target = state_lib.abstract_state(state_lib.state_builder(config), mesh)
  full = checkpoint.restore(tmp_path, 7, target=target).state
  for got, want in zip(jax.tree.leaves(full), jax.tree.leaves(state), strict=True):
    np.testing.assert_array_equal(got, want)


def test_a_checkpoint_whose_data_is_cut_short_is_named_in_one_clean_line(tmp_path):
  """Orbax wraps a failed TensorStore read in an error ending in a pybind method's repr, dozens of lines long: the
  message names the error it wraps (what is wrong, and where) instead, whole and on one line."""
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  config.model.update(vocab_size=256, d_model=16)  # tables too large to be inlined in OCDBT's index
  _, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  saver = checkpoint.Checkpointer(tmp_path, keep=1, config=config)
  saver.save(7, state)
  saver.close()
  data_files = list((checkpoint.checkpoint_dir(tmp_path) / "7" / "state").glob("ocdbt.process_*/d/*"))
  assert data_files
  for data_file in data_files:
    data_file.write_bytes(data_file.read_bytes()[:10])

  with pytest.raises(UsageError) as damaged:
    checkpoint.restore(tmp_path, 7)
  message = str(damaged.value)
  assert message.startswith(f"checkpoint 7 at {checkpoint.checkpoint_dir(tmp_path) / '7'} is damaged: ValueError: ")
  assert re.search(r"Requested byte range \[0, \d+\) is not valid for value of size 10$", message), message
  assert "\n" not in message and "pybind" not in message and "TensorStore details" not in message
  assert "tensorstore_spec" not in message




def test_a_checkpointer_makes_its_folder_at_once_and_a_reader_makes_none(tmp_path):
  from configs import smoke  # noqa: PLC0415

  assert checkpoint.available_steps(tmp_path / "read") == [] and not (tmp_path / "read").exists()
  saver = checkpoint.Checkpointer(tmp_path / "run", keep=1, config=smoke.get_config())
  assert checkpoint.checkpoint_dir(tmp_path / "run").is_dir()  # before any save
  saver.close()


def test_a_failed_write_names_the_checkpoint_the_folder_and_the_error_in_one_line(tmp_path):
  full = OSError(28, "No space left on device")
  assert str(checkpoint.WriteFailed(tmp_path, 7, full)) == (
      f"writing checkpoint 7 in {tmp_path} failed: OSError: [Errno 28] No space left on device")
  assert str(checkpoint.WriteFailed(tmp_path, None, ValueError("bad\nsecond line"))) == (
      f"writing checkpoints in {tmp_path} failed: ValueError: bad")

def test_a_reason_of_exactly_limit_characters_is_kept_whole_and_a_longer_one_cut():
  assert checkpoint.reason(ValueError("abcdefgh"), limit=20) == "ValueError: abcdefgh"  # 12 + 8 = 20 characters
  assert checkpoint.reason(ValueError("abcdefghi"), limit=20) == "ValueError: abcde..."  # 21: 17 kept, then "..."

_READ = '''
class Pending:
  def __await__(self):
    yield


async def read_shard():
  try:
    await Pending()
  except GeneratorExit as closed:  # as Orbax's read of one array index: its own error, from the close
    raise Exception("Encountered error while reading array index") from closed
'''


def _defined_in(filename: str, snippet: str, name: str):
  """The function `name` of `snippet`, compiled as if it were the code of `filename`."""
  namespace = {}
  exec(compile(snippet, filename, "exec"), namespace)  # noqa: S102 (a fixed snippet, under a chosen file name)
  return namespace[name]


def _abandon_coroutine(filename: str) -> None:
  """Starts a coroutine defined in `filename` and drops it unawaited: closing it raises from GeneratorExit, an
  unraisable exception (what a read left behind by a failed checkpoint read does when it is collected)."""
  coroutine = _defined_in(filename, _READ, "read_shard")()
  coroutine.send(None)
  del coroutine
  gc.collect()


def test_an_abandoned_orbax_read_prints_nothing_once_checkpoints_are_read(tmp_path):
  """After a damaged checkpoint is skipped, Orbax's other reads of it are collected later and each raises; Python
  would print each as 'Exception ignored in: <coroutine ...>' with a traceback. Only those are dropped."""
  seen, previous = [], sys.unraisablehook
  sys.unraisablehook = lambda unraisable: seen.append(str(unraisable.exc_value))
  try:
    assert checkpoint.restore(tmp_path, resuming=True) is None  # no checkpoints: the filter is in place regardless
    _abandon_coroutine(os.path.join(os.sep, "site-packages", "orbax", "checkpoint", "serialization.py"))
    assert seen == []
    _abandon_coroutine(os.path.join(os.sep, "site-packages", "mine", "reader.py"))  # anyone else's still shows
    assert seen == ["Encountered error while reading array index"]
  finally:
    sys.unraisablehook = previous


_TASK = '''
async def deserialize():
  raise Exception("Encountered error while reading array index")
'''


def _abandon_task(filename: str) -> None:
  """Runs a task of a coroutine defined in `filename` to its exception and drops it unretrieved: asyncio logs
  'Task exception was never retrieved' when it is collected (what a failed checkpoint read's other tasks do)."""
  loop = asyncio.new_event_loop()
  task = loop.create_task(_defined_in(filename, _TASK, "deserialize")())
  loop.run_until_complete(asyncio.wait([task]))  # done, its exception never asked for
  loop.close()
  del task
  gc.collect()


def test_an_abandoned_orbax_task_logs_nothing_once_checkpoints_are_read(tmp_path, caplog):
  assert checkpoint.restore(tmp_path, resuming=True) is None  # no checkpoints: the filter is in place regardless
  with caplog.at_level(logging.ERROR, logger="asyncio"):
    _abandon_task(os.path.join(os.sep, "site-packages", "orbax", "checkpoint", "serialization.py"))
    assert caplog.records == []
    _abandon_task(os.path.join(os.sep, "site-packages", "mine", "reader.py"))  # anyone else's still shows
  assert [record.getMessage().splitlines()[0] for record in caplog.records] == ["Task exception was never retrieved"]


@pytest.mark.parametrize("future", [
    "<_GatheringFuture finished exception=Exception(\"Encountered error while reading array index: (). See full "
    "TensorStore details: <bound method ...>\")>",
    "<Future finished exception=ValueError('OUT_OF_RANGE: Error reading \"lookup_total/0\" in OCDBT database at "
    "local file \"/w/checkpoints/3000/state/\": Requested byte range [0, 3730) is not valid for value of size 0')>",
])
def test_abandoned_tensorstore_futures_log_nothing_once_checkpoints_are_read(tmp_path, caplog, future):
  """The other forms asyncio logs a failed checkpoint read's leftovers in, as it words them."""
  assert checkpoint.restore(tmp_path, resuming=True) is None
  with caplog.at_level(logging.ERROR, logger="asyncio"):
    kind = future[1:].split(" ")[0]
    logging.getLogger("asyncio").error(f"{kind} exception was never retrieved\nfuture: {future}")
    assert caplog.records == []
    logging.getLogger("asyncio").error("Future exception was never retrieved\nfuture: <Future finished "
                                       "exception=ValueError('mine')>")  # anyone else's still shows
  assert len(caplog.records) == 1
