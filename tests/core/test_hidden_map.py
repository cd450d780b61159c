"""model.hidden = "linear": a (D, D) map W between the lookup and the projection, trained by the project's loop.

A 1-device smoke run with W resumes bit for bit; the 4x2 mesh run (tests/sharded_run.py) ends where it does.
"""

from __future__ import annotations

import shutil

import jax
import numpy as np
import pytest
from helpers import HIDDEN_STEPS, all_series, assert_close, hidden_smoke_config

from tied_embed.train import checkpoint
from tied_embed.train.trainer import train_and_evaluate


def _leaves(state) -> dict[str, np.ndarray]:
  return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(state)}


@pytest.fixture(scope="session")
def hidden_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("hidden")
  return workdir, train_and_evaluate(hidden_smoke_config(), workdir)


def test_a_hidden_map_run_trains_w_and_logs_it(hidden_run):
  workdir, summary = hidden_run
  leaves = _leaves(summary.state)
  kernel = leaves["['model']['hidden_map']['kernel'].value"]
  assert kernel.shape == (8, 8) and not np.allclose(kernel, np.eye(8))  # W moved away from the identity
  assert "['model']['embedder']['embedding'].value" in leaves  # still one tied table
  assert summary.param_count == 32 * 8 + 8 * 8  # V·D + D²
  series = all_series(workdir)
  for tag in ("grad/hidden_norm", "train/hidden_identity_distance", "train/hidden_antisymmetric_share"):
    assert sorted(series[tag]) == [10, 20], tag
  assert series["grad/split_error"][20] < 1e-5  # the chunked step's paths against nnx.grad of the plain loss
  assert 0 < series["train/hidden_identity_distance"][20] and 0 <= series["train/hidden_antisymmetric_share"][20] < 1


def test_a_hidden_map_run_resumes_bit_for_bit(hidden_run, tmp_path):
  workdir, straight = hidden_run
  shutil.copytree(workdir, tmp_path / "run")
  shutil.rmtree(tmp_path / "run" / "checkpoints" / str(HIDDEN_STEPS))  # so it resumes from step 10
  resumed = train_and_evaluate(hidden_smoke_config(), tmp_path / "run")
  got, want = _leaves(resumed.state), _leaves(straight.state)
  assert set(got) == set(want)
  for name in want:
    np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_the_checkpoint_of_a_hidden_map_run_restores_w(hidden_run):
  workdir, summary = hidden_run
  restored = checkpoint.restore(workdir)
  np.testing.assert_array_equal(restored.model.hidden_map.kernel[...],
                                _leaves(summary.state)["['model']['hidden_map']['kernel'].value"])


def test_the_4x2_hidden_map_run_ends_with_the_1_device_state(hidden_run, sharded_hidden):
  final, reference = sharded_hidden, _leaves(hidden_run[1].state)
  assert set(final.files) == set(reference)
  for name in reference:
    assert_close(final[name], reference[name])


def test_inspection_scores_through_w_and_reports_what_it_adds(hidden_run):
  from tied_embed.inspection.inspector import inspect_run  # noqa: PLC0415

  workdir, summary = hidden_run
  leaves = _leaves(summary.state)
  table = leaves["['model']['embedder']['embedding'].value"].astype(np.float64)
  kernel = leaves["['model']['hidden_map']['kernel'].value"].astype(np.float64)
  report = inspect_run(workdir, tokens=[0, 5], pictures=False)
  scores = table @ kernel @ table.T  # S = E·W·Eᵀ, independently of the package
  for entry in report["tokens"]:
    np.testing.assert_allclose(entry["own_score"], scores[entry["id"], entry["id"]], rtol=1e-5, atol=1e-6)
  assert report["parameters"]["this_model"] == 32 * 8 + 8 * 8
  assert "E·W·Eᵀ" in report["scores"]
  hidden = report["asymmetry"]["hidden_map"]
  np.testing.assert_allclose(hidden["identity_distance"], np.linalg.norm(kernel - np.eye(8)), rtol=1e-6)
  share = np.linalg.norm((kernel - kernel.T) / 2) / np.linalg.norm(kernel)
  np.testing.assert_allclose(hidden["kernel_antisymmetric_share"], share, rtol=1e-6)
  assert 0 < hidden["learned_antisymmetric_share"] < 1  # E·W·Eᵀ is not symmetric: W has an antisymmetric part
