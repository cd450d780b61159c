"""Everything docs/testing.md names exists: each tied_embed/, tests/ and scripts/ file (and the test a `::name` after
one names), and each name in backticks that reads as code: a dotted name in the package (`optim.clip_scale`,
`fast.kernels.library.switched_off`, `model.Block.__init__`), a config field (`model.layers`), or a single name
defined in the package, the tests or the scripts (`make_train_step`, `RUN_FIRST`, a test's name)."""

from __future__ import annotations

import ast
import builtins
import functools
import keyword
import pathlib
import re

from conftest import ROOT

from tied_embed.train.config import BY_PATH

DOC = ROOT / "docs" / "testing.md"
FILE = re.compile(r"(?<![\w/])((?:tied_embed|tests|scripts)/[\w/.-]*\.py)(?:::(\w+))?")
CODE = re.compile(r"`([^`\n]+)`")
NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
LIBRARIES = {"jax", "jnp", "nnx", "optax", "np", "os", "functools", "mutmut"}  # names in them are theirs
SEARCHED = ("tied_embed", "tests", "scripts", "science")
SETTINGS = ("Makefile", "pyproject.toml")  # make's variables, pytest's markers and options


def _defined(tree: ast.AST) -> set[str]:
  """Every name a module defines at any depth: functions, classes (also as 'class Name'), assignments, arguments,
  keywords, and the identifiers its strings hold (a metric's or a field's name)."""
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.add(node.name)
      if isinstance(node, ast.ClassDef):
        names.add(f"class {node.name}")
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      names.add(node.id)
    elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
      names.add(node.attr)
    elif isinstance(node, ast.arg):
      names.add(node.arg)
    elif isinstance(node, ast.keyword) and node.arg:
      names.add(node.arg)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
      names.add(node.value)
  return names


@functools.cache
def _modules() -> dict[str, set[str]]:
  """{dotted module name: the names it defines} for every Python file under SEARCHED."""
  found = {}
  for folder in SEARCHED:
    for path in (ROOT / folder).rglob("*.py"):
      if path == pathlib.Path(__file__).resolve():  # its own examples of missing names
        continue
      dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
      found[dotted] = _defined(ast.parse(path.read_text()))
  return found


def _exists(name: str) -> bool:
  """A config field; a module (or a name inside one) whose dotted path ends with the name's first parts; or, for a
  single name, one some module defines."""
  parts = name.split(".")
  if name in BY_PATH or parts[0] in LIBRARIES or keyword.iskeyword(name) or hasattr(builtins, name):
    return True
  if len(parts) == 1:
    return (any(name in names for names in _modules().values())
            or any(re.search(rf"\b{name}\b", (ROOT / file).read_text()) for file in SETTINGS))
  if any(f"class {parts[0]}" in names and all(part in names for part in parts)  # a class and its method
         for names in _modules().values()):
    return True
  for cut in range(len(parts), 0, -1):
    suffix = ".".join(parts[:cut])
    for module, names in _modules().items():
      if (module == suffix or module.endswith("." + suffix)) and all(part in names for part in parts[cut:]):
        return True
  return False


def named_files(text: str) -> list[tuple[str, str | None]]:
  return FILE.findall(text)


def named_code(text: str) -> list[str]:
  """The backticked spans that are a bare or dotted name (no spaces, calls, operators or flags)."""
  return [span for span in CODE.findall(text) if NAME.fullmatch(span)]


def test_every_file_and_test_it_names_exists():
  missing = []
  for path, test in named_files(DOC.read_text()):
    if not (ROOT / path).is_file():
      missing.append(path)
    elif test and test not in _defined(ast.parse((ROOT / path).read_text())):
      missing.append(f"{path}::{test}")
  assert not missing, f"docs/testing.md names what does not exist: {sorted(set(missing))}"


def test_every_function_module_and_field_it_names_exists():
  missing = sorted({name for name in named_code(DOC.read_text()) if not _exists(name)})
  assert not missing, f"docs/testing.md names what no module defines: {missing}"


def test_the_check_finds_a_missing_file_a_missing_test_and_a_missing_function():
  missing = "tests/core/" + "test_nothing_here.py"  # spelt in two, so no check of this file's own paths reads it
  text = (f"{missing}, tests/core/test_model.py::test_no_such_test, `optim.no_such_function`,"
          " `model.no_such_field`, `no_such_name_anywhere`, tests/core/test_model.py, `optim.clip_scale`")
  assert [path for path, _ in named_files(text) if not (ROOT / path).is_file()] == [missing]
  assert [name for name in named_code(text) if not _exists(name)] == [
      "optim.no_such_function", "model.no_such_field", "no_such_name_anywhere"]
