"""How long the commands take to start: best-of-N wall times of whole commands, one checkout against another.

  .venv/bin/python benchmarks/startup.py                          # this checkout, best of 3
  .venv/bin/python benchmarks/startup.py --base /tmp/other-checkout --write-docs

Times, for each checkout (`--base` and this one, taken in turns so that both see the same load): `import jax,
flax.nnx, optax` (the floor every command pays), `import tied_embed.train.trainer`, the smoke run (configs/smoke.py)
on a built dataset with the compiled programs kept from an earlier run (a second run), the same with the compile
cache off, and `python -m tied_embed.inspection --no-pictures` on a finished smoke run. The machine may be shared:
the block names its load average before and after. --write-docs rewrites the block between the STARTUP markers of
docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from science import common  # noqa: E402

START, END = "<!-- STARTUP:START (written by benchmarks/startup.py) -->", "<!-- STARTUP:END -->"
SMOKE = ["train.py", "--config", "configs/smoke.py"]


def commands(scratch: pathlib.Path, name: str) -> dict[str, tuple[list[str], dict[str, str]]]:
  """{row: (argv after the interpreter, extra environment)}; `name` keeps each checkout's workdirs apart."""
  data, cache = f"--config.data.data_dir={scratch / 'data'}", {"TIED_EMBED_COMPILE_CACHE": str(scratch / "cache")}
  return {
      "import jax, flax.nnx, optax": (["-c", "import jax, flax.nnx, optax"], {}),
      "import tied_embed.train.trainer": (["-c", "import tied_embed.train.trainer"], {}),
      "smoke run, second run (dataset built, compile cache warm)": (SMOKE + [data, "--workdir"], cache),
      "smoke run, dataset built, compile cache off": (SMOKE + [data, "--workdir"], {"TIED_EMBED_COMPILE_CACHE": ""}),
      "inspection of a smoke run (--no-pictures)": (
          ["-m", "tied_embed.inspection", "--no-pictures", "--workdir", str(scratch / f"{name}-prepared")], {}),
  }


def timed(checkout: pathlib.Path, argv: list[str], env: dict[str, str]) -> float:
  """Seconds of one whole command run from `checkout`; raises if it fails."""
  environment = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")} | {"TF_CPP_MIN_LOG_LEVEL": "3"}
  started = time.perf_counter()
  subprocess.run([sys.executable, *argv], cwd=checkout, env=environment | env, check=True, capture_output=True)
  return time.perf_counter() - started


def measure(checkouts: dict[str, pathlib.Path], repeats: int, scratch: pathlib.Path) -> dict[str, dict[str, float]]:
  """{row: {checkout name: best seconds}}, the checkouts in turns within each repeat."""
  for name, checkout in checkouts.items():  # the dataset, the cache and a finished run to inspect
    argv, env = commands(scratch, name)["smoke run, second run (dataset built, compile cache warm)"]
    timed(checkout, argv + [str(scratch / f"{name}-prepared")], env)
  best: dict[str, dict[str, float]] = {}
  for repeat in range(repeats):
    for name, checkout in checkouts.items():
      for index, (row, (argv, env)) in enumerate(commands(scratch, name).items()):
        workdir = [str(scratch / f"{name}-{repeat}-{index}")] if argv[-1] == "--workdir" else []  # a fresh run
        seconds = timed(checkout, argv + workdir, env)
        best.setdefault(row, {})[name] = min(seconds, best.get(row, {}).get(name, float("inf")))
  return best


def block(best: dict[str, dict[str, float]], names: list[str], load: tuple[float, float], repeats: int) -> str:
  model, _ = common.cpu()
  note = (f"Best of {repeats} on {model}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}; load average "
          f"{load[0]:.1f} before, {load[1]:.1f} after (a shared machine: the ratios matter more than the seconds).")
  lines = [textwrap.fill(note, width=120, break_on_hyphens=False), "",
           "| command (seconds, whole command) | " + " | ".join(names) + " |",
           "|---|" + "---|" * len(names)]
  lines += [f"| {row} | " + " | ".join(f"{times[name]:.1f}" for name in names) + " |" for row, times in best.items()]
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--base", type=pathlib.Path, help="another checkout to time beside this one")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--write-docs", action="store_true", help="rewrite docs/performance.md's STARTUP block")
  args = parser.parse_args()
  checkouts = ({"base": args.base.resolve()} if args.base else {}) | {"this checkout": ROOT}
  scratch = pathlib.Path(tempfile.mkdtemp(prefix="startup-"))
  try:
    before = os.getloadavg()[0]
    best = measure(checkouts, args.repeats, scratch)
    text = block(best, list(checkouts), (before, os.getloadavg()[0]), args.repeats)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  print(text)
  if args.write_docs:
    common.rewrite_block(ROOT / "docs" / "performance.md", START, END, f"\n{text}\n")


if __name__ == "__main__":
  main()
