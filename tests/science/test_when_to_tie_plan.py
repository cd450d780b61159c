"""science/when_to_tie's plan: each (corpus, model family) block fits in two hours on 2 cores by its own arithmetic,
the controls and the context models run (their configs build their models), --family picks one block's models,
and a killed sweep resumes from the record of its finished runs without training them again."""

import json
import math
import os
import shutil
import signal
import statistics
import time
import types

import numpy as np
import pytest

from science.when_to_tie import plan as plans
from science.when_to_tie import sweep


def test_each_timed_block_fits_in_two_hours_by_hand_arithmetic():
  # subword bigram: 3 models; per size 12 first trials (3 learning rates × 4 weight decays) + 5 seeds × draws (3 at
  # 1% and 10%, 1 at 100%): 1%: 3 · (12 + 15) · 15.9 s = 1,287.9 s; 10%: 3 · 27 · 61.4 = 4,973.4 s; 100%:
  # 3 · (12 + 5) · 714 = 36,414 s.
  assert plans.block_seconds("subword", "bigram") == pytest.approx(1287.9 + 4973.4 + 36414)  # 11.9 h
  assert plans.block_seconds("bytes", "bigram") == pytest.approx(3 * 27 * 6.6 + 3 * 27 * 5.9 + 3 * 17 * 10.3)
  for corpus in plans.RUN_SECONDS:
    for family in plans.TIMED_FAMILIES:
      if (corpus, family) in plans.UNFIT_BLOCKS:  # said to be over, and by its estimate it is
        assert plans.BLOCK_SECONDS < plans.block_seconds(corpus, family) < math.inf
      else:
        assert plans.block_seconds(corpus, family) <= plans.BLOCK_SECONDS == 7200
  assert set(plans.TIMED_FAMILIES) == set(plans.FAMILIES)  # every family has an estimate
  # bytes MLP, 2,500 steps at most, its block's own runs: 3 · 27 · (12.4 + 15.8) s + 3 · 17 · 31.4 s = 3,885.6 s
  assert plans.block_seconds("bytes", "mlp") == pytest.approx(3 * 27 * (12.4 + 15.8) + 3 * 17 * 31.4)
  # bytes transformer, its block's own runs: 3 · 27 · (20.1 + 27.5) s + 3 · 17 · 60.0 s = 6,915.6 s (1.92 h)
  assert plans.block_seconds("bytes", "transformer") == pytest.approx(6915.6)
  # A context family: the same runs (3 models, 12 first trials + 5 seeds × draws) at its own measured seconds.
  mlp = plans.CONTEXT_RUN_SECONDS["mlp"]["subword"]
  assert plans.block_seconds("subword", "mlp") == pytest.approx(3 * 27 * (mlp[0.01] + mlp[0.1]) + 3 * 17 * mlp[1.0])
  assert math.isnan(plans.block_seconds("subword", "words"))  # a family never timed has no estimate


def test_the_subword_context_run_seconds_are_the_medians_of_their_sittings_runs():
  # Each size's seconds in plan.CONTEXT_RUN_SECONDS against the median wall seconds of the runs kept in its sitting's
  # record (finished_runs.json in science/sittings/subword_mlp and science/sittings/subword_transformer), wherever 5
  # or more runs of that size finished: within 10%, so that a record a later sitting extends still agrees, and a
  # dropped digit or a swapped size does not.
  compared = 0
  for family in ("mlp", "transformer"):
    record = json.loads((plans.REPO / "science" / "sittings" / f"subword_{family}" / sweep.FINISHED).read_text())
    by_size: dict[float, list[float]] = {}
    for key, run in record.items():
      by_size.setdefault(float(key.rsplit("-f", 1)[1].split("-")[0]), []).append(run["seconds"])
    for size, seconds in by_size.items():
      if len(seconds) >= 5:
        assert plans.CONTEXT_RUN_SECONDS[family]["subword"][size] == pytest.approx(statistics.median(seconds), rel=0.1)
        compared += 1
  assert compared == 6  # both families at 1%, 10% and 100%


