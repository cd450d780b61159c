"""What the train step holds, read from its compiled program and its call order, not timed: it donates its whole
state, its temporaries never include the (T, V) logits, and jitted on its first call it compiles first and hands
the compiler's freed heap back before its gradient buffer and the step's temporaries exist
(benchmarks/step_memory.py measures the peaks).
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tied_embed.core import optim
from tied_embed.core.model import build_model
from tied_embed.fast import compilation
from tied_embed.train import run_step

V, D, T, C = 2048, 16, 2048, 64  # T·V float32 logits are 16 MiB, a (V, C) chunk of them 512 KiB
KIB = 2**10


def _setup(chunk_size: int = C):
  from configs import default  # noqa: PLC0415

  config = default.get_config()
  config.model.vocab_size, config.model.d_model, config.train.batch_size = V, D, T
  graphdef, state = nnx.split(run_step.RunState(build_model(config), optim.make_optimizer(config.train)))
  ids, next_ids = np.random.default_rng(0).integers(0, V, (2, T), dtype=np.int32)
  step = run_step.make_run_step(graphdef, chunk_size, train_config=config.train)
  return step, state, jnp.asarray(ids), jnp.asarray(next_ids)


def test_the_step_donates_its_whole_state_and_the_gradient_buffer():
  step, state, ids, next_ids = _setup()
  state_bytes = sum(leaf.nbytes for leaf in jax.tree.leaves(state))
  analysis = step.lower(state, ids, next_ids).compile().memory_analysis()
  assert analysis.alias_size_in_bytes == state_bytes + V * D * 4  # every state array, and the (V, D) buffer


def test_the_chunked_steps_temporaries_hold_one_chunk_of_logits_not_the_batchs():
  step, state, ids, next_ids = _setup()
  temp = step.lower(state, ids, next_ids).compile().memory_analysis().temp_size_in_bytes
  # By hand: one (V, C) float32 chunk of logits, exponentiated in place (512 KiB); the (T, D) arrays the scan carries
  # (the looked-up rows, each distinct row's dx, the lookup norms' zeros: 3 × 128 KiB, a fourth allowed); AdamW's
  # (V, D) temporaries beside the donated buffer (2 × 128 KiB). The (T, V) logits alone would be 16 MiB.
  bound = V * C * 4 + 4 * T * D * 4 + 2 * V * D * 4
  assert temp <= bound, f"{temp / KIB:.0f} KiB of temporaries, bound {bound / KIB:.0f} KiB"


class _SpyJit:
  """Stands in for the step's jitted function, recording which of lowering (compiling) and running each call does."""

  def __init__(self, jitted, events: list[str]):
    self._jitted, self._events = jitted, events

  def lower(self, *args, **kwargs):
    self._events.append("compile")
    return self._jitted.lower(*args, **kwargs)

  def __call__(self, *args, **kwargs):
    self._events.append("run")
    return self._jitted(*args, **kwargs)


def test_a_step_jitted_on_its_first_call_compiles_frees_the_compilers_heap_then_makes_its_buffer_and_runs(
    monkeypatch, caplog):
  step, state, ids, next_ids = _setup()
  events: list[str] = []
  release, make_buffer = compilation.release_freed, step._buffer_for
  monkeypatch.setattr(compilation, "release_freed", lambda: events.append("release") or release())
  # The (V, D) gradient buffer made after the compile: its memory and the compiler's peak never add up.
  monkeypatch.setattr(step, "_buffer_for",
                      lambda s: (step._buffer is None and events.append("buffer")) or make_buffer(s))
  step._jitted = _SpyJit(step._jitted, events)
  with jax.log_compiles(True), caplog.at_level(logging.WARNING, logger="jax._src.interpreters.pxla"):
    for with_stats in (False, False, True, False):
      state, _ = step(state, ids, next_ids, with_stats=with_stats)
  assert events == ["compile", "release", "buffer", "run", "run", "compile", "release", "run", "run"]
  compiles = [r for r in caplog.records if r.getMessage().startswith("Compiling jit(step)")]
  assert len(compiles) == 2, [r.getMessage()[:80] for r in compiles]  # once per variant: jit reuses what it compiled
