"""Open a run from its workdir alone: `inspect_run`, the report of what the table learned, and `continue_prompt`.

They read a checkpoint, WORKDIR/report_data.npz (else the dataset cached under the data dir, never generated here)
and the event files, and write only into WORKDIR/report/: never through a symbolic link (a workdir may be another's)."""

from __future__ import annotations

import os
import pathlib
import stat
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from flax import nnx

from tied_embed import workdir as workdir_lib
from tied_embed.core.model import variant_of
from tied_embed.data import asymmetry, frequency, sources
from tied_embed.data import record as record_lib
from tied_embed.data.base import LogProbRows, log_softmax, row_block
from tied_embed.inspection import report as report_lib
from tied_embed.inspection.text import format_markdown
from tied_embed.util import UsageError, file_kind, first_line, first_link, printable, require, write_atomically

_LOSS_TAGS = ("train/loss", "eval/loss", *map(frequency.scalar_name, frequency.BUCKETS))
_DEFAULT_TOKENS = 3  # without --tokens: the most frequent input tokens
_HEATMAP_MAX_TOKENS = 256  # a bigger vocabulary is drawn as the block of its most frequent current tokens,
_HEATMAP_ZOOM_TOKENS = 128  # this many, as a V x V picture would be a uniform haze at screen resolution
# What inspection reads, directly in the workdir: a link among them would show another run's numbers as this one's.
_READ_NAMES = (workdir_lib.CHECKPOINTS, workdir_lib.DATA, workdir_lib.REPORT_DATA)
MAX_GENERATE = 10_000  # sampled tokens at most: a few seconds at V = 8192, a continuation a person still reads


def inspect_run(workdir: str | pathlib.Path, step: int | str | None = None, tokens: list[int | str] | None = None,
                top_k: int = 5, pictures: bool = True) -> dict[str, Any]:
  """The JSON-ready report of checkpoint `step` (default: the newest readable one; 'best': by select/loss).

  Keys: workdir, step, available_steps, run, loss_by_input_frequency, scores, parameters, tokens, fit, provenance,
  undertrained, path_directions, asymmetry, warnings, and with pictures pictures and report_md. A token is an id or, for
  a text run, a string of its vocabulary. UsageError, before writing, for no or unreadable checkpoints, a missing step,
  a token outside the vocabulary, top_k outside [1, V]."""
  from tied_embed.train.metrics import value_at  # noqa: PLC0415 (TensorBoard only when inspecting)

  workdir = pathlib.Path(workdir)
  require(top_k >= 1, "--top-k", top_k, "an integer >= 1")  # what is wrong whatever the checkpoint
  for token in tokens or []:
    require(isinstance(token, str) or token >= 0, "--tokens", token, "token ids >= 0")
  warnings: list[str] = []

  def check_tokens(restored: Any) -> None:  # before the data is read
    vocab_size = restored.model.vocab_size
    for token in tokens or []:
      require(isinstance(token, str) or 0 <= token < vocab_size, "--tokens", token, f"token ids in [0, {vocab_size})")
    require(1 <= top_k <= vocab_size, "--top-k", top_k, f"an integer in [1, {vocab_size}]")

  restored, facts, steps = open_run(workdir, step, warnings, check=check_tokens)
  config, provenance, model = restored.config, restored.provenance, restored.model
  tokens = ([int(i) for i in np.argsort(-facts.input_counts, kind="stable")[:_DEFAULT_TOKENS]] if tokens is None
            else [resolve_token(token, facts.tokenizer) for token in tokens])
  series, eval_loss = _loss_series(workdir, restored.step, warnings)
  lookup_table, projection_table = (np.asarray(table) for table in model.scoring_tables())
  scores, in_context = score_table(model, config), variant_of(config, "context").name != "none"
  tables = {id(param): param[...].size for param in model.table_params()}  # one entry when tied
  other_params = sum(leaf.size for leaf in jax.tree.leaves(nnx.state(model, nnx.Param))) - sum(tables.values())
  label = sources.get(facts.source).token_label if facts.tokenizer is None else facts.tokenizer.label
  sizes = frequency.bucket_sizes(facts.input_counts, facts.eval_input_counts)
  report = {
      "workdir": str(workdir), "step": restored.step, "available_steps": steps,
      "run": {
          "config": _config_summary(config), "reference": facts.reference_name,
          "train_loss": value_at(series.get("train/loss"), restored.step), "eval_loss": eval_loss,
          "loss_floor": facts.loss_floor, "gap": None if eval_loss is None else eval_loss["value"] - facts.loss_floor,
      },
      # {bucket: {loss (logged at the step, or None), tokens, train_pairs, eval_pairs (None without counts)}}
      "loss_by_input_frequency": {
          bucket: {"loss": value_at(series.get(frequency.scalar_name(bucket)), restored.step), **size}
          for bucket, size in sizes.items()},
      **report_lib.build_report(
          lookup_table, projection_table, tied=bool(config.model.tied), source=facts.source,
          true_log_probs=facts.true_log_probs, lookup_total=provenance["lookup_total"],
          projection_total=provenance["projection_total"], tokens=tokens, top_k=top_k, label=label,
          other_params=other_params, d_model=int(model.d_model),
          scores=_CONTEXT_SCORES if in_context else model.scores_in_words(),
          score_rows=scores.rows if in_context else None),
      "undertrained": report_lib.undertrained_summary(
          np.asarray(model.tables()[0]), provenance["lookup_total"], provenance["projection_total"],
          facts.input_counts, top_k, label=label),
      "warnings": warnings,
  }
  report["path_directions"] = report_lib.path_direction_summary(restored.path_directions, label=label)
  report["asymmetry"] = asymmetry.summary(facts, d_model=int(config.model.d_model))
  if stats := model.hidden_stats():  # what the model's hidden function reports of itself
    report["asymmetry"]["hidden_map"] = asymmetry.hidden_summary(stats, scores)
  if pictures:
    try:
      _draw(report, workdir, scores, facts, provenance, series)
    except OSError as error:
      warnings.append(f"pictures not written: {error}")
  return report


