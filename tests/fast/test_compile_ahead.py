"""The trainer compiles its train step from the abstract state, before any state exists, and jit reuses it.

Compiling on the state put the XLA compiler's working memory on top of the parameters and optimizer moments (120-135
MiB above them at V=32768, benchmarks/README.md); compiling from `state_lib.abstract_state`'s ShapeDtypeStructs
before `state_lib.fresh_state` (or a restore) keeps the two apart. That only pays if the step is not compiled again
when the real arrays arrive, so the test counts the train step's compiles too.
"""

from __future__ import annotations

import logging

import jax
import pytest
from helpers import smoke_with

from tied_embed.fast import compilation
from tied_embed.train import state as state_lib
from tied_embed.train import trainer


def test_the_step_is_compiled_once_per_variant_before_the_state_exists(tmp_path, monkeypatch, caplog):
  events = []
  compile_ahead, fresh_state = compilation.compile_ahead, state_lib.fresh_state

  def spy_compile(step, state, ids, next_ids):
    events.append(("compile", all(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree.leaves(state))))
    return compile_ahead(step, state, ids, next_ids)

  def spy_fresh(build, target):
    events.append(("state", None))
    return fresh_state(build, target)

  monkeypatch.setattr(compilation, "compile_ahead", spy_compile)
  monkeypatch.setattr(state_lib, "fresh_state", spy_fresh)
  config = smoke_with("train.num_steps", 20)
  with jax.log_compiles(True), caplog.at_level(logging.WARNING, logger="jax._src.interpreters.pxla"):
    trainer.train_and_evaluate(config, tmp_path / "run")
  assert events == [("compile", True), ("state", None)]  # abstract, and before the state
  step_compiles = [r for r in caplog.records if r.getMessage().startswith("Compiling jit(step)")]
  assert len(step_compiles) == 2, [r.getMessage()[:80] for r in step_compiles]  # the plain and the log step


def test_a_complete_run_compiles_nothing(tmp_path, monkeypatch):
  config = smoke_with("train.num_steps", 10)
  trainer.train_and_evaluate(config, tmp_path / "run")
  monkeypatch.setattr(compilation, "compile_ahead", lambda *args: pytest.fail("a complete run compiled"))
  trainer.train_and_evaluate(config, tmp_path / "run")
