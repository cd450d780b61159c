"""Mutation testing of one package with mutmut 3: `python scripts/mutate.py PACKAGE [MUTANTS]` (`make mutate
PACKAGE=core MUTANTS='tied_embed.core.optim.*'`); MUTANTS, globs of mutant names separated by spaces, runs those
alone.

mutmut reads one [tool.mutmut] table, so this script supplies one per package instead: the files it mutates, and
the tests that mirror the package (mutmut then runs, for each mutant, only those of them that call the mutated
function). mutmut works in a copy of the project, `mutants/`, and keeps each mutant's result there: a second run of
the same package retests only the functions that changed. A run of another package starts that copy afresh.

Afterwards it prints the package's score, (killed + timeouts) / all mutants run, a mutant that no test calls
counting as a survivor, and the survivors' names (`mutmut show NAME` prints one's diff). docs/testing.md has the
scores and the mutants known equivalent."""

from __future__ import annotations

import collections
import json
import pathlib
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
}
WORK = pathlib.Path("mutants")  # mutmut's own name for its copy of the project
MARKER = WORK / "package.txt"  # which package the copy in WORK belongs to


def _settings(package: str) -> dict:
  """The [tool.mutmut] table of one package's run."""
  only, tests = PACKAGES[package]
  return {
      "source_paths": ["tied_embed"],  # the whole package is copied (the tests import all of it); `only` is mutated
      "only_mutate": only,
      "pytest_add_cli_args_test_selection": tests,
      "pytest_add_cli_args": ["-p", "no:cacheprovider", "-p", "no:xdist"],
      "also_copy": ["configs", "tests", "pyproject.toml"],
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


def score(work: pathlib.Path = WORK) -> tuple[collections.Counter, list[str]]:
  """(count of each status, names of the mutants that survived or that no test calls) from mutmut's result files
  under `work`."""
  from mutmut.stats import status_by_exit_code  # noqa: PLC0415

  counts, survivors = collections.Counter(), []
  for meta in sorted(work.rglob("*.py.meta")):
    for name, exit_code in json.loads(meta.read_text())["exit_code_by_key"].items():
      status = status_by_exit_code[exit_code]
      counts[status] += 1
      if status in ("survived", "no tests"):  # a mutant no test calls survives too
        survivors.append(name)
  return counts, survivors


def main(argv: list[str]) -> int:
  if not argv or argv[0] not in PACKAGES:
    print(f"PACKAGE={argv[0] if argv else ''!r} is not allowed: expected one of {', '.join(PACKAGES)}",
          file=sys.stderr)
    return 2
  package = argv[0]
  if WORK.exists() and (not MARKER.exists() or MARKER.read_text() != package):
    shutil.rmtree(WORK)  # another package's copy: its results and test associations do not apply
  _use_settings(_settings(package))
  # A test's subprocess (a sharded run) imports the mutated code too, and its mutmut reads its settings from here.
  WORK.mkdir(exist_ok=True)
  (WORK / "setup.cfg").write_text("[mutmut]\nsource_paths=tied_embed\n")
  from mutmut.__main__ import cli  # noqa: PLC0415

  try:
    cli(["run", "--max-children", "1", *argv[1:]], standalone_mode=False)
  finally:
    if WORK.exists():
      MARKER.write_text(package)
  counts, survivors = score()
  decided = counts["killed"] + counts["survived"] + counts["timeout"] + counts["no tests"]
  print(f"{package}: {counts['killed']} killed, {counts['survived']} survived, {counts['timeout']} timeouts, "
        f"{counts['no tests']} without tests; score {counts['killed'] + counts['timeout']}/{decided}")
  for name in survivors:
    print(f"  survived: {name}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
