"""Inspection: report numbers on hand-made tables, and the CLI on the shared smoke run."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import matplotlib.image
import numpy as np
import pytest

from tied_embed.inspection import report
from tied_embed.inspection.cli import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Hand-made tied table: S = E·Eᵀ = [[1, 0, 3], [0, 4, 0], [3, 0, 9]].
TABLE = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0]])


def test_own_score_is_squared_norm_ranked_within_its_row():
  scores = TABLE @ TABLE.T
  np.testing.assert_allclose(scores, [[1, 0, 3], [0, 4, 0], [3, 0, 9]])
  assert report.own_score_rank(scores, 0) == (1.0, 2)  # row [1, 0, 3]: 3 beats the own score 1
  assert report.own_score_rank(scores, 1) == (4.0, 1)
  assert report.own_score_rank(scores, 2) == (9.0, 1)


def test_top_next_gives_softmax_probabilities_next_to_the_true_ones():
  true_row = np.array([np.log(0.5), np.log(0.5), -np.inf])  # -inf: a never-seen pair, probability 0
  top = report.top_next(np.array([1.0, 0.0, 3.0]), true_row, k=2)
  denominator = math.e + 1 + math.e**3
  assert [entry["id"] for entry in top] == [2, 0]
  assert top[0]["model_prob"] == pytest.approx(math.e**3 / denominator)
  assert top[1]["model_prob"] == pytest.approx(math.e / denominator)
  assert [entry["true_prob"] for entry in top] == [0.0, pytest.approx(0.5)]
  unknown = report.top_next(np.zeros(3), np.full(3, np.nan), k=1)
  assert unknown[0]["true_prob"] is None


def test_fit_is_exact_when_scores_are_true_log_probs_up_to_row_constants():
  rng = np.random.default_rng(0)
  scores = rng.normal(size=(5, 5))
  true = scores - np.log(np.exp(scores).sum(axis=1, keepdims=True)) + 0.0
  fit = report.fit_to_truth(scores + rng.normal(size=(5, 1)), true)
  assert fit["correlation"] == pytest.approx(1.0)
  assert fit["mean_abs_error"] == pytest.approx(0.0, abs=1e-12)
  assert (fit["entries"], fit["rows"]) == (25, 5)


def test_fit_skips_never_seen_entries_and_unknown_rows():
  scores = np.array([[0.0, 1.0, 2.0], [5.0, 0.0, 0.0], [1.0, 2.0, 0.0], [3.0, 1.0, 2.0]])
  true = np.array([[np.log(0.5), np.log(0.5), -np.inf], [np.nan] * 3, [np.log(0.25), np.log(0.75), -np.inf],
                   [0.0, -np.inf, -np.inf]])
  fit = report.fit_to_truth(scores, true)
  # Row 0 centred on its two finite entries: learned [-0.5, 0.5], true [0, 0]; row 2: learned [-0.5, 0.5],
  # true ±ln(3)/2. Row 1 is skipped, and row 3 too: one finite entry centres to 0 against 0, no fit to read.
  half_ln3 = math.log(3) / 2
  assert (fit["entries"], fit["rows"]) == (4, 2)
  assert fit["mean_abs_error"] == pytest.approx((0.5 + 0.5 + 2 * abs(0.5 - half_ln3)) / 4)
  learned, truth = np.array([-0.5, 0.5, -0.5, 0.5]), np.array([0, 0, -half_ln3, half_ln3])
  assert fit["correlation"] == pytest.approx(np.corrcoef(learned, truth)[0, 1])


def test_the_gap_is_shown_in_nats_and_as_a_percentage_of_the_floor():
  from tied_embed.inspection.text import _gap  # noqa: PLC0415

  assert _gap({"gap": 0.05, "loss_floor": 2.0}) == "0.0500 (2.50% of floor)"  # 0.05 / 2 = 2.5%
  assert _gap({"gap": 0.05, "loss_floor": 0.0}) == "0.0500" and _gap({"gap": None, "loss_floor": 2.0}) == "n/a"


def test_provenance_summary_by_hand():
  summary = report.provenance_summary(np.array([2.0, 0.0, 1.0, 0.0]), np.array([2.0, 3.0, 3.0, 0.0]), k=2)
  assert summary["projection_only"] == [1]
  assert (summary["lookup_sum"], summary["projection_sum"]) == (3.0, 8.0)
  # Shares: row 0 2/4, row 1 0/3, row 2 1/4; row 3 got nothing and is left out.
  assert summary["lookup_share"] == pytest.approx(
      {"min": 0.0, "p25": 0.125, "median": 0.25, "p75": 0.375, "max": 0.5, "mean": 0.25}
  )
  assert [row["id"] for row in summary["most_lookup"]] == [0, 2]
  assert [row["id"] for row in summary["most_projection"]] == [2, 0]  # looked-up rows only


def test_untied_scores_use_input_times_output_and_say_so():
  output = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
  built = report.build_report(
      TABLE, output, tied=False, source="planted", true_log_probs=np.full((3, 3), np.log(1 / 3)),
      lookup_total=np.ones(3), projection_total=np.ones(3), tokens=[2], top_k=3,
  )
  assert "untied" in built["scores"]
  assert built["tokens"][0]["own_score"] == pytest.approx(3.0)  # input[2]·output[2] = 3·1 + 0·1
  assert built["parameters"] == {"table_shape": [3, 2], "tied": 6, "untied": 12, "saved": 6, "this_model": 12}


def test_the_own_score_is_named_as_what_it_is():
  # plain tables: |e_i|² tied, in_i·out_i untied; a model whose S is more than the tables (W, a bias): S's diagonal
  common = dict(source="planted", true_log_probs=np.full((3, 3), np.log(1 / 3)), lookup_total=np.ones(3),
                projection_total=np.ones(3), tokens=[2], top_k=3)
  assert report.build_report(TABLE, TABLE, tied=True, **common)["own_score_name"] == "|e_i|²"
  assert report.build_report(TABLE, TABLE[::-1], tied=False, **common)["own_score_name"] == "in_i·out_i"
  with_w = report.build_report(TABLE, TABLE, tied=True, scores="E·W·Eᵀ (tied table with a hidden map W)", **common)
  assert with_w["own_score_name"] == "S_ii"


def test_text_tokens_are_shown_as_printable_characters():
  from tied_embed.data import sources  # noqa: PLC0415

  assert [sources.get("text").token_label(t) for t in (97, 32, 10, 0xC3)] == ["'a'", "' '", "'\\n'", "'\\xc3'"]
  assert sources.get("planted").token_label(97) == "97"


def test_event_reader_keeps_the_later_write_of_a_repeated_step(tmp_path):
  from tied_embed.train.events import EventWriter
  from tied_embed.train.metrics import read_scalars, value_at

  first = EventWriter(tmp_path)
  first.write_scalars(1, {"train/loss": 3.0})
  first.write_scalars(2, {"train/loss": 2.5, "eval/loss": 2.7})
  first.close()
  second = EventWriter(tmp_path)  # a resumed run rewrites step 2
  second.write_scalars(2, {"train/loss": 2.4})
  second.close()
  series = read_scalars(tmp_path, ("train/loss", "eval/loss"))
  np.testing.assert_array_equal(series["train/loss"][0], [1, 2])
  np.testing.assert_allclose(series["train/loss"][1], [3.0, 2.4])
  assert value_at(series["eval/loss"], 5) == {"step": 2, "value": pytest.approx(2.7)}
  assert value_at(series["eval/loss"], 1) is None


def test_pictures_are_valid_pngs(tmp_path):
  from tied_embed.inspection import plots

  true = np.log(np.full((4, 4), 0.25))
  true[0, 1] = -np.inf
  figures = {
      "heatmaps": plots.heatmaps_figure(np.log(np.full((4, 4), 0.25)), true, "true"),
      "heatmaps_zoom": plots.heatmaps_figure(np.log(np.full((4, 4), 0.25)), true, "true", np.array([0, 2, 3])),
      "loss_curves": plots.loss_curves_figure({"train/loss": (np.arange(3), np.array([3.0, 2.0, 1.5]))}, 1.4, 2),
      "provenance": plots.provenance_figure(np.array([0.0, 1, 2, 3]), np.ones(4), np.array([0, 1, 10, 100])),
  }
  paths = plots.write_pictures(tmp_path, figures, step=2)
  for name in figures:
    assert_valid_png(tmp_path / paths[name])
  assert list(tmp_path.glob("events.out.tfevents.*"))


def assert_valid_png(path):
  assert path.read_bytes()[:8] == PNG_SIGNATURE
  pixels = matplotlib.image.imread(path)
  assert pixels.ndim == 3 and 200 <= pixels.shape[0] <= 2000 and 200 <= pixels.shape[1] <= 3000
  assert pixels[..., :3].std() > 0.01  # not a blank canvas


# --- On the shared smoke run (a copy, so the report/ folder written here never touches the original). ---

TOKENS = [0, 1, 31]
TOP_K = 3


@pytest.fixture(scope="module")
def inspected(smoke_workdir, tmp_path_factory):
  """(workdir copy, report dict, Restored, BigramData) for the latest smoke checkpoint."""
  from tied_embed.data import bigram as data
  from tied_embed.inspection.inspector import inspect_run
  from tied_embed.train import checkpoint

  workdir = tmp_path_factory.mktemp("inspect") / "run"
  shutil.copytree(smoke_workdir, workdir)
  built = inspect_run(workdir, tokens=TOKENS, top_k=TOP_K)
  restored = checkpoint.restore(workdir)
  return workdir, built, restored, data.load_bigram_data(restored.config, str(workdir))


def test_token_numbers_match_numpy_on_the_restored_table(inspected):
  _, built, restored, bigrams = inspected
  table = np.asarray(restored.model.embedding[...], np.float64)
  for token, entry in zip(TOKENS, built["tokens"], strict=True):
    scores = table[token] @ table.T
    own = scores[token]  # the row's own entry, by the same formula as the rest of the row (a separately summed
    # sum(E[t]**2) can round one ulp apart from it, and the row would then beat or trail itself)
    assert entry["own_score"] == pytest.approx(np.sum(table[token] ** 2), rel=1e-6)
    # The report's matmul may round another way than this one: a score within `near` of the own score may
    # rank either side of it, anything farther must be counted exactly.
    near = 1e-9 * np.abs(scores).max()
    assert 1 + np.count_nonzero(scores > own + near) <= entry["own_rank"] <= 1 + np.count_nonzero(scores > own - near)
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    ids = [e["id"] for e in entry["top"]]
    # The top k by probability: their probabilities are the k largest (ties may come in either order).
    np.testing.assert_allclose(probs[ids], np.sort(probs)[::-1][:TOP_K], rtol=1e-6)
    np.testing.assert_allclose([e["model_prob"] for e in entry["top"]], probs[ids], rtol=1e-6)
    np.testing.assert_allclose([e["true_prob"] for e in entry["top"]], np.exp(bigrams.true_log_probs[token, ids]))


def centred_fit(scores, true_log_probs):
  """(correlation, mean abs error) of row-centred scores vs row-centred finite true log-probs, via nanmean."""
  truth = np.where(np.isfinite(true_log_probs), true_log_probs, np.nan)
  learned = np.where(np.isnan(truth), np.nan, scores)
  truth_c = (truth - np.nanmean(truth, axis=1, keepdims=True))[~np.isnan(truth)]
  learned_c = (learned - np.nanmean(learned, axis=1, keepdims=True))[~np.isnan(truth)]
  return np.corrcoef(truth_c, learned_c)[0, 1], np.abs(truth_c - learned_c).mean()


def test_fit_matches_numpy_on_the_restored_table(inspected):
  import jax

  from tied_embed.core.model import init_table

  _, built, restored, bigrams = inspected
  table = np.asarray(restored.model.embedding[...], np.float64)
  correlation, mean_abs_error = centred_fit(table @ table.T, bigrams.true_log_probs)
  assert built["fit"]["correlation"] == pytest.approx(correlation, rel=1e-6)
  assert built["fit"]["mean_abs_error"] == pytest.approx(mean_abs_error, rel=1e-6)
  fresh = np.asarray(init_table(jax.random.key(1), *table.shape), np.float64)
  assert correlation > centred_fit(fresh @ fresh.T, bigrams.true_log_probs)[0] + 0.2  # training learned structure


def test_run_parameters_and_provenance_match_the_checkpoint_and_events(inspected):
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  from tensorboard.util.tensor_util import make_ndarray

  workdir, built, restored, bigrams = inspected
  vocab_size, d_model = restored.model.embedding[...].shape
  assert built["step"] == restored.step == restored.config.train.num_steps
  assert built["parameters"]["table_shape"] == [vocab_size, d_model]
  counts = built["parameters"]
  assert (counts["tied"], counts["untied"], counts["saved"]) == (vocab_size * d_model, 2 * vocab_size * d_model,
                                                                 vocab_size * d_model)
  events = EventAccumulator(str(workdir)).Reload()
  eval_events = [e for e in events.Tensors("eval/loss") if e.step <= restored.step]
  eval_loss = float(make_ndarray(max(eval_events, key=lambda e: (e.step, e.wall_time)).tensor_proto))
  assert built["run"]["eval_loss"]["value"] == pytest.approx(eval_loss)
  assert built["run"]["gap"] == pytest.approx(eval_loss - bigrams.loss_floor)
  lookup, projection = restored.provenance["lookup_total"], restored.provenance["projection_total"]
  assert built["provenance"]["projection_only"] == [i for i in range(vocab_size) if lookup[i] == 0 < projection[i]]
  looked = [i for i in range(vocab_size) if lookup[i] + projection[i] > 0]
  shares = {i: lookup[i] / (lookup[i] + projection[i]) for i in looked}
  assert built["provenance"]["lookup_share"]["median"] == pytest.approx(np.median(list(shares.values())), rel=1e-5)
  assert built["provenance"]["most_lookup"][0]["id"] == max(shares, key=shares.get)


def test_report_pictures_are_valid_pngs_linked_from_report_md(inspected):
  workdir, built, _, _ = inspected
  report_dir = workdir / "report"
  markdown = (report_dir / "report.md").read_text()
  assert set(built["pictures"]) == {"heatmaps", "loss_curves", "provenance"}
  for path in built["pictures"].values():
    assert f"]({path})" in markdown
    assert_valid_png(report_dir / path)
  assert list(report_dir.glob("events.out.tfevents.*"))  # the same pictures as TensorBoard images


def test_json_output_parses_and_matches_the_library_report(inspected, capsys):
  workdir, built, _, _ = inspected
  assert main(["--workdir", str(workdir), "--tokens", ",".join(map(str, TOKENS)), "--top-k", str(TOP_K), "--json"]) == 0
  assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(built))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--step", "7"], "--step=7 is not allowed: expected one of the saved steps "),
        (["--tokens", "1000"], "token ids in [0, "),
        (["--tokens", "32"], "--tokens=32 is not allowed: expected token ids in [0, 32)"),  # V = 32: ids end at 31
        (["--top-k", "33"], "--top-k=33 is not allowed: expected an integer in [1, 32]"),
        (["--tokens", "-1"], "--tokens=-1"),
        (["--tokens", "3,x"], "comma-separated integer token ids"),
        (["--top-k", "0"], "--top-k=0"),
        (["--next", "the", "--seed", "-1"], "--seed=-1 is not allowed: expected an integer in [0, 2**31 - 1]"),
        (["--next", "the", "--generate", "1000000000"],
         "--generate=1000000000 is not allowed: expected an integer in [0, 10_000]"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(inspected, capsys, flags, message):
  workdir = inspected[0]
  before = (workdir / "report" / "report.md").stat().st_mtime_ns
  assert main(["--workdir", str(workdir), *flags]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: ") and message in err and "\n" not in err
  if flags[0] == "--step":
    from tied_embed.train.checkpoint import available_steps

    assert err.endswith(", ".join(map(str, available_steps(workdir))))
  assert (workdir / "report" / "report.md").stat().st_mtime_ns == before  # nothing rewritten


def test_without_tokens_the_report_shows_the_most_frequent_inputs_and_takes_top_k_up_to_v(inspected):
  from tied_embed.inspection.inspector import inspect_run  # noqa: PLC0415

  workdir, _, restored, bigrams = inspected
  vocab_size = restored.model.vocab_size
  assert vocab_size == 32
  built = inspect_run(workdir, top_k=vocab_size, pictures=False)  # every token in its top k: allowed
  counts = np.bincount(bigrams.train_ids, minlength=vocab_size)  # how often each token is a train input
  assert [token["id"] for token in built["tokens"]] == np.argsort(-counts, kind="stable")[:3].tolist()
  assert all(len(token["top"]) == vocab_size for token in built["tokens"])


def test_cli_process_on_workdir_without_checkpoints_exits_2_without_traceback(tmp_path):
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
  result = subprocess.run(
      [sys.executable, "-m", "tied_embed.inspection", "--workdir", str(tmp_path)], capture_output=True, text=True,
      env=env,
  )
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [f"error: --workdir={str(tmp_path)!r} has no checkpoints"
                                                 f" (expected {tmp_path / 'checkpoints'}/<step>/)"]
  assert result.stdout == "" and list(tmp_path.iterdir()) == []


# --- Read-only and self-contained: each test on its own copy of the smoke run. ---


@pytest.fixture()
def run_copy(smoke_workdir, tmp_path):
  """A fresh copy of the smoke workdir, without the report/ an earlier inspection may have left."""
  workdir = tmp_path / "run"
  shutil.copytree(smoke_workdir, workdir, ignore=shutil.ignore_patterns("report"))
  return workdir


def _tables_part(built):
  """The report without what depends on where and how it was written."""
  return {key: value for key, value in built.items() if key not in ("workdir", "pictures", "report_md", "warnings")}


def test_recorded_data_makes_inspection_need_nothing_outside_the_workdir(inspected, run_copy, monkeypatch):
  from tied_embed.data import bigram as data
  from tied_embed.data import record
  from tied_embed.inspection.inspector import inspect_run
  from tied_embed.train import checkpoint

  config = checkpoint.restore(run_copy, arrays=False).config
  path = data.record_for_inspection(data.load_bigram_data(config, run_copy), run_copy)
  assert path == run_copy / "report_data.npz"
  vocab_size, d_model = config.model.vocab_size, config.model.d_model
  assert path.stat().st_size < 8 * vocab_size * (d_model + 2) + 4096  # the hidden table, the counts, a header
  shutil.rmtree(run_copy / "data")

  def no_dataset(*args, **kwargs):
    raise AssertionError("inspection read the dataset")

  monkeypatch.setattr(data, "load_bigram_data", no_dataset)
  monkeypatch.setattr(data, "load", no_dataset)

  def outside_report():
    return sorted(p for p in run_copy.rglob("*") if "report" not in p.relative_to(run_copy).parts)

  before = outside_report()
  built = inspect_run(run_copy, tokens=TOKENS, top_k=TOP_K)
  assert json.loads(json.dumps(_tables_part(built))) == json.loads(json.dumps(_tables_part(inspected[1])))
  assert built["warnings"] == []
  assert outside_report() == before
  facts = record.read(run_copy)
  np.testing.assert_array_equal(np.asarray(facts.true_log_probs), np.asarray(inspected[3].true_log_probs))


def test_text_record_round_trips_the_empirical_table_without_the_file(tmp_path):
  from helpers import make_config

  from tied_embed.data import bigram as data
  from tied_embed.data import record

  path = tmp_path / "corpus.txt"
  path.write_bytes(("the cat sat on the mat; ünïcödé bytes too. " * 7).encode())
  config = make_config(source="text", text_path=str(path))
  bigrams = data.load_bigram_data(config, tmp_path / "work")
  data.record_for_inspection(bigrams, tmp_path)
  path.unlink()  # inspection must not need the text file
  facts = record.read(tmp_path)
  assert (facts.source, facts.reference_name, facts.vocab_size) == ("text", "empirical", 256)
  assert (facts.loss_floor, facts.identity) == (bigrams.loss_floor, bigrams.identity)
  assert facts.identity.startswith("text-v256-sha")
  np.testing.assert_array_equal(np.asarray(facts.true_log_probs), np.asarray(bigrams.true_log_probs))
  np.testing.assert_array_equal(facts.input_counts, bigrams.input_counts)


def test_symlinked_report_files_are_replaced_never_written_through(run_copy, tmp_path):
  from tied_embed.inspection.inspector import inspect_run

  outside = tmp_path / "outside.md"
  outside.write_text("precious")
  (run_copy / "report").mkdir()
  (run_copy / "report" / "report.md").symlink_to(outside)
  (run_copy / "report" / "heatmaps.png").symlink_to(outside)
  built = inspect_run(run_copy, tokens=[0], top_k=2)
  assert outside.read_text() == "precious"
  assert not (run_copy / "report" / "report.md").is_symlink()
  assert_valid_png(run_copy / "report" / built["pictures"]["heatmaps"])


def test_symlinked_report_dir_is_not_written_and_the_report_still_prints(run_copy, tmp_path, capsys):
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  (run_copy / "report").symlink_to(elsewhere)
  assert main(["--workdir", str(run_copy), "--json"]) == 0
  captured = capsys.readouterr()
  assert "pictures" not in json.loads(captured.out)
  assert "warning: pictures not written:" in captured.err and "symbolic link" in captured.err
  assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_unwritable_report_dir_still_prints_the_report_and_says_so(run_copy, capsys, json_flag):
  (run_copy / "report").write_text("a file where the report directory would go")  # as a read-only workdir would
  assert main(["--workdir", str(run_copy), "--tokens", "0", *json_flag]) == 0
  captured = capsys.readouterr()
  assert captured.out.strip() and "warning: pictures not written:" in captured.err
  if json_flag:
    assert json.loads(captured.out)["step"] == 60


def test_damaged_latest_checkpoint_falls_back_to_the_newest_readable_one(run_copy, capsys):
  (run_copy / "checkpoints" / "60" / "config" / "metadata").write_text("{x")
  assert main(["--workdir", str(run_copy), "--json", "--no-pictures"]) == 0
  captured = capsys.readouterr()
  assert json.loads(captured.out)["step"] == 40
  assert "warning: checkpoint 60" in captured.err and "showing an older one" in captured.err
  assert "Traceback" not in captured.err
  assert main(["--workdir", str(run_copy), "--step", "60"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: checkpoint 60") and "\n" not in err


def test_foreign_checkpoints_are_one_line_and_exit_2(run_copy, capsys):
  shutil.rmtree(run_copy / "checkpoints")
  (run_copy / "checkpoints" / "7").mkdir(parents=True)
  (run_copy / "checkpoints" / "7" / "notes.txt").write_text("not a checkpoint")
  assert main(["--workdir", str(run_copy)]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: ") and "\n" not in err


def test_eval_older_than_the_checkpoint_is_warned(run_copy, capsys):
  for events in run_copy.glob("events.out.tfevents.*"):
    events.unlink()
  assert main(["--workdir", str(run_copy), "--no-pictures"]) == 0
  err = capsys.readouterr().err
  assert "warning: the newest eval/loss in the events at or before step 60 is none" in err


@pytest.mark.parametrize("tokens", ["1_0", "\u0661", "\uff11", "+1", "0x1"])
def test_only_ascii_decimal_tokens_are_ids(tokens):
  from tied_embed.inspection.cli import parse_token_items

  assert parse_token_items(tokens) == [tokens]  # a token string of the run's vocabulary, never int()'s reading of it
  assert parse_token_items("3, 17,42") == [3, 17, 42]


def test_step_must_be_ascii_decimal(run_copy, capsys):
  assert main(["--workdir", str(run_copy), "--step", "6_0"]) == 2
  assert "invalid int value: '6_0'" in capsys.readouterr().err


def test_inspecting_again_replaces_the_pictures_of_that_step(run_copy):
  from tied_embed.inspection.inspector import inspect_run

  for _ in range(3):
    built = inspect_run(run_copy, tokens=[0], top_k=2)
  report_dir = run_copy / "report"
  assert len(list(report_dir.glob("events.out.tfevents.*"))) == 1
  inspect_run(run_copy, step=40, tokens=[0], top_k=2)
  assert len(list(report_dir.glob("events.out.tfevents.*"))) == 2  # one per inspected step
  markdown = (report_dir / "report.md").read_text()
  assert "report.md" not in markdown and built["report_md"].endswith("report.md")


def test_no_pictures_writes_nothing(run_copy, capsys):
  before = sorted(p.relative_to(run_copy) for p in run_copy.rglob("*"))
  assert main(["--workdir", str(run_copy), "--no-pictures"]) == 0
  assert sorted(p.relative_to(run_copy) for p in run_copy.rglob("*")) == before
  assert "\npictures " not in capsys.readouterr().out


def test_report_memory_grows_with_the_rows_shown_not_v_squared():
  import tracemalloc

  from tied_embed.data.sources.synthetic import table_rows

  vocab_size, d_model = 4096, 8
  rng = np.random.default_rng(0)
  hidden, table = rng.normal(size=(vocab_size, d_model)), rng.normal(size=(vocab_size, d_model))
  tracemalloc.start()
  try:
    built = report.build_report(
        table, table, tied=True, source="planted", true_log_probs=table_rows(hidden, hidden),
        lookup_total=np.ones(vocab_size), projection_total=np.ones(vocab_size), tokens=[0, 5], top_k=3,
    )
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  assert peak < vocab_size**2 * 8 / 4  # a (V, V) float64 table would be 128 MB
  assert built["fit"]["entries"] == vocab_size**2 and -1 <= built["fit"]["correlation"] <= 1


def test_garbled_report_data_falls_back_to_the_dataset_with_a_warning(inspected, run_copy):
  from tied_embed.inspection.inspector import inspect_run

  (run_copy / "report_data.npz").write_bytes(b"PK\x03\x04 not a zip archive")
  built = inspect_run(run_copy, tokens=TOKENS, top_k=TOP_K, pictures=False)
  assert any("report_data.npz cannot be read" in warning for warning in built["warnings"])
  assert json.loads(json.dumps(_tables_part(built))) == json.loads(json.dumps(_tables_part(inspected[1])))


def test_without_report_data_and_dataset_inspection_says_what_is_missing_and_writes_nothing(run_copy, capsys):
  (run_copy / "report_data.npz").unlink()
  shutil.rmtree(run_copy / "data")
  before = sorted(p.relative_to(run_copy) for p in run_copy.rglob("*"))
  assert main(["--workdir", str(run_copy), "--no-pictures"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith(f"error: --workdir={str(run_copy)!r} has no usable report_data.npz") and "\n" not in err
  assert f"{run_copy / 'data'}" in err and "is missing" in err
  assert sorted(p.relative_to(run_copy) for p in run_copy.rglob("*")) == before  # no dataset made, no lock taken


def test_without_report_data_inspection_reads_the_cached_dataset_and_writes_nothing(inspected, run_copy, capsys):
  (run_copy / "report_data.npz").unlink()
  before = {p.relative_to(run_copy): p.stat().st_mtime_ns for p in run_copy.rglob("*")}
  assert main(["--workdir", str(run_copy), "--tokens", ",".join(map(str, TOKENS)), "--top-k", str(TOP_K), "--json",
               "--no-pictures"]) == 0
  assert _tables_part(json.loads(capsys.readouterr().out)) == json.loads(json.dumps(_tables_part(inspected[1])))
  assert {p.relative_to(run_copy): p.stat().st_mtime_ns for p in run_copy.rglob("*")} == before


def test_path_cosines_match_hand_values():
  from tied_embed.inspection.report import path_cosines  # noqa: PLC0415

  lookup = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [3.0, 4.0]])
  projection = np.array([[2.0, 0.0], [0.0, 5.0], [-1.0, 0.0], [1.0, 1.0], [4.0, 3.0]])
  np.testing.assert_allclose(path_cosines(lookup, projection), [1.0, 0.0, -1.0, 0.0, 24 / 25])


def test_report_gives_each_tracked_rows_path_cosine(smoke_run):
  from tied_embed.inspection.inspector import inspect_run  # noqa: PLC0415
  from tied_embed.train import checkpoint  # noqa: PLC0415

  report = inspect_run(smoke_run.workdir, pictures=False)
  restored = checkpoint.restore(smoke_run.workdir)
  lookup, projection = restored.path_directions["lookup"], restored.path_directions["projection"]
  rows = report["path_directions"]["rows"]
  assert [row["id"] for row in rows] == restored.path_directions["rows"].tolist()
  for row, g_lookup, g_projection in zip(rows, lookup, projection, strict=True):
    expected = float(g_lookup @ g_projection / (np.linalg.norm(g_lookup) * np.linalg.norm(g_projection)))
    assert row["cosine"] == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_provenance_picture_rings_the_rows_that_learned_only_through_the_projection():
  from tied_embed.inspection import plots  # noqa: PLC0415

  counts = np.array([0, 0, 0, 5, 50, 500], np.float64)
  lookup = np.array([0.0, 0.0, 0.0, 0.1, 1.0, 10.0])  # three rows never looked up
  projection = np.array([2.0, 3.0, 0.0, 2.0, 2.0, 2.0])  # one of them got no gradient at all
  fig = plots.provenance_figure(lookup, projection, counts)
  labels = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
  assert labels[-1] == "projection only (2 rows)"
  ringed = fig.axes[0].collections[-1].get_offsets()
  np.testing.assert_array_equal(np.asarray(ringed), [[0.0, 2.0], [0.0, 3.0]])
  # each path's points: every row whose total is above 0, the ones below 1 too (a log axis shows them)
  looked_up, projected = (np.asarray(fig.axes[0].collections[i].get_offsets()) for i in (0, 1))
  np.testing.assert_array_equal(looked_up, [[5.0, 0.1], [50.0, 1.0], [500.0, 10.0]])
  np.testing.assert_array_equal(projected, [[0.0, 2.0], [0.0, 3.0], [5.0, 2.0], [50.0, 2.0], [500.0, 2.0]])


def test_report_gives_the_tasks_asymmetry_budget(smoke_run):
  from tied_embed.inspection.inspector import inspect_run  # noqa: PLC0415
  from tied_embed.inspection.text import format_text  # noqa: PLC0415

  report = inspect_run(smoke_run.workdir, pictures=False)
  assert report["asymmetry"]["antisymmetric_share"] < 1e-9  # planted: a symmetric task
  assert report["asymmetry"]["tokens"] == smoke_run.config.model.vocab_size
  assert "asymmetry 0.000 of the task's row-centred log-probabilities is antisymmetric" in format_text(report)


def test_a_fifo_among_the_report_event_files_is_replaced_not_read(tmp_path):
  import os  # noqa: PLC0415

  from matplotlib.figure import Figure  # noqa: PLC0415

  from tied_embed.inspection.plots import write_pictures  # noqa: PLC0415

  report_dir = tmp_path / "report"
  report_dir.mkdir()
  os.mkfifo(report_dir / "events.out.tfevents.0.fifo")  # TensorBoard's reader would wait on it for ever
  assert write_pictures(report_dir, {"blank": Figure(figsize=(1, 1))}, step=5) == {"blank": "blank.png"}
  assert not (report_dir / "events.out.tfevents.0.fifo").exists()
  assert len(list(report_dir.glob("events.out.tfevents.*"))) == 1 and (report_dir / "blank.png").is_file()


def test_a_zoomed_heatmap_names_its_tokens_not_their_positions():
  from tied_embed.inspection.plots import heatmaps_figure  # noqa: PLC0415

  table = np.log(np.full((4, 4), 0.25))
  fig = heatmaps_figure(table, table, "true", np.array([0, 2, 3]))  # three of V = 4 shown: positions 0, 1, 2
  ticks = [text.get_text() for text in fig.axes[0].get_xticklabels()]
  assert ticks == ["0", "2", "3"]  # the tokens at positions 0, 1 and 2


def test_sampling_draws_from_the_tempered_softmax_with_the_given_seed():
  # by hand in NumPy: each step's probabilities softmax(row / T), drawn with default_rng(seed).choice
  rng_table = np.random.default_rng(11).standard_normal((6, 6))
  for seed in (0, 1):
    rng, tokens = np.random.default_rng(seed), [2]
    for _ in range(8):
      logits = rng_table[tokens[-1]] / 0.7
      probs = np.exp(logits - logits.max())
      tokens.append(int(rng.choice(6, p=probs / probs.sum())))
    assert report.sample_after(lambda ids: rng_table[ids[-1]], [2], 8, 0.7, seed) == tokens[1:], seed
