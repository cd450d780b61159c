"""What `checkpoint.restore` returns, and how a checkpoint that did not read back is named in one line."""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import re

import ml_collections
import numpy as np
from flax import nnx

from tied_embed.core.model import Model
from tied_embed.core.step import TrainState
from tied_embed.util import first_line

# TensorStore appends what it was opening to its errors (` [tensorstore_spec='{...}']`, ` [source locations='...']`).
_ANNOTATIONS = re.compile(r" \[(?:tensorstore_spec|source locations)\b")


def reason(error: BaseException, limit: int = 400) -> str:
  """Why a checkpoint did not read back: 'TypeName: message' on one line, cut to `limit` characters.

  Orbax wraps a failed TensorStore read in an error dozens of lines long; the error it wraps says what is wrong,
  so that one is named instead, without TensorStore's annotations."""
  while error.__cause__ is not None and "See full TensorStore details" in str(error):
    error = error.__cause__
  text = _ANNOTATIONS.split(first_line(error, limit=1 << 20))[0]
  return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclasses.dataclass
class Restored:
  """A checkpoint `restore` read: its step, the config it was trained with, its manifest and its train state."""

  step: int
  config: ml_collections.ConfigDict
  manifest: dict
  state: nnx.State | None = None  # in the layout asked for; None when read with arrays=False
  graphdef: nnx.GraphDef | None = None  # the saved config's, when that gave the layout (no `target`)
  directory: pathlib.Path | None = None  # WORKDIR/checkpoints
  damaged: list[tuple[int, Exception]] = dataclasses.field(default_factory=list)  # newer ones that failed, newest first

  @functools.cached_property
  def train_state(self) -> TrainState:
    return nnx.merge(self.graphdef, self.state)

  @property
  def model(self) -> Model:
    return self.train_state.model

  @functools.cached_property
  def provenance(self) -> dict[str, np.ndarray]:
    """'lookup_total', 'projection_total': (V,) float32."""
    return {name: np.asarray(self.state[name][...]) for name in ("lookup_total", "projection_total")}

  @functools.cached_property
  def path_directions(self) -> dict[str, np.ndarray]:
    """'rows': (K,) int32 tracked rows; 'lookup', 'projection': (K, D) float32, each path's summed gradient rows."""
    names = {"rows": "tracked_rows", "lookup": "tracked_lookup", "projection": "tracked_projection"}
    return {key: np.asarray(self.state[name][...]) for key, name in names.items()}

  @property
  def dataset(self) -> str:
    """The identity of the data it trained on, as its manifest records it ('' if none was given)."""
    return str(self.manifest.get("dataset", ""))

  @property
  def skipped(self) -> list[str]:
    """Why each newer checkpoint was not read, one line each."""
    return [unreadable(self.directory, step, error) for step, error in self.damaged]


def unreadable(directory: pathlib.Path, step: int, error: BaseException) -> str:
  """'checkpoint 60 at WORKDIR/checkpoints/60 is damaged: <reason>', `directory` being WORKDIR/checkpoints."""
  return f"checkpoint {step} at {directory / str(step)} is damaged: {reason(error)}"
