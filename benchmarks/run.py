"""All benchmarks: the train step against PyTorch, the chunked loss's memory, and the entrypoint.

  python benchmarks/run.py                                  # writes runs/bench/results.json
  python benchmarks/run.py --json=runs/bench/memory.json --only=memory
  python benchmarks/run.py --json benchmarks/results.json   # rewrites the tracked results, only when asked

Prints a table and writes JSON to --json (by default under runs/) with the sections `train_step` (V=8192, D=256,
T=4096), `gpt2` (the same at GPT-2's V=50257, D=768, T=1024), `context_step` (configs/context_transformer.py's step
beside the same model in PyTorch), `memory`, `step_memory` (both uses of the step, jit on its first call and
compiled ahead, against PyTorch's chunked step at V = 8192, 32768, 65536), `entrypoint` and `machine` (the CPU's
name and kind, vector extensions, matrix units, the routes the step takes (tied_embed/fast/kernels or XLA's own
code), the date and the load: the ratios depend on them, since each framework's matmul kernels do). The
targets are printed beside the measured ratios; they are results, not assertions. Expect about 10 minutes on 2
quiet cores (`--only` picks sections).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from benchmarks import context_step, entrypoint, memory, report, step_memory, throughput, torch_step, workload  # noqa: E402
from science import common  # noqa: E402
from tied_embed.fast.kernels import fused_adamw  # noqa: E402

DEFAULT_JSON = pathlib.Path("runs/bench/results.json")
SECTIONS = {
    "train_step": throughput.measure,  # V=8192, D=256, T=4096
    "gpt2": lambda: throughput.measure("gpt2", rounds=5),  # GPT-2's V=50257, D=768, T=1024: seconds per round
    "context_step": context_step.measure,  # configs/context_transformer.py: V=8192, D=128, 4 blocks, 32 windows of 64
    "memory": memory.measure,
    "step_memory": step_memory.measure,  # both uses of the step (jit on first call, compile-ahead) across V
    "entrypoint": entrypoint.measure,
}


# The CPU flags the matmul kernels of XLA, MKL and oneDNN choose by: vector width, bf16 and AMX support.
VECTOR_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16")


def matrix_units(flags: list[str]) -> str:
  """The CPU's bfloat16 matrix hardware in words, from its flags: what PyTorch's and the AMX kernel's bf16 use."""
  amx = [flag for flag in flags if flag.startswith("amx_")]
  units = [f"AMX ({' '.join(amx)})"] if amx else ["no AMX"]
  units.append("avx512_bf16" if "avx512_bf16" in flags else "no avx512_bf16")
  return ", ".join(units)


def cpu_kind(cpu: str, flags: list[str] | tuple[str, ...] = ()) -> str:
  """'intel', 'amd-avx512' (Zen 4 on), 'amd' (AVX2) or 'other', from the CPU's model name and flags: which of
  docs/performance.md's tables a run belongs in (the step's routes differ between the two AMD kinds)."""
  name = cpu.lower()
  kind = "intel" if "intel" in name else "amd" if ("amd" in name or "epyc" in name) else "other"
  return "amd-avx512" if kind == "amd" and "avx512f" in flags else kind


def routes() -> dict[str, str]:
  """What the trainer's step runs on here (tied_embed/fast/kernels, or XLA's own code and why), in words."""
  adamw = fused_adamw.unavailable_reason()
  adamw = adamw and adamw.replace(f"{pathlib.Path(__file__).resolve().parents[1]}/", "")  # the checkout's own path
  return {"float32 dots": throughput.kernel_name("float32"), "bfloat16 dots": throughput.kernel_name("bfloat16"),
          "AdamW": "the fused AdamW kernel" if adamw is None else f"optax's update ({adamw})"}


def machine() -> dict:
  """What the numbers ran on, when, and which routes the step took."""
  cpu, present = common.cpu()
  flags = [flag for flag in VECTOR_FLAGS if flag in present]
  try:
    import torch  # noqa: PLC0415

    torch_version = torch.__version__
  except ImportError:
    torch_version = None
  return {"cpu": cpu, "cpu_kind": cpu_kind(cpu, flags), "cpu_flags": flags, "matrix_units": matrix_units(flags),
          "threads": workload.cpu_threads(), "routes": routes(), "date": datetime.date.today().isoformat(),
          "load_average": os.getloadavg()[0], "jax": jax.__version__,
          "torch": torch_version, "torch_adamw": torch_step.ADAMW_OPTIONS, "python": platform.python_version()}


def _fmt(value, spec: str = ".1f") -> str:
  return "n/a" if value is None else format(value, spec)


SPEEDUP_LABELS = {
    "": {"chunked": "chunked, uniform ids (the trainer's step)", "chunked_zipf": "chunked, Zipf ids (text-like)",
         "full": "full logits, uniform ids", "plain_chunked": "chunked, no provenance, every token's logits"},
    "_bf16": {"chunked_bf16": "bfloat16 chunked, uniform ids", "chunked_bf16_zipf": "bfloat16 chunked, Zipf ids"},
}


