"""All benchmarks: the train step against PyTorch, the chunked loss's memory, and the entrypoint.

  python benchmarks/run.py --json benchmarks/results.json [--only train_step,memory,entrypoint]

Prints a table and writes JSON with the sections `train_step`, `memory`, `entrypoint` and `machine`. The targets
(issue 6) are printed beside the measured ratios; they are results, not assertions. Expect about 5 minutes on
2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from benchmarks import entrypoint, memory, throughput, workload  # noqa: E402

SECTIONS = {"train_step": throughput.measure, "memory": memory.measure, "entrypoint": entrypoint.measure}


def machine() -> dict:
  """What the numbers ran on."""
  cpu = next(
      (line.split(":", 1)[1].strip() for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
       if line.startswith("model name")),
      platform.processor(),
  )
  try:
    import torch  # noqa: PLC0415

    torch_version = torch.__version__
  except ImportError:
    torch_version = None
  return {"cpu": cpu, "threads": workload.cpu_threads(), "jax": jax.__version__, "torch": torch_version,
          "python": platform.python_version()}


def _fmt(value, spec: str = ".1f") -> str:
  return "n/a" if value is None else format(value, spec)


def _print_train_step(r: dict) -> None:
  print(f"\ntrain step, V={r['V']} D={r['D']} T={r['T']} (medians of {r['rounds']} interleaved rounds)")
  print(f"  JAX step (full logits)  {r['step_ms']:8.1f} ms  {r['tokens_per_s']:9.0f} tokens/s")
  chunked = f"JAX step (chunk {r['chunk_size']})"
  print(f"  {chunked:<23} {r['chunked_step_ms']:8.1f} ms  {r['chunked_tokens_per_s']:9.0f} tokens/s")
  print(f"  JAX step, no provenance {r['plain_step_ms']:8.1f} ms")
  torch_rate = _fmt(r["torch_tokens_per_s"], ".0f")
  print(f"  PyTorch step            {_fmt(r['torch_step_ms']):>8} ms  {torch_rate:>9} tokens/s")
  print(f"  one (T,D)x(D,V) matmul  {r['matmul_ms']:8.1f} ms (PyTorch: {_fmt(r['torch_matmul_ms'])} ms)")
  print(f"  roofline fraction (3 matmuls / step)  {r['roofline_fraction']:.2f}")
  print(f"  JAX / PyTorch tokens/s  {_fmt(r['speedup_vs_torch'], '.2f')}x   (target >= 1.3x)")


def _print_memory(r: dict) -> None:
  print(f"\nmemory, V={r['V']} D={r['D']} T={r['T']}, one process each (peak RSS)")
  rows = [("baseline (params + optimizer)", r["baseline_mib"], None),
          ("full logits step", r["full_peak_mib"], r["full_step_ms"]),
          (f"chunked step (chunk {r['chunk_size']})", r["chunked_peak_mib"], r["chunked_step_ms"])]
  for label, mib, ms in rows:
    print(f"  {label:<30} {mib:8.0f} MiB" + ("" if ms is None else f"  {ms:8.0f} ms"))
  print(f"  chunked / full, above baseline {r['chunked_over_full_extra']:.3f}   (target <= 0.125)")
  print(f"  chunked / full, step time      {r['chunked_over_full_time']:.2f}    (target <= 1.1)")


def _print_entrypoint(r: dict) -> None:
  print("\nentrypoint, warm calls")
  for row in r["warm"]:
    print(f"  V={row['V']:>6} D={row['D']:>4} T={row['T']:>4}: {row['entrypoint_ms']:.3f} ms, bare compiled "
          f"{row['bare_ms']:.3f} ms (x{row['overhead_ratio']:.2f}), literal eager {row['literal_eager_ms']:.3f} ms")


def print_table(results: dict) -> None:
  info = results["machine"]
  print(f"\n{info['cpu']}, {info['threads']} threads, jax {info['jax']}, torch {info['torch'] or 'not installed'}")
  printers = {"train_step": _print_train_step, "memory": _print_memory, "entrypoint": _print_entrypoint}
  for name, printer in printers.items():
    if name in results:
      printer(results[name])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--json", required=True, type=pathlib.Path, help="where to write the results")
  parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections to run")
  args = parser.parse_args()
  names = [name for name in args.only.split(",") if name]
  unknown = sorted(set(names) - set(SECTIONS))
  if unknown:
    parser.error(f"--only: unknown section(s) {unknown}; allowed: {', '.join(SECTIONS)}")
  results = {"machine": machine()}
  for name in names:
    print(f"measuring {name} ...", file=sys.stderr, flush=True)
    results[name] = SECTIONS[name]()
  print_table(results)
  args.json.parent.mkdir(parents=True, exist_ok=True)
  args.json.write_text(json.dumps(results, indent=2) + "\n")
  print(f"\nwrote {args.json}")


if __name__ == "__main__":
  main()
