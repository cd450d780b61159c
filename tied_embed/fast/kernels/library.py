"""Where the step's C++ kernels are built, and loading them only once their build record vouches for them.

`make kernels` builds _gemm.so, _gemm_onednn.so and _adamw.so into `kernel_dir()` ($TIED_EMBED_KERNEL_DIR, else beside
the sources, else the user's cache), each with NAME.json (its sources' hash, flags, jaxlib, CPU, size and sha256),
checked before opening: a truncated library kills the process in dlopen, a stale one misreads XLA's operands."""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import pathlib
import platform
import re
import sys

import jax
import jaxlib

from tied_embed import util

HERE = pathlib.Path(__file__).parent
CHECKOUT = (HERE.parents[2] / "pyproject.toml").exists()  # run from the source tree, not a package pip copied
DIR_VARIABLE = "TIED_EMBED_KERNEL_DIR"
REBUILD = "make kernels" if CHECKOUT else "python -m tied_embed.fast.kernels.build"
INSTALL = "make kernels" if CHECKOUT else "pip install 'tied-embed[kernels]'"  # the libraries the kernels link


@dataclasses.dataclass(frozen=True)
class Library:
  """One kernel library: its file in kernel_dir(), its sources in this folder, and how it is compiled."""

  file: str
  sources: tuple[str, ...]
  flags: tuple[str, ...]
  runtime: str | None = None  # the shared library it links, from the environment's prefix (<venv>/lib)
  header: str | None = None  # a header the runtime's devel wheel installs in <venv>/include


# AdamW's loop vectorises for this machine's widest registers (512 bits where it has AVX-512), with sqrt inlined (no
# errno) and no fused multiply-adds, so its roundings are the ones the source spells out.
ADAMW = Library("_adamw.so", ("adamw.cc",),
                ("-O3", "-march=native", "-mprefer-vector-width=512", "-fno-math-errno", "-ffp-contract=off"))
GEMM_ONEDNN = Library("_gemm_onednn.so", ("gemm_onednn.cc", "gemm.h"), ("-O2",), "libdnnl.so.3", "oneapi/dnnl/dnnl.hpp")
GEMM = Library("_gemm.so", ("gemm.cc", "gemm.h"), ("-O2",), "libmkl_rt.so.3", "mkl_cblas.h")
LIBRARIES = (ADAMW, GEMM_ONEDNN, GEMM)


def cpuinfo_field(names: str | tuple[str, ...], cpuinfo: pathlib.Path = pathlib.Path("/proc/cpuinfo")) -> str | None:
  """The first processor's field `names` ("" if it has none); None where /proc/cpuinfo cannot be read."""
  try:
    lines = cpuinfo.read_text().splitlines()
  except OSError:
    return None
  return next((line.partition(":")[2].strip() for line in lines if line.startswith(names)), "")


def fingerprint(library: Library) -> dict[str, str]:
  """What a build of `library` here would record before its file: sources and flags, jaxlib, machine, CPU."""
  digest = hashlib.sha256(" ".join(library.flags).encode())
  for name in library.sources:
    digest.update(f"\0{name}\0".encode() + (HERE / name).read_bytes())
  # A build for this CPU (-march=native) depends on its flags: their hash, "" where /proc/cpuinfo is unreadable.
  flags = cpuinfo_field(("flags", "Features")) if "-march=native" in library.flags else None
  cpu = "" if flags is None else hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:16]
  return {"sources": digest.hexdigest(), "jaxlib": jaxlib.__version__, "machine": platform.machine(), "cpu": cpu}


def kernel_dir() -> pathlib.Path:
  """Where the libraries are built and loaded from; the cache's folder is named for these sources and sys.prefix."""
  if os.environ.get(DIR_VARIABLE):
    return pathlib.Path(os.environ[DIR_VARIABLE])
  if CHECKOUT:
    return HERE
  key = hashlib.sha256(json.dumps([fingerprint(library) for library in LIBRARIES] + [sys.prefix]).encode())
  cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
  return cache / "tied-embed" / "kernels" / key.hexdigest()[:16]


def record_path(path: pathlib.Path) -> pathlib.Path:
  """The build record beside a library: _gemm.so → _gemm.json."""
  return path.with_suffix(".json")


