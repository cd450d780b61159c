"""The jitted evaluation through the model itself (bfloat16, and pairs scored by their distinct inputs: through its
`score_operands`), the held-out splits it scores, the eval/* scalars, and selection and early stopping on the
selection split."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from tied_embed.core import loss as loss_lib
from tied_embed.data import frequency, windows
from tied_embed.fast import chunked_loss, precision
from tied_embed.train import mesh as mesh_lib

if TYPE_CHECKING:
  from tied_embed.data.bigram import BigramData


def _window_losses(graphdef: nnx.GraphDef, chunk_size: int, compute_dtype: str, state: nnx.State, ids: jax.Array,
                   next_ids: jax.Array) -> jax.Array:
  """Windows ids, next_ids (E, L) → each position's loss (E, L) float32, `chunk_size` (0: all) windows at a time."""
  model = nnx.merge(graphdef, state).model

  def one(window: tuple[jax.Array, jax.Array]) -> jax.Array:
    tokens, targets = window
    if compute_dtype == "float32":
      return loss_lib.per_token_losses(model, tokens[None], targets[None])[0]
    # The model's own score operands (H, B), logits = H · Bᵀ, so a model that adds to the scores is scored with it.
    hidden, table = model.score_operands(model.hidden(model.embed(tokens[None]))[0], model.tables()[1])

    def position(row: jax.Array, target: jax.Array) -> jax.Array:  # (D',), () → ()
      return chunked_loss.full_cross_entropy(row[None], table, target[None], compute_dtype)

    return jax.vmap(position)(hidden, targets)

  if chunk_size <= 0:
    return jax.vmap(one)((ids, next_ids))
  return jax.lax.map(one, (ids, next_ids), batch_size=chunk_size)


