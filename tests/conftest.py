"""Shared fixtures: one smoke training run (configs/smoke.py) per test session, reused by every test that needs one;
one compilation cache per session, shared by this process and every subprocess the tests start."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from helpers import (  # noqa: E402
    compilation_cache_env,
    compilation_cache_options,
    subprocess_env,
    with_suite_xla_flags,
)

os.environ["XLA_FLAGS"] = with_suite_xla_flags(os.environ.get("XLA_FLAGS", ""))  # read when JAX starts its backend

ROOT = pathlib.Path(__file__).resolve().parents[1]

if os.environ.get("MUTANT_UNDER_TEST") == "stats":  # `make mutate`'s first step, which maps tests to functions:
  # mutmut's code counts each call to a function through settings it reads from the current directory, which a
  # train.py the tests start elsewhere lacks; so this process keeps the flag to itself and its children run the plain
  # code (their calls would not reach the map anyway). Each mutant's own run still reaches the children.
  from mutmut.mutation import trampoline  # noqa: E402

  trampoline.set_mutant_under_test("stats")
  del os.environ["MUTANT_UNDER_TEST"]


# The files holding the suite's longest tests (runs in subprocesses, the 8-device runs, the quick sweep: 15-40 s
# each), longest first. They run first: pytest-xdist's worksteal gives each worker half of the collection in order and
# an idle worker takes the end of the other's queue, so a long test collected last can leave one worker running it
# alone at the end (measured: 33 s of `make test`'s 8 minutes).
RUN_FIRST = (
    "tests/science/test_when_to_tie.py",
    "tests/train/test_multihost_preemption.py",
    "tests/train/test_sharding.py",
    "tests/core/test_hidden_map.py",
    "tests/train/test_resume_after_faults.py",
    "tests/docs/test_tutorial.py",
    "tests/train/test_context_run.py",
    "tests/train/test_cli.py",
    "tests/train/test_events.py",
    "tests/inspection/test_inspect.py",
    "tests/inspection/test_context_report.py",
)


def _mutant_run_durations() -> dict[str, float] | None:
  """Each test's seconds as `make mutate` measured them (mutants/mutmut-stats.json, in the current directory), while
  it runs one mutant's tests; None otherwise. Those stop at the first failure, so the quickest run first."""
  if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
    return None
  try:
    return json.loads(pathlib.Path("mutmut-stats.json").read_text())["duration_by_test"]
  except (OSError, ValueError, KeyError):
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
  """RUN_FIRST's files first, in that order; the rest, and the tests within a file, in collection order. For one
  mutant of `make mutate`, the quickest tests first instead."""
  if (durations := _mutant_run_durations()) is not None:
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))
    return
  rank = {name: index for index, name in enumerate(RUN_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.relative_to(ROOT).as_posix(), len(RUN_FIRST)))


def shared_tmp_path(factory: pytest.TempPathFactory) -> pathlib.Path:
  """The session's temporary tree that every pytest-xdist worker of one `make test` shares (a worker's own tree is a
  folder in it); without xdist, the session's tree."""
  return factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else factory.getbasetemp()


def pytest_sessionstart(session: pytest.Session) -> None:
  """JAX's persistent compilation cache in a fresh directory of this session's temporary tree (so every session,
  a fresh clone's included, starts it empty; xdist's workers share it), before anything compiles: in os.environ for
  the subprocesses, through jax.config for this process (JAX read the environment when it was imported)."""
  import importlib.util  # noqa: PLC0415

  if importlib.util.find_spec("filelock") is None:  # with a size limit set, JAX reads no entry without it
    raise pytest.UsageError("the suite's compilation cache needs the filelock package: "
                            "pip install -r requirements-test.txt")
  factory = getattr(session.config, "_tmp_path_factory", None)  # pytest's tmp_path_factory, made at configure
  directory = shared_tmp_path(factory) / "jax_compilation_cache" if factory else pathlib.Path(tempfile.mkdtemp())
  directory.mkdir(exist_ok=True)
  os.environ.update(compilation_cache_env(directory))
  import jax  # noqa: PLC0415

  for option, value in compilation_cache_options(directory).items():
    jax.config.update(option, value)


