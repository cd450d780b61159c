"""Sharded training: a 4x2 mesh of 8 simulated devices repeats the 1-device smoke run (2 processes of 4 devices
each repeat it too: tests/train/test_multihost_preemption.py, whose preempted run and its rerun serve that check).

The 1-device reference is the session smoke run (configs/smoke.py, mesh 1x1). The 8-device run happens once,
in a subprocess (tests/sharded_run.py), since JAX fixes the device count when it starts. Summation order
differs between meshes, so float32 results agree to rounding: rtol 1e-5, with atol 1e-6 for the few table
entries within ~1e-3 of zero (the table's entries are O(1)).
"""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import ROOT
from helpers import COUNTS, METRICS, assert_close, subprocess_env
from sharded_run import PROBE_BATCH

from tied_embed.train import checkpoint
from tied_embed.train import mesh as mesh_lib
from tied_embed.train import state as state_lib
from tied_embed.train.config import validate as validate_config
from tied_embed.train.metrics import read_scalars
from tied_embed.util import UsageError

TABLE = "['model']['embedding'].value"
def _leaves(state) -> dict[str, np.ndarray]:
  return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(state)}


def test_4x2_run_ends_with_the_1_device_parameters_and_optimizer_state(sharded, smoke_run):
  final, reference = np.load(sharded / "final.npz"), _leaves(smoke_run.summary.state)
  assert set(final.files) == set(reference)
  for name in reference:
    assert_close(final[name], reference[name])
  assert int(final["['optimizer']['step'].value"]) == smoke_run.config.train.num_steps


def _is_vocabulary_array(name: str) -> bool:
  """The table, its optimizer moments (wherever the chain puts them) and the provenance totals."""
  return "['embedding']" in name or name in ("['lookup_total'].value", "['projection_total'].value")


def test_vocabulary_arrays_are_split_in_2_along_v_and_replicated_along_data(sharded, smoke_run):
  vocab_size, d_model = smoke_run.config.model.vocab_size, smoke_run.config.model.d_model
  leaves = json.loads((sharded / "layout.json").read_text())["leaves"]
  assert sum(map(_is_vocabulary_array, leaves)) == 5  # table, mu, nu, two totals
  for name, leaf in leaves.items():
    if not _is_vocabulary_array(name):  # counters, running metrics, tracked rows: whole on every device
      assert not any(leaf["spec"]) and not any(leaf["compiled_spec"]), name  # P() or P(None, ...)
      indices = [s["index"] for s in leaf["shards"]]
      assert all(index == indices[0] for index in indices) and all(start == 0 for start, _ in indices[0]), name
      continue
    ndim = 2 if "embedding" in name else 1
    assert leaf["spec"] == leaf["compiled_spec"] == ["model"] + [None] * (ndim - 1), name
    assert len(leaf["shards"]) == 8
    for shard in leaf["shards"]:
      # Mesh row-major over devices 0..7: device k sits at (data k // 2, model k % 2) and holds half k % 2 of V.
      half = vocab_size // 2
      rows = [half * (shard["device"] % 2), half * (shard["device"] % 2 + 1)]
      assert shard["index"] == [rows] + [[0, d_model]] * (ndim - 1), (name, shard)


