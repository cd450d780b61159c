"""science/when_to_tie.py end to end in its --quick form: every model × size runs, and the results add up."""

import json

import numpy as np
import pytest

from science import when_to_tie
from tied_embed.run.config_validation import validate_config


def test_run_configs_are_valid_and_differ_only_where_they_should(tmp_path):
  corpus = when_to_tie.corpora(quick=True, subword_corpus="")["bytes"]
  for model in when_to_tie.MODELS:
    config = when_to_tie.run_config(corpus, model, 0.03, 1, 0.01, 40, tmp_path)
    validate_config(config)
    assert (config.model.tied, config.seed, config.data.train_fraction) == (model.tied, 1, 0.03)
    assert config.train.num_steps == config.train.eval_every == config.train.checkpoint_every == 40
    assert config.model.hidden == model.hidden


def test_quick_sweep_writes_tables_and_plot(tmp_path, capsys):
  results = when_to_tie.main(["--quick", "--corpora", "bytes", "--out", str(tmp_path), "--no-compile-cache"])
  entry = results["corpora"]["bytes"]
  assert list(entry["runs"]) == ["tied", "untied", "tied_w", "tied_w_l2"]
  vocab_size, d_model = 256, entry["d_model"]
  params = {"tied": vocab_size * d_model, "untied": 2 * vocab_size * d_model,
            "tied_w": vocab_size * d_model + d_model**2, "tied_w_l2": vocab_size * d_model + d_model**2}
  for key, by_fraction in entry["runs"].items():
    assert list(by_fraction) == ["0.1"]
    for runs in by_fraction.values():
      (run,) = runs  # one seed
      assert run["gap_percent"] == pytest.approx(100 * (run["eval_loss"] - entry["floor"]) / entry["floor"])
      assert np.isfinite(run["loss_rare_inputs"]) and run["loss_rare_inputs"] > 0
      assert run["param_count"] == params[key]
  assert entry["eval_pairs"] > 0 and entry["train_pairs"] > entry["holdout_pairs"] > 0
  selection = entry["l2_selection"]["0.1"]
  assert selection["trained_on_fraction"] == 0.1  # its runs trained on the first 10%; the held-out tail is the last
  assert selection["chosen"] == min(when_to_tie.L2_GRID[1:], key=lambda l2: selection["holdout_loss"][f"{l2:g}"])
  assert when_to_tie.HOLDOUT_SHARE == 0.1  # so a selection for any size trains on at most the first 90%
  written = json.loads((tmp_path / "when_to_tie.json").read_text())
  assert written["corpora"]["bytes"]["runs"] == json.loads(json.dumps(entry["runs"]))
  markdown = (tmp_path / "when_to_tie.md").read_text()
  assert "| 10% (" in markdown and "when_to_tie.png" in markdown
  assert (tmp_path / "when_to_tie.png").read_bytes()[:4] == b"\x89PNG"
  assert "wall time" in capsys.readouterr().out
