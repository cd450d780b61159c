"""scripts/mutate.py's arithmetic and argument checks (mutmut itself runs only under `make mutate`): the sample's
Wilson interval against hand arithmetic, and a bad SAMPLE refused in one line, exit 2."""

from __future__ import annotations

import importlib.util
import math

import pytest
from conftest import ROOT

_spec = importlib.util.spec_from_file_location("scripts.mutate", ROOT / "scripts" / "mutate.py")
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


def test_every_package_names_files_and_tests_that_exist_under_its_sources():
  for package, (only, tests) in mutate.PACKAGES.items():
    mutated = [path for glob in only for path in ROOT.glob(glob.replace("/*", "/**/*.py") if glob.endswith("*")
                                                                 else glob)]
    assert mutated, f"{package}: {only} matches no file"
    assert all(path.relative_to(ROOT).parts[0] in mutate.SOURCES for path in mutated), package
    assert all((ROOT / test).exists() for test in tests), package


def test_a_sample_is_drawn_from_the_named_mutants_alone():
  everything = [f"science.kneser_ney.x_fit__mutmut_{i}" for i in range(1, 6)] + ["science.common.x_block__mutmut_1"]
  names, pool = mutate.draw(everything, ["science.kneser_ney.*"], 3)
  assert pool == 5 and len(names) == 3 and names == sorted(names)
  assert set(names) <= set(everything[:5])
  assert mutate.draw(everything, [], 10) == (sorted(everything), 6)  # no glob: every mutant, at most all of them
