"""The command line's compile cache (`compilation.cache_compiles`): where it goes, how it is turned off, and that a
cache the caller set up (the suite's own, conftest.py) is left as it is."""

from __future__ import annotations

import jax
import pytest

from tied_embed.fast import compilation

OPTIONS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs", "jax_compilation_cache_max_size")


@pytest.fixture
def no_cache_yet():
  """jax.config as in a fresh command (no cache directory), put back afterwards."""
  kept = {option: getattr(jax.config, option) for option in OPTIONS}
  jax.config.update("jax_compilation_cache_dir", None)
  yield
  for option, value in kept.items():
    jax.config.update(option, value)


def test_a_cache_the_caller_set_up_is_left_alone(no_cache_yet, monkeypatch, tmp_path):
  jax.config.update("jax_compilation_cache_dir", str(tmp_path / "callers"))  # as JAX_COMPILATION_CACHE_DIR would
  monkeypatch.setenv(compilation.CACHE_VARIABLE, str(tmp_path / "ours"))
  assert compilation.cache_compiles() is None
  assert jax.config.jax_compilation_cache_dir == str(tmp_path / "callers") and not (tmp_path / "ours").exists()


def test_the_variable_names_the_directory(no_cache_yet, monkeypatch, tmp_path):
  monkeypatch.setenv(compilation.CACHE_VARIABLE, str(tmp_path / "xla"))
  jax.config.update("jax_compilation_cache_max_size", -1)  # JAX's default: no limit, and no file lock
  assert compilation.cache_compiles() == tmp_path / "xla"
  assert jax.config.jax_compilation_cache_dir == str(tmp_path / "xla") and (tmp_path / "xla").is_dir()
  assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.3
  assert jax.config.jax_compilation_cache_max_size == 2 * 1024**3  # 2 GiB: a limit, so JAX locks its entries


def test_without_the_variable_it_is_under_the_users_cache_folder(no_cache_yet, monkeypatch, tmp_path):
  monkeypatch.delenv(compilation.CACHE_VARIABLE, raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  assert compilation.cache_compiles() == tmp_path / "tied_embed" / "xla"


def test_an_empty_variable_or_a_directory_that_cannot_be_made_turns_it_off(no_cache_yet, monkeypatch, tmp_path):
  monkeypatch.setenv(compilation.CACHE_VARIABLE, "")
  assert compilation.cache_compiles() is None and jax.config.jax_compilation_cache_dir is None
  (tmp_path / "file").write_text("not a folder")
  monkeypatch.setenv(compilation.CACHE_VARIABLE, str(tmp_path / "file" / "xla"))
  assert compilation.cache_compiles() is None and jax.config.jax_compilation_cache_dir is None


def test_a_home_relative_variable_and_a_home_without_xdg_resolve_under_home(no_cache_yet, monkeypatch, tmp_path):
  monkeypatch.setenv("HOME", str(tmp_path))
  monkeypatch.setenv(compilation.CACHE_VARIABLE, "~/xla")  # as a user writes it in a shell profile
  assert compilation.cache_compiles() == tmp_path / "xla"
  jax.config.update("jax_compilation_cache_dir", None)
  monkeypatch.delenv(compilation.CACHE_VARIABLE)
  monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
  assert compilation.cache_compiles() == tmp_path / ".cache" / "tied_embed" / "xla"  # XDG's default, ~/.cache
