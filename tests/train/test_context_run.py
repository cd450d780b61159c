"""A context model trained by the project's loop on windows of a by-document byte corpus: it logs its split check
below 1e-5, keeps one table in its Orbax checkpoint, resumes bit for bit, and its refusals are one line."""

from __future__ import annotations

import logging
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from helpers import all_series

from configs import smoke
from tied_embed.train import checkpoint
from tied_embed.train import config as config_lib
from tied_embed.train.trainer import train_and_evaluate
from tied_embed.util import UsageError

WORDS = "the cursor moves to the next line and the window scrolls when the text is longer than the screen".split()


def _corpus(directory):
  rng = np.random.default_rng(0)
  directory.mkdir()
  for index in range(8):  # 8 documents of ~1.5 KB: by_document puts the last one or two in validation
    (directory / f"doc{index}.txt").write_text(" ".join(rng.choice(WORDS, 300)) + "\n")
  return directory


def _config(corpus, context="transformer"):
  config = smoke.get_config()
  config.data.source, config.data.text_path, config.data.split = "text", str(corpus), "by_document"
  config.data.tokenizer, config.model.vocab_size = "bytes", 256
  config.model.context, config.data.context_length = context, 16
  config.model.heads = 2
  config.train.batch_size, config.train.num_steps = 8, 20
  config.train.log_every = config.train.eval_every = config.train.checkpoint_every = 10
  return config


STEP_COMPILES: list[str] = []  # the context run's "Compiling jit(step)" log messages


@pytest.fixture(scope="module")
def context_run(tmp_path_factory):
  root = tmp_path_factory.mktemp("context")
  corpus = _corpus(root / "corpus")
  config = _config(corpus)
  config.model.dropout = 0.1  # masks from (seed, step): the split check, the tie and the bitwise resume hold with them
  compiles = _Messages()  # the step's compiles, counted by test_the_windowed_step_is_compiled_once_per_variant
  logger = logging.getLogger("jax._src.interpreters.pxla")
  logger.addHandler(compiles)
  try:
    with jax.log_compiles(True):
      summary = train_and_evaluate(config, root / "run")
  finally:
    logger.removeHandler(compiles)
  STEP_COMPILES[:] = [m for m in compiles.messages if m.startswith("Compiling jit(step)")]
  return root / "run", config, summary


class _Messages(logging.Handler):
  def __init__(self):
    super().__init__(logging.DEBUG)
    self.messages = []

  def emit(self, record):
    self.messages.append(record.getMessage())


def test_the_windowed_step_is_compiled_once_per_variant(context_run):
  """The trainer compiles its step ahead for (B, L) windows, so the first real batch compiles nothing more."""
  assert len(STEP_COMPILES) == 2, [m[:100] for m in STEP_COMPILES]  # the plain and the log step


def _leaves(state) -> dict[str, np.ndarray]:
  return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(state)}


def test_a_context_run_learns_and_logs_its_split_check(context_run):
  workdir, _, summary = context_run
  series = all_series(workdir)
  assert sorted(series["grad/split_error"]) == [10, 20]
  assert max(series["grad/split_error"].values()) < 1e-5
  assert series["eval/loss"][20] < series["eval/loss"][10] < np.log(256)
  assert summary.eval_loss == pytest.approx(series["eval/loss"][20])


def test_the_parameter_count_is_the_params_alone(context_run):
  _, config, summary = context_run
  d, layers = config.model.d_model, config.model.layers
  # the table, 16 positions, per block 4·D² + 4·D (attention) + 8·D² + 5·D (MLP) + 4·D (two LayerNorms), a final norm
  assert summary.param_count == 256 * d + 16 * d + layers * (12 * d * d + 13 * d) + 2 * d  # not the dropout key


def test_the_checkpoint_holds_one_table_read_with_plain_orbax(context_run):
  workdir, _, _ = context_run
  raw = ocp.StandardCheckpointer().restore(workdir / "checkpoints" / "20" / "state")
  tables = lambda tree: [leaf for leaf in jax.tree.leaves(tree) if np.shape(leaf) == (256, 8)]  # noqa: E731
  assert len(tables(raw["model"])) == 1
  assert len(tables(raw["optimizer"])) == 2  # Adam's two moments of the one table
  restored = checkpoint.restore(workdir)
  lookup, projection = restored.model.table_params()
  assert lookup is projection