def _loss_series(workdir: pathlib.Path, step: int, warnings: list[str]) -> tuple[dict[str, Any], Any]:
  """The run's logged loss series, and the eval/loss at or before `step`; a warning where either is missing."""
  from tied_embed.train.metrics import read_scalars, value_at  # noqa: PLC0415 (TensorBoard only when inspecting)

  try:  # no loss curves where the events cannot be read: a damaged file must not hide the checkpoint's report
    for path in workdir_lib.event_files(workdir):  # the reader would wait on a FIFO for ever
      if not stat.S_ISREG(mode := path.lstat().st_mode):
        raise OSError(f"{printable(str(path))} is {file_kind(mode)}, not a regular file")
    series = read_scalars(workdir, _LOSS_TAGS)
  except Exception as error:  # noqa: BLE001 (TensorBoard's reader fails in many types)
    warnings.append(f"the event files in {workdir} cannot be read ({first_line(error)}): no loss curves")
    series = {}
  eval_loss = value_at(series.get("eval/loss"), step)
  if eval_loss is None or eval_loss["step"] < step:
    newest = "none" if eval_loss is None else f"step {eval_loss['step']}"
    warnings.append(f"the newest eval/loss in the events at or before step {step} is {newest}, older"
                    f" than the checkpoint shown: its eval loss and gap are not this checkpoint's")
  return series, eval_loss


