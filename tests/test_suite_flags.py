"""The suite's own XLA options (tests/helpers.py `SUITE_XLA_FLAGS`): in this process, in every subprocess a test
starts, and left out where a test runs the users' shape at XLA's defaults."""

import os

from helpers import subprocess_env

OPTIONS = ["--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false"]
DEVICES = "--xla_force_host_platform_device_count=8"


def test_this_process_compiles_with_the_suites_options():
  assert set(OPTIONS) <= set(os.environ["XLA_FLAGS"].split())


def test_a_subprocess_gets_the_suites_options_before_its_own_each_once():
  assert subprocess_env(XLA_FLAGS=DEVICES)["XLA_FLAGS"].split() == [*OPTIONS, DEVICES]
  assert subprocess_env(XLA_FLAGS=" ".join([*OPTIONS, DEVICES]))["XLA_FLAGS"].split() == [*OPTIONS, DEVICES]
  assert set(OPTIONS) <= set(subprocess_env()["XLA_FLAGS"].split())


def test_an_optimized_subprocess_compiles_with_xlas_defaults_and_keeps_its_own_flags():
  assert subprocess_env(optimized=True, XLA_FLAGS=DEVICES)["XLA_FLAGS"] == DEVICES
  assert not set(OPTIONS) & set(subprocess_env(optimized=True).get("XLA_FLAGS", "").split())
