"""The config field list of docs/configs.md (between its `fields` markers): `.venv/bin/python scripts/config_fields.py`
prints it, one row per field of `tied_embed.train.config.FIELDS`, then the sources' own data.* fields."""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tied_embed.data import sources  # noqa: E402
from tied_embed.train.config import FIELDS  # noqa: E402


def markdown_table() -> str:
  """The field list: one row per field of `FIELDS`, then the sources' own data.* fields."""
  rows = ["| field | default | allowed | may change on resume | names the dataset | meaning |", "|---" * 6 + "|"]
  for field in FIELDS:
    resumable, dataset = ("yes" if flag else "no" for flag in (field.resumable, field.dataset))
    allowed = field.allowed.replace("|", "\\|")
    rows.append(f"| `{field.path}` | `{field.default!r}` | {allowed} | {resumable} | {dataset} | {field.doc} |")
  source_fields = sorted({f"data.{name}" for source in sources.REGISTRY.values() for name in source.fields})
  rows.extend(["", "The data sources check their own fields (none may change on resume): "
              + ", ".join(f"`{path}`" for path in source_fields) + "."])
  return "\n".join(rows) + "\n"


if __name__ == "__main__":
  print(markdown_table(), end="")
