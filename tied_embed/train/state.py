"""The run's state from its config: the model, its optimizer and the run's bookkeeping (`RunState`), built as
abstract arrays laid out on the mesh (for compiling and restoring into) or as arrays created where they live."""

from __future__ import annotations

from collections.abc import Callable

import jax
import ml_collections
from flax import nnx
from jax.sharding import Mesh

from tied_embed.core import optim
from tied_embed.core.model import build_model
from tied_embed.train.mesh import LOGICAL_AXIS_RULES
from tied_embed.train.run_step import RunState


def state_builder(config: ml_collections.ConfigDict) -> Callable[[], RunState]:
  """→ build(): a new RunState (model, optimizer, bookkeeping) of `config`, for `abstract_state` and `fresh_state`."""
  tx = optim.make_optimizer(config.train)
  return lambda: RunState(build_model(config), tx)


def abstract_state(build: Callable[[], RunState], mesh: Mesh) -> tuple[nnx.GraphDef, nnx.State]:
  """The graphdef and the shape/dtype/sharding-only state of the RunState `build()` makes, on `mesh`: each leaf's
  sharding is Flax's of its Variable's `out_sharding` logical axis names (the optimizer's moments inherit the Param's)
  under LOGICAL_AXIS_RULES; anything unannotated is replicated."""
  graphdef, shapes = nnx.split(nnx.eval_shape(build))
  with nnx.logical_axis_rules(tuple(LOGICAL_AXIS_RULES.items())):
    shardings = nnx.get_named_sharding(shapes, mesh)
  return graphdef, jax.tree.map(lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding),
                                shapes, shardings)


def fresh_state(build: Callable[[], RunState], target: nnx.State) -> nnx.State:
  """A new RunState's state, created directly in the shardings of `target` (`abstract_state`'s)."""
  return jax.jit(lambda: nnx.state(build()), out_shardings=jax.tree.map(lambda leaf: leaf.sharding, target))()
