"""Shared fixtures: one smoke training run (configs/smoke.py) per test session, reused by every test that needs one."""

from __future__ import annotations

import dataclasses
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import ml_collections  # noqa: E402
import pytest  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class SmokeRun:
  workdir: pathlib.Path
  config: ml_collections.ConfigDict
  summary: object  # tied_embed.trainer.RunSummary (its .state is the in-memory final state)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
  """configs/smoke.py trained in-process, once, into a session temporary workdir."""
  from configs import smoke  # noqa: PLC0415
  from tied_embed.trainer import train_and_evaluate  # noqa: PLC0415

  config = smoke.get_config()
  workdir = tmp_path_factory.mktemp("smoke")
  summary = train_and_evaluate(config, workdir)
  return SmokeRun(workdir=workdir, config=config, summary=summary)


@pytest.fixture(scope="session")
def smoke_workdir(smoke_run: SmokeRun) -> pathlib.Path:
  """The workdir of the finished smoke run: TensorBoard events in it, checkpoints in its checkpoints/."""
  return smoke_run.workdir
