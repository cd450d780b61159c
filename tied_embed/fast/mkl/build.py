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

HERE = pathlib.Path(__file__).parent
# library → (its source, the runtime it links, a header that runtime's devel wheel installs)
LIBRARIES = {
    mkl.ONEDNN_LIBRARY: (HERE / "gemm_onednn.cc", "libdnnl.so.3", "oneapi/dnnl/dnnl.hpp"),
    mkl.LIBRARY: (HERE / "gemm.cc", "libmkl_rt.so.3", "mkl_cblas.h"),
}


def command(output: pathlib.Path) -> list[str] | str:
  """The g++ command line building `output` (a key of LIBRARIES), or why it cannot be built here (a str)."""
  source, runtime_name, header = LIBRARIES[output]
  compiler = shutil.which("g++") or shutil.which("c++")
  prefix = pathlib.Path(sys.prefix)
  runtime = prefix / "lib" / runtime_name
  if compiler is None:
    return "no C++ compiler (g++) on PATH"
  if not (prefix / "include" / header).exists() or not runtime.exists():
    return f"{runtime_name} or {header} is not installed in {prefix}"
  return [compiler, "-O2", "-std=c++17", "-shared", "-fPIC", "-w", f"-I{jax.ffi.include_dir()}",
          f"-I{prefix / 'include'}", str(source), "-o", str(output), str(runtime),
          f"-Wl,-rpath,{runtime.resolve().parent}"]


def build(output: pathlib.Path) -> str | None:
  """Builds one library of the kernel into `output`; None on success, else why not (one line)."""
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
  for library in LIBRARIES:  # oneMKL's last: make's target, so a failed oneDNN build does not repeat every run
    reason = build(library)
    if reason is None:
      print(f"built {library}")
    else:
      print(f"info: {library.name} is not built ({reason}); the chunked loss will run XLA's dots instead of it")


if __name__ == "__main__":
  main()
