"""scripts/mutate.py's arithmetic and argument checks (mutmut itself runs only under `make mutate`): the sample's
Wilson interval against hand arithmetic, and a bad SAMPLE refused in one line, exit 2."""

from __future__ import annotations

import importlib.util
import math

import pytest
from conftest import ROOT

_spec = importlib.util.spec_from_file_location("mutate_script", ROOT / "scripts" / "mutate.py")
mutate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutate)


def test_the_wilson_interval_of_a_sample():
  # 36 of 40, z = 1.96: centre (0.9 + 1.96²/80) / (1 + 1.96²/40) = 0.94802 / 1.09604 = 0.86495; half-width
  # 1.96 · sqrt(0.00225 + 0.00060025) / 1.09604 = 0.09547.
  low, high = mutate.wilson_interval(36, 40)
  assert (low, high) == pytest.approx((0.86495 - 0.09547, 0.86495 + 0.09547), abs=2e-5)
  # all killed: the lower end is n / (n + z²), 38 / 41.8416 for 38 of 38
  assert mutate.wilson_interval(38, 38) == pytest.approx((38 / (38 + 1.96**2), 1.0))
  assert mutate.wilson_interval(0, 0) == (0.0, 1.0)  # nothing run says nothing
  assert not math.isnan(mutate.wilson_interval(0, 5)[0])


def test_sample_arguments_are_read_and_a_bad_one_is_one_line_exit_2(capsys):
  assert mutate._sample_arguments(["fast"]) == (None, ["fast"])
  assert mutate._sample_arguments(["fast", "--sample", "40", "x.*"]) == (40, ["fast", "x.*"])
  for bad in (["fast", "--sample", "0"], ["fast", "--sample", "many"], ["fast", "--sample"]):
    with pytest.raises(SystemExit) as exited:
      mutate._sample_arguments(bad)
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("SAMPLE=") and "is not allowed: expected a whole number of mutants, at least 1" in line
