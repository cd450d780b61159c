"""The house in figures: lines of Python per layer, the longest functions, the largest modules (`make house`).

  .venv/bin/python scripts/house.py

Budgets are figures to report, not tests: the story (tied_embed/core/) should read in one sitting (~700 lines), the
package should stay small (~7,500 lines), and no function should run past ~80 lines. docs/testing.md puts these beside
nanoGPT's and Flax's lm1b's."""

from __future__ import annotations

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUDGETS = {"tied_embed/core": 700, "tied_embed": 7_500}  # lines of Python each should stay near
LONG_FUNCTION = 80  # lines


def lines(paths) -> int:
  return sum(len(path.read_text().splitlines()) for path in paths)


def long_functions(package: pathlib.Path, limit: int = LONG_FUNCTION) -> list[tuple[int, str]]:
  """(lines, 'path:name') of every function over `limit` lines, longest first."""
  found = []
  for path in sorted(package.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit:
        found.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(ROOT)}:{node.name}"))
  return sorted(found, reverse=True)


def figures() -> list[str]:
  """One line per figure: each layer's lines against its budget, then the long functions and largest modules."""
  rows = []
  for folder, budget in BUDGETS.items():
    count = lines((ROOT / folder).rglob("*.py"))
    rows.append(f"{folder}/: {count:,} lines of Python (budget ~{budget:,}{', over' if count > budget else ''})")
  for package in sorted(p for p in (ROOT / "tied_embed").iterdir() if p.is_dir() and not p.name.startswith("_")):
    rows.append(f"  {package.relative_to(ROOT)}/: {lines(package.rglob('*.py')):,}")
  long = long_functions(ROOT / "tied_embed")
  rows.append(f"functions over {LONG_FUNCTION} lines: " + (", ".join(f"{n} {name}" for n, name in long) or "none"))
  modules = sorted(((len(p.read_text().splitlines()), str(p.relative_to(ROOT)))
                    for p in (ROOT / "tied_embed").rglob("*.py")), reverse=True)[:5]
  rows.append("largest modules: " + ", ".join(f"{name} {n}" for n, name in modules))
  return rows


if __name__ == "__main__":
  print("\n".join(figures()))
  sys.exit(0)
