"""A context model's train state laid out on a 4x2 mesh (an abstract one: no devices needed), the fast counterpart of
tests/train/test_context_mesh.py's slow 8-device run: one (V, D) table when tied (two untied), split along V over
`model` with its Adam moments, the output bias split as V is, and every Param of the mixer replicated."""

from __future__ import annotations

import jax
import pytest
from jax.sharding import AbstractMesh, PartitionSpec

from configs import context_transformer
from tied_embed.train import mesh as mesh_lib

VOCAB, D_MODEL = 64, 8


def _layout(context: str, tied: bool, bias: bool) -> dict[str, tuple[tuple[int, ...], PartitionSpec]]:
  config = context_transformer.get_config()
  config.model.update(vocab_size=VOCAB, d_model=D_MODEL, tied=tied, context=context, heads=2, output_bias=bias)
  config.data.context_length = 4
  _, state = mesh_lib.abstract_state(mesh_lib.state_builder(config), AbstractMesh((4, 2), ("data", "model")))
  return {jax.tree_util.keystr(path): (leaf.shape, leaf.sharding.spec)
          for path, leaf in jax.tree_util.tree_leaves_with_path(state)}


@pytest.mark.parametrize("context", ["mlp", "transformer"])
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("bias", [False, True])
def test_a_context_models_tables_split_along_v_and_its_mixer_replicated(context, tied, bias):
  layout = _layout(context, tied, bias)
  model = {path: value for path, value in layout.items() if path.startswith("['model']")}
  tables = [path for path, (shape, _) in model.items() if shape == (VOCAB, D_MODEL)]
  assert len(tables) == (1 if tied else 2), tables
  split = PartitionSpec("model", None)
  for path in tables:
    assert model[path][1] == split, path
    name = path[len("['model']"):]
    moments = [p for p in layout if p.startswith("['optimizer']") and p.endswith(name)]
    assert len(moments) == 2 and all(layout[p][1] == split for p in moments), moments  # Adam's mu and nu
  biases = [path for path, (shape, _) in model.items() if shape == (VOCAB,)]
  assert len(biases) == int(bias)
  for path in biases:
    assert model[path][1] == PartitionSpec("model"), path
  mixer = [path for path in model if path not in tables + biases]
  assert mixer, "a context model has Params beside its tables"
  for path in mixer:
    assert model[path][1] == PartitionSpec(), path