def continue_prompt(workdir: str | pathlib.Path, prompt: str, top_k: int = 5, generate: int = 0,
                    temperature: float = 1.0, seed: int = 0, step: int | str | None = None) -> dict[str, Any]:
  """What a text run says follows `prompt` (tokenized with its own tokenizer): the top-k next tokens and, with
  `generate` > 0, a sampled continuation → JSON-ready dict: workdir, step, prompt, prompt_tokens, next, warnings, and
  with `generate` generated, text, temperature, seed. UsageError: a run without text, an empty prompt, a bad value."""
  require(0 <= generate <= MAX_GENERATE, "--generate", generate,
          f"an integer in [0, {MAX_GENERATE:_}] (tokens to sample)")
  require(0 <= seed <= 2**31 - 1, "--seed", seed, "an integer in [0, 2**31 - 1]")
  require(np.isfinite(temperature) and temperature >= 0, "--temperature", temperature,
          "a finite number >= 0 (0 = always the likeliest)")
  warnings: list[str] = []
  restored, facts, _ = open_run(workdir, step, warnings)
  tokenizer = facts.tokenizer
  require(tokenizer is not None, "--next", prompt, f"a run on text (this one's source, {facts.source!r}, has no text)")
  require(1 <= top_k <= facts.vocab_size, "--top-k", top_k, f"an integer in [1, {facts.vocab_size}]")
  ids = tokenizer.encode(prompt)
  require(bool(ids), "--next", prompt, "a prompt with at least one token")
  scores = next_scores(restored)
  probs = np.exp(log_softmax(scores(ids)[None]))[0]  # P(next | the window's tokens; pairs: the last token)
  order = np.argsort(-probs, kind="stable")[:top_k]
  result = {
      "workdir": str(workdir), "step": restored.step, "prompt": prompt,
      "prompt_tokens": [{"id": int(i), "label": tokenizer.label(i)} for i in ids],
      "next": [{"id": int(j), "label": tokenizer.label(j), "prob": float(probs[j])} for j in order],
      "warnings": warnings,
  }
  if generate:
    drawn = report_lib.sample_after(scores, ids, generate, temperature, seed)
    result.update(generated=[{"id": i, "label": tokenizer.label(i)} for i in drawn],
                  text=tokenizer.decode(ids + drawn), temperature=temperature, seed=seed)
  return result


def next_scores(restored: Any) -> Callable[[list[int]], np.ndarray]:
  """scores(tokens) → (V,) float64 next-token scores after a list of ids: a run on pairs scores the last token with
  its scoring tables in float64; a run on windows of data.context_length L runs the model on the last L tokens."""
  length = int(restored.config.data.get("context_length", 1))
  if length == 1:
    lookup, projection = (np.asarray(table, np.float64) for table in restored.model.scoring_tables())
    return lambda tokens: lookup[tokens[-1]] @ projection.T
  return window_scores(restored.model, length)


def window_scores(model: nnx.Module, length: int) -> Callable[[list[int]], np.ndarray]:
  """scores(tokens) → (V,) float64: a causal context model's logits at the last of `tokens`' last `length` ids, from
  one program compiled once: every window is written into a (1, length) one, a shorter one followed by padding, which
  the positions before it never see; so a long --generate runs one compiled call per token, not the model op by op."""
  graphdef, state = nnx.split(model)

  @jax.jit
  def scores_at(state: nnx.State, window: jax.Array, last: jax.Array) -> jax.Array:
    return nnx.merge(graphdef, state)(window)[0, last]  # (1, L) ids → (1, L, V) logits → (V,)

  def scores(tokens: list[int]) -> np.ndarray:
    recent = tokens[-length:]
    window = np.zeros((1, length), np.int32)
    window[0, :len(recent)] = recent
    return np.asarray(scores_at(state, window, np.int32(len(recent) - 1)), np.float64)

  return scores


_CONTEXT_SCORES = ("the model's logits after token i alone, a window of one token, as --next gives them (a context"
                   " model's scores are no product of its tables)")


