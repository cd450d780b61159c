"""The bench's timing loop: turns, the untimed call before each timed one, and the report saying how it timed."""

from __future__ import annotations

import pytest

from benchmarks import report, workload

TINY_CONTEXT = {"model.vocab_size": 64, "model.d_model": 16, "data.context_length": 4, "train.batch_size": 2}


def test_each_turn_times_the_last_of_its_back_to_back_calls():
  calls = {"a": 0, "b": 0}

  def counter(name):
    def call():
      calls[name] += 1
    return call

  times = workload.interleaved_times({name: counter(name) for name in calls}, rounds=3, settle_s=0.0, calls_per_turn=2)
  assert {name: len(values) for name, values in times.items()} == {"a": 3, "b": 3}
  assert calls == {"a": 1 + 3 * 2, "b": 1 + 3 * 2}  # one warm-up call, then two calls per turn


def test_the_report_says_how_the_calls_were_timed():
  assert "the last of 2 back-to-back calls" in report._turns({"train_step": {"calls_per_turn": 2}})
  assert report._turns({"train_step": {}}) == "medians of calls taken in turns."  # a run that does not record it


def test_the_report_writes_a_runs_table_into_its_cpu_kinds_block_only(tmp_path, monkeypatch):
  import json  # noqa: PLC0415
  import sys  # noqa: PLC0415

  amd, intel = report.markers("amd"), report.markers("intel")
  doc = tmp_path / "performance.md"
  doc.write_text(f"{intel[0]}\nIntel table\n{intel[1]}\n{amd[0]}\nold\n{amd[1]}\n")
  machine = {"cpu": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "threads": 2, "jax": "0", "torch": "0",
             "date": "2026-12-05", "load_average": 10.0}
  hand = {"v_term_mib": 4.0, "first_call": {"extra_mib": 9.0}, "ahead": {"extra_mib": 8.0},
          "torch_chunked": {"extra_mib": 7.0}}
  run = {"machine": machine, "step_memory": {"D": 256, "T": 8192, "chunk_size": 256, "load_average": [10.0],
                                             "by_vocab": {"2048": hand}}}
  (tmp_path / "a.json").write_text(json.dumps(run))
  monkeypatch.setattr(sys, "argv", ["report.py", str(tmp_path / "a.json"), "--doc", str(doc)])
  report.main()
  text = doc.read_text()
  assert f"{intel[0]}\nIntel table\n{intel[1]}" in text  # the other kind's table untouched
  amd_block = text.split(amd[0])[1].split(amd[1])[0]
  assert "AMD EPYC" in amd_block and "2026-12-05" in amd_block and "avx2 fma" in amd_block
  assert "torch 0 (AdamW with its defaults)" in amd_block  # a run that predates recording PyTorch's AdamW
  assert "| V=2048: jit on first call | 9 |" in amd_block and "old" not in amd_block


def test_each_cpu_kind_keeps_its_own_table():
  from benchmarks import run  # noqa: PLC0415

  assert run.cpu_kind("AMD EPYC 9R14 96-Core Processor", ["avx2", "avx512f", "avx512_bf16"]) == "amd-avx512"
  assert run.cpu_kind("AMD EPYC 7R13 Processor", ["avx2", "fma"]) == "amd"  # Zen 3: XLA's dots, a table of its own
  assert run.cpu_kind("Intel(R) Xeon(R) Platinum 8488C", ["avx512f", "amx_bf16"]) == "intel"
  assert run.cpu_kind("Neoverse-V1", ["avx512f"]) == "other"
  assert report.markers("amd-avx512") == ("<!-- bench:amd-avx512:begin -->", "<!-- bench:amd-avx512:end -->")


def test_the_report_names_the_pytorch_peers_adamw():
  from benchmarks import run, torch_step  # noqa: PLC0415

  assert torch_step.ADAMW_OPTIONS == {"fused": True}  # PyTorch's fastest CPU update, not its per-parameter default
  assert run.machine()["torch_adamw"] == torch_step.ADAMW_OPTIONS
  assert report.adamw_words({"torch_adamw": {"fused": True}}) == "AdamW with fused=True"
  assert report.adamw_words({}) == "AdamW with its defaults"


def test_the_bench_prints_the_pytorch_peers_adamw(capsys):
  from benchmarks import run  # noqa: PLC0415

  machine = {"cpu": "AMD EPYC", "threads": 2, "jax": "0", "torch": "2", "cpu_flags": [], "matrix_units": "none",
             "torch_adamw": {"fused": True}}
  run.print_table({"machine": machine})
  assert "torch 2 (AdamW with fused=True)" in capsys.readouterr().out
  run.print_table({"machine": {**machine, "torch": None}})
  assert "torch not installed" in capsys.readouterr().out


def test_the_pytorch_peers_take_adamws_fused_update_and_it_equals_the_default_one():
  torch = pytest.importorskip("torch")
  from benchmarks import context_step, torch_step  # noqa: PLC0415

  config = workload.bench_config(64, 16, 32, chunk_size=0)
  state = torch_step.TorchState(config, num_threads=1)
  assert state.optimizer.defaults["fused"] is True
  context = context_step.make_torch_step(context_step.bench_config(**TINY_CONTEXT),
                                         context_step.window_batch(context_step.bench_config(**TINY_CONTEXT)),
                                         None, threads=1)
  assert context.optimizer.defaults["fused"] is True
  weights = {}
  for fused in (True, None):  # one update of the same weight and gradient, PyTorch's two CPU implementations
    weight = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 64).reshape(8, 8))
    weight.grad = torch.linspace(0.5, -0.5, 64).reshape(8, 8)
    torch.optim.AdamW([weight], lr=0.1, weight_decay=0.1, fused=fused).step()
    weights[fused] = weight.detach().clone()
  torch.testing.assert_close(weights[True], weights[None])


def test_the_resident_and_peak_counters_follow_a_64_mib_array_in_and_out():
  import numpy as np  # noqa: PLC0415

  array = np.ones(16 * 2**20, np.float32)  # 64 MiB, every page written; above malloc's threshold, so unmapped by del
  with_array = workload.resident_mib()
  del array
  without = workload.resident_mib()
  assert 48 <= with_array - without <= 96
  assert workload.peak_mib() >= with_array - 1  # the kernel updates VmHWM lazily: a few pages behind at times
