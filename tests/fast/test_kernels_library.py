"""Loading the kernels (tied_embed/fast/kernels/library.py): a library that is missing, damaged, foreign or built from
other sources is never opened, and the step falls back to XLA's own code with one line saying why and how to rebuild;
a resume on another kernel set says it is not bitwise.

Each library here is a copy of the C library's libm in a temporary directory, with or without a build record made
for it, so the cases run without a compiler or the kernels' build, and never touch the real build.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import pathlib
import platform
import subprocess
import sys

import pytest
from conftest import ROOT

from tied_embed import workdir as workdir_lib
from tied_embed.fast.kernels import build, fused_adamw, in_use, library

ADAMW_TARGETS = {fused_adamw.TARGET: (library.ADAMW, "FusedAdamW")}


def _loaded(name: str) -> pathlib.Path:
  """The path of a system library this process has loaded (libm.so.6, libc.so.6): real ones no kernel is."""
  ctypes.CDLL(name)
  maps = pathlib.Path("/proc/self/maps").read_text().splitlines()
  return pathlib.Path(next(line.split()[-1] for line in maps if line.endswith(f"/{name}") or f"/{name[:4]}-" in line))


def _fake_build(directory: pathlib.Path, kernel: library.Library = library.ADAMW) -> pathlib.Path:
  """libm copied in as `kernel`'s library, with a record as a build of these sources would write for it."""
  path = directory / kernel.file
  path.write_bytes(_loaded("libm.so.6").read_bytes())
  library.write_record(kernel, path)
  return path


def _reason(directory: pathlib.Path) -> str:
  reason = library.register(ADAMW_TARGETS, directory)
  assert isinstance(reason, str) and "\n" not in reason
  return reason


def test_a_library_its_record_vouches_for_loads(tmp_path):
  path = _fake_build(tmp_path)
  assert library.check(library.ADAMW, path) is None
  assert isinstance(library.load(library.ADAMW, tmp_path), ctypes.CDLL)
  # and one that lacks the handler is refused without registering anything
  assert _reason(tmp_path) == f"{path} has no handler FusedAdamW (`{library.REBUILD}` rebuilds it)"


def test_a_missing_library_or_record_is_named(tmp_path):
  assert _reason(tmp_path) == f"{tmp_path / '_adamw.so'} is not built (`{library.REBUILD}` builds it)"
  path = _fake_build(tmp_path)
  library.record_path(path).unlink()
  assert _reason(tmp_path) == f"{path} has no readable build record _adamw.json (`{library.REBUILD}` rebuilds it)"
  library.record_path(path).write_text("[]")  # JSON, but not a record
  assert _reason(tmp_path) == f"{path} has no readable build record _adamw.json (`{library.REBUILD}` rebuilds it)"


