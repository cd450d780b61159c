"""docs/performance.md's tables, written from `benchmarks/run.py` results: no number in them is typed by hand.

  python benchmarks/report.py runs/bench/a.json runs/bench/b.json     # one column per run, in this order

docs/performance.md keeps one block per CPU kind (its `machine.cpu_kind`, from the CPU's name: intel, amd): the
runs' block replaces what stands between that kind's `<!-- bench:<kind>:begin -->` and `<!-- bench:<kind>:end -->`
lines (`--doc` names another file; `--print` prints the block instead of writing it). Every run given must be of
one CPU kind.
"""

from __future__ import annotations

import argparse
import json
import pathlib

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def markers(kind: str) -> tuple[str, str]:
  """The lines around the block of runs on CPUs of `kind` in docs/performance.md."""
  return f"<!-- bench:{kind}:begin -->", f"<!-- bench:{kind}:end -->"


def cpu_kind(machine: dict) -> str:
  """The run's CPU kind: recorded by run.py, else read from the CPU's name (runs recorded before the field)."""
  if "cpu_kind" in machine:
    return machine["cpu_kind"]
  name = machine["cpu"].lower()
  return "intel" if "intel" in name else "amd" if ("amd" in name or "epyc" in name) else "other"


# (label, key) rows of a train-step section; key is `<name>_ms`, or a speedup key (printed as a ratio).
STEP_ROWS = [
    ("JAX, full logits", "step_ms"),
    ("JAX, chunked (`loss.chunk_size=256`, the configs'), uniform ids", "chunked_step_ms"),
    ("the same, Zipf ids", "chunked_zipf_step_ms"),
    ("JAX, every token's logits, no provenance (PyTorch's work), chunked", "plain_chunked_step_ms"),
    ("**JAX, chunked, `model.dtype=bfloat16`**, uniform ids", "chunked_bf16_step_ms"),
    ("the same, Zipf ids", "chunked_bf16_zipf_step_ms"),
    ("PyTorch eager", "torch_step_ms"),
    ("PyTorch, loss under `torch.compile`", "torch_compile_step_ms"),
    ("PyTorch, `F.linear_cross_entropy`", "torch_chunked_step_ms"),
    ("PyTorch eager, bf16 autocast", "torch_step_bf16_ms"),
    ("PyTorch `torch.compile`, bf16 autocast", "torch_compile_step_bf16_ms"),
    ("PyTorch `F.linear_cross_entropy`, bf16 autocast", "torch_chunked_step_bf16_ms"),
    ("one (T, D)×(D, V) matmul: JAX float32 / bf16 (the step's routes)", ("matmul_ms", "bf16_matmul_ms")),
    ("one matmul: PyTorch float32 / bf16", ("torch_matmul_ms", "torch_bf16_matmul_ms")),
    ("**float32 step / fastest float32 PyTorch**, uniform ids", "chunked_speedup_vs_fastest_torch"),
    ("the same, Zipf ids", "chunked_zipf_speedup_vs_fastest_torch"),
    ("**bf16 step / fastest bf16 PyTorch**, uniform ids", "chunked_bf16_speedup_vs_fastest_torch_bf16"),
    ("the same, Zipf ids", "chunked_bf16_zipf_speedup_vs_fastest_torch_bf16"),
    ("**bf16 step / float32 step** (speedup)", "bf16_speedup"),
    ("fastest PyTorch, float32 / bf16", ("fastest_torch", "fastest_torch_bf16")),
]
TORCH_NAMES = {"torch_step": "eager", "torch_compile_step": "`torch.compile`",
               "torch_chunked_step": "`linear_cross_entropy`"}
MEMORY_ROWS = [
    ("JAX baseline, params + AdamW (MiB)", "baseline_mib"),
    ("**JAX chunked step, peak above baseline (MiB)**", "chunked_extra_mib"),
    ("JAX: compiling the step, peak above baseline (MiB)", "chunked_compile_extra_mib"),
    ("JAX chunked bf16 step, peak above baseline (MiB)", "chunked_bf16_extra_mib"),
    ("JAX full-logits step, peak above baseline (MiB)", "full_extra_mib"),
    ("PyTorch baseline (MiB)", "torch_baseline_mib"),
    ("**PyTorch `linear_cross_entropy`, peak above baseline (MiB)**", "torch_chunked_extra_mib"),
    ("step ms: JAX chunked, uniform / Zipf ids", ("chunked_step_ms", "chunked_zipf_step_ms")),
    ("step ms: PyTorch eager / compile / chunked", ("torch_step_ms", "torch_compile_step_ms", "torch_chunked_step_ms")),
    ("**float32 step / fastest float32 PyTorch**, uniform ids", "chunked_speedup_vs_fastest_torch"),
]