def _operands(model, ids: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(H (U, D'), B (V, D')), logits = H · Bᵀ, the model's own score operands, each id (U,) scored alone as a
  one-token window (a context model sees no other token)."""
  hidden = jax.vmap(lambda token: model.hidden(model.embed(token[None]))[0])(ids)
  return model.score_operands(hidden, model.tables()[1])


def _input_logsumexps(graphdef: nnx.GraphDef, chunk_size: int, compute_dtype: str, state: nnx.State,
                      inputs: jax.Array) -> jax.Array:
  """(U,) input ids → (U,) float32: each one's logsumexp over its V scores, `chunk_size` (0: all) inputs at a time."""
  model = nnx.merge(graphdef, state).model

  def one(token: jax.Array) -> jax.Array:
    hidden, table = _operands(model, token[None])
    return jax.nn.logsumexp(precision.dot(hidden, table.T, precision.as_dtype(compute_dtype)), axis=-1)[0]

  return jax.vmap(one)(inputs) if chunk_size <= 0 else jax.lax.map(one, inputs, batch_size=chunk_size)


def _pair_losses(graphdef: nnx.GraphDef, compute_dtype: str, state: nnx.State, logsumexps: jax.Array,
                 rows: jax.Array, ids: jax.Array, next_ids: jax.Array) -> jax.Array:
  """Each pair's cross-entropy, logsumexps[rows] − its target's score: rows, ids, next_ids (P,) → (P,) float32."""
  hidden, table = _operands(nnx.merge(graphdef, state).model, ids)
  dtype = precision.as_dtype(compute_dtype)
  hidden, targets = precision.operand(hidden, dtype), precision.operand(table[next_ids], dtype)
  return logsumexps[rows] - jnp.einsum("pd,pd->p", hidden, targets, preferred_element_type=jnp.float32)


def make_eval_losses(graphdef: nnx.GraphDef, chunk_size: int,
                     compute_dtype: str = "float32") -> Callable[..., jax.Array]:
  """jit(state, ids, next_ids (E,) or (E, L)) → per-token losses alike, float32, `chunk_size` (0: all) at a time."""

  def losses(state: nnx.State, ids: jax.Array, next_ids: jax.Array) -> jax.Array:
    if ids.ndim > 1:
      return _window_losses(graphdef, chunk_size, compute_dtype, state, ids, next_ids)
    logsumexps = _input_logsumexps(graphdef, chunk_size, compute_dtype, state, ids)
    return _pair_losses(graphdef, compute_dtype, state, logsumexps, jnp.arange(ids.shape[0]), ids, next_ids)

  return jax.jit(losses)


class Evaluator:
  """A held-out split, placed on the mesh once and scored batch after batch into a running total and one per
  input-frequency bucket. With data.context_length L > 1, in windows of L (`windows.tiled_windows`) starting
  train.eval_stride S pairs apart in each document (-1: L, tiled), each pair scored once (a window after its
  document's first scores only its last S positions, the rest being context), L·⌈M/S⌉ positions or so an eval;
  otherwise a pair's loss depends on its two ids alone, so each distinct input's logsumexp over the vocabulary is
  computed once an eval and each distinct pair is scored once, weighed by its count: U·V·D work for U distinct inputs
  in place of the split's M·V·D (Vim's help files: U ≈ 2,000 against M ≈ 463,000)."""

  def __init__(self, graphdef: nnx.GraphDef, ids: np.ndarray, next_ids: np.ndarray, data: BigramData,
               config: ml_collections.ConfigDict, mesh, document_ends: np.ndarray | None = None):
    """`ids`, `next_ids` (M,) int32: the split's pairs; `data`: the train counts; `document_ends`: for windows."""
    num_buckets, chunk_size, dtype = len(frequency.BUCKETS), int(config.loss.chunk_size), str(config.model.dtype)

    def add(state, total, bucket_totals, logsumexps, batch_ids, batch_next_ids, buckets, weights, rows=None):
      if rows is None:  # windows: the padding past a document's end weighs 0
        batch_losses = _window_losses(graphdef, chunk_size, dtype, state, batch_ids, batch_next_ids) * weights
      else:
        batch_losses = weights * _pair_losses(graphdef, dtype, state, logsumexps, rows, batch_ids, batch_next_ids)
      batch_losses, buckets = batch_losses.reshape(-1), buckets.reshape(-1)
      by_bucket = jax.ops.segment_sum(batch_losses, buckets, num_segments=num_buckets)
      return total + batch_losses.sum(), bucket_totals + by_bucket

    # jit(state, total (), bucket_totals (K,), logsumexps (U,), ids, next_ids, buckets, weights[, rows]) → the totals
    # plus the batch's weighed losses; each call consumes the previous one's totals, so batches are never in flight
    # together.
    self._add_batch = jax.jit(add)
    self._logsumexps = jax.jit(lambda state, inputs: _input_logsumexps(graphdef, chunk_size, dtype, state, inputs))
    self._totals = jax.device_put((jnp.float32(0), jnp.zeros(num_buckets, jnp.float32)), mesh_lib.replicated(mesh))
    size, data_size, length = int(config.train.eval_batch_size), mesh.shape["data"], data.context_length
    self._count, self._inputs, self._none = len(ids), None, jnp.zeros(0, jnp.float32)  # windows read no logsumexps
    if length > 1:  # train.eval_stride: -1 (the default) tiles each document; S < L overlaps the windows
      stride = int(config.train.get("eval_stride", -1))  # a config from before the field: tiled
      ids, next_ids, weights = windows.tiled_windows(ids, next_ids, document_ends, length,
                                                     length if stride == -1 else stride)
      size, columns = max(size // length, 1), (ids, next_ids, weights)  # windows per batch: ~eval_batch_size positions
    else:
      inputs, rows = np.unique(ids, return_inverse=True)
      (rows, next_ids), counts = np.unique(np.stack([rows.reshape(-1), next_ids]), axis=1, return_counts=True)
      ids, next_ids, weights = inputs[rows], next_ids.astype(np.int32), counts.astype(np.float32)
      pad = -len(ids) % size  # one batch shape, one program: the last batch filled with pairs that weigh 0
      ids, next_ids, rows, weights = (np.pad(column, (0, pad)) for column in (ids, next_ids, rows, weights))
      # padded to a multiple of the data axis (with its first input, whose extra logsumexps no pair reads)
      inputs = np.pad(inputs, (0, -len(inputs) % data_size), mode="edge")
      self._inputs = jax.device_put(inputs, mesh_lib.batch_sharding(mesh))
      columns = (ids, next_ids, weights, rows.astype(np.int32))
    eval_buckets = frequency.input_buckets(data.input_counts)[ids]
    self._bucket_counts = np.bincount(eval_buckets.reshape(-1), minlength=num_buckets,
                                      weights=weights.reshape(-1)).astype(np.int64)
    self._batches = []
    for start in range(0, len(ids), size):
      batch = (*columns[:2], eval_buckets, *columns[2:])
      batch = tuple(column[start : start + size] for column in batch)
      # A short last batch that `data` doesn't divide is scored whole on every device instead.
      sharding = mesh_lib.batch_sharding(mesh) if len(batch[0]) % data_size == 0 else mesh_lib.replicated(mesh)
      self._batches.append(jax.device_put(batch, sharding))

  def _input_scores(self, state: nnx.State) -> jax.Array:
    """The distinct inputs' logsumexps (U,) at `state` (an empty array for windows, which need none)."""
    return self._none if self._inputs is None else self._logsumexps(state, self._inputs)

  def compile_ahead(self, state: nnx.State) -> None:
    """Compiles the batch program for every batch shape and layout the split has (jit reuses them)."""
    logsumexps = jax.ShapeDtypeStruct((0,), jnp.float32)
    if self._inputs is not None:
      compiled = self._logsumexps.lower(state, self._inputs).compile()
      logsumexps = jax.ShapeDtypeStruct(self._inputs.shape, jnp.float32, sharding=compiled.output_shardings)
    layouts = {(batch[0].shape, batch[0].sharding): batch for batch in self._batches}
    for batch in layouts.values():
      self._add_batch.lower(state, *self._totals, logsumexps, *batch).compile()

  def __call__(self, state: nnx.State) -> tuple[float, dict[str, float]]:
    """Mean loss over the split at `state`'s parameters, and per input-frequency bucket with pairs."""
    totals, logsumexps = self._totals, self._input_scores(state)
    for batch in self._batches:
      totals = self._add_batch(state, *totals, logsumexps, *batch)
    total, bucket_totals = jax.device_get(totals)
    by_bucket = {name: float(bucket_totals[k]) / int(self._bucket_counts[k])
                 for k, name in enumerate(frequency.BUCKETS) if self._bucket_counts[k]}
    return float(total) / self._count, by_bucket


def eval_scalars(eval_loss: float, by_bucket: dict[str, float], data: BigramData) -> dict[str, float]:
  """The eval/* scalars of an eval: the validation loss, the floor and the gap to it, the loss per input-frequency
  bucket that holds eval pairs (eval/loss_<bucket>_inputs) and the data's further references (eval/<name>)."""
  scalars = {"eval/loss": eval_loss, "eval/loss_floor": data.loss_floor, "eval/gap": eval_loss - data.loss_floor}
  scalars.update({frequency.scalar_name(bucket): loss for bucket, loss in by_bucket.items()})
  scalars.update({f"eval/{name}": value for name, value in data.eval_references.items()})
  return scalars


class HeldOut:
  """The splits scored at every eval: `evaluate` (validation) and `select` (the selection split, or None)."""

  def __init__(self, graphdef: nnx.GraphDef, data: BigramData, config: ml_collections.ConfigDict, mesh):
    self.evaluate = Evaluator(graphdef, data.eval_ids, data.eval_next, data, config, mesh, data.eval_document_ends)
    select = (data.select_ids, data.select_next)  # empty without a selection split
    self.select = (Evaluator(graphdef, *select, data, config, mesh, data.select_document_ends)
                   if len(data.select_ids) else None)

  def compile_ahead(self, state: nnx.State) -> None:
    for evaluator in (self.evaluate, self.select):
      if evaluator is not None:
        evaluator.compile_ahead(state)


@dataclasses.dataclass
class Selection:
  """The best eval by select/loss and the evals since (early stopping's count), kept in every checkpoint's manifest."""

  best_step: int | None = None
  best_select_loss: float | None = None
  best_eval: dict[str, float] = dataclasses.field(default_factory=dict)  # the eval/* scalars logged at the best step
  evals_since_best: int = 0  # evals after the best one, none a new best

  def record(self, step: int, select_loss: float, eval_scalars: dict[str, float], min_delta: float = 0.0) -> bool:
    """Counts the eval at `step`; → whether it is a new best: the first, or below the best by over `min_delta` nats."""
    if self.best_select_loss is None or self.best_select_loss - select_loss > min_delta:
      self.best_step, self.best_select_loss = step, select_loss
      self.best_eval, self.evals_since_best = dict(eval_scalars), 0
      return True
    self.evals_since_best += 1
    return False

  def exhausted(self, patience: int) -> bool:
    """Whether early stopping with `patience` (0 = off) ends the run here: `patience` evals without a new best."""
    return patience > 0 and self.best_step is not None and self.evals_since_best >= patience

  @classmethod
  def from_manifest(cls, manifest: dict[str, Any] | None) -> Selection:
    """The selection a checkpoint's manifest recorded; a fresh one for a checkpoint without (no selection split)."""
    saved = (manifest or {}).get("selection")
    if not saved:
      return cls()
    return cls(best_step=saved["best_step"], best_select_loss=saved["best_select_loss"],
               best_eval=dict(saved["best_eval"]), evals_since_best=int(saved["evals_since_best"]))
