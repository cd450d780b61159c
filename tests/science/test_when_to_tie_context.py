"""The sweep's model axis (issue 45, point 6): a context model's own scores through its forward pass on the trainer's
eval windows, and the Kneser-Ney n-gram of its context chosen on the selection pairs, each against an independent
computation; and a `--quick --family mlp,transformer` sweep end to end, its report naming the same-order n-gram."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from helpers import subprocess_env

from science.when_to_tie import plan as plans
from science.when_to_tie import sweep


def _stream(seed: int, count: int, vocab_size: int = 5):
  """A token stream of `count` pairs (M,), (M,) whose next token depends on the two before it."""
  rng = np.random.default_rng(seed)
  tokens = [0, 1]
  for _ in range(count):
    tokens.append(int((tokens[-1] + 2 * tokens[-2] + (rng.random() < 0.3) * rng.integers(vocab_size)) % vocab_size))
  tokens = np.array(tokens[1:])
  return tokens[:-1], tokens[1:]


def test_the_ngram_of_order_two_is_the_kneser_ney_bigram_and_the_order_is_chosen_on_the_selection_pairs():
  train, selection, evaluation = _stream(0, 400), _stream(1, 150), _stream(2, 120)
  train_ends, select_ends, eval_ends = np.array([150, 300]), np.array([70]), None
  # At order 2 the n-gram is the interpolated Kneser-Ney bigram on PairCounts (its own implementation): the same
  # discount chosen, the same losses, whatever the windows.
  bigram = sweep.kneser_ney_reference(train, selection, evaluation, 5)
  at_two = sweep.ngram_reference((*train, train_ends), (*selection, select_ends), (*evaluation, eval_ends), 6, (2,), 5)
  assert (at_two["order"], at_two["discount"]) == (2, bigram["discount"])
  assert at_two["select_loss"] == pytest.approx(bigram["select_loss"], rel=1e-9)
  assert at_two["eval_loss"] == pytest.approx(bigram["eval_loss"], rel=1e-9)
  # Orders 2..4: the (order, discount) with the lowest selection loss, each scored on its own by science/kneser_ney.
  from science import kneser_ney  # noqa: PLC0415

  losses = {(order, discount): kneser_ney.NgramCounts.of(*train, train_ends, order, 5).loss(*selection, select_ends, 6,
                                                                                            discount)
            for order in (2, 3, 4) for discount in kneser_ney.DISCOUNT_GRID}
  order, discount = min(losses, key=losses.get)
  chosen = sweep.ngram_reference((*train, train_ends), (*selection, select_ends), (*evaluation, eval_ends), 6,
                                 (2, 3, 4), 5)
  assert (chosen["order"], chosen["discount"], chosen["window"]) == (order, discount, 6) and order > 2
  assert chosen["select_loss"] == pytest.approx(losses[order, discount], rel=1e-9)
  assert chosen["eval_loss"] == pytest.approx(
      kneser_ney.NgramCounts.of(*train, train_ends, order, 5).loss(*evaluation, eval_ends, 6, discount), rel=1e-9)
  assert chosen["eval_loss"] < bigram["eval_loss"]  # the stream's next token depends on two before it


@pytest.mark.parametrize("family", plans.CONTEXTS)
def test_a_context_models_scores_are_its_forward_pass_over_each_documents_windows(tmp_path, family):
  from tied_embed.core.model import build_model  # noqa: PLC0415

  corpus = plans.corpora(quick=True, subword_corpus="")["bytes"]
  model_spec = plans.FAMILIES[family][2]  # tied + W with context
  config = plans.run_config(corpus, model_spec, 0.1, 0, {"hidden_l2": 0.01}, 40, 10, tmp_path, 0.1)
  model = build_model(config)
  ids, next_ids = (np.random.default_rng(4).integers(0, 256, 70) for _ in range(2))
  ends, length = np.array([20, 53]), plans.context_length(model_spec)
  rare = np.zeros(256, bool)
  rare[ids[::3]] = True
  scores = sweep.window_scores(model, ids, next_ids, ends, length, rare, windows_per_batch=2)
  # By hand: each document cut into windows of L from its start, each window through the model alone, float64.
  losses, own = [], []
  for start, end in ((0, 20), (20, 53), (53, 70)):
    for first in range(start, end, length):
      window = ids[first : min(first + length, end)]
      logits = np.asarray(model(window[None].astype(np.int32))[0], np.float64)
      top = logits.max(axis=1)
      lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
      losses += list(lse - logits[np.arange(len(window)), next_ids[first : first + len(window)]])
      own += list(logits.argmax(axis=1) == window)
  losses, own = np.array(losses), np.array(own)
  assert scores["eval_loss"] == pytest.approx(losses.mean(), rel=1e-5)
  assert scores["loss_rare_inputs"] == pytest.approx(losses[rare[ids]].mean(), rel=1e-5)
  assert scores["predicts_self"] == pytest.approx(own.mean()) and scores["predicts_self_rare"] == pytest.approx(
      own[rare[ids]].mean())


@pytest.mark.slow  # 12 context runs, each ~20 s of CPU (mostly compiling) on the 2-core build machine
def test_a_quick_context_sweep_writes_a_report_with_the_kneser_ney_ngram_of_each_context(tmp_path):
  from configs import text  # noqa: PLC0415
  from science import kneser_ney  # noqa: PLC0415
  from tied_embed.data import bigram as data_lib  # noqa: PLC0415

  done = subprocess.run(
      [sys.executable, "-m", "science.when_to_tie", "--quick", "--corpora", "bytes", "--family", "mlp,transformer",
       "--out", str(tmp_path), "--no-compile-cache", "--convergence-factor=0"],
      cwd=plans.REPO, env=subprocess_env(), capture_output=True, text=True, timeout=1800, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  results = json.loads((tmp_path / "when_to_tie.json").read_text())
  entry = results["corpora"]["bytes"]
  keys = [model.key for family in plans.CONTEXTS for model in plans.FAMILIES[family]]
  assert list(entry["runs"]) == keys and entry["contexts"] == {key: key.split("_")[-1] for key in keys}
  # The n-gram of each context, recomputed from the data as the runs read it: the train pairs used (10% of what
  # selection leaves), scored on the selection and validation pairs in windows of L from each document's start.
  config = text.get_config()
  config.data.data_dir, config.data.selection_fraction = str(tmp_path / "data" / "bytes"), 0.1
  data = data_lib.load_existing_bigram_data(config, tmp_path / "unused")
  used = round(0.1 * len(data.train_ids))
  counts = kneser_ney.NgramCounts.of(data.train_ids[:used], data.train_next[:used], None, 8, 256)
  for context, orders in (("mlp", (4,)), ("transformer", tuple(range(2, 9)))):
    numbers = entry["ngram"][context]["0.1"]
    select = counts.statistics(data.select_ids, data.select_next, None, 16)
    losses = {(order, discount): float(-np.mean(np.log(counts.mix(select, discount, order))))
              for order in orders for discount in kneser_ney.DISCOUNT_GRID}
    order, discount = min(losses, key=losses.get)
    assert (numbers["order"], numbers["discount"], numbers["window"]) == (order, discount, 16)
    assert numbers["select_loss"] == pytest.approx(losses[order, discount], rel=1e-9)
    scored = counts.mix(counts.statistics(data.eval_ids, data.eval_next, None, 16), discount, order)
    assert numbers["eval_loss"] == pytest.approx(float(-np.mean(np.log(scored))), rel=1e-9)
    assert numbers["eval_loss"] < entry["kneser_ney"]["0.1"]["eval_loss"]  # context helps the count model too
  for by_fraction in entry["runs"].values():
    (run,) = by_fraction["0.1"]
    # the forward pass over the tiled windows is what the trainer's windowed eval scored at the best step
    assert run["float64_eval_loss"] == pytest.approx(run["eval_loss"], rel=1e-4)
    assert 0 <= run["predicts_self"] <= 1 and math.isfinite(run["select_loss"])
  markdown = (tmp_path / "when_to_tie.md").read_text()
  assert "Kneser-Ney n-gram of the mlp's context" in markdown and "Kneser-Ney n-gram of the transformer's" in markdown
  assert f"| {entry['ngram']['mlp']['0.1']['eval_loss']:.4f} (4, " in markdown