def score_table(model: nnx.Module, config: Any) -> LogProbRows:
  """S (V, V), computed a block of rows at a time, float64: a context model's logits after each token alone (the first
  position of a window, where it sees no context), one program compiled for every block; any other model's scoring
  tables A[ids] · Bᵀ."""
  vocab_size = int(model.vocab_size)
  if variant_of(config, "context").name == "none":
    lookup, projection = (np.asarray(table, np.float64) for table in model.scoring_tables())
    return LogProbRows(vocab_size, lambda ids: lookup[ids] @ projection.T)
  graphdef, state = nnx.split(model)
  size = min(row_block(vocab_size), vocab_size)

  @jax.jit
  def logits(state: nnx.State, ids: jax.Array) -> jax.Array:
    return nnx.merge(graphdef, state)(ids[:, None])[:, 0]  # (K, 1) windows → (K, 1, V) logits → (K, V)

  def rows(ids: np.ndarray) -> np.ndarray:
    padded = np.zeros(-(-len(ids) // size) * size, np.int32)  # whole blocks, the last one filled with token 0
    padded[:len(ids)] = ids
    blocks = [np.asarray(logits(state, block), np.float64) for block in padded.reshape(-1, size)]
    return np.concatenate([np.zeros((0, vocab_size)), *blocks])[:len(ids)]

  return LogProbRows(vocab_size, rows)


def resolve_token(token: int | str, tokenizer: Any) -> int:
  """A token id, or a string looked up in the run's vocabulary; UsageError if the run has none or lacks it."""
  if not isinstance(token, str):
    return int(token)
  if tokenizer is None:
    raise UsageError.bad_value("--tokens", token, "comma-separated integer token ids, e.g. 3,17,42 (this run's"
                               " tokens are plain ids, not text)")
  found = tokenizer.lookup(token)
  if found is None:
    examples = ", ".join(tokenizer.label(i) for i in range(min(3, tokenizer.vocab_size)))
    raise UsageError.bad_value("--tokens", token, f"comma-separated integer token ids or tokens of this run's"
                               f" vocabulary (e.g. {examples}); this string is not one token")
  return found


def open_run(workdir: str | pathlib.Path, step: int | str | None, warnings: list[str],
             check: Callable[[Any], None] | None = None) -> tuple[Any, record_lib.InspectionData, list[int]]:
  """(the restored checkpoint `step`, the run's data facts, every saved step); 'best': by select/loss, default the
  newest readable, warning of newer damaged ones. `check(restored)` runs before the data is read. UsageError: a link."""
  from tied_embed.train import checkpoint  # noqa: PLC0415 (Orbax stays out of `import tied_embed`)

  workdir = pathlib.Path(workdir)
  for path in [workdir / name for name in _READ_NAMES] + workdir_lib.event_files(workdir):
    if (link := first_link(path)) is not None:
      raise UsageError(f"{printable(str(link))} is a symbolic link (to {printable(os.readlink(link))}); inspection "
                       f"reads only inside --workdir={str(workdir)!r}: put the files themselves there")
  try:
    steps = checkpoint.available_steps(workdir)
  except Exception as error:  # noqa: BLE001 (Orbax reports a foreign directory in many types)
    raise UsageError(f"--workdir={str(workdir)!r}: {workdir / 'checkpoints'} cannot be read as checkpoints"
                     f" ({first_line(error)})") from None
  if not steps:
    raise UsageError(f"--workdir={str(workdir)!r} has no checkpoints (expected {workdir / 'checkpoints'}/<step>/)")
  require(step in (None, "best", *steps), "--step", step, f"one of the saved steps {', '.join(map(str, steps))}")
  restored = checkpoint.restore(workdir, step)
  warnings.extend(f"{checkpoint.unreadable(restored.directory, skipped, error)}: showing an older one"
                  for skipped, error in restored.damaged)  # newer ones that do not read back whole
  if check is not None:
    check(restored)
  return restored, _data_facts(restored, workdir, warnings), steps


def _data_facts(restored: Any, workdir: pathlib.Path, warnings: list[str]) -> record_lib.InspectionData:
  """What the report needs of the data: WORKDIR/report_data.npz if it reads back with the checkpoint's V and dataset
  identity, else (warning why) the dataset cached under the data dir; UsageError when neither is there."""
  path, vocab_size = workdir_lib.report_data(workdir), restored.model.vocab_size
  dataset = str(restored.manifest.get("dataset", ""))  # '' for a checkpoint saved without one
  try:
    facts = record_lib.read(workdir)
  except Exception as error:  # noqa: BLE001 (a damaged file: fall back as for an old workdir)
    warnings.append(f"{path} cannot be read ({first_line(error)}): using the dataset")
  else:
    if facts is not None and facts.vocab_size != vocab_size:
      warnings.append(f"{path} is for V={facts.vocab_size}, the checkpoint has V={vocab_size}: using the dataset")
    elif facts is not None and dataset and facts.identity != dataset:
      warnings.append(f"{path} is another run's (its data is {facts.identity!r}, the checkpoint trained on "
                      f"{dataset!r}): using the dataset")
    elif facts is not None:
      return facts
  from tied_embed.data import bigram as data  # noqa: PLC0415 (TFDS only for workdirs that have no report_data.npz)

  try:
    bigrams = data.load_existing_bigram_data(restored.config, str(workdir))
  except (UsageError, OSError) as error:
    raise UsageError(f"--workdir={str(workdir)!r} has no usable {workdir_lib.REPORT_DATA}, and the dataset its config"
                     f" names cannot be read instead (inspection makes none): {error}") from None
  facts = data.inspection_data(bigrams)
  facts.tokenizer = sources.get(bigrams.source).tokenizer_from_record(bigrams.reference.record)
  return facts


def _draw(report: dict[str, Any], workdir: pathlib.Path, scores: LogProbRows, facts: record_lib.InspectionData,
          provenance: dict[str, np.ndarray], series: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
  """Write the PNGs, the TensorBoard images and report.md into WORKDIR/report (replacing each file whole, a link
  there replaced, never written through); record their paths in `report`. OSError saying why where it cannot."""
  from tied_embed.inspection import plots  # noqa: PLC0415 (matplotlib and TensorBoard only when drawing)

  report_dir = workdir_lib.report(workdir)
  if report_dir.is_symlink():
    raise OSError(f"{report_dir} is a symbolic link (inspection writes only inside the workdir)")
  try:
    report_dir.mkdir(exist_ok=True)
  except OSError as error:
    raise OSError(f"{report_dir} cannot be created ({error.strerror or error})") from None  # e.g. a file there
  vocab_size = facts.vocab_size
  shown = np.arange(vocab_size) if vocab_size <= _HEATMAP_MAX_TOKENS else np.sort(
      np.argsort(-facts.input_counts, kind="stable")[:_HEATMAP_ZOOM_TOKENS])
  learned = log_softmax(scores[shown])
  figures = {
      "heatmaps": plots.heatmaps_figure(learned[:, shown], facts.true_log_probs.rows(shown)[:, shown],
                                        facts.reference_name, None if len(shown) == vocab_size else shown, vocab_size,
                                        None if facts.tokenizer is None else facts.tokenizer.label),
      "loss_curves": plots.loss_curves_figure(series, facts.loss_floor, report["step"]),
      "provenance": plots.provenance_figure(provenance["lookup_total"], provenance["projection_total"],
                                            facts.input_counts),
  }
  report["pictures"] = plots.write_pictures(report_dir, figures, report["step"])
  report["report_md"] = str(report_dir / "report.md")
  try:
    write_atomically(report_dir / "report.md", format_markdown(report).encode())
  except OSError:
    del report["pictures"], report["report_md"]
    raise


def _config_summary(config: Any) -> dict[str, Any]:
  """The config fields the report's header shows."""
  model, data, train = config.model, config.data, config.train
  return {"seed": int(config.seed), "source": str(data.source), "vocab_size": int(model.vocab_size),
          "d_model": int(model.d_model), "tied": bool(model.tied), "hidden": str(model.get("hidden", "none")),
          "hidden_l2": float(model.get("hidden_l2", 0.0)), "train_fraction": float(data.get("train_fraction", 1.0)),
          "selection_fraction": float(data.get("selection_fraction", 0.0)), "optimizer": str(train.optimizer),
          "learning_rate": float(train.learning_rate), "batch_size": int(train.batch_size),
          "num_steps": int(train.num_steps), "context": _context_in_words(config)}


def _context_in_words(config: Any) -> str | None:
  """'transformer over windows of 64 tokens (layers=2, heads=4): a causal transformer over the window', from the
  variant's declaration; None for a model without context."""
  variant = variant_of(config, "context")
  if variant.name == "none":
    return None
  fields = ", ".join(f"{field.name}={config.model.get(field.name, field.default)}" for field in variant.settings)
  return (f"{variant.name} over windows of {int(config.data.context_length)} tokens{f' ({fields})' if fields else ''}:"
          f" {variant.doc}")
