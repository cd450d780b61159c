"""A context model on the 4x2 mesh of 8 simulated CPU devices ends where the 1-device run does, with one table.

Both runs train in one subprocess (JAX fixes the device count when it starts); the config is
tests/train/test_context_run.py's transformer on windows of a by-document byte corpus."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT
from helpers import subprocess_env

SCRIPT = """
import json, pathlib, sys
sys.path[:0] = ["tests", "tests/train", "."]
import jax, numpy as np
from flax import nnx
from test_context_run import _config, _corpus
from tied_embed.train.trainer import train_and_evaluate
out = pathlib.Path(sys.argv[1])
corpus = _corpus(out / "corpus")
found = {}
for data, model in ((1, 1), (4, 2)):
  config = _config(corpus)
  config.mesh.data, config.mesh.model = data, model
  summary = train_and_evaluate(config, out / f"run_{data}x{model}")
  params = summary.state["model"]
  tables = [leaf for leaf in jax.tree.leaves(params) if leaf.shape == (256, 8)]
  found[f"{data}x{model}"] = {"eval_loss": summary.eval_loss, "tables": len(tables),
                              "devices": len(tables[0].sharding.device_set),
                              "table": np.asarray(tables[0]).tolist()}
(out / "found.json").write_text(json.dumps(found))
"""


@pytest.mark.slow
def test_a_context_run_on_a_4x2_mesh_ends_where_the_1_device_run_does(tmp_path):
  env = subprocess_env(XLA_FLAGS="--xla_force_host_platform_device_count=8")
  done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=1500)
  assert done.returncode == 0, done.stderr[-3000:]
  found = json.loads((tmp_path / "found.json").read_text())
  one, mesh = found["1x1"], found["4x2"]
  assert one["tables"] == mesh["tables"] == 1  # one table on the mesh too
  assert mesh["devices"] == 8 and one["devices"] == 1
  assert abs(one["eval_loss"] - mesh["eval_loss"]) < 1e-4
  np.testing.assert_allclose(mesh["table"], one["table"], rtol=1e-4, atol=1e-5)
