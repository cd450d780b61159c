"""Every repository path and every dotted tied_embed module name in the docs, docstrings, comments, configs and
requirements exists: a reader who follows one lands somewhere."""

import ast
import importlib.util
import pathlib
import re
import subprocess

from conftest import ROOT

TEXT_SUFFIXES = {".md", ".py", ".txt", ".toml", ".cc", ".h", ".cfg"}
TOP_FOLDERS = ("tied_embed", "tests", "configs", "docs", "science", "scripts", "benchmarks")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP_FOLDERS) + r")/[\w./*-]*[\w*])")
MODULE = re.compile(r"(?<![\w./-])(tied_embed(?:\.[A-Za-z_]\w*)+)")


def _tracked_text_files() -> list[pathlib.Path]:
  names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
  return [ROOT / name for name in names
          if pathlib.PurePath(name).suffix in TEXT_SUFFIXES or pathlib.PurePath(name).name == "Makefile"]


def _path_exists(text: str) -> bool:
  text = text.rstrip(".")
  if "*" in text:
    return any(ROOT.glob(text))
  if (ROOT / text).exists() or any(ROOT.glob(text + ".*")):  # a file, a folder, or a stem named for its files
    return True
  # a build output or a run's output is named but not in a clone (.gitignore lists it)
  return subprocess.run(["git", "check-ignore", "-q", text], cwd=ROOT).returncode == 0


def _defined_names(module_file: pathlib.Path) -> set[str]:
  tree = ast.parse(module_file.read_text())
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
      names.add(node.name)
    elif isinstance(node, ast.Assign):
      names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
      names.add(node.target.id)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
  return names


def _module_name_exists(dotted: str) -> bool:
  """`dotted` is a module or package, or a name defined at some depth inside one (a.b.c.function.attribute)."""
  parts = dotted.rstrip(".").split(".")
  for cut in range(len(parts), 0, -1):
    spec = importlib.util.find_spec(".".join(parts[:cut])) if _parent_is_package(parts[:cut]) else None
    if spec is not None:
      rest = parts[cut:]
      if not rest:
        return True
      origin = pathlib.Path(spec.origin) if spec.origin else None
      return origin is not None and origin.suffix == ".py" and rest[0] in _defined_names(origin)
  return False


def _parent_is_package(parts: list[str]) -> bool:
  for cut in range(1, len(parts)):
    spec = importlib.util.find_spec(".".join(parts[:cut]))
    if spec is None or spec.submodule_search_locations is None:
      return False
  return True


def test_every_named_repository_path_exists():
  missing = [f"{path.relative_to(ROOT)}: {name}" for path in _tracked_text_files()
             for name in sorted(set(PATH.findall(path.read_text(errors="replace")))) if not _path_exists(name)]
  assert not missing, "paths that do not exist:\n" + "\n".join(missing)


def test_every_named_tied_embed_module_exists():
  missing = [f"{path.relative_to(ROOT)}: {name}" for path in _tracked_text_files()
             for name in sorted(set(MODULE.findall(path.read_text(errors="replace")))) if not _module_name_exists(name)]
  assert not missing, "tied_embed names that do not exist:\n" + "\n".join(missing)
