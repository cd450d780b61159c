"""Compiles the step's CPU kernels against jaxlib's FFI headers: `make install`.

  python -m tied_embed.fast.mkl.build

Writes, with the machine's g++: tied_embed/fast/mkl/_gemm.so and _gemm_onednn.so (the GEMMs, gemm.cc against
oneMKL and gemm_onednn.cc against oneDNN) and tied_embed/fast/fused_adamw/_adamw.so (plain C++, compiled for this
machine's CPU). oneMKL's and oneDNN's headers and libraries come from the environment's own prefix: the mkl-devel
and onednn-*-cpu-gomp wheels of requirements.txt put them in <venv>/include and <venv>/lib. A failed build prints
one `info:` line and exits 0: the step then runs XLA's own code instead of that kernel (tied_embed/fast/mkl,
tied_embed/fast/fused_adamw), so a machine without a compiler or the libraries still trains and tests.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import jax

from tied_embed.fast import fused_adamw, mkl

HERE = pathlib.Path(__file__).parent
GEMM_FLAGS = ["-O2"]
# The update loop is written to vectorise: for this machine's widest registers (512 bits where it has AVX-512),
# with sqrt inlined (no errno) and no fused multiply-adds, so its roundings are the ones the source spells out.
ADAMW_FLAGS = ["-O3", "-march=native", "-mprefer-vector-width=512", "-fno-math-errno", "-ffp-contract=off"]
# library → (its source, the runtime it links and a header its devel wheel installs (None: none), compiler flags)
LIBRARIES = {
    fused_adamw.LIBRARY: (fused_adamw.SOURCE, None, None, ADAMW_FLAGS),
    mkl.ONEDNN_LIBRARY: (HERE / "gemm_onednn.cc", "libdnnl.so.3", "oneapi/dnnl/dnnl.hpp", GEMM_FLAGS),
    mkl.LIBRARY: (HERE / "gemm.cc", "libmkl_rt.so.3", "mkl_cblas.h", GEMM_FLAGS),
}


def command(output: pathlib.Path) -> list[str] | str:
  """The g++ command line building `output` (a key of LIBRARIES), or why it cannot be built here (a str)."""
  source, runtime_name, header, flags = LIBRARIES[output]
  compiler = shutil.which("g++") or shutil.which("c++")
  prefix = pathlib.Path(sys.prefix)
  if compiler is None:
    return "no C++ compiler (g++) on PATH"
  args = [compiler, *flags, "-std=c++17", "-shared", "-fPIC", "-w", f"-I{jax.ffi.include_dir()}", str(source),
          "-o", str(output)]
  if runtime_name is None:
    return args
  runtime = prefix / "lib" / runtime_name
  if not (prefix / "include" / header).exists() or not runtime.exists():
    return f"{runtime_name} or {header} is not installed in {prefix}"
  return [*args, f"-I{prefix / 'include'}", str(runtime), f"-Wl,-rpath,{runtime.resolve().parent}"]


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
      print(f"info: {library.name} is not built ({reason}); the step will run XLA's own code instead of it")


if __name__ == "__main__":
  main()
