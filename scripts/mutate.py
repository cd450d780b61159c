"""Mutation testing of one package with mutmut 3: `python scripts/mutate.py PACKAGE [MUTANTS]` (`make mutate
PACKAGE=core MUTANTS='tied_embed.core.optim.*'`); MUTANTS, globs of mutant names separated by spaces, runs those
alone. `--sample N` (`make mutate PACKAGE=fast SAMPLE=40`) runs N mutants drawn at random (seed 0) from all of the
package's, or from those MUTANTS names, for a package too large to run whole in an hour, and prints the sample's score
with its 95% interval.

mutmut reads one [tool.mutmut] table, so this script supplies one per package instead: the files it mutates, and
the tests that mirror the package (mutmut then runs, for each mutant, only those of them that call the mutated
function). mutmut works in a copy of the project, `mutants/`, and keeps each mutant's result there: a second run of
the same package retests only the functions that changed. A run of another package starts that copy afresh.

Afterwards it prints the package's score, (killed + timeouts) / all mutants run, a mutant that no test calls
counting as a survivor, and the survivors' names (`mutmut show NAME` prints one's diff). docs/testing.md has the
scores and the mutants known equivalent."""

from __future__ import annotations

import collections
import fnmatch
import json
import math
import pathlib
import random
import shutil
import sys

# package → (the files mutmut mutates, as globs; the tests that mirror the package)
PACKAGES: dict[str, tuple[list[str], list[str]]] = {
    "core": (["tied_embed/core/*"], ["tests/core"]),
    "entrypoint": (["tied_embed/entrypoint.py"], ["tests/core/test_entrypoint.py"]),
    # the chunked loss and the sparse paths are tested against the plain ones in tests/core as well
    "fast": (["tied_embed/fast/*"], ["tests/fast", "tests/core/test_losses.py", "tests/core/test_provenance.py"]),
    "data": (["tied_embed/data/*"], ["tests/data"]),
    "train": (["tied_embed/train/*"], ["tests/train"]),
    # the speed paths' choice alone: fast/ whole is too large to run within the hour
    "choose": (["tied_embed/fast/choose.py"], ["tests/fast", "tests/train/test_window_size_caps.py"]),
    "inspection": (["tied_embed/inspection/*"], ["tests/inspection"]),
    "science": (["science/*"], ["tests/science"]),  # `*` spans folders: science/when_to_tie/ too
    # the tests that load each script (they load it under its dotted name, which mutmut's switch matches)
    "scripts": (["scripts/*"], ["tests/test_mutate_script.py", "tests/test_layout.py",
                                "tests/train/test_config_fields.py", "tests/science/test_reliability_scripts.py",
                                "tests/science/test_when_to_tie_sittings.py", "tests/docs/test_context_numbers.py",
                                "tests/docs/test_quoted.py"]),
}
SOURCES = ["tied_embed", "science", "scripts"]  # the folders a package's files may be in
WORK = pathlib.Path("mutants")  # mutmut's own name for its copy of the project
MARKER = WORK / "package.txt"  # which package the copy in WORK belongs to


def _settings(package: str) -> dict:
  """The [tool.mutmut] table of one package's run."""
  only, tests = PACKAGES[package]
  return {
      "source_paths": SOURCES,  # copied whole (the tests import all of them); `only` is mutated
      "only_mutate": only,
      "pytest_add_cli_args_test_selection": tests,
      "pytest_add_cli_args": ["-p", "no:cacheprovider", "-p", "no:xdist"],
      # what the tests read besides the sources
      "also_copy": ["configs", "tests", "pyproject.toml", "train.py", "docs", "benchmarks", "README.md", "Makefile"],
      "process_isolation": "forkserver",  # stats, the clean run and each mutant in a fork of a process without JAX:
      "forkserver_warmup": "none",  # one that imported the tests would hold JAX's and TF's threads, and a fork hangs
      # a timeout (an infinite loop) after 10x (the tests' CPU seconds + 30, for the imports and compiles) CPU seconds
      "timeout_multiplier": 5.0,
      "timeout_constant": 30.0,
  }


def _use_settings(settings: dict) -> None:
  from mutmut import configuration  # noqa: PLC0415 (requirements-mutate.txt: not part of the default install)

  def reader():
    return lambda key, default: settings.get(key, default)

  configuration._config_reader = reader


