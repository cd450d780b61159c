"""Would a bfloat16 compute dtype speed the step up on this CPU? One (T, D)×(D, V) matmul in each precision.

  python benchmarks/bf16_matmul.py [T D V]      (default 4096 256 8192)

XLA float32, XLA bfloat16 operands with float32 accumulation (`preferred_element_type`, what a `model.dtype` of
bfloat16 would run), PyTorch float32 and bfloat16, timed in turns. It also prints whether XLA's compiled bfloat16
program converts the operands to float32 before the dot (then the CPU's bf16/AMX units go unused).
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks import workload  # noqa: E402


def measure(num_tokens: int, d_model: int, vocab_size: int, rounds: int = 7) -> dict:
  """{variant_fastest_ms: ms, 'xla_bf16_converts_to_f32': bool}."""
  keys = jax.random.split(jax.random.key(0))
  x = jax.random.normal(keys[0], (num_tokens, d_model))
  table = jax.random.normal(keys[1], (vocab_size, d_model))
  x16, table16 = x.astype(jnp.bfloat16), table.astype(jnp.bfloat16)
  f32 = jax.jit(lambda a, e: a @ e.T)
  bf16 = jax.jit(lambda a, e: jnp.matmul(a, e.T, preferred_element_type=jnp.float32))
  hlo = bf16.lower(x16, table16).compile().as_text()
  fns = {"xla_f32": lambda: jax.block_until_ready(f32(x, table)),
         "xla_bf16": lambda: jax.block_until_ready(bf16(x16, table16))}
  try:
    import torch  # noqa: PLC0415

    torch.set_num_threads(workload.cpu_threads())
    tx, ttable = torch.randn(num_tokens, d_model), torch.randn(vocab_size, d_model)
    tx16, ttable16 = tx.bfloat16(), ttable.bfloat16()
    fns["torch_f32"] = lambda: tx @ ttable.T
    fns["torch_bf16"] = lambda: tx16 @ ttable16.T
  except ImportError:
    pass
  times = workload.interleaved_times(fns, rounds)
  result = {f"{name}_fastest_ms": min(values) * 1e3 for name, values in times.items()}
  # A float32 copy of the (T, D) operand in the optimized program: the dot runs in float32.
  result["xla_bf16_converts_to_f32"] = f"f32[{num_tokens},{d_model}]" in hlo
  return result


if __name__ == "__main__":
  shape = tuple(int(a) for a in sys.argv[1:4]) or (4096, 256, 8192)
  print(f"T, D, V = {shape}, {workload.cpu_threads()} threads; fastest of interleaved calls")
  for name, value in measure(*shape).items():
    print(f"  {name:<26} {value:.1f}" if isinstance(value, float) else f"  {name:<26} {value}")
