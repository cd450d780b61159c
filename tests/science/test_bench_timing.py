"""The bench's timing loop: turns, the untimed call before each timed one, and the report saying how it timed."""

from __future__ import annotations

from benchmarks import report, workload


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
