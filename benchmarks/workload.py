"""The pieces every benchmark shares: the real train step at a given size, a batch, and interleaved timing.

Timings on a shared machine are noisy, so things that are compared are timed in turns within one process
(`interleaved_medians`) and reported as medians.
"""

from __future__ import annotations

import os
import pathlib
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from configs import default
from tied_embed.core import optim
from tied_embed.core.model import build_model
from tied_embed.fast import chunked_loss, compilation
from tied_embed.train import mesh as mesh_lib
from tied_embed.train import run_step


def cpu_threads() -> int:
  """The cores this process may run on: what XLA:CPU sizes its thread pool by, and what PyTorch gets too."""
  return len(os.sched_getaffinity(0))


def bench_config(vocab_size: int, d_model: int, num_tokens: int, chunk_size: int) -> ml_collections.ConfigDict:
  """configs/default.py (AdamW, clipping, warmup + cosine) at the benchmark's size."""
  config = default.get_config()
  config.model.vocab_size, config.model.d_model = vocab_size, d_model
  config.train.batch_size = num_tokens
  config.loss.chunk_size = chunk_size
  return config


def with_dtype(config: ml_collections.ConfigDict, dtype: str) -> ml_collections.ConfigDict:
  """A copy of `config` with `model.dtype` (the loss's matmul operand dtype) set to `dtype`."""
  config = config.copy_and_resolve_references()
  config.model.dtype = dtype
  return config


def train_state(config: ml_collections.ConfigDict) -> tuple[nnx.GraphDef, nnx.State]:
  """A fresh RunState (tied table, optimizer moments, provenance totals), split for the jitted step."""
  state = run_step.RunState(build_model(config), optim.make_optimizer(config.train))
  graphdef, arrays = nnx.split(state)
  return graphdef, jax.block_until_ready(arrays)


def random_batch(vocab_size: int, num_tokens: int, seed: int = 0) -> tuple[jax.Array, jax.Array]:
  """Uniform (ids, next_ids), each (T,) int32 on the device: the most distinct ids a batch can have."""
  rng = np.random.default_rng(seed)
  ids, next_ids = rng.integers(0, vocab_size, (2, num_tokens), dtype=np.int32)
  return jnp.asarray(ids), jnp.asarray(next_ids)


ZIPF_EXPONENT = 1.0  # a text-like batch; a 4096-token batch of real subword text has fewer distinct ids still


def zipf_batch(
    vocab_size: int, num_tokens: int, exponent: float = ZIPF_EXPONENT, seed: int = 0
) -> tuple[jax.Array, jax.Array]:
  """Text-like (ids, next_ids), (T,) int32: id frequencies fall as 1 / rank**exponent, ranks shuffled over ids.

  The trainer's step forms each distinct id's logits once, so its cost depends on how many there are; PyTorch's
  steps don't look.
  """
  rng = np.random.default_rng(seed)
  weights = 1.0 / np.arange(1, vocab_size + 1) ** exponent
  ids_by_rank = rng.permutation(vocab_size).astype(np.int32)
  ids, next_ids = ids_by_rank[rng.choice(vocab_size, (2, num_tokens), p=weights / weights.sum())]
  return jnp.asarray(ids), jnp.asarray(next_ids)


def distinct_fraction(ids: jax.Array) -> float:
  """Distinct ids / tokens of a batch (T,)."""
  return len(np.unique(np.asarray(ids))) / ids.shape[0]


def direct_loss(model, ids: jax.Array, next_ids: jax.Array, chunk_size: int) -> jax.Array:
  """The bigram loss of the model as a whole, chunked as the step's is: no split into paths."""
  lookup_table, projection_table = model.tables()
  return chunked_loss.cross_entropy(lookup_table[ids], projection_table, next_ids, chunk_size)


def make_plain_step(graphdef: nnx.GraphDef, chunk_size: int):
  """jit(state, ids (B,), next_ids (B,)) → (new state, {'loss'}): one nnx.value_and_grad of the tied model.

  The reference a provenance step is compared against: no split into path gradients, no totals, no guard.
  It lives here and not in tied_embed because training has one code path, the provenance step.
  """

  def step(state: nnx.State, ids: jax.Array, next_ids: jax.Array):
    train_state = nnx.merge(graphdef, state)
    loss, grads = nnx.value_and_grad(direct_loss)(train_state.model, ids, next_ids, chunk_size)
    train_state.optimizer.update(train_state.model, grads)
    return nnx.state(train_state), {"loss": loss}

  return jax.jit(step, donate_argnums=0, compiler_options=compilation.compiler_options())


def repeated_steps(step, state, batch, steps: int):
  """A timed run: `steps` calls of `step(state, *batch)`, each consuming the state the previous one returned."""

  def run():
    nonlocal state
    for _ in range(steps):
      state, metrics = step(state, *batch)
    jax.block_until_ready(metrics)

  return run