def test_the_controls_and_the_model_axis_run():
  assert [m.key for m in plans.FAMILIES["controls"]] == ["tied_bias", "tied_sym", "untied_half"]
  assert {m.key for m in plans.FAMILIES["transformer"]} == {"tied_transformer", "untied_transformer",
                                                           "tied_w_transformer"}
  assert [plans.unavailable(m) for m in plans.CONTROLS] == ["", "", ""]
  assert plans.unavailable(plans.MODELS[2]) == ""
  for family in plans.CONTEXTS:
    assert [plans.unavailable(m) for m in plans.FAMILIES[family]] == ["", "", ""]
    assert [(m.tied, m.hidden, m.tuned) for m in plans.FAMILIES[family]] == [(m.tied, m.hidden, m.tuned)
                                                                             for m in plans.MODELS]
  # A model with a field its config lacks, or a value it refuses, says which.
  missing = plans.dataclasses.replace(plans.MODELS[0], needs=(("model.no_such_field", 1),))
  assert plans.unavailable(missing) == "model.no_such_field does not exist yet"
  pairs = plans.dataclasses.replace(plans.MODELS[0], needs=(("model.context", "mlp"),))
  assert "data.context_length=1 is not allowed" in plans.unavailable(pairs)


def test_each_context_run_config_is_valid_builds_its_model_and_steps_over_the_bigrams_tokens(tmp_path):
  from tied_embed.core.model import ContextMLP, ContextTransformer, WithHiddenMap, build_model  # noqa: PLC0415
  from tied_embed.train.config import validate  # noqa: PLC0415

  for corpus in plans.corpora(quick=True, subword_corpus="").values():
    pairs = plans.run_config(corpus, plans.MODELS[0], 0.1, 0, {}, 40, 10, tmp_path, 0.1)
    for family, built in (("mlp", ContextMLP), ("transformer", ContextTransformer)):
      tied, untied, tied_w = (plans.run_config(corpus, model, 0.1, 0, {"hidden_l2": 0.01}, 40, 10, tmp_path, 0.1)
                              for model in plans.FAMILIES[family])
      for config in (tied, untied, tied_w):
        validate(config, num_devices=1, memory_bytes=2**50)
        assert config.data.context_length == plans.CONTEXT_LENGTH == 16 and config.model.context == family
        # B / L windows of L: the bigram run's tokens per step (1024), so the same schedule is the same passes
        assert config.train.batch_size * config.data.context_length == pairs.train.batch_size == 1024
        assert config.model.d_model == pairs.model.d_model
      assert (tied.model.tied, untied.model.tied, tied_w.model.tied, tied_w.model.hidden) == (True, False, True,
                                                                                              "linear")
      assert isinstance(build_model(tied), built) and isinstance(build_model(tied_w), WithHiddenMap)
      assert isinstance(build_model(tied_w).embedder, built)
    mlp, transformer = (plans.run_config(corpus, plans.FAMILIES[family][0], 0.1, 0, {}, 40, 10, tmp_path, 0.1)
                        for family in plans.CONTEXTS)
    assert mlp.model.context_k == 3 and (transformer.model.layers, transformer.model.heads) == (1, 2)
  assert [plans.ngram_orders(plans.FAMILIES[family][0]) for family in plans.CONTEXTS] == [(4,), tuple(range(2, 9))]
  assert plans.ngram_orders(plans.MODELS[0]) == () and plans.context_length(plans.MODELS[0]) == 1


def test_a_context_block_cuts_its_steps_only_where_the_plan_says_and_the_flag_wins():
  for (corpus, family), cut in plans.CONTEXT_CUTS.items():
    for field, value in cut.items():
      assert getattr(plans.block_plan(corpus, (family,)), field) == value < getattr(plans.PLANS[corpus], field)
      assert getattr(plans.block_plan(corpus, ("bigram", family)), field) == value  # one plan for the block's runs
  for corpus, plan in plans.PLANS.items():
    assert plans.block_plan(corpus, ("bigram", "controls")) == plan
    assert plans.block_plan(corpus, ("mlp", "transformer"), max_steps=123).max_steps == 123