def write_record(library: Library, path: pathlib.Path) -> None:
  """Writes the record of the library just built at `path` (its fingerprint, size and sha256)."""
  data = path.read_bytes()
  record = {**fingerprint(library), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
  util.write_atomically(record_path(path), (json.dumps(record, indent=1) + "\n").encode())


def check(library: Library, path: pathlib.Path) -> str | None:
  """None if the file at `path` is the library these sources build here, as its record says; else why not."""
  if not path.exists():
    return f"{path} is not built (`{REBUILD}` builds it)"
  try:
    record = json.loads(record_path(path).read_text())
    if not isinstance(record, dict):
      raise ValueError("not a record")
  except (OSError, ValueError):
    return f"{path} has no readable build record {record_path(path).name} (`{REBUILD}` rebuilds it)"
  expected = fingerprint(library)
  if record.get("sources") != expected["sources"]:
    problem = "was built from other sources than these"
  elif record.get("jaxlib") != expected["jaxlib"]:
    problem = f"was built against jaxlib {record.get('jaxlib')}, this is {expected['jaxlib']}"
  elif record.get("machine") != expected["machine"] or record.get("cpu") != expected["cpu"]:
    problem = "was built for another CPU"
  else:
    try:
      data = path.read_bytes()
    except OSError as error:
      return f"{path} cannot be read: {error.strerror}"
    if len(data) != record.get("size"):
      problem = f"is not the file its build wrote ({len(data)} bytes, not {record.get('size')}): damaged or replaced"
    elif hashlib.sha256(data).hexdigest() != record.get("sha256"):
      problem = "is not the file its build wrote (another sha256): damaged or replaced"
    else:
      return None
  return f"{path} {problem} (`{REBUILD}` rebuilds it)"


def _load_error(path: pathlib.Path, error: OSError) -> str:
  """dlopen's error in words: a missing dependency named as missing (glibc: "No such file or directory")."""
  message = str(error)
  missing = re.match(r"(\S+): cannot open shared object file", message)
  if missing and missing.group(1) == str(path):  # glibc's words for a library of another machine, too
    return f"{path} is not a library this {platform.machine()} machine opens (`{REBUILD}` rebuilds it)"
  if missing:
    return f"{path} needs {missing.group(1)}, which is not installed here (`{INSTALL}` installs it)"
  return f"{path} does not load: {message.removeprefix(f'{path}: ')}"


_OPENED: dict[pathlib.Path, ctypes.CDLL] = {}  # each library opened once per process; a refusal is checked again


def load(library: Library, directory: pathlib.Path) -> ctypes.CDLL | str:
  """`library` from `directory`, checked (`check`) and opened; else why not (one line)."""
  path = directory / library.file
  if path in _OPENED:
    return _OPENED[path]
  if (reason := check(library, path)) is not None:
    return reason
  # MKL's OpenMP threads otherwise spin 200 ms after each call, on the cores XLA's own threads need next.
  os.environ.setdefault("KMP_BLOCKTIME", "0")
  try:
    _OPENED[path] = ctypes.cdll.LoadLibrary(str(path))
  except OSError as error:
    return _load_error(path, error)
  return _OPENED[path]


def switched_off(switch: str) -> str | None:
  """Why a kernel cannot run in this process whatever its library: its switch set to 0, or not the CPU backend."""
  if os.environ.get(switch, "1") == "0":
    return f"{switch}=0"
  if jax.default_backend() != "cpu":
    return f"the backend is {jax.default_backend()}, not the CPU"
  return None


def register(targets: dict[str, tuple[Library, str]], directory: pathlib.Path | None = None) -> str | None:
  """Registers FFI targets {name: (library, handler symbol)} from `directory`; None, or why not (then none)."""
  directory = kernel_dir() if directory is None else pathlib.Path(directory)
  handlers = {}
  for target, (library, symbol) in targets.items():
    loaded = load(library, directory)
    if isinstance(loaded, str):
      return loaded
    try:
      handlers[target] = getattr(loaded, symbol)
    except AttributeError:
      return f"{directory / library.file} has no handler {symbol} (`{REBUILD}` rebuilds it)"
  for target, handler in handlers.items():
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform="cpu")
  return None
