"""The report's pictures: matplotlib figures (Agg, no pyplot state), saved as PNGs and as TensorBoard images (the
TensorBoard run `report` beside the training curves, one events file per inspected step)."""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Callable

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tied_embed import workdir as workdir_lib
from tied_embed.train.events import EventsFailed, EventWriter, load_events
from tied_embed.util import write_atomically


def heatmaps_figure(learned_log_probs: np.ndarray, true_log_probs: np.ndarray, true_name: str,
                    token_ids: np.ndarray | None = None, vocab_size: int | None = None,
                    label: Callable[[int], str] | None = None) -> Figure:
  """Learned and true log P(next | current) side by side on one colour scale: (V, V), (V, V) → Figure. `token_ids` (K,)
  ascending restricts both axes (or (K, K) blocks already cut, with `vocab_size` for the title), labelled by
  `label(id)`. -inf and nan true entries are blank; the scale starts at the 1st percentile."""
  vocab_size = vocab_size or len(learned_log_probs)
  shown = np.arange(vocab_size) if token_ids is None else np.asarray(token_ids)
  block = np.ix_(shown, shown) if len(learned_log_probs) != len(shown) else (slice(None), slice(None))
  learned = np.asarray(learned_log_probs, np.float64)[block]
  true_masked = np.ma.masked_invalid(np.asarray(true_log_probs, np.float64)[block])
  finite = np.concatenate([learned.ravel(), true_masked.compressed()])
  finite = finite[np.isfinite(finite)]
  vmin, vmax = float(np.percentile(finite, 1)), float(finite.max())
  fig = Figure(figsize=(11, 5.6), layout="constrained")
  axes = fig.subplots(1, 2, sharey=True)
  for ax, matrix, title in ((axes[0], learned, "learned: log softmax(S)"),
                            (axes[1], true_masked, f"{true_name}: log P(next | current)")):
    image = ax.imshow(matrix, vmin=vmin, vmax=vmax, cmap="viridis")  # antialiased when V exceeds the pixels
    ax.set(title=title, xlabel="next token j")
  if token_ids is not None or label is not None:
    ticks = np.unique(np.linspace(0, len(shown) - 1, 9 if label else 5).round().astype(int))
    names = [(label or str)(int(shown[t])) for t in ticks]
    for ax in axes:
      ax.set_xticks(ticks, names, rotation=90 if label else 0)
    axes[0].set_yticks(ticks, names)
  if token_ids is not None:
    fig.suptitle(f"the {len(shown)} most frequent current tokens of {vocab_size}")
  axes[0].set_ylabel("current token i")
  fig.colorbar(image, ax=axes, shrink=0.85, label="log probability")
  return fig


def loss_curves_figure(series: dict[str, tuple[np.ndarray, np.ndarray]], loss_floor: float, step: int) -> Figure:
  """Train and eval loss against the floor: {tag: (steps (N,), values (N,))}, floor, inspected step → Figure."""
  fig = Figure(figsize=(7, 4.2), layout="constrained")
  ax = fig.subplots()
  for tag, style in (("train/loss", "-"), ("eval/loss", "o-")):
    if tag in series:
      steps, values = series[tag]
      ax.plot(steps, values, style, markersize=3, label=tag)
  ax.axhline(loss_floor, color="black", linestyle="--", label=f"floor {loss_floor:.4f}")
  ax.axvline(step, color="gray", linestyle=":", label=f"checkpoint step {step}")
  ax.set(xlabel="step", ylabel="cross-entropy (nats)", title="loss vs the entropy floor")
  ax.legend()
  return fig


def provenance_figure(lookup_total: np.ndarray, projection_total: np.ndarray, input_counts: np.ndarray) -> Figure:
  """Each row's gradient by path against its input count: (V,), (V,), (V,) → Figure; projection-only rows ringed red."""
  counts = np.asarray(input_counts, np.float64)
  lookup_total, projection_total = np.asarray(lookup_total, np.float64), np.asarray(projection_total, np.float64)
  fig = Figure(figsize=(7, 4.2), layout="constrained")
  ax = fig.subplots()
  for totals, marker, label in ((lookup_total, "o", "lookup path"), (projection_total, "x", "projection path")):
    shown = totals > 0
    ax.scatter(counts[shown], totals[shown], marker=marker, s=14, alpha=0.7, label=label)
  only = (lookup_total == 0) & (projection_total > 0)
  if only.any():
    ax.scatter(counts[only], projection_total[only], marker="o", s=60, facecolors="none", edgecolors="red",
               label=f"projection only ({int(only.sum())} rows)")
  if counts.min() > 0:
    ax.set_xscale("log")
  else:
    ax.set_xscale("symlog", linthresh=1)
  ax.set(yscale="log", xlabel="times the token is the current (input) token in train",
         ylabel="accumulated row gradient norm", title="gradient provenance per table row")
  ax.legend()
  return fig


def write_pictures(report_dir: pathlib.Path, figures: dict[str, Figure], step: int) -> dict[str, str]:
  """Saves each figure as `<report_dir>/<name>.png` (replaced whole) and as TensorBoard image `report/<name>` at `step`,
  deleting an earlier call's events file of `step` → {name: PNG file name}; OSError where a file cannot be written."""
  report_dir.mkdir(parents=True, exist_ok=True)
  pictures, images = {}, {}
  for name, fig in figures.items():
    write_atomically(report_dir / f"{name}.png", functools.partial(fig.savefig, format="png", dpi=100))
    pictures[name] = f"{name}.png"
    canvas = FigureCanvasAgg(fig)  # rendered with Agg: (H, W, 3) uint8
    canvas.draw()
    images[f"report/{name}"] = np.asarray(canvas.buffer_rgba())[..., :3].copy()[None]
  for path in workdir_lib.event_files(report_dir):
    if path.is_symlink() or not path.is_file() or step in _image_steps(path):  # never read a FIFO: it blocks
      path.unlink()
  writer = EventWriter(report_dir)
  try:
    writer.write_images(step, images)
    writer.close()
  except EventsFailed as error:
    raise OSError(str(error)) from None
  return pictures


def _image_steps(path: pathlib.Path) -> set[int]:
  """The steps an events file holds report images for; empty if it cannot be read."""
  try:
    return {int(event.step) for event in load_events(path)
            if any(value.tag.startswith("report/") for value in event.summary.value)}
  except Exception:  # noqa: BLE001 (a damaged events file is left alone)
    return set()
