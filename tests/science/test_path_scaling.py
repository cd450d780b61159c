"""Path gradient scaling: the update is a·g_lookup + b·g_projection, clipping sees that sum, 1/1 is the plain step."""

from __future__ import annotations

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import all_series, hand_path_gradients, smoke_with

from tied_embed.core import optim
from tied_embed.core import paths as plain_paths
from tied_embed.core import step as step_lib
from tied_embed.core.model import build_model
from tied_embed.train import run_step
from tied_embed.train.config import validate as validate_config
from tied_embed.util import UsageError

IDS = np.array([0, 3, 3, 7, 31, 2], np.int32)
NEXT_IDS = np.array([1, 4, 4, 0, 5, 2], np.int32)


def _names(tied: bool) -> tuple[str, str]:
  return ("embedding", "embedding") if tied else ("input_embedding", "output_embedding")


def _sgd_setup(tied: bool, grad_clip_norm: float = 0.0):
  config = smoke_with("model.tied", tied)
  config.train.update(optimizer="sgd", learning_rate=0.1, warmup_steps=0, grad_clip_norm=grad_clip_norm,
                      weight_decay=0.0)
  graphdef, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  before = [np.asarray(state["model"][name][...], np.float64) for name in _names(tied)]
  return graphdef, state, before


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize(("a", "b"), [(2.0, 1.0), (0.5, 3.0), (0.0, 1.0)])
def test_one_sgd_step_applies_the_weighted_path_gradients(tied, a, b):
  graphdef, state, before = _sgd_setup(tied)
  lookup, projection = hand_path_gradients(*before, IDS, NEXT_IDS)

  step = run_step.make_run_step(graphdef, chunk_size=0, lookup_grad_scale=a, projection_grad_scale=b)
  state, _ = step(state, jnp.asarray(IDS), jnp.asarray(NEXT_IDS))

  if tied:
    want = before[0] - 0.1 * (a * lookup + b * projection)
    np.testing.assert_allclose(state["model"]["embedding"][...], want, atol=1e-6)
  else:
    np.testing.assert_allclose(state["model"]["input_embedding"][...], before[0] - 0.1 * a * lookup, atol=1e-6)
    np.testing.assert_allclose(state["model"]["output_embedding"][...], before[1] - 0.1 * b * projection, atol=1e-6)
  # The provenance totals keep recording the unweighted paths.
  np.testing.assert_allclose(state["lookup_total"][...], np.linalg.norm(lookup, axis=1), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(state["projection_total"][...], np.linalg.norm(projection, axis=1), rtol=1e-5, atol=1e-7)


def test_clipping_sees_the_weighted_sum():
  clip, a, b = 0.01, 4.0, 0.5
  graphdef, state, before = _sgd_setup(tied=True, grad_clip_norm=clip)
  lookup, projection = hand_path_gradients(*before, IDS, NEXT_IDS)
  weighted = a * lookup + b * projection
  assert np.linalg.norm(weighted) > 10 * clip  # so the clip is active

  step = run_step.make_run_step(graphdef, chunk_size=0, lookup_grad_scale=a, projection_grad_scale=b)
  state, metrics = step(state, jnp.asarray(IDS), jnp.asarray(NEXT_IDS), with_stats=True)

  want = before[0] - 0.1 * weighted * clip / np.linalg.norm(weighted)
  np.testing.assert_allclose(state["model"]["embedding"][...], want, atol=1e-7)
  np.testing.assert_allclose(metrics["applied_norm"], np.linalg.norm(weighted), rtol=1e-5)


@pytest.mark.parametrize("tied", [True, False])
def test_log_step_reports_the_unweighted_paths_and_the_applied_norm(tied):
  a, b = 3.0, 0.25
  graphdef, state, before = _sgd_setup(tied)
  lookup, projection = hand_path_gradients(*before, IDS, NEXT_IDS)

  step = run_step.make_run_step(graphdef, chunk_size=0, lookup_grad_scale=a, projection_grad_scale=b)
  _, metrics = step(state, jnp.asarray(IDS), jnp.asarray(NEXT_IDS), with_stats=True)

  np.testing.assert_allclose(metrics["lookup_norm"], np.linalg.norm(lookup), rtol=1e-5)
  np.testing.assert_allclose(metrics["projection_norm"], np.linalg.norm(projection), rtol=1e-5)
  np.testing.assert_allclose(metrics["total_norm"], np.linalg.norm(lookup + projection), rtol=1e-5)
  if tied:
    applied = np.linalg.norm(a * lookup + b * projection)
  else:  # the global norm over both tables
    applied = np.hypot(np.linalg.norm(a * lookup), np.linalg.norm(b * projection))
  np.testing.assert_allclose(metrics["applied_norm"], applied, rtol=1e-5)


def test_a_run_logs_the_applied_norm_at_each_log_step(smoke_run):
  series = all_series(smoke_run.workdir)
  assert sorted(series["grad/applied_norm"]) == sorted(series["grad/total_norm"]) == [10, 20, 30, 40, 50, 60]
  for step, total in series["grad/total_norm"].items():  # at a = b = 1 the tied update is the plain sum
    assert series["grad/applied_norm"][step] == pytest.approx(total, rel=1e-5)


_ASSEMBLY = plain_paths.param_gradients


def _unscaled_param_gradients(model, paths, *scales):
  """The update as it is with no scaling: each model's own assembly of its path gradients."""
  del scales
  return _ASSEMBLY(model, paths)


@pytest.mark.parametrize("tied", [True, False])
def test_unit_scales_are_bitwise_the_unscaled_step(tied, monkeypatch):
  config = smoke_with("model.tied", tied)  # adamw with clipping, as the shipped configs train
  graphdef, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  reference = jax.tree.map(jnp.copy, state)
  step = run_step.make_run_step(graphdef, chunk_size=0, lookup_grad_scale=1.0, projection_grad_scale=1.0)
  with monkeypatch.context() as patch:  # the same step with the identity hard-wired; it traces at its first call
    patch.setattr(plain_paths, "param_gradients", _unscaled_param_gradients)
    unscaled = run_step.make_run_step(graphdef, chunk_size=0)
    rng = np.random.default_rng(0)
    batches = [tuple(jnp.asarray(rng.integers(0, 32, size=64, dtype=np.int32)) for _ in range(2)) for _ in range(6)]
    for i, (ids, next_ids) in enumerate(batches):
      reference, _ = unscaled(reference, ids, next_ids, with_stats=i % 3 == 0)
  for i, (ids, next_ids) in enumerate(batches):
    state, _ = step(state, ids, next_ids, with_stats=i % 3 == 0)
  for got, want in zip(jax.tree.leaves(state), jax.tree.leaves(reference), strict=True):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("field", ["train.lookup_grad_scale", "train.projection_grad_scale"])
@pytest.mark.parametrize("value", [-0.5, float("nan"), float("inf"), "2"])
def test_bad_scales_are_refused_in_one_line(field, value):
  with pytest.raises(UsageError) as raised:
    validate_config(smoke_with(field, value), num_devices=1, memory_bytes=2**50)
  message = str(raised.value)
  assert "\n" not in message and message.startswith(f"{field}={value!r} is not allowed: expected a finite number >= 0")


@pytest.mark.parametrize("value", [0.0, 1.0, 4])
def test_finite_non_negative_scales_are_accepted(value):
  validate_config(smoke_with("train.lookup_grad_scale", value), num_devices=1, memory_bytes=2**50)


def test_the_trainer_applies_the_configured_scales(tmp_path):
  """A run with lookup scale 3 and projection scale 0 logs an applied norm of exactly 3 × the lookup path's."""
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  config = smoke_with("train.lookup_grad_scale", 3.0)
  config.train.projection_grad_scale = 0.0
  config.train.num_steps = 10
  train_and_evaluate(config, tmp_path / "run")
  series = all_series(tmp_path / "run")
  np.testing.assert_allclose(series["grad/applied_norm"][10], 3.0 * series["grad/lookup_norm"][10], rtol=1e-5)


def test_the_sweep_writes_under_runs_and_touches_docs_only_when_asked(tmp_path, monkeypatch):
  """Its default stem is runs/path_scaling/path_scaling; --write-docs alone names the tracked docs/path_scaling."""
  from science import path_scaling  # noqa: PLC0415

  repo = pathlib.Path(__file__).resolve().parents[2]
  assert path_scaling.parse_args([]).out == pathlib.Path("runs/path_scaling/path_scaling")
  assert path_scaling.parse_args(["--out", "elsewhere/sweep"]).out == pathlib.Path("elsewhere/sweep")
  assert path_scaling.parse_args(["--write-docs"]).out == repo / "docs" / "path_scaling"
  with pytest.raises(SystemExit) as refused:
    path_scaling.parse_args(["--write-docs", "--out", "elsewhere/sweep"])
  assert refused.value.code == 2

  # Redraw the report from the tracked sweep's JSON with the default flags: the files land under runs/, docs/ stays.
  docs_before = {path.name: path.read_bytes() for path in (repo / "docs").glob("path_scaling.*")}
  stem = tmp_path / "runs" / "path_scaling" / "path_scaling"
  stem.parent.mkdir(parents=True)
  stem.with_suffix(".json").write_bytes(docs_before["path_scaling.json"])
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(sys, "argv", ["path_scaling.py", "--report_only"])
  path_scaling.main()
  assert stem.with_suffix(".md").read_text().startswith("# Path gradient scaling")
  assert stem.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
  assert {path.name: path.read_bytes() for path in (repo / "docs").glob("path_scaling.*")} == docs_before


def test_text_pairs_split_by_position():
  from science import path_scaling  # noqa: PLC0415

  splits = path_scaling.text_pairs(bytes(range(20)))
  np.testing.assert_array_equal(splits["train"][0], np.arange(17))
  np.testing.assert_array_equal(splits["validation"][1], [19])


def test_the_docs_final_gap_spread_is_the_seeds_sample_standard_deviation():
  import json  # noqa: PLC0415

  docs = pathlib.Path(__file__).resolve().parents[2] / "docs"
  results = json.loads((docs / "path_scaling.json").read_text())
  page = (docs / "path_scaling.md").read_text()
  checked = 0
  for task, entry in results["tasks"].items():
    for optimizer, by_name in entry["runs"].items():
      for name, runs in by_name.items():
        gaps = np.array([run["final_gap"] for run in runs], np.float64)
        # 3 seeds: the sample standard deviation (ddof = 1), √(3/2) times the population one
        cell = f"| {task} | {name} | {gaps.mean():.4f} ± {gaps.std(ddof=1):.4f} |"
        assert cell in page, (task, optimizer, name, cell)
        checked += 1
  assert checked >= 20