def test_each_controls_run_config_is_valid_and_builds_its_model(tmp_path):
  from tied_embed.core.model import WithOutputBias, WithSymmetricMap, build_model  # noqa: PLC0415
  from tied_embed.train.config import validate  # noqa: PLC0415

  corpus = plans.corpora(quick=True, subword_corpus="")["bytes"]
  bias, symmetric, half = (plans.run_config(corpus, model, 0.1, 0, {"hidden_l2": 0.01}, 40, 10, tmp_path, 0.1)
                           for model in plans.CONTROLS)
  for config in (bias, symmetric, half):
    validate(config, num_devices=1, memory_bytes=2**50)
  assert (bias.model.tied, bias.model.output_bias, bias.model.hidden, bias.model.hidden_l2) == (True, True, "none", 0)
  assert isinstance(build_model(bias), WithOutputBias)
  assert (symmetric.model.tied, symmetric.model.output_bias, symmetric.model.hidden) == (True, False, "symmetric")
  assert symmetric.model.hidden_l2 == 0.01 and isinstance(build_model(symmetric), WithSymmetricMap)
  # The equal-parameter control: untied at D/2 has tied's 2 · V · D/2 = V · D parameters (configs/text.py: 256, 32).
  assert (half.model.tied, half.model.output_bias, half.model.d_model) == (False, False, 16)
  assert 2 * half.model.vocab_size * half.model.d_model == 256 * 32


@pytest.mark.parametrize(("flag", "keys"), [
    ([], ["tied", "untied", "tied_w"]),  # the default: the bigram family alone, as before the flag
    (["--family=controls"], ["tied_bias", "tied_sym", "untied_half"]),
    (["--family=controls,bigram,controls"], ["tied_bias", "tied_sym", "untied_half", "tied", "untied", "tied_w"]),
])
def test_the_family_flag_picks_the_models_of_one_block(tmp_path, flag, keys):
  from science.when_to_tie import cli  # noqa: PLC0415

  args = cli.parse([*flag, "--quick", "--corpora=bytes", "--out", str(tmp_path / "out")])
  assert [model.key for model in args.models] == keys
  assert not (tmp_path / "out").exists()


class _Summary(types.SimpleNamespace):
  pass


def _fake_sweep(tmp_path, monkeypatch, calls):
  """A Sweep over 50 hand-made pairs whose trainer and checkpoint reader are stand-ins that count trainings."""
  from tied_embed.train import checkpoint, trainer  # noqa: PLC0415

  def train_and_evaluate(config, workdir):
    calls.append(workdir.name)
    workdir.mkdir(parents=True)
    return _Summary(best_step=10, step=20, stopped_early=False, best_select_loss=1.0 + len(calls), best_eval_loss=2.0,
                    loss_floor=1.0, best_eval={}, eval_loss=2.1, select_loss=1.1, param_count=8)

  table = np.eye(4, 2)
  monkeypatch.setattr(trainer, "train_and_evaluate", train_and_evaluate)
  monkeypatch.setattr(checkpoint, "restore", lambda workdir, step: types.SimpleNamespace(
      model=types.SimpleNamespace(scoring_tables=lambda: (table, table))))
  made = sweep.Sweep.__new__(sweep.Sweep)
  corpus = plans.corpora(quick=True, subword_corpus="")["bytes"]
  ids = np.arange(50, dtype=np.int32) % 4
  made.corpus, made.plan, made.keep_runs, made.batch_size, made.out = corpus, plans.QUICK_PLAN, False, 8, tmp_path
  made.data_dir, made.runs_dir = tmp_path / "data", tmp_path / "runs" / "bytes"
  made.finished_path = tmp_path / sweep.FINISHED
  made.finished, made.resumed = sweep.read_finished(made.finished_path), {}
  made.data = types.SimpleNamespace(train_ids=ids, train_next=ids, eval_ids=ids, eval_next=ids, identity="text-v4")
  made.draws = {0: made.data}
  return made