@dataclasses.dataclass
class SmokeRun:
  workdir: pathlib.Path
  config: ml_collections.ConfigDict
  summary: object  # tied_embed.train.trainer.RunSummary (its .state is the in-memory final state)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
  """configs/smoke.py trained in-process, once, into a session temporary workdir."""
  from configs import smoke  # noqa: PLC0415
  from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415

  config = smoke.get_config()
  workdir = tmp_path_factory.mktemp("smoke")
  summary = train_and_evaluate(config, workdir)
  return SmokeRun(workdir=workdir, config=config, summary=summary)


@pytest.fixture(scope="session")
def smoke_workdir(smoke_run: SmokeRun) -> pathlib.Path:
  """The workdir of the finished smoke run: TensorBoard events in it, checkpoints in its checkpoints/."""
  return smoke_run.workdir


@dataclasses.dataclass
class ConsoleRun:
  first: subprocess.CompletedProcess  # train.py on a fresh workdir
  rerun: subprocess.CompletedProcess  # the same command again, on the finished run


@pytest.fixture(scope="session")
def train_py_smoke(tmp_path_factory) -> ConsoleRun:
  """`train.py --config configs/smoke.py --workdir runs/smoke --config.train.num_steps=20` run as a user runs it (a
  subprocess, from a temporary current directory), then rerun: the console tests/train/test_cli.py and
  tests/docs/test_quoted.py check. Run once per `make test`, as `sharded` is: the first xdist worker that needs it
  runs it, the others wait on the lock and read what it printed."""
  from filelock import FileLock  # noqa: PLC0415

  out = shared_tmp_path(tmp_path_factory) / "train_py_smoke"
  with FileLock(f"{out}.lock"):
    if not (out / "finished").exists():
      shutil.rmtree(out, ignore_errors=True)
      out.mkdir()
      args = [sys.executable, str(ROOT / "train.py"), "--config", str(ROOT / "configs" / "smoke.py"), "--workdir",
              "runs/smoke", "--config.train.num_steps=20"]
      env = {**os.environ, "PYTHONPATH": str(ROOT)}
      for name in ("first", "rerun"):
        result = subprocess.run(args, cwd=out, capture_output=True, text=True, timeout=300, env=env)
        (out / f"{name}.json").write_text(json.dumps([result.returncode, result.stdout, result.stderr]))
      (out / "finished").touch()
  runs = {name: subprocess.CompletedProcess(args=[], returncode=code, stdout=stdout, stderr=stderr)
          for name in ("first", "rerun") for code, stdout, stderr in [json.loads((out / f"{name}.json").read_text())]}
  return ConsoleRun(first=runs["first"], rerun=runs["rerun"])


@pytest.fixture(scope="session")
def sharded(tmp_path_factory):
  """OUT of tests/sharded_run.py: the smoke run on a 4x2 mesh of 8 CPU devices and its restores. Run once per
  `make test`: the first xdist worker that needs it runs it while the others wait on the lock, then read its files."""
  from filelock import FileLock  # noqa: PLC0415

  out = shared_tmp_path(tmp_path_factory) / "sharded"
  with FileLock(f"{out}.lock"):
    if not (out / "finished").exists():
      shutil.rmtree(out, ignore_errors=True)  # what a failed run left: the rerun starts fresh, it does not resume
      out.mkdir()
      result = subprocess.run(
          [sys.executable, "tests/sharded_run.py", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
          env=subprocess_env(XLA_FLAGS="--xla_force_host_platform_device_count=8"),
      )
      assert result.returncode == 0, result.stderr[-3000:]
      (out / "finished").touch()
  return out


@pytest.fixture(scope="session")
def sharded_hidden(sharded):
  """The final state of tests/core/test_hidden_map.py's config trained on the 4x2 mesh, by name."""
  return np.load(sharded / "final_hidden.npz")
