"""Input-frequency buckets (rare, middle, frequent) and the eval loss per bucket, against NumPy and hand counts."""

import numpy as np
import pytest
from helpers import all_series

from tied_embed.data import frequency

RARE, MIDDLE, FREQUENT = (frequency.BUCKETS.index(name) for name in ("rare", "middle", "frequent"))


@pytest.mark.parametrize(("counts", "expected"), [
    # N = 10, sorted 0 (5), 2 (3), 3 (1), 4 (1), 1 (0): first occurrences 0, 5, 8, 9. Token 3 precedes token 4 at
    # equal counts (smaller id first), so 4 alone lies in the last 10%; token 1 never occurs.
    ([5, 0, 3, 1, 1], [FREQUENT, RARE, MIDDLE, MIDDLE, RARE]),
    # Token 1's occurrences 4..7 straddle 5 = 50%: it is frequent; token 2 starts at 8 < 9: middle.
    ([4, 4, 2], [FREQUENT, FREQUENT, MIDDLE]),
    ([0, 0], [RARE, RARE]),  # no train pairs at all
])
def test_buckets_by_hand(counts, expected):
  np.testing.assert_array_equal(frequency.input_buckets(np.array(counts)), expected)


def greedy_buckets(counts: np.ndarray) -> np.ndarray:
  """The buckets built greedily from both ends: frequent tokens are taken, most frequent first, while those
  taken so far make up less than half of the occurrences; rare ones, least frequent first (the reverse order),
  while those taken including the next one make up at most a tenth; tokens never seen are rare."""
  total = counts.sum()
  order = sorted(range(len(counts)), key=lambda t: (-counts[t], t))
  buckets = np.full(len(counts), MIDDLE)
  taken = 0
  for token in order:
    if counts[token] == 0 or taken >= total / 2:
      break
    buckets[token] = FREQUENT
    taken += counts[token]
  taken = 0
  for token in reversed(order):
    if counts[token] > 0:
      if taken + counts[token] > total / 10:
        break
      taken += counts[token]
    buckets[token] = RARE
  return buckets


@pytest.mark.parametrize("seed", range(5))
def test_buckets_match_a_greedy_numpy_construction(seed):
  rng = np.random.default_rng(seed)
  counts = rng.zipf(1.3, size=300).clip(max=10_000) * (rng.random(300) > 0.2)  # heavy tail, ties, some never seen
  buckets = frequency.input_buckets(counts)
  np.testing.assert_array_equal(buckets, greedy_buckets(counts))
  share = {b: counts[buckets == b].sum() / counts.sum() for b in (RARE, FREQUENT)}
  assert share[FREQUENT] >= 0.5 and share[RARE] <= 0.1
  sizes = frequency.bucket_sizes(counts, counts[::-1])
  assert sum(size["tokens"] for size in sizes.values()) == 300
  assert sizes["rare"]["eval_pairs"] == counts[::-1][buckets == RARE].sum()


def numpy_bucket_losses(table: np.ndarray, train_ids, eval_ids, eval_next) -> dict[str, float]:
  """Mean float64 cross-entropy of the tied logits E[i]·Eᵀ over the eval pairs of each bucket (greedy buckets)."""
  logits = table[eval_ids] @ table.T
  top = logits.max(axis=1)
  losses = top + np.log(np.exp(logits - top[:, None]).sum(axis=1)) - logits[np.arange(len(eval_ids)), eval_next]
  bucket_of_pair = greedy_buckets(np.bincount(train_ids, minlength=len(table)))[eval_ids]
  return {name: float(losses[bucket_of_pair == index].mean())
          for index, name in enumerate(frequency.BUCKETS) if np.any(bucket_of_pair == index)}


def test_eval_loss_per_bucket_matches_numpy(smoke_run):
  from tied_embed.data import bigram as data  # noqa: PLC0415

  bigrams = data.load_bigram_data(smoke_run.config, smoke_run.workdir)
  table = np.asarray(smoke_run.summary.state["model"]["embedding"][...], np.float64)
  expected = numpy_bucket_losses(table, bigrams.train_ids, bigrams.eval_ids, bigrams.eval_next)
  assert set(expected) == set(frequency.BUCKETS)  # the smoke task has eval pairs in every bucket
  got = smoke_run.summary.loss_by_input_frequency
  assert got == pytest.approx(expected, rel=1e-5)
  logged = all_series(smoke_run.workdir)
  last = smoke_run.config.train.num_steps
  for bucket, loss in expected.items():
    assert logged[frequency.scalar_name(bucket)][last] == pytest.approx(loss, rel=1e-5)
  # The buckets partition the eval pairs: their losses, weighted by pair counts, average to eval/loss.
  sizes = frequency.bucket_sizes(bigrams.input_counts, np.bincount(bigrams.eval_ids, minlength=len(table)))
  weighted = sum(got[b] * sizes[b]["eval_pairs"] for b in got) / len(bigrams.eval_ids)
  assert weighted == pytest.approx(smoke_run.summary.eval_loss, rel=1e-5)


def test_inspect_reports_the_buckets(smoke_run):
  from tied_embed.inspection.inspector import inspect_run  # noqa: PLC0415
  from tied_embed.inspection.text import format_text  # noqa: PLC0415

  report = inspect_run(smoke_run.workdir, pictures=False)
  buckets = report["loss_by_input_frequency"]
  config = smoke_run.config
  assert list(buckets) == list(frequency.BUCKETS)
  assert sum(b["tokens"] for b in buckets.values()) == config.model.vocab_size
  assert sum(b["train_pairs"] for b in buckets.values()) == config.data.num_train_pairs
  assert sum(b["eval_pairs"] for b in buckets.values()) == config.data.num_eval_pairs
  for name, bucket in buckets.items():
    assert bucket["loss"]["step"] == report["step"]
    assert bucket["loss"]["value"] == pytest.approx(smoke_run.summary.loss_by_input_frequency[name], rel=1e-6)
  line = next(line for line in format_text(report).splitlines() if line.startswith("by input"))
  assert f"rare {buckets['rare']['loss']['value']:.4f} ({buckets['rare']['tokens']} tokens" in line