def _value(section: dict, key: str) -> str:
  value = _ratio(section, key) if key == "bf16_speedup" else section.get(key)
  if value is None:
    return "n/a"
  if isinstance(value, str):
    return TORCH_NAMES.get(value.removesuffix("_bf16"), value)
  if "speedup" in key:
    return f"{value:.2f}x"
  return f"{value:.0f}" if key.endswith("_mib") or value >= 1000 else f"{value:.1f}"


def _cell(section: dict, key) -> str:
  return " / ".join(_value(section, one) for one in key) if isinstance(key, tuple) else _value(section, key)


def table(title: str, sections: list[dict], rows, names: list[str]) -> str:
  lines = [f"| {title} | " + " | ".join(f"run {name}" for name in names) + " |",
           "|---|" + "---|" * len(sections)]
  for label, key in rows:
    lines.append(f"| {label} | " + " | ".join(_cell(section, key) for section in sections) + " |")
  return "\n".join(lines)


SUMMARY = [  # (what, section key → value) lines of the summary, each as the range over the runs
    ("float32 step / fastest float32 PyTorch step, uniform ids", "chunked_speedup_vs_fastest_torch"),
    ("float32 step / fastest float32 PyTorch step, Zipf ids", "chunked_zipf_speedup_vs_fastest_torch"),
    ("bfloat16 step / fastest bf16-autocast PyTorch step, uniform ids", "chunked_bf16_speedup_vs_fastest_torch_bf16"),
    ("bfloat16 step / float32 step (speedup)", "bf16_speedup"),
]


def _ratio(section: dict, key: str) -> float | None:
  if key == "bf16_speedup":
    bf16 = section.get("chunked_bf16_step_ms")
    return section["chunked_step_ms"] / bf16 if bf16 else None
  return section.get(key)


def summary(results: list[dict]) -> str:
  """One line per SUMMARY entry and shape: 'lo-hi x' over the runs (medians), goal beside it."""
  lines = []
  for section in ("train_step", "gpt2", "memory"):
    if not all(section in r for r in results):
      continue
    first = results[0][section]
    for what, key in SUMMARY:
      values = [_ratio(r[section], key) for r in results]
      if any(v is None for v in values):
        continue
      lo, hi = min(values), max(values)
      span = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"
      lines.append(f"- V={first['V']}, D={first['D']}, T={first['T']}: {what}: **{span}**")
    if section == "memory":
      jax_extra = [max(r[section]["chunked_extra_mib"], r[section]["chunked_compile_extra_mib"]) for r in results]
      torch_extra = [r[section]["torch_chunked_extra_mib"] for r in results]
      if None not in torch_extra:
        lines.append(f"- V={first['V']}, D={first['D']}, T={first['T']}: peak above baseline, compile included, JAX "
                     f"chunked / PyTorch `linear_cross_entropy`: "
                     + ", ".join(f"{j:.0f} / {t:.0f} MiB" for j, t in zip(jax_extra, torch_extra, strict=True)))
  return "\n".join(lines)


def _turns(result: dict) -> str:
  """How the step times were taken, from the run's own record."""
  calls = result.get("train_step", {}).get("calls_per_turn", 1)
  if calls == 1:
    return "medians of calls taken in turns."
  return f"medians of calls taken in turns, each the last of {calls} back-to-back calls of its own."