def test_a_truncated_library_is_not_opened_and_the_process_lives(tmp_path):
  """Opening a library truncated to half kills the process (SIGBUS in dlopen): its size gives it away first."""
  path = _fake_build(tmp_path)
  data = path.read_bytes()
  path.write_bytes(data[: len(data) // 2])
  script = ("import pathlib, sys\nfrom tied_embed.fast.kernels import fused_adamw, library\n"
            "print(library.register({fused_adamw.TARGET: (library.ADAMW, 'FusedAdamW')}, pathlib.Path(sys.argv[1])))")
  done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                        timeout=300)
  assert done.returncode == 0, done.stderr
  assert done.stdout == (f"{path} is not the file its build wrote ({len(data) // 2} bytes, not {len(data)}): damaged "
                         f"or replaced (`{library.REBUILD}` rebuilds it)\n")


def test_a_foreign_library_copied_over_the_build_is_not_opened(tmp_path):
  path = _fake_build(tmp_path)
  size = path.stat().st_size
  libc = _loaded("libc.so.6").read_bytes()
  path.write_bytes(libc)  # another library copied over the build: it lacks the handlers
  assert _reason(tmp_path) == (f"{path} is not the file its build wrote ({len(libc)} bytes, not {size}): damaged or "
                               f"replaced (`{library.REBUILD}` rebuilds it)")
  data = bytearray(_loaded("libm.so.6").read_bytes())
  data[-1] ^= 1  # the same size, other bytes
  path.write_bytes(bytes(data))
  assert _reason(tmp_path) == (f"{path} is not the file its build wrote (another sha256): damaged or replaced "
                               f"(`{library.REBUILD}` rebuilds it)")


def test_a_library_built_from_other_sources_is_not_opened(tmp_path):
  path = _fake_build(tmp_path)
  record = json.loads(library.record_path(path).read_text())
  library.record_path(path).write_text(json.dumps({**record, "sources": "0" * 64}))
  assert _reason(tmp_path) == f"{path} was built from other sources than these (`{library.REBUILD}` rebuilds it)"
  library.record_path(path).write_text(json.dumps({**record, "jaxlib": "0.0.1"}))
  assert "was built against jaxlib 0.0.1, this is " in _reason(tmp_path)


def test_the_fallback_says_why_in_one_line(tmp_path, monkeypatch, caplog):
  """Through the kernel's own availability: one info line, the reason and the rebuild command in it."""
  monkeypatch.setenv(library.DIR_VARIABLE, str(tmp_path))
  monkeypatch.setenv(fused_adamw.SWITCH, "1")
  path = _fake_build(tmp_path)
  path.write_bytes(path.read_bytes()[:1000])
  fused_adamw.unavailable_reason.cache_clear()
  try:
    with caplog.at_level(logging.INFO, logger=fused_adamw.__name__):
      assert not fused_adamw.available()
    lines = [record.getMessage() for record in caplog.records if record.name == fused_adamw.__name__]
    size = len(_loaded("libm.so.6").read_bytes())
    assert lines == [f"AdamW runs as optax's update: {path} is not the file its build wrote (1000 bytes, not {size}): "
                     f"damaged or replaced (`{library.REBUILD}` rebuilds it)."]
  finally:
    fused_adamw.unavailable_reason.cache_clear()


def test_a_missing_dependency_is_named_not_glibcs_no_such_file():
  path = pathlib.Path("/k/_gemm.so")
  error = OSError("libmkl_rt.so.3: cannot open shared object file: No such file or directory")
  assert library._load_error(path, error) == (
      f"/k/_gemm.so needs libmkl_rt.so.3, which is not installed here (`{library.INSTALL}` installs it)")
  # glibc says the same of a library for another machine (an x86-64 build on aarch64): it is not absent
  foreign = OSError("/k/_gemm.so: cannot open shared object file: No such file or directory")
  assert library._load_error(path, foreign) == (
      f"/k/_gemm.so is not a library this {platform.machine()} machine opens (`{library.REBUILD}` rebuilds it)")
  other = OSError("/k/_gemm.so: invalid ELF header")
  assert library._load_error(path, other) == "/k/_gemm.so does not load: invalid ELF header"


def test_a_build_that_cannot_build_removes_the_stale_library(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv(library.DIR_VARIABLE, str(tmp_path))
  monkeypatch.setattr(build.shutil, "which", lambda name: None)  # no compiler
  stale = _fake_build(tmp_path, library.GEMM)
  record = json.loads(library.record_path(stale).read_text())
  library.record_path(stale).write_text(json.dumps({**record, "sources": "0" * 64}))
  build.main([])
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == len(library.LIBRARIES) and all(line.startswith("info: ") for line in lines)
  assert (f"info: {stale} is not built (no C++ compiler (g++) on PATH); its old build is removed; the step runs "
          "XLA's own code instead of it") in lines
  assert not stale.exists() and not library.record_path(stale).exists()


def test_kernel_dir_outside_a_checkout_is_the_users_cache(tmp_path, monkeypatch):
  monkeypatch.delenv(library.DIR_VARIABLE, raising=False)
  assert library.kernel_dir() == library.HERE  # this checkout: beside the sources
  monkeypatch.setattr(library, "CHECKOUT", False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  directory = library.kernel_dir()
  assert directory.parent == tmp_path / "tied-embed" / "kernels" and len(directory.name) == 16
  monkeypatch.setenv(library.DIR_VARIABLE, str(tmp_path / "mine"))
  assert library.kernel_dir() == tmp_path / "mine"


@pytest.mark.parametrize(("before", "now", "warned"), [("gemm-f32,adamw", "none", True), ("none", "none", False)])
def test_a_resume_on_another_kernel_set_says_it_is_not_bitwise(tmp_path, caplog, before, now, warned):
  in_use.record(tmp_path, before, resuming=False)
  with caplog.at_level(logging.WARNING, logger=in_use.__name__):
    in_use.record(tmp_path, now, resuming=True)
  lines = [record.getMessage() for record in caplog.records if record.name == in_use.__name__]
  expected = [f"Resuming on kernels {now} where the checkpoints were written on {before}: the run continues, but "
              "not bitwise equal to an uninterrupted one (docs/failures.md)."]
  assert lines == (expected if warned else [])
  assert json.loads((tmp_path / workdir_lib.KERNELS).read_text()) == {"kernels": now}


def _stand_in_compiler(directory: pathlib.Path, stderr: str, code: int) -> str:
  """A g++ stand-in: prints `stderr` to its stderr and exits `code`; on 0 writes b"a build" to its -o file."""
  script = directory / "g++"
  script.write_text(f"#!{sys.executable}\nimport sys\nsys.stderr.write({stderr!r})\n"
                    f"if {code} == 0:\n  open(sys.argv[sys.argv.index('-o') + 1], 'wb').write(b'a build')\n"
                    f"sys.exit({code})\n")
  script.chmod(0o755)
  return str(script)


def test_the_command_links_the_runtime_it_finds_under_the_prefix_and_names_what_is_missing(tmp_path, monkeypatch):
  monkeypatch.setattr(build.shutil, "which", lambda name: "/usr/bin/g++")
  monkeypatch.setattr(build.sys, "prefix", str(tmp_path))
  header, runtime = tmp_path / "include" / library.GEMM.header, tmp_path / "lib" / library.GEMM.runtime
  for path in (header, runtime):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
  output = tmp_path / "out" / "_gemm.so"
  args = build.command(library.GEMM, output)
  assert args[0] == "/usr/bin/g++" and args[args.index("-o") + 1] == str(output)
  assert args[-3:] == [f"-I{tmp_path}/include", str(runtime), f"-Wl,-rpath,{(tmp_path / 'lib').resolve()}"]
  header.unlink()
  assert build.command(library.GEMM, output) == (
      f"{header} is missing (requirements-kernels.txt installs it, on x86-64 only)")
  header.write_text("")
  runtime.unlink()
  assert build.command(library.GEMM, output) == (
      f"{runtime} is missing (requirements-kernels.txt installs it, on x86-64 only)")


@pytest.mark.parametrize(("stderr", "reason"), [
    ("", "g++ failed: no output"),
    ("a.cc:1: warning\na.cc:2: error: no\n", "g++ failed: a.cc:2: error: no"),
])
def test_a_failed_compile_is_named_by_its_last_line(tmp_path, monkeypatch, stderr, reason):
  compiler = _stand_in_compiler(tmp_path, stderr, code=1)
  monkeypatch.setattr(build.shutil, "which", lambda name: compiler)
  output = tmp_path / library.ADAMW.file
  assert build.build(library.ADAMW, output) == reason
  assert not output.exists() and not library.record_path(output).exists()


def test_a_build_writes_the_file_and_the_record_its_check_accepts(tmp_path, monkeypatch):
  compiler = _stand_in_compiler(tmp_path, "", code=0)
  monkeypatch.setattr(build.shutil, "which", lambda name: compiler)
  output = tmp_path / library.ADAMW.file
  assert build.build(library.ADAMW, output) is None
  assert output.read_bytes() == b"a build"
  record = json.loads(library.record_path(output).read_text())
  assert record["size"] == 7 and record["sha256"] == hashlib.sha256(b"a build").hexdigest()
  assert library.check(library.ADAMW, output) is None  # the record is this library's: its sources and flags
  assert library.check(library.GEMM, output) == (
      f"{output} was built from other sources than these (`{library.REBUILD}` rebuilds it)")
