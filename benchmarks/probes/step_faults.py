"""What a step costs the kernel: page faults, system and user time per step, and XLA's temporaries.

  python benchmarks/probes/step_faults.py [gpt2|train_step] [float32|bfloat16] [steps]   (default gpt2 float32 5)
  python benchmarks/probes/step_faults.py train_step bfloat16 20 --pause=0,0.001,0.01,0.05,0.2

The real train step (`workload.Stepper`, configs/default.py at the section's shape, chunk 256, uniform ids), called
back to back after 3 warm-up calls; `resource.getrusage` around the calls. With `--pause`, each listed pause (s)
is slept before every call instead, and the median call is printed per pause (the bench's turns pause 0.2 s).
Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import pathlib
import resource
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from benchmarks import throughput, workload  # noqa: E402


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("section", nargs="?", default="gpt2", choices=sorted(throughput.SHAPES))
  parser.add_argument("dtype", nargs="?", default="float32", choices=("float32", "bfloat16"))
  parser.add_argument("steps", nargs="?", type=int, default=5)
  parser.add_argument("--pause", default="", help="comma-separated pauses in seconds before each call")
  args = parser.parse_args()
  vocab_size, d_model, num_tokens = throughput.SHAPES[args.section]
  config = workload.bench_config(vocab_size, d_model, num_tokens, chunk_size=throughput.CHUNK_SIZE)
  batch = workload.random_batch(vocab_size, num_tokens)
  stepper = workload.Stepper(workload.with_dtype(config, args.dtype), batch=batch)
  for _ in range(3):
    stepper()
  where = f"V={vocab_size} D={d_model} T={num_tokens} {args.dtype}"
  for pause in [float(p) for p in args.pause.split(",")] if args.pause else [None]:
    seconds = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(args.steps):
      if pause:
        time.sleep(pause)
      start = time.perf_counter()
      stepper()
      seconds.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    per_step = {field: (getattr(after, field) - getattr(before, field)) / args.steps
                for field in ("ru_minflt", "ru_stime", "ru_utime")}
    print(f"{where}, pause {pause or 0:g} s: median {statistics.median(seconds) * 1e3:.1f} ms/step, "
          f"{per_step['ru_minflt']:.0f} faults, system {per_step['ru_stime'] * 1e3:.0f} ms, "
          f"user {per_step['ru_utime'] * 1e3:.0f} ms per step; XLA temporaries {stepper.temp_bytes() / 2**20:.0f} MiB")


if __name__ == "__main__":
  main()