def _print_speedups(r: dict) -> None:
  for suffix, labels in SPEEDUP_LABELS.items():
    if f"fastest_torch{suffix}" not in r or not any(f"{key}_speedup_vs_fastest_torch{suffix}" in r for key in labels):
      continue
    fastest = r[f"fastest_torch{suffix}"] or "n/a"
    print(f"  JAX / fastest PyTorch{' bf16' if suffix else ''} ({fastest}), medians (fastest calls):   target >= 1.3x")
    for key, label in labels.items():
      if f"{key}_speedup_vs_fastest_torch{suffix}" in r:
        print(f"    {label:<46} {_fmt(r[f'{key}_speedup_vs_fastest_torch{suffix}'], '.2f')}x "
              f"({_fmt(r[f'{key}_speedup_vs_fastest_torch{suffix}_by_fastest_call'], '.2f')}x)")


def _print_train_step(r: dict) -> None:
  print(f"\ntrain step, V={r['V']} D={r['D']} T={r['T']} (medians of {r['rounds']} interleaved rounds)")
  print(f"  distinct ids per batch: uniform {r['distinct_fraction']:.0%}, Zipf({r['zipf_exponent']}) "
        f"{r['zipf_distinct_fraction']:.0%}")
  rows = [("JAX step (full logits)", r["step_ms"]),
          (f"JAX step (chunk {r['chunk_size']})", r["chunked_step_ms"]),
          (f"JAX step (chunk {r['chunk_size']}), Zipf batch", r["chunked_zipf_step_ms"]),
          (f"JAX step (chunk {r['chunk_size']}), bfloat16 matmuls", r["chunked_bf16_step_ms"]),
          (f"JAX step (chunk {r['chunk_size']}), bfloat16, Zipf batch", r["chunked_bf16_zipf_step_ms"]),
          ("JAX step, no provenance", r["plain_step_ms"]),
          (f"JAX step, no provenance, chunk {r['chunk_size']}", r["plain_chunked_step_ms"]),
          ("PyTorch eager", r["torch_step_ms"]),
          ("PyTorch torch.compile", r["torch_compile_step_ms"]),
          ("PyTorch linear_cross_entropy", r["torch_chunked_step_ms"]),
          ("PyTorch eager, bf16 autocast", r["torch_step_bf16_ms"]),
          ("PyTorch torch.compile, bf16 autocast", r["torch_compile_step_bf16_ms"]),
          ("PyTorch linear_cross_entropy, bf16 autocast", r["torch_chunked_step_bf16_ms"])]
  print(f"  chunked loss's matmuls: float32 on {r.get('f32_kernel', 'XLA')}, bfloat16 on {r['bf16_kernel']}")
  for label, ms in rows:
    rate = _fmt(None if ms is None else r["T"] / ms * 1e3, ".0f")
    print(f"  {label:<44} {_fmt(ms):>8} ms  {rate:>9} tokens/s")
  print(f"  one (T,D)x(D,V) matmul, float32 / bf16: JAX {r['matmul_ms']:.1f} / {r['bf16_matmul_ms']:.1f} ms, "
        f"PyTorch {_fmt(r['torch_matmul_ms'])} / {_fmt(r['torch_bf16_matmul_ms'])} ms")
  print(f"  roofline fraction (3 matmuls / full step)  {r['roofline_fraction']:.2f}")
  print(f"  JAX full / PyTorch eager      {_fmt(r['speedup_vs_torch'], '.2f')}x")
  print(f"  JAX chunked, bfloat16 / float32 time  {r['bf16_over_f32_time']:.2f}")
  _print_speedups(r)


def _print_context_step(r: dict) -> None:
  print(f"\ncontext transformer step, V={r['V']} D={r['D']} B={r['B']} windows of L={r['L']}, {r['layers']} blocks "
        f"of {r['heads']} heads (medians of {r['rounds']} interleaved rounds; load average {r['load_average'][0]:.1f})")
  print(f"  parameters {r['params']} (PyTorch {_fmt(r['torch_params'], 'd')}); step-0 loss "
        f"{r['first_loss']['step']:.4f}, log V = {r['log_vocab']:.4f}; the blocks' products on {r['block_dots']}")
  rows = [("JAX, the trainer's step", "step"), ("JAX, the trainer's step, bf16 loss matmuls", "step_bf16"),
          ("JAX, plain step (full logits, no provenance)", "plain_step"),
          ("JAX, the chunked loss + gradients alone", "loss_piece"),
          ("JAX, the blocks forward + backward alone", "blocks_piece"),
          ("PyTorch eager", "torch_step"), ("PyTorch torch.compile", "torch_compile_step"),
          ("PyTorch eager, bf16 autocast", "torch_step_bf16"),
          ("PyTorch torch.compile, bf16 autocast", "torch_compile_step_bf16")]
  for label, name in rows:
    ms = r.get(f"{name}_ms")
    fastest = r["fastest_ms"].get(name)
    rate = _fmt(None if ms is None else r["tokens"] / ms * 1e3, ".0f")
    print(f"  {label:<46} {_fmt(ms):>8} ms  (fastest {_fmt(fastest)})  {rate:>9} tokens/s")
  def ratio(value) -> str:
    return "n/a" if value is None else f"{value:.2f}x"

  for suffix in ("", "_bf16"):
    for label, name in (("eager", "torch_step"), ("torch.compile", "torch_compile_step"),
                        ("fastest", "fastest_torch")):
      if r.get(f"{name}{suffix}_over_step") is not None:
        print(f"  PyTorch {label}{suffix.replace('_', ' ')} / JAX trainer's step{suffix.replace('_', ' ')}, "
              f"medians (fastest calls): {ratio(r[f'{name}{suffix}_over_step'])} "
              f"({ratio(r[f'{name}{suffix}_over_step_by_fastest_call'])})")


