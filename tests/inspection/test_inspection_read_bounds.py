"""What inspection and the tokenizer read is bounded: a report_data.npz that expands past what a run's record can
is not decompressed (inspection falls back to the dataset, with a warning); a --tokens literal past the parser's
limits is no token (one line); SentencePiece's refusal of too few pieces names model.vocab_size, not its own flag."""

from __future__ import annotations

import io
import random
import time
import zipfile

import numpy as np
import pytest
from test_foreign_files_and_inputs import _rewrite_record as _add_to_record
from test_foreign_files_and_inputs import run_copy  # noqa: F401 (the fixture)

from tied_embed import workdir as workdir_lib
from tied_embed.data import record as record_lib
from tied_embed.data.text import tokenizer as tokenizer_lib
from tied_embed.inspection.inspector import inspect_run, resolve_token
from tied_embed.util import UsageError

DEEP = "'a'+" + "-" * 100_000 + "1+'a'"  # a quoted "token" whose parse exhausts ast.literal_eval (MemoryError)




def test_a_report_data_that_expands_past_its_bound_is_not_decompressed(run_copy):  # noqa: F811 (the fixture)
  zeros = np.zeros((96 << 20) // 8)  # 96 MiB of zeros: about 100 KB compressed
  _add_to_record(run_copy, **{"record.padding": zeros})
  size = (run_copy / workdir_lib.REPORT_DATA).stat().st_size
  assert (64 << 20) + 64 * size < zeros.nbytes  # past the bound: 64 MiB + 64 times the file (by hand)
  with pytest.raises(ValueError, match=r"expands to more than [\d,]+ bytes \(record\.padding\.npy"):
    record_lib.read(run_copy)
  report = inspect_run(run_copy, pictures=False)
  assert any("expands to more than" in w and "using the dataset" in w for w in report["warnings"])


def test_an_array_header_claiming_a_huge_shape_is_refused_before_allocation(run_copy):  # noqa: F811 (the fixture)
  """A member of 32 bytes whose .npy header says (2**40,) float64: np.load would allocate 8 TiB for it."""
  header = np.lib.format.header_data_from_array_1_0(np.zeros(4))
  header["shape"] = (1 << 40,)
  member = io.BytesIO()
  np.lib.format.write_array_header_1_0(member, header)
  with zipfile.ZipFile(run_copy / workdir_lib.REPORT_DATA, "a") as archive:
    archive.writestr("record.huge.npy", member.getvalue() + bytes(32))
  start = time.monotonic()
  with pytest.raises(ValueError, match="expands to more than"):
    record_lib.read(run_copy)
  assert time.monotonic() - start < 1


def test_a_deeply_nested_tokens_literal_is_no_token_in_one_line():
  start = time.monotonic()
  assert tokenizer_lib.ByteTokenizer().lookup(DEEP) is None
  with pytest.raises(UsageError, match="this string is not one token") as refused:
    resolve_token(DEEP, tokenizer_lib.ByteTokenizer())
  assert "\n" not in str(refused.value) and time.monotonic() - start < 5


def test_a_quoted_literal_that_is_not_a_string_is_no_token():
  assert tokenizer_lib.ByteTokenizer().lookup("'a', 'b'") is None  # a tuple of two strings, no byte
  assert tokenizer_lib.ByteTokenizer().lookup("'\\n'") == 10


def test_too_many_characters_for_the_vocabulary_names_model_vocab_size_not_sentencepieces_flag():
  rng = random.Random(0)
  lines = ["".join(chr(0x4E00 + rng.randrange(300)) for _ in range(40)) for _ in range(500)]
  needed = len(set("".join(lines))) + 2  # each character, the word-start piece '▁' and <unk>
  with pytest.raises(UsageError) as refused:
    tokenizer_lib.train_sentencepiece(lines, 64)
  message = str(refused.value)
  assert message.startswith("model.vocab_size=64 is not allowed")
  assert f"model.vocab_size of at least {needed}" in message and "character_coverage" not in message