class Stepper:
  """A jitted train step with its own state, callable repeatedly; blocks on each step's loss.

  By default the real one, set up as the trainer sets it up: `tied_embed.train.run_step.make_run_step` (provenance,
  totals, non-finite guard) on the config's mesh (one device here), compiled from the abstract state before the
  state exists, the compiler's freed memory handed back to the OS, then the state created in its shardings.
  `compile_peak_mib` is this process's peak up to the end of the compile. `plain=True` gives `make_plain_step`
  instead, compiled on the state. `batch` (ids, next_ids) defaults to `random_batch`.
  """

  def __init__(self, config: ml_collections.ConfigDict, *, plain: bool = False, batch=None):
    batch = batch or random_batch(int(config.model.vocab_size), int(config.train.batch_size))
    chunk_size = int(config.loss.chunk_size)
    self._plain = plain
    if plain:
      graphdef, self.state = train_state(config)
      self.batch = batch
      self._step = make_plain_step(graphdef, chunk_size)
      self._step.lower(self.state, *self.batch).compile()
      compilation.release_freed()
      self.compile_peak_mib = peak_mib()
      return
    mesh = mesh_lib.make_mesh(config.mesh)
    graphdef, abstract = mesh_lib.abstract_state(mesh_lib.state_builder(config), mesh)
    shardings = jax.tree.map(lambda leaf: leaf.sharding, abstract)
    self._step = run_step.make_run_step(
        graphdef, chunk_size, shardings, compute_dtype=str(config.model.dtype), train_config=config.train
    )
    batch_sharding = mesh_lib.batch_sharding(mesh)
    abstract_ids = jax.ShapeDtypeStruct(batch[0].shape, batch[0].dtype, sharding=batch_sharding)
    compilation.compile_ahead(self._step, abstract, abstract_ids, abstract_ids)  # releases the compiler's memory
    self.compile_peak_mib = peak_mib()
    self.state = jax.block_until_ready(mesh_lib.fresh_state(mesh_lib.state_builder(config), abstract))
    self.batch = jax.device_put(batch, batch_sharding)

  def temp_bytes(self) -> int:
    """XLA's count of the compiled step's temporary buffers (the plain variant's, not the log step's)."""
    stats = {} if self._plain else {"with_stats": False}
    return self._step.lower(self.state, *self.batch, **stats).compile().memory_analysis().temp_size_in_bytes

  def __call__(self) -> jax.Array:
    stats = {} if self._plain else {"with_stats": False}  # as compiled: jit keys an absent argument apart
    self.state, metrics = self._step(self.state, *self.batch, **stats)
    return jax.block_until_ready(metrics["loss"])


def _status_mib(field: str) -> float:
  """A memory field of this process's /proc/self/status (Linux), in MiB."""
  for line in pathlib.Path("/proc/self/status").read_text().splitlines():
    if line.startswith(f"{field}:"):
      return int(line.split()[1]) / 1024
  raise RuntimeError(f"no {field} in /proc/self/status")


def peak_mib() -> float:
  """This process's peak resident set size so far, in MiB (Linux VmHWM)."""
  return _status_mib("VmHWM")


def resident_mib() -> float:
  """This process's resident set size now, in MiB (Linux VmRSS)."""
  return _status_mib("VmRSS")


def reset_peak() -> None:
  """Starts VmHWM afresh from the current resident set (Linux: `5` into /proc/self/clear_refs)."""
  pathlib.Path("/proc/self/clear_refs").write_text("5")


def interleaved_times(
    fns: dict[str, Callable[[], object]], rounds: int, warmup: int = 1, settle_s: float = 0.2,
    calls_per_turn: int = 1,
) -> dict[str, list[float]]:
  """Seconds of each timed call of each function, in turns (a, b, c, a, b, c, ...) after `warmup` calls each.

  Each turn starts `settle_s` after the previous one ended: the previous framework's worker threads keep
  spinning for a while after their work (OpenMP's wait policy), and on 2 cores they would slow the next call.
  A turn makes `calls_per_turn` calls back to back and times the last: with more than one, a call as in a
  training loop, right after the one before it, rather than the first call after an idle pause.
  """
  for fn in fns.values():
    for _ in range(warmup):
      fn()
  times: dict[str, list[float]] = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      time.sleep(settle_s)
      for _ in range(calls_per_turn - 1):
        fn()
      start = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - start)
  return times


def interleaved_medians(
    fns: dict[str, Callable[[], object]], rounds: int, warmup: int = 1, stat: Callable = statistics.median
) -> dict[str, float]:
  """Median seconds per call of each function, timed in turns (see `interleaved_times`).

  `stat=min` gives the fastest call instead: on a machine others are loading, the least disturbed one.
  """
  return {name: stat(values) for name, values in interleaved_times(fns, rounds, warmup).items()}