def step_memory_table(sections: list[dict], names: list[str]) -> str:
  """Rows per V and use: each use's peak above its process's own baseline, and the V-proportional part by hand."""
  first = sections[0]
  lines = [f"| D={first['D']}, T={first['T']}, chunk {first['chunk_size']}: peak above own baseline (MiB) | "
           + " | ".join(f"run {name}" for name in names) + " |", "|---|" + "---|" * len(sections)]
  uses = (("jit on first call", "first_call"), ("compile-ahead (the trainer's)", "ahead"),
          ("PyTorch `linear_cross_entropy`", "torch_chunked"))
  for vocab in first["by_vocab"]:
    for label, use in uses:
      cells = [section["by_vocab"].get(vocab, {}).get(use, {}).get("extra_mib") for section in sections]
      lines.append(f"| V={vocab}: {label} | " + " | ".join("n/a" if c is None else f"{c:.0f}" for c in cells) + " |")
    hand = first["by_vocab"][vocab]["v_term_mib"]
    lines.append(f"| V={vocab}: (V, D) gradient + (V, C) chunk logits, by hand | "
                 + " | ".join(f"{hand:.0f}" for _ in sections) + " |")
  lines.append("| load average (1 min) after each V | "
               + " | ".join(", ".join(f"{x:.1f}" for x in s["load_average"]) for s in sections) + " |")
  return "\n".join(lines)


def adamw_words(machine: dict) -> str:
  """PyTorch's AdamW in the run's peers: its recorded options, or its defaults where the run predates recording them."""
  options = machine.get("torch_adamw")
  if not options:
    return "AdamW with its defaults"
  return "AdamW with " + ", ".join(f"{key}={value}" for key, value in options.items())


def _header(results: list[dict], names: list[str]) -> str:
  info = results[0]["machine"]
  when = f", {info['date']}" if "date" in info else ""
  load = f", load average {info['load_average']:.1f} at the start" if "load_average" in info else ""
  text = (f"Runs {', '.join(names)} of `benchmarks/run.py`: {info['cpu']}, {info['threads']} cores{when}{load} "
          f"(vector extensions: {' '.join(info['cpu_flags']) or 'unknown'}; matrix units: "
          f"{info.get('matrix_units', 'not recorded')}); jax {info['jax']}, torch {info['torch']} "
          f"({adamw_words(info)}); ")
  if "train_step" in results[0]:
    text += _turns(results[0]) + " "
  text += "Written by `benchmarks/report.py` from the runs' JSON."
  if info.get("routes"):
    text += " Routes: " + "; ".join(f"{piece} on {route}" for piece, route in info["routes"].items()) + "."
  return text


def block(results: list[dict]) -> str:
  names = [chr(ord("A") + i) for i in range(len(results))]
  parts = [_header(results, names)]
  if "train_step" in results[0]:
    routes = results[0]["train_step"]
    parts[0] += (f" The chunked step's float32 dots ran on {routes.get('f32_kernel', 'XLA')}, its bfloat16 dots on "
                 f"{routes['bf16_kernel']}.")
  parts.append(summary(results))
  for section, what in (("train_step", "ms per step"), ("gpt2", "ms per step, GPT-2's shape")):
    if all(section in r for r in results):
      first = results[0][section]
      title = f"V={first['V']}, D={first['D']}, T={first['T']} ({what})"
      parts.append(table(title, [r[section] for r in results], STEP_ROWS, names))
  if all("memory" in r for r in results):
    first = results[0]["memory"]
    title = f"V={first['V']}, D={first['D']}, T={first['T']}, one process each"
    parts.append(table(title, [r["memory"] for r in results], MEMORY_ROWS, names))
  if all("step_memory" in r for r in results):
    parts.append(step_memory_table([r["step_memory"] for r in results], names))
  return "\n\n".join(part for part in parts if part)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("runs", nargs="+", type=pathlib.Path, help="results JSON of benchmarks/run.py, one per run")
  parser.add_argument("--doc", type=pathlib.Path, default=DOC)
  parser.add_argument("--print", action="store_true", help="print the block instead of writing it")
  args = parser.parse_args()
  results = [json.loads(path.read_text()) for path in args.runs]
  kinds = sorted({cpu_kind(r["machine"]) for r in results})
  if len(kinds) != 1:
    raise SystemExit(f"error: runs: CPU kinds {kinds}; one table holds runs of one CPU kind")
  text = block(results)
  if args.print:
    print(text)
    return
  doc = args.doc.read_text()
  begin, end = markers(kinds[0])
  if begin not in doc or end not in doc:
    raise SystemExit(f"error: {args.doc} has no {begin} ... {end} block to replace")
  head, rest = doc.split(begin, 1)
  args.doc.write_text(f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}")
  print(f"wrote {args.doc}")


if __name__ == "__main__":
  main()