def score(work: pathlib.Path = WORK, only: list[str] | None = None) -> tuple[collections.Counter, list[str]]:
  """(count of each status, names of the mutants that survived or that no test calls) from mutmut's result files
  under `work`; of the mutants named in `only` where given."""
  from mutmut.stats import status_by_exit_code  # noqa: PLC0415

  counts, survivors, only = collections.Counter(), [], None if only is None else set(only)
  for meta in sorted(work.rglob("*.py.meta")):
    for name, exit_code in json.loads(meta.read_text())["exit_code_by_key"].items():
      if only is not None and name not in only:
        continue
      status = status_by_exit_code[exit_code]
      counts[status] += 1
      if status in ("survived", "no tests"):  # a mutant no test calls survives too
        survivors.append(name)
  return counts, survivors


def generate_mutants() -> list[str]:
  """The names of every mutant of the package set up by `_use_settings`: mutmut's generation step alone, as its
  `run` begins (which then finds them made and makes them again only for files changed since)."""
  from mutmut import __main__ as mutmut_main  # noqa: PLC0415

  mutmut_main.set_mutant_under_test("mutant_generation")
  mutmut_main.copy_src_dir()
  mutmut_main.copy_also_copy_files()
  mutmut_main.setup_source_paths()
  mutmut_main.create_mutants(1)
  mutmut_main.set_mutant_under_test("")
  return sorted(name for meta in WORK.rglob("*.py.meta") for name in json.loads(meta.read_text())["exit_code_by_key"])


def draw(everything: list[str], globs: list[str], sample: int) -> tuple[list[str], int]:
  """(`sample` of the mutants in `everything` drawn at random, seed 0, sorted; how many they were drawn from): of
  those a glob in `globs` matches where any is given, so a sample can keep to the modules a change touched."""
  pool = [name for name in everything if not globs or any(fnmatch.fnmatch(name, glob) for glob in globs)]
  return sorted(random.Random(0).sample(pool, min(sample, len(pool)))), len(pool)


def wilson_interval(killed: int, total: int, z: float = 1.96) -> tuple[float, float]:
  """The Wilson score 95% interval of a proportion killed/total: the package's score estimated from a sample."""
  if total == 0:
    return 0.0, 1.0
  p = killed / total
  centre = (p + z * z / (2 * total)) / (1 + z * z / total)
  half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
  return max(0.0, centre - half), min(1.0, centre + half)


def _sample_arguments(argv: list[str]) -> tuple[int | None, list[str]]:
  """(N of `--sample N` or None, the other arguments)."""
  if "--sample" not in argv:
    return None, argv
  at = argv.index("--sample")
  value = argv[at + 1] if at + 1 < len(argv) else ""
  if not value.isdigit() or int(value) < 1:
    print(f"SAMPLE={value!r} is not allowed: expected a whole number of mutants, at least 1", file=sys.stderr)
    raise SystemExit(2)
  return int(value), argv[:at] + argv[at + 2:]


def main(argv: list[str]) -> int:
  if not argv or argv[0] not in PACKAGES:
    print(f"PACKAGE={argv[0] if argv else ''!r} is not allowed: expected one of {', '.join(PACKAGES)}",
          file=sys.stderr)
    return 2
  package = argv[0]
  sample, argv = _sample_arguments(argv)
  if WORK.exists() and (not MARKER.exists() or MARKER.read_text() != package):
    shutil.rmtree(WORK)  # another package's copy: its results and test associations do not apply
  _use_settings(_settings(package))
  # A test's subprocess (a sharded run) imports the mutated code too, and its mutmut reads its settings from here.
  WORK.mkdir(exist_ok=True)
  (WORK / "setup.cfg").write_text("[mutmut]\nsource_paths=\n" + "".join(f"  {path}\n" for path in SOURCES))
  from mutmut.__main__ import cli  # noqa: PLC0415

  names = argv[1:]
  if sample is not None:
    names, pool = draw(generate_mutants(), names, sample)
    print(f"{package}: {len(names)} of its {pool} mutants{' named' if argv[1:] else ''}, drawn at random (seed 0)")
  try:
    cli(["run", "--max-children", "1", *names], standalone_mode=False)
  finally:
    if WORK.exists():
      MARKER.write_text(package)
  counts, survivors = score(only=names if sample is not None else None)
  decided = counts["killed"] + counts["survived"] + counts["timeout"] + counts["no tests"]
  print(f"{package}: {counts['killed']} killed, {counts['survived']} survived, {counts['timeout']} timeouts, "
        f"{counts['no tests']} without tests; score {counts['killed'] + counts['timeout']}/{decided}")
  if sample is not None:
    low, high = wilson_interval(counts["killed"] + counts["timeout"], decided)
    print(f"{package}: the package's score, estimated from the sample: 95% interval {low:.1%} to {high:.1%} "
          "(equivalent mutants among the survivors still count against it)")
  for name in survivors:
    print(f"  survived: {name}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
