"""Compiles the GEMM kernel (gemm.cc) against oneMKL, oneDNN and jaxlib's FFI headers: `make install`.

  python -m tied_embed.fast.mkl.build

Writes tied_embed/fast/mkl/_gemm.so with the machine's g++. oneMKL's and oneDNN's headers and libraries come from
the environment's own prefix: the mkl-devel and onednn-*-cpu-gomp wheels of requirements.txt put them in
<venv>/include and <venv>/lib. A failed build prints one `info:` line and exits 0: the loss then runs XLA's dots
(tied_embed/fast/mkl/__init__.py), so a machine without a compiler or the libraries still trains and tests.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import jax

from tied_embed.fast import mkl

SOURCE = pathlib.Path(__file__).with_name("gemm.cc")


def command(output: pathlib.Path) -> list[str] | str:
  """The g++ command line building `output`, or why it cannot be built here (a str)."""
  compiler = shutil.which("g++") or shutil.which("c++")
  prefix = pathlib.Path(sys.prefix)
  mkl_rt, dnnl = prefix / "lib" / "libmkl_rt.so.3", prefix / "lib" / "libdnnl.so.3"
  if compiler is None:
    return "no C++ compiler (g++) on PATH"
  if not (prefix / "include" / "mkl_cblas.h").exists() or not mkl_rt.exists():
    return f"oneMKL (mkl-devel) is not installed in {prefix}"
  if not (prefix / "include" / "oneapi" / "dnnl" / "dnnl.hpp").exists() or not dnnl.exists():
    return f"oneDNN (onednn-devel-cpu-gomp) is not installed in {prefix}"
  return [compiler, "-O2", "-std=c++17", "-shared", "-fPIC", "-w", f"-I{jax.ffi.include_dir()}",
          f"-I{prefix / 'include'}", str(SOURCE), "-o", str(output), str(mkl_rt), str(dnnl),
          f"-Wl,-rpath,{mkl_rt.resolve().parent}"]


def build(output: pathlib.Path = mkl.LIBRARY) -> str | None:
  """Builds the kernel into `output`; None on success, else why not (one line)."""
  args = command(output)
  if isinstance(args, str):
    return args
  partial = output.with_suffix(".so.partial")
  args[args.index(str(output))] = str(partial)
  done = subprocess.run(args, capture_output=True, text=True)
  if done.returncode != 0:
    partial.unlink(missing_ok=True)
    return f"g++ failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}"
  partial.replace(output)  # a half-written library is never left under the loaded name
  return None


def main() -> None:
  reason = build()
  if reason is None:
    print(f"built {mkl.LIBRARY}")
  else:
    print(f"info: the oneMKL kernel is not built ({reason}); the chunked loss will run XLA's dots")


if __name__ == "__main__":
  main()