def _print_memory(r: dict) -> None:
  print(f"\nmemory, V={r['V']} D={r['D']} T={r['T']}, one process each (peak RSS; JAX's step peak after compiling)")
  rows = [("JAX baseline (params + optimizer)", r["baseline_mib"], None),
          ("JAX full logits step", r["full_peak_mib"], r["full_step_ms"]),
          (f"JAX chunked step (chunk {r['chunk_size']})", r["chunked_peak_mib"], r["chunked_step_ms"]),
          ("JAX chunked step, Zipf batch (time only)", None, r["chunked_zipf_step_ms"]),
          ("JAX chunked step, bfloat16 matmuls", r["chunked_bf16_peak_mib"], None),
          ("PyTorch baseline", r["torch_baseline_mib"], None),
          ("PyTorch linear_cross_entropy", r["torch_chunked_peak_mib"], r["torch_chunked_step_ms"]),
          ("PyTorch eager (time only)", None, r["torch_step_ms"]),
          ("PyTorch torch.compile (time only)", None, r["torch_compile_step_ms"])]
  for label, mib, ms in rows:
    print(f"  {label:<42} {_fmt(mib, '.0f'):>6} MiB  {_fmt(ms, '.0f'):>6} ms")
  print(f"  above own baseline: JAX chunked step {r['chunked_extra_mib']:.0f} MiB, "
        f"PyTorch chunked {_fmt(r['torch_chunked_extra_mib'], '.0f')} MiB   (target: JAX <= PyTorch)")
  print(f"  JAX chunked: compiling it peaks {r['chunked_compile_extra_mib']:.0f} MiB above baseline (once, before "
        f"the first step); XLA's temporaries {r['chunked_xla_temp_mib']:.0f} MiB")
  print(f"  chunked / full, above baseline {r['chunked_over_full_extra']:.3f}")
  print(f"  chunked / full, step time      {r['chunked_over_full_time']:.2f}")
  _print_speedups(r)


def _print_step_memory(r: dict) -> None:
  print(f"\nstep memory, D={r['D']} T={r['T']} chunk {r['chunk_size']}, one process per use (peak above the "
        f"process's own baseline, MiB; load average {', '.join(f'{x:.1f}' for x in r['load_average'])})")
  print(f"  {'V':>6}  {'jit on first call':>17}  {'compile-ahead':>13}  {'PyTorch chunked':>15}  "
        f"{'(V,D)+(V,C) by hand':>19}")
  for vocab, row in r["by_vocab"].items():
    cells = [_fmt(row.get(use, {}).get("extra_mib"), ".0f") for use in step_memory.USES]
    print(f"  {vocab:>6}  {cells[0]:>17}  {cells[1]:>13}  {cells[2]:>15}  {row['v_term_mib']:>19.0f}")


def _print_entrypoint(r: dict) -> None:
  print("\nentrypoint, warm calls")
  for row in r["warm"]:
    print(f"  V={row['V']:>6} D={row['D']:>4} T={row['T']:>4}: {row['entrypoint_ms']:.3f} ms, bare compiled "
          f"{row['bare_ms']:.3f} ms (x{row['overhead_ratio']:.2f}), literal eager {row['literal_eager_ms']:.3f} ms")


def print_table(results: dict) -> None:
  info = results["machine"]
  torch = f"torch {info['torch']} ({report.adamw_words(info)})" if info["torch"] else "torch not installed"
  print(f"\n{info['cpu']}, {info['threads']} threads, jax {info['jax']}, {torch}")
  print(f"vector extensions: {' '.join(info['cpu_flags']) or 'unknown'}")
  print(f"matrix units: {info['matrix_units']}")
  for piece, route in info.get("routes", {}).items():
    print(f"route, {piece}: {route}")
  printers = {"train_step": _print_train_step, "gpt2": _print_train_step, "context_step": _print_context_step,
              "memory": _print_memory, "step_memory": _print_step_memory,
              "entrypoint": _print_entrypoint}
  for name, printer in printers.items():
    if name in results:
      printer(results[name])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--json", default=DEFAULT_JSON, type=pathlib.Path,
                      help=f"where to write the results (default {DEFAULT_JSON})")
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