def test_a_killed_sweep_resumes_from_its_record_without_training_finished_runs(tmp_path, monkeypatch):
  calls = []
  first = _fake_sweep(tmp_path, monkeypatch, calls)
  done = first.train(plans.MODELS[0], 1.0, 0, {"weight_decay": 0.1})
  # named by its model, settings, size, seed and schedule (20 steps, an eval every 5), then its config's digest
  assert len(calls) == 1 and calls[0].startswith("tied-weight_decay=0.1-f1-s0-n20-e5-m0-c")
  assert not (first.runs_dir / calls[0]).exists()
  recorded = json.loads((tmp_path / sweep.FINISHED).read_text())
  assert list(recorded.values()) == [json.loads(json.dumps(done))]
  # A new process on the same --out: the finished run comes from the record; a new one (seed 1) is trained.
  again = _fake_sweep(tmp_path, monkeypatch, calls)
  assert again.train(plans.MODELS[0], 1.0, 0, {"weight_decay": 0.1}) == recorded[next(iter(recorded))]
  assert len(calls) == 1
  # and counts the recorded run's own times, so a resumed sweep's report names the whole work's time
  assert again.resumed == {next(iter(recorded)): (done["seconds"], done["cpu_seconds"])}
  again.train(plans.MODELS[0], 1.0, 1, {"weight_decay": 0.1})
  assert len(calls) == 2 and calls[1].startswith("tied-weight_decay=0.1-f1-s1-n20-e5-m0-c")
  # Other steps are another run, never a recorded one: --bytes-steps changed between the two commands.
  again.plan = plans.dataclasses.replace(plans.QUICK_PLAN, max_steps=plans.MIN_STEPS + 40)
  again.train(plans.MODELS[0], 1.0, 0, {"weight_decay": 0.1})
  assert len(calls) == 3
  assert len(json.loads((tmp_path / sweep.FINISHED).read_text())) == 3
  assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_the_record_is_written_whole_and_never_through_a_link_at_its_temporary_name(tmp_path):
  outside = tmp_path / "outside.txt"
  outside.write_text("not the sweep's")
  path = tmp_path / "out" / sweep.FINISHED
  path.parent.mkdir()
  (path.parent / f".{path.name}.{os.getpid()}.tmp").symlink_to(outside)
  sweep.write_json(path, {"run": {"seconds": 1.5}})
  assert json.loads(path.read_text()) == {"run": {"seconds": 1.5}} and outside.read_text() == "not the sweep's"
  path.unlink()
  path.symlink_to(outside)  # a link at the record's own name: replaced by the record, the file it named untouched
  sweep.write_json(path, {})
  assert not path.is_symlink() and json.loads(path.read_text()) == {} and outside.read_text() == "not the sweep's"


def _burn_cpu(seconds):
  """Busy until this process has spent `seconds` more of CPU time (and so at least as much wall time)."""
  until = time.process_time() + seconds
  while time.process_time() < until:
    pass


