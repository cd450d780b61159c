"""The smoke run on a 4x2 mesh of 8 simulated CPU devices, and what it left, for tests/train/test_sharding.py.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/sharded_run.py OUT

Run as a subprocess (the device count is fixed when JAX starts). Writes into OUT:
  run/               the 4x2 smoke run's workdir (events, checkpoints 40 and 60)
  final.npz          its final in-memory state, one array per leaf (keys: jax.tree_util.keystr paths)
  restored_<DxM>.npz checkpoint 60 restored on other meshes (2x4, 8x1) through checkpoint.restore
  resumed_2x4.npz    the run resumed from checkpoint 40 on a 2x4 mesh and trained to step 60
  layout.json        per leaf: the spec of the final array, of the compiled step's output, and each device's shard;
                     per jitted function (step, diagnostics, eval): the collectives in its compiled HLO
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from configs import smoke  # noqa: E402
from tied_embed.train import checkpoint, evaluation, run_step  # noqa: E402
from tied_embed.train import mesh as mesh_lib  # noqa: E402
from tied_embed.train.trainer import train_and_evaluate  # noqa: E402

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
# `%x = f32[16,8]{1,0} all-reduce(` or `%x = (f32[16,8]{1,0}, f32[]) all-reduce-start(`
_COLLECTIVE_LINE = re.compile(r"= (\(.*?\)|\S+) (" + "|".join(COLLECTIVES) + r")(?:-start)?\(")
PROBE_BATCH = 96  # 24 rows per data shard: no collective shape can be mistaken for V=32 or a 16-row table shard


def config_on(data: int, model: int):
  config = smoke.get_config()
  config.mesh.data, config.mesh.model = data, model
  return config


def hidden_config_on(data: int, model: int):
  """tests/core/test_hidden_map.py's config (`helpers.hidden_smoke_config`: a hidden map W with its penalty) on a
  data x model mesh."""
  from helpers import hidden_smoke_config  # noqa: PLC0415 (tests/ is this script's sys.path[0])

  config = hidden_smoke_config()
  config.mesh.data, config.mesh.model = data, model
  return config


def leaves(state: nnx.State) -> dict[str, np.ndarray]:
  return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(state)}


def spec(sharding, ndim: int) -> list[str | None]:
  """A NamedSharding's PartitionSpec as one entry per dimension (None = not split)."""
  entries = list(sharding.spec) + [None] * (ndim - len(sharding.spec))
  return [entry if entry is None else str(entry) for entry in entries]


def shards(array: jax.Array) -> list[dict]:
  """Where each device's piece of `array` sits: device id and the [start, stop) of each dimension."""
  return [
      {"device": shard.device.id,
       "index": [list(dim.indices(size)[:2]) for dim, size in zip(shard.index, array.shape, strict=True)]}
      for shard in array.addressable_shards
  ]


def collectives(compiled) -> list[dict]:
  """Every collective in a compiled program: its op and the shapes it produces."""
  found = []
  for match in _COLLECTIVE_LINE.finditer(compiled.as_text()):
    shapes = [[int(d) for d in dims.split(",") if d] for dims in re.findall(r"[a-z]+\d*\[([\d,]*)\]", match[1])]
    found.append({"op": match[2], "shapes": shapes})
  return found


def compiled_programs(config) -> dict:
  """The step (plain and at a log step) and eval of `config`, compiled for a PROBE_BATCH batch on its mesh."""
  mesh = mesh_lib.make_mesh(config.mesh)
  graphdef, target = mesh_lib.abstract_state(mesh_lib.state_builder(config), mesh)
  shardings = jax.tree.map(lambda leaf: leaf.sharding, target)
  batch = [jax.ShapeDtypeStruct((PROBE_BATCH,), np.int32, sharding=mesh_lib.batch_sharding(mesh))] * 2
  chunk_size = int(config.loss.chunk_size)
  train_step = run_step.make_run_step(graphdef, chunk_size, shardings)
  return {
      "step": train_step.lower(target, *batch).compile(),
      "log step": train_step.lower(target, *batch, with_stats=True).compile(),
      "eval": evaluation.make_eval_losses(graphdef, chunk_size).lower(target, *batch).compile(),
  }


def main(out: pathlib.Path) -> None:
  assert jax.device_count() == 8, "run with XLA_FLAGS=--xla_force_host_platform_device_count=8"
  config = config_on(4, 2)
  summary = train_and_evaluate(config, out / "run")
  np.savez(out / "final.npz", **leaves(summary.state))

  programs = compiled_programs(config)
  step_out = programs["step"].output_shardings[0]  # (state, metrics, the gradient buffer)
  layout = {
      "leaves": {
          jax.tree_util.keystr(path): {
              "spec": spec(leaf.sharding, leaf.ndim),
              "compiled_spec": spec(compiled, leaf.ndim),
              "shards": shards(leaf),
          }
          for (path, leaf), compiled in zip(
              jax.tree_util.tree_leaves_with_path(summary.state), jax.tree.leaves(step_out), strict=True
          )
      },
      "collectives": {name: collectives(program) for name, program in programs.items()},
  }
  (out / "layout.json").write_text(json.dumps(layout))

  for data, model in ((2, 4), (8, 1)):
    restored = checkpoint.restore(out / "run", mesh=mesh_lib.make_mesh(config_on(data, model).mesh))
    table = restored.model.embedding[...]
    np.savez(out / f"restored_{data}x{model}.npz", embedding=np.asarray(table), shards=json.dumps(shards(table)),
             **restored.provenance)

  hidden = hidden_config_on(4, 2)
  np.savez(out / "final_hidden.npz", **leaves(train_and_evaluate(hidden, out / "hidden").state))
  for name, program in compiled_programs(hidden).items():
    layout["collectives"][f"hidden {name}"] = collectives(program)
  (out / "layout.json").write_text(json.dumps(layout))

  resumed = out / "resumed"
  shutil.copytree(out / "run", resumed)
  shutil.rmtree(resumed / "checkpoints" / "60")
  np.savez(out / "resumed_2x4.npz", **leaves(train_and_evaluate(config_on(2, 4), resumed).state))


if __name__ == "__main__":
  main(pathlib.Path(sys.argv[1]))
