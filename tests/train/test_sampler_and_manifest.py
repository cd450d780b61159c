"""The batch sampler over a tiny split, and the checkpoint integrity check against a manifest missing an entry.

Each test here fails on a small plausible bug (a sampler that never draws the last pair, a check that compares only
the arrays the manifest names): docs/testing.md lists them."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
from flax import nnx
from helpers import smoke_with

from tied_embed.core import optim
from tied_embed.core.model import build_model
from tied_embed.train import checkpoint, run_step
from tied_embed.train import mesh as mesh_lib
from tied_embed.train.trainer import train_batch
from tied_embed.util import UsageError


def _tiny_split(size=5):
  """Pairs (i, 10 + i) for i < size: a pair drawn whole reads next = id + 10."""
  ids = np.arange(size, dtype=np.int32)
  return types.SimpleNamespace(train_ids=ids, train_next=ids + 10, context_length=1)


def test_the_sampler_draws_every_pair_of_a_tiny_split_whole():
  data = _tiny_split()
  drawn = [train_batch(data, seed=1, step=step, batch_size=4) for step in range(50)]
  ids = np.concatenate([batch[0] for batch in drawn])
  assert set(ids.tolist()) == {0, 1, 2, 3, 4}  # the first and the last pair too; 200 draws miss one with p < 1e-18
  for batch_ids, batch_next in drawn:
    assert batch_ids.shape == batch_next.shape == (4,)
    np.testing.assert_array_equal(batch_next, batch_ids + 10)
  counts = np.bincount(ids, minlength=5)
  assert counts.min() > 20, counts  # uniform: 40 expected each


def test_the_sampler_draws_every_window_of_a_tiny_split_whole():
  # 12 pairs (i, 10 + i), windows of L = 3 starting at 0, 2, 4, 6, 9 (the last one the last possible start)
  ids = np.arange(12, dtype=np.int32)
  starts = np.array([0, 2, 4, 6, 9])
  data = types.SimpleNamespace(train_ids=ids, train_next=ids + 10, train_starts=starts, context_length=3)
  drawn = [train_batch(data, seed=1, step=step, batch_size=4) for step in range(50)]
  firsts = set()
  for batch_ids, batch_next in drawn:
    assert batch_ids.shape == batch_next.shape == (4, 3)
    np.testing.assert_array_equal(batch_ids, batch_ids[:, :1] + np.arange(3))  # each window ids[s : s + 3]
    np.testing.assert_array_equal(batch_next, batch_ids + 10)
    firsts |= set(batch_ids[:, 0].tolist())
  assert firsts == {0, 2, 4, 6, 9}  # the last start too; 200 draws miss one with p < 1e-18


def test_a_batch_is_a_function_of_seed_and_step_alone():
  data = _tiny_split(1000)
  a = train_batch(data, seed=3, step=7, batch_size=64)
  np.testing.assert_array_equal(a[0], train_batch(data, seed=3, step=7, batch_size=64)[0])
  assert not np.array_equal(a[0], train_batch(data, seed=3, step=8, batch_size=64)[0])
  assert not np.array_equal(a[0], train_batch(data, seed=4, step=7, batch_size=64)[0])


def test_a_split_of_one_pair_gives_it_every_time():
  ids, next_ids = train_batch(_tiny_split(1), seed=0, step=0, batch_size=3)
  np.testing.assert_array_equal(ids, [0, 0, 0])
  np.testing.assert_array_equal(next_ids, [10, 10, 10])


def _saved_checkpoint(directory):
  config = smoke_with("model.vocab_size", 8)
  _, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  saver = checkpoint.Checkpointer(directory, keep=2, config=config)
  saver.save(3, state)
  saver.close()
  return checkpoint.checkpoint_dir(directory) / "3" / "manifest" / "metadata"


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_a_manifest_that_misses_an_array_or_names_one_too_many_is_refused(tmp_path, change):
  path = _saved_checkpoint(tmp_path)
  manifest = json.loads(path.read_text())
  arrays = manifest["arrays"] if "arrays" in manifest else manifest
  assert "model/embedding" in arrays, sorted(arrays)
  if change == "missing":
    del arrays["model/embedding"]
  else:
    arrays["model/extra_table"] = "0" * 16
  path.write_text(json.dumps(manifest))
  with pytest.raises(UsageError, match="damaged"):
    checkpoint.restore(tmp_path, step=3)


def test_a_launcher_of_two_tasks_or_more_joins_them_through_jax_distributed(monkeypatch):
  calls = []
  monkeypatch.setattr(mesh_lib.jax.distributed, "initialize", lambda **kwargs: calls.append(kwargs))
  for name in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):  # 2, the smallest that is more than one process
    assert mesh_lib.initialize_from_environment({name: "2"}) is True
  assert calls == [{}, {}]  # the launcher's own variables tell JAX the rest
  environ = {"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1", "JAX_COORDINATOR_ADDRESS": "host:1234"}
  assert mesh_lib.initialize_from_environment(environ) is True
  assert calls[-1] == {"coordinator_address": "host:1234", "num_processes": 2, "process_id": 1}
  assert mesh_lib.initialize_from_environment({"SLURM_NTASKS": "1", "OMPI_COMM_WORLD_SIZE": "1"}) is False
  assert len(calls) == 3
  for process_id in ("2", "-1"):  # of 2 processes, the ids are 0 and 1: refused in one line, nothing joined
    with pytest.raises(UsageError, match=r"JAX_PROCESS_ID in 0\.\.1"):
      mesh_lib.initialize_from_environment({**environ, "JAX_PROCESS_ID": process_id})
  assert len(calls) == 3