def test_a_run_stopped_midway_and_resumed_is_timed_from_its_first_start(tmp_path, monkeypatch):
  from tied_embed.train import signals, trainer  # noqa: PLC0415

  made = _fake_sweep(tmp_path, monkeypatch, [])
  finishing = trainer.train_and_evaluate

  def stopped_midway(config, workdir):  # a checkpoint, 0.3 s of CPU, then SIGTERM
    workdir.mkdir(parents=True)
    _burn_cpu(0.3)
    raise signals.Preempted(signal.SIGTERM, 10)

  def resumed(config, workdir):  # the stand-in makes its workdir anew; the sweep has read what the stop kept there
    shutil.rmtree(workdir)
    return finishing(config, workdir)

  monkeypatch.setattr(trainer, "train_and_evaluate", stopped_midway)
  wall = time.perf_counter()
  with pytest.raises(signals.Preempted):
    made.train(plans.MODELS[0], 1.0, 0, {"weight_decay": 0.1})
  monkeypatch.setattr(trainer, "train_and_evaluate", resumed)
  run = made.train(plans.MODELS[0], 1.0, 0, {"weight_decay": 0.1})
  wall = time.perf_counter() - wall
  # both invocations counted: the stopped one's 0.3 s of CPU (and so of wall time) and the resumed one's, no more
  assert 0.3 <= run["cpu_seconds"] and 0.3 <= run["seconds"] <= wall
  assert not made.runs_dir.exists() or not any(made.runs_dir.iterdir())  # the kept seconds went with the workdir
  made.finished = {}  # so a later run of that name starts from 0: within its own call's wall time (not 0.3 s more)
  monkeypatch.setattr(trainer, "train_and_evaluate", finishing)
  wall = time.perf_counter()
  again = made.train(plans.MODELS[0], 1.0, 0, {"weight_decay": 0.1})
  assert again["seconds"] <= time.perf_counter() - wall


@pytest.mark.slow
def test_a_tiny_drawn_sweep_scores_every_seed_on_every_draw_and_reports_paired_intervals(tmp_path):
  from science.when_to_tie import report  # noqa: PLC0415

  corpus = plans.dataclasses.replace(plans.corpora(quick=True, subword_corpus="")["bytes"], split=plans.DRAWN)
  plan = plans.dataclasses.replace(plans.QUICK_PLAN, max_steps=plans.MIN_STEPS)
  grids = plans.corpus_grids(corpus, plans.QUICK_GRIDS)
  models = plans.MODELS[:2]
  entry = sweep.sweep_corpus(corpus, models, (0.01,), (0,), grids, plan, tmp_path, convergence_factor=0)
  for model in models:
    runs = entry["runs"][model.key]["0.01"]
    assert sorted((run["seed"], run["draw"]) for run in runs) == [(0, d) for d in range(plans.DRAWS)]
    assert all(run["num_steps"] == plans.MIN_STEPS for run in runs)
    assert [trial["settings"] for trial in entry["tuning"][model.key]["0.01"]["trials"]] == plans.trials(model, grids)
  by_draw = entry["count"]["0.01"]["by_draw"]
  assert len(set(by_draw.values())) == plans.DRAWS  # each draw's count model is fitted on that draw's pairs
  assert "draw0" in entry["dataset"] and len(entry["kneser_ney"]["0.01"]["by_draw"]) == plans.DRAWS
  # 3 paired differences (1 seed × 3 draws) behind each pick
  assert report.pick(entry, "0.01").margin.n == plans.DRAWS
  results = {"models": [plans.dataclasses.asdict(m) for m in models], "grids": grids, "seeds": [0],
             "tune_seed": plans.TUNE_SEED, "seconds": 1.0, "cpu_seconds": 1.0, "machine": "test", "patience": 0,
             "corpora": {"bytes": entry}}
  assert report.results_problem(json.loads(json.dumps(results))) == ""
  recorded = json.loads((tmp_path / sweep.FINISHED).read_text())
  assert len(recorded) == 2 * (1 + plans.DRAWS)  # each model: one trial, three scored runs


def test_the_method_text_names_the_models_that_tune_the_penalty():
  from science.when_to_tie import report  # noqa: PLC0415

  grids = {"learning_rate": [0.05], "weight_decay": [0.0], "hidden_l2": [0.1]}
  results = {"grids": grids, "tune_seed": plans.TUNE_SEED, "corpora": {"bytes": {"grids": grids}}}
  for family, named in (("bigram", "; tied + W's penalty λ‖W − I‖² from {0.1} is spread"),
                        ("controls", "; tied + S's penalty λ‖W − I‖² from {0.1} is spread")):
    models = [plans.dataclasses.asdict(model) for model in plans.FAMILIES[family]]
    assert named in report._tuning_text({**results, "models": models})
  untuned = [plans.dataclasses.asdict(plans.CONTROLS[0])]
  assert "penalty" not in report._tuning_text({**results, "models": untuned})
