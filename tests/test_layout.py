"""The layers on disk: the story in tied_embed/core imports none of the speed paths or the run machinery, and each
package imports only the layers below it."""

import ast
import subprocess
import sys

from conftest import ROOT

CORE_FILES = sorted((ROOT / "tied_embed" / "core").glob("*.py"))
ALLOWED = {"__future__", "math", "collections", "typing", "jax", "flax", "optax", "tied_embed"}
LOADED_NEVER = ("tied_embed.fast", "tied_embed.train", "tied_embed.data", "tied_embed.inspection",
                "tensorflow", "tensorflow_datasets", "orbax", "clu", "ml_collections")


def _runtime_imports(path) -> set[str]:
  """Modules a file imports, leaving out those imported only for annotations (under `if TYPE_CHECKING:`)."""
  tree = ast.parse(path.read_text())
  guarded = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
             for n in ast.walk(node)}
  names = set()
  for node in ast.walk(tree):
    if id(node) in guarded:
      continue
    if isinstance(node, ast.Import):
      names |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
      names.add(node.module)
  return names


def test_the_core_modules_import_only_jax_flax_optax_and_each_other():
  assert {path.stem for path in CORE_FILES} >= {"model", "loss", "paths", "step", "optim"}
  for path in CORE_FILES:
    for name in _runtime_imports(path):
      assert name.split(".")[0] in ALLOWED, f"{path.name} imports {name}"
      if name.startswith("tied_embed."):
        assert name.startswith("tied_embed.core"), f"{path.name} imports {name}"


# Each package's imports of the others, lazy ones included, point down the layers:
# inspection/ (reads a run) is the top; train/ (the loop and its machinery) under it; data/ and fast/ under train/.
NOT_IMPORTED_FROM = {
    "train": ("tied_embed.inspection",),
    "data": ("tied_embed.train", "tied_embed.inspection", "tied_embed.fast"),
    "fast": ("tied_embed.train", "tied_embed.inspection", "tied_embed.data"),
}


def test_the_packages_import_only_the_layers_below_them():
  for package, above in NOT_IMPORTED_FROM.items():
    for path in sorted((ROOT / "tied_embed" / package).rglob("*.py")):
      for name in _runtime_imports(path):
        assert not (name or "").startswith(above), f"{path.relative_to(ROOT)} imports {name}"


def test_importing_the_core_loads_no_run_machinery():
  probe = "import sys, tied_embed.core.step, tied_embed.core.optim; print(sorted(sys.modules))"
  loaded = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
  found = [name for name in LOADED_NEVER if f"'{name}'" in loaded or f"'{name}." in loaded]
  assert not found, f"importing tied_embed.core loads {found}"


def test_the_readmes_reading_order_names_every_story_module_and_only_files_that_exist():
  readme = (ROOT / "README.md").read_text()
  table = readme.split("<!-- reading-order -->")[1]
  paths = [line.split("|")[1].strip().strip("`") for line in table.splitlines() if line.startswith("| `")]
  assert len(paths) >= 8
  for path in paths:
    assert (ROOT / path).is_file(), path
  story = {str(path.relative_to(ROOT)) for path in CORE_FILES if path.name != "__init__.py"}
  assert story <= set(paths), f"the reading order leaves out {sorted(story - set(paths))}"


def test_the_house_figures_count_every_line_and_name_long_functions():
  """Budgets are figures (`make house`), never a red suite: the counts are exact, and a long function is named."""
  import importlib.util
  spec = importlib.util.spec_from_file_location("scripts.house", ROOT / "scripts" / "house.py")
  house = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(house)
  core = sum(len(path.read_text().splitlines()) for path in CORE_FILES)
  rows = house.figures()
  assert rows[0].startswith(f"tied_embed/core/: {core:,} lines")
  assert rows[0].endswith(", over)") == (core > 700)
  assert house.long_functions(ROOT / "tied_embed", limit=10), "functions over 10 lines exist and must be named"
  assert all(n > 10 for n, _ in house.long_functions(ROOT / "tied_embed", limit=10))
