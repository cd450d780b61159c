"""Compiles the step's CPU kernels with g++ against jaxlib's FFI headers into `library.kernel_dir()`, each with its
build record: `make kernels`, or `python -m tied_embed.fast.kernels.build [--force]`. A library whose record matches is
kept; one that cannot be built is named in an `info:` line and the build exits 0."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tempfile

import jax

from tied_embed import util
from tied_embed.fast.kernels import library


def command(kernel: library.Library, output: pathlib.Path) -> list[str] | str:
  """The g++ command line building `kernel` into `output`, or why it cannot be built here (a str)."""
  compiler = shutil.which("g++") or shutil.which("c++")
  if compiler is None:
    return "no C++ compiler (g++) on PATH"
  args = [compiler, *kernel.flags, "-std=c++17", "-shared", "-fPIC", "-w", f"-I{jax.ffi.include_dir()}",
          str(library.HERE / kernel.sources[0]), "-o", str(output)]
  if kernel.runtime is None:
    return args
  prefix = pathlib.Path(sys.prefix)
  runtime = prefix / "lib" / kernel.runtime
  for needed in (prefix / "include" / kernel.header, runtime):
    if not needed.exists():
      return f"{needed} is missing (requirements-kernels.txt installs it, on x86-64 only)"
  return [*args, f"-I{prefix / 'include'}", str(runtime), f"-Wl,-rpath,{runtime.resolve().parent}"]


def build(kernel: library.Library, output: pathlib.Path) -> str | None:
  """Builds `kernel` into `output` and writes its record; None on success, else why not (one line)."""
  args = command(kernel, output)
  if isinstance(args, str):
    return args
  # The compiler writes into a fresh private directory (a name beside `output` could be a link it writes through);
  # the library then replaces `output` whole (never half-written, never through a link), with the linker's mode.
  with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.") as scratch:
    built = pathlib.Path(scratch) / output.name
    args[args.index(str(output))] = str(built)
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
      return f"g++ failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}"
    library.record_path(output).unlink(missing_ok=True)  # no moment where the new file has the old one's record
    util.write_atomically(output, built.read_bytes(), mode=0o777)
  library.write_record(kernel, output)
  return None


def main(argv: list[str] | None = None) -> None:
  force = "--force" in (sys.argv[1:] if argv is None else argv)
  directory = library.kernel_dir()
  directory.mkdir(parents=True, exist_ok=True)
  for kernel in library.LIBRARIES:
    output = directory / kernel.file
    if not force and library.check(kernel, output) is None:
      output.touch()  # newer than its sources again, so that make sees it up to date
      print(f"kept {output} (its record matches these sources)")
      continue
    if (reason := build(kernel, output)) is None:
      print(f"built {output}")
      continue
    removed = "; its old build is removed" if output.exists() else ""
    output.unlink(missing_ok=True)  # a library of other sources must not stay to be mistaken for this build
    library.record_path(output).unlink(missing_ok=True)
    print(f"info: {output} is not built ({reason}){removed}; the step runs XLA's own code instead of it")


if __name__ == "__main__":
  main()