def test_compiled_programs_never_move_a_whole_vocabulary(sharded, smoke_run):
  """The HLO's collectives carry batch rows and table shards, never V-sized arrays (no silent replication)."""
  vocab_size, d_model = smoke_run.config.model.vocab_size, smoke_run.config.model.d_model
  programs = json.loads((sharded / "layout.json").read_text())["collectives"]
  for name, found in programs.items():
    assert found, name
    for collective in found:
      assert all(vocab_size not in shape for shape in collective["shapes"]), (name, collective)
  step = programs["step"]
  assert {c["op"] for c in step} == {"all-reduce", "all-gather"}
  # Only the batch is ever gathered whole: its ids (T,), for the lookup path's per-row sums.
  assert all(shape[0] == PROBE_BATCH for c in step if c["op"] == "all-gather" for shape in c["shapes"])
  # The projection path and the total gradient cross the data axis as this device's (V/2, D) half; the sparse
  # lookup path as the batch's (T, D) rows.
  assert any(collective["shapes"].count([vocab_size // 2, d_model]) == 2 for collective in step)
  assert any([PROBE_BATCH, d_model] in collective["shapes"] for collective in step)


@pytest.mark.parametrize("grad_clip_norm", [1.0, 0.0])
@pytest.mark.parametrize("tied", [True, False])
def test_shardings_follow_the_annotations_whatever_the_optimizer_chain(tied, grad_clip_norm):
  """Every table (V, D) and its moments are split along V, the totals too, and nothing else is, on any chain."""
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()
  config.model.tied, config.train.grad_clip_norm = tied, grad_clip_norm
  config.model.d_model = config.model.vocab_size  # a (V, V) table: shapes alone could not tell the axes apart
  _, target = state_lib.abstract_state(state_lib.state_builder(config), mesh_lib.make_mesh(config.mesh))
  leaves = jax.tree_util.tree_leaves_with_path(target)
  specs = {jax.tree_util.keystr(path): tuple(leaf.sharding.spec) for path, leaf in leaves}
  tables = [name for name in specs if "embedding']" in name]
  assert len(tables) == (3 if tied else 6)  # each table and its two Adam moments
  for name, spec in specs.items():
    if name in tables:
      assert spec == ("model", None), name
    elif name in ("['lookup_total'].value", "['projection_total'].value"):
      assert spec == ("model",), name
    else:
      assert spec == (), name


def test_default_config_on_a_4x2_mesh_finishes_every_time(tmp_path):
  """The default config's shape on 8 simulated devices (V=1024, B=1024, log_every=100), three runs in a row.

  With a hundred steps dispatched between two log steps and nothing bounding them, XLA:CPU's collectives wait on
  each other and abort the run after a 40 s rendezvous timeout (exit 134) in most runs; 300 steps cover three
  log steps.
  """
  code = (
      "import os, sys; from configs import default; from tied_embed.train.trainer import train_and_evaluate\n"
      "print('flags', os.environ['XLA_FLAGS'], flush=True)\n"
      "for run in range(3):\n"
      "  config = default.get_config()\n"
      "  config.train.num_steps, config.mesh.data, config.mesh.model = 300, 4, 2\n"
      "  config.data.data_dir = sys.argv[1] + '/data'\n"
      "  summary = train_and_evaluate(config, f'{sys.argv[1]}/run{run}')\n"
      "  print('finished', summary.step, flush=True)\n"
  )
  result = subprocess.run(
      [sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=480,
      env=subprocess_env(optimized=True, XLA_FLAGS="--xla_force_host_platform_device_count=8"),
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert [line for line in result.stdout.splitlines() if line.startswith("finished")] == ["finished 300"] * 3
  assert "flags --xla_force_host_platform_device_count=8\n" in result.stdout  # the users' shape at XLA's defaults


def test_checkpoint_from_8_devices_restores_on_1_device(sharded, smoke_run):
  final = np.load(sharded / "final.npz")
  restored = checkpoint.restore(sharded / "run")
  assert restored.step == 60 and jax.device_count() == 1
  np.testing.assert_array_equal(restored.model.embedding[...], final[TABLE])
  assert_close(restored.model.embedding[...], smoke_run.summary.state["model"]["embedding"][...])
  for name in ("lookup_total", "projection_total"):
    np.testing.assert_array_equal(restored.provenance[name], final[f"['{name}'].value"])
    assert_close(restored.provenance[name], smoke_run.summary.state[name][...])


@pytest.mark.parametrize(("mesh", "num_shards"), [("2x4", 4), ("8x1", 1)])
def test_checkpoint_restores_on_other_meshes(sharded, mesh, num_shards):
  final, restored = np.load(sharded / "final.npz"), np.load(sharded / f"restored_{mesh}.npz")
  np.testing.assert_array_equal(restored["embedding"], final[TABLE])
  np.testing.assert_array_equal(restored["lookup_total"], final["['lookup_total'].value"])
  rows = {tuple(shard["index"][0]) for shard in json.loads(str(restored["shards"]))}
  vocab_size = len(restored["embedding"])
  assert rows == {(i * vocab_size // num_shards, (i + 1) * vocab_size // num_shards) for i in range(num_shards)}


def test_training_resumes_on_another_mesh(sharded, smoke_run):
  resumed, reference = np.load(sharded / "resumed_2x4.npz"), _leaves(smoke_run.summary.state)
  for name in reference:
    assert_close(resumed[name], reference[name])


def test_logged_loss_and_provenance_metrics_match_the_1_device_run(sharded, smoke_run):
  got = read_scalars(sharded / "run", METRICS + COUNTS + ("grad/split_error",))
  want = read_scalars(smoke_run.workdir, METRICS + COUNTS + ("grad/split_error",))
  for tag in METRICS + COUNTS:
    np.testing.assert_array_equal(got[tag][0], want[tag][0])
    assert_close(got[tag][1], want[tag][1])
  for tag in COUNTS:
    np.testing.assert_array_equal(got[tag][1], want[tag][1])
  assert max(got["grad/split_error"][1]) < 1e-5


@pytest.mark.parametrize(
    ("data", "model", "field", "reason"),
    [
        (1, 3, "mesh.model=3", "a divisor of model.vocab_size=32"),
        (-1, 3, "mesh.data=-1", "fits 8 devices (the other axis is 3)"),
        (4, 4, "'4x4'", "at most 8 devices"),
        (3, 1, "mesh.data=3", "a divisor of train.batch_size=128"),
    ],
)
def test_mesh_errors_say_which_size_conflicts_with_what(data, model, field, reason):
  """tests/train/test_config_validation.py checks which field each names; here, that the message gives the reason."""
  from configs import smoke  # noqa: PLC0415

  config = smoke.get_config()  # V=32, B=128
  config.mesh.data, config.mesh.model = data, model
  with pytest.raises(UsageError) as error:
    validate_config(config, num_devices=8)
  message = str(error.value)
  assert field in message and reason in message and "\n" not in message, message


def test_process_slices_tile_the_global_batch():
  batch = np.arange(12)
  np.testing.assert_array_equal(np.concatenate([mesh_lib.process_slice(batch, p, 3) for p in range(3)]), batch)
  np.testing.assert_array_equal(mesh_lib.process_slice(batch, 3, 4), [9, 10, 11])  # the last process: the last 3
  with pytest.raises(UsageError) as refusal:
    mesh_lib.process_slice(batch, 0, 5)
  assert str(refusal.value) == "train.batch_size=12 is not allowed: expected a multiple of the 5 processes"


def test_several_processes_need_whole_data_rows_each():
  mesh_lib.check_mesh_fits_processes(4, 2, num_devices=8, num_processes=2)
  mesh_lib.check_mesh_fits_processes(1, 8, num_devices=8, num_processes=1)
  with pytest.raises(UsageError, match=r"mesh='1x8' .* a multiple of the 2 processes"):
    mesh_lib.check_mesh_fits_processes(1, 8, num_devices=8, num_processes=2)
  with pytest.raises(UsageError, match=r"mesh='2x2' .* all 8 devices"):
    mesh_lib.check_mesh_fits_processes(2, 2, num_devices=8, num_processes=2)


def test_one_process_environment_starts_no_coordinator():
  assert mesh_lib.initialize_from_environment({}) is False
  assert mesh_lib.initialize_from_environment({"JAX_NUM_PROCESSES": "1", "SLURM_NTASKS": "1"}) is False
  with pytest.raises(UsageError, match="JAX_PROCESS_ID"):
    mesh_lib.initialize_from_environment({"JAX_NUM_PROCESSES": "2", "JAX_COORDINATOR_ADDRESS": "localhost:1"})
  with pytest.raises(UsageError, match=r"JAX_NUM_PROCESSES='two' is not allowed"):
    mesh_lib.initialize_from_environment({"JAX_NUM_PROCESSES": "two"})
  with pytest.raises(UsageError, match="needs JAX_COORDINATOR_ADDRESS"):
    mesh_lib.initialize_from_environment({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"})