def test_a_context_run_resumes_bit_for_bit(context_run, tmp_path):
  workdir, config, straight = context_run
  shutil.copytree(workdir, tmp_path / "run")
  shutil.rmtree(tmp_path / "run" / "checkpoints" / "20")  # so it resumes from step 10
  resumed = train_and_evaluate(config, tmp_path / "run")
  got, want = _leaves(resumed.state), _leaves(straight.state)
  assert set(got) == set(want)
  for name in want:
    np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize(("path", "value", "allowed"), [
    ("data.context_length", 0, "expected an integer in [1, 65536]"),
    ("data.context_length", 65_537, "expected an integer in [1, 65536]"),
    ("model.context_k", 257, "expected an integer in [1, 256]"),
    ("model.layers", 129, "expected an integer in [1, 128]"),
    ("model.heads", 1025, "expected an integer in [1, 1024]"),
    ("data.context_length", 1, "expected at least 2 with model.context='transformer'"),
    ("model.heads", 3, "expected a divisor of model.d_model=8"),
    ("model.context", "rnn", 'expected "none" | "mlp" | "conv" | "transformer"'),
    ("model.context_k", 5, "expected 3 (off) unless model.context='mlp'"),
    ("model.dropout", 1.0, "expected a finite number in [0, 1)"),
    ("model.dropout", -0.1, "expected a finite number in [0, 1)"),
    *(("train.eval_stride", stride, "expected -1 (the window length) or an integer in [1, data.context_length=16]")
      for stride in (0, 17, -2)),
])
def test_context_refusals_name_the_field_and_what_is_allowed(tmp_path, path, value, allowed):
  config = _config(tmp_path)
  config_lib_set(config, path, value)
  with pytest.raises(UsageError) as refused:
    config_lib.validate(config)
  message = str(refused.value)
  assert message.startswith(f"{path}={value!r} is not allowed: {allowed}") and "\n" not in message, message


def test_a_transformers_fields_do_nothing_without_it_so_they_must_stay_off(tmp_path):
  for path, value, off in (("model.layers", 5, 2), ("model.heads", 2, 4)):
    config = _config(tmp_path)
    config_lib_set(config, "model.context", "mlp")
    config_lib_set(config, path, value)
    with pytest.raises(UsageError) as refused:
      config_lib.validate(config)
    assert str(refused.value).startswith(f"{path}={value} is not allowed: expected {off} (off) unless "
                                         "model.context='transformer'"), str(refused.value)


@pytest.mark.parametrize("context", ["mlp", "transformer"])
def test_the_shortest_window_a_context_model_takes_is_two(tmp_path, context):
  config = _config(_corpus(tmp_path / "corpus"))
  config_lib_set(config, "model.context", context)
  if context == "mlp":
    config_lib_set(config, "model.layers", 2)  # the transformer's fields at their off values
    config_lib_set(config, "model.heads", 4)
  config_lib_set(config, "data.context_length", 2)
  config_lib.validate(config)  # a window of 2: each position sees itself and the one before


def test_windows_need_a_token_stream():
  config = smoke.get_config()
  config.data.context_length = 4  # planted pairs are drawn independently
  with pytest.raises(UsageError, match=r"^data.context_length=4 is not allowed: expected 1 with data.source="):
    config_lib.validate(config)


def config_lib_set(config, path, value):
  from tied_embed.train import config_file  # noqa: PLC0415

  config_file.set_unchecked(config, path, value)


def test_next_and_generate_read_the_context_window(context_run):
  from tied_embed.inspection.inspector import continue_prompt  # noqa: PLC0415

  workdir, _, _ = context_run
  model = checkpoint.restore(workdir).model
  result = continue_prompt(workdir, "the cursor moves", top_k=3, generate=4, temperature=0)
  ids = [token["id"] for token in result["prompt_tokens"]]
  logits = np.asarray(model(np.asarray(ids[-16:], np.int32)[None])[0, -1], np.float64)
  probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
  assert [token["id"] for token in result["next"]] == list(np.argsort(-probs, kind="stable")[:3])
  np.testing.assert_allclose([token["prob"] for token in result["next"]], np.sort(probs)[::-1][:3], rtol=1e-6)
  assert result["generated"][0]["id"] == int(np.argmax(probs))  # greedy: the likeliest next token first
  other = continue_prompt(workdir, "the screen moves", top_k=3)  # the same last token, another context
  assert [t["prob"] for t in other["next"]] != [t["prob"] for t in result["next"]]
