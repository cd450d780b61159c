"""A table the device cannot hold is a ValueError naming V, D and the bytes, raised before XLA sees the shape (whose
size overflows XLA's arithmetic and aborts the interpreter)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tied_embed import tied_io_embed
from tied_embed.entrypoint import _memory_bytes

TOO_BIG = [(2**30, 2**30), (2**31 - 1, 2**29), (2**40, 2**20), (2**30, 2**29)]  # (V, D)


@pytest.fixture(scope="module")
def live_interpreter() -> subprocess.CompletedProcess:
  """Every TOO_BIG call in one subprocess, so an abort (SIGABRT, exit 134) shows as a failure rather than ending
  pytest; each call's output follows its own `case V D` line."""
  script = textwrap.dedent(f"""
      from tied_embed import tied_io_embed
      for vocab_size, d_model in {TOO_BIG!r}:
        print("case", vocab_size, d_model, flush=True)
        try:
          tied_io_embed(0, [1.0], vocab_size, d_model)
        except ValueError as error:
          print("ValueError:", error, flush=True)
      """)
  return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("vocab_size,d_model", TOO_BIG)
def test_impossible_table_raises_value_error_in_a_live_interpreter(live_interpreter, vocab_size, d_model):
  done = live_interpreter
  assert done.returncode == 0, done.stderr[-2000:]
  said = done.stdout.split(f"case {vocab_size} {d_model}\n", 1)[1].split("case ", 1)[0]  # this call's output alone
  needed = 4 * (vocab_size * d_model + vocab_size)  # float32 (V, D) table and (1, V) logits, by hand
  assert f"ValueError: vocab_size={vocab_size}, d_model={d_model} is not allowed" in said
  assert f"need {needed:,} bytes" in said


def test_limit_counts_the_logits_too():
  """The check is on table plus logits: a table that fits with logits that do not is refused as well."""
  memory = _memory_bytes()
  vocab_size = memory // 8 + 1  # (V, 1) table fits alone (V*4 < memory); with 1 token's logits it needs > memory
  with pytest.raises(ValueError, match=f"need {8 * vocab_size:,} bytes"):
    tied_io_embed(0, np.zeros(1, np.float32), vocab_size, 1)


def test_valid_call_is_unchanged_near_the_check():
  out = tied_io_embed(3.0, np.array([0.0, 2.0]), 3.0, 2.0)
  assert out.shape == (6,)


def test_the_logits_are_counted_for_every_token(monkeypatch):
  from tied_embed import entrypoint  # noqa: PLC0415

  monkeypatch.setattr(entrypoint, "_memory_bytes", lambda: 1000)  # a device of 1,000 bytes
  # V = 10, D = 1, T = 30: the table 4 · 10 and the (30, 10) logits 4 · 300 bytes, 1,240 in all
  with pytest.raises(ValueError, match="need 1,240 bytes, more than the 1,000 bytes"):
    entrypoint._check_fits(10, 1, 30)
  entrypoint._check_fits(10, 1, 20)  # 4 · (10 + 200) = 840 fits
