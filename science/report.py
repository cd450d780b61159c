"""The path-scaling sweep's markdown tables and plot, from the results `path_scaling.py` collects."""

from __future__ import annotations

import pathlib

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from science import common

UNTIED = "untied a=1 b=1"
TIED = "tied a=1 b=1"


def _stat(runs: list[dict], key: str) -> tuple[float, float]:
  values = [run[key] for run in runs]
  return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")


def _ratio(name: str) -> float:
  a, b = (float(part.split("=")[1]) for part in name.split()[1:3])
  return a / b


def sweep_table(results: dict, optimizer: str) -> list[str]:
  steps = results["sizes"]["steps"]
  lines = [f"| task | run | final gap (nats) | gap at step {steps // 4} | steps to within 5% | lookup share of "
           "gradient (all / rare rows) | rare rows' share of the gap | KL rare / frequent rows | rare / frequent "
           "row norm |", "|---|---|---|---|---|---|---|---|---|"]
  for task, entry in results["tasks"].items():
    for name, runs in entry["runs"][optimizer].items():
      mean = {key: _stat(runs, key)[0] for key in runs[0]}
      gap_sd = _stat(runs, "final_gap")[1]
      lines.append(
          f"| {task} | {name} | {mean['final_gap']:.4f} ± {gap_sd:.4f} | {mean['early_gap']:.4f} | "
          f"{mean['settle_step']:.0f} | {mean['lookup_share']:.2f} / {mean['rare_lookup_share']:.2f} | "
          f"{mean['rare_gap_share']:.3f} | {mean['rare_kl']:.3f} / {mean['frequent_kl']:.3f} | "
          f"{mean['rare_norm_ratio']:.2f} |")
  return lines


def asymmetry_table(results: dict) -> list[str]:
  optimizers = list(next(iter(results["tasks"].values()))["runs"])
  gap_columns = " | ".join(f"{o}: tied / untied gap | {o}: tied − untied" for o in optimizers)
  lines = [f"| task | antisymmetric share | fitted width-D tied table leaves | its excess loss (nats) | {gap_columns} "
           "|",
           "|---|---|---|---|" + "---|---|" * len(optimizers)]
  for task, entry in results["tasks"].items():
    budget = entry["asymmetry"]
    fit_share, fit_loss = (budget.get(key, np.nan) for key in ("psd_rank_residual_share", "psd_rank_excess_loss"))
    gaps = []
    for optimizer in optimizers:
      runs = entry["runs"][optimizer]
      tied, untied = _stat(runs[TIED], "final_gap")[0], _stat(runs[UNTIED], "final_gap")[0]
      gaps.append(f"{tied:.4f} / {untied:.4f} | {tied - untied:+.4f}")
    lines.append(f"| {task} | {budget['antisymmetric_share']:.3f} | {fit_share:.3f} | {fit_loss:.3f} | "
                 f"{' | '.join(gaps)} |")
  return lines


def figure(results: dict) -> Figure:
  """Per task: the final gap and the rare rows' mean KL against a/b, one line per optimizer and scaled path."""
  tasks = list(results["tasks"])
  fig = Figure(figsize=(4.6 * len(tasks), 8))
  FigureCanvasAgg(fig)
  axes = fig.subplots(2, len(tasks), squeeze=False)
  for column, task in enumerate(tasks):
    by_optimizer = results["tasks"][task]["runs"]
    for row, (key, label) in enumerate([("final_gap", "final gap (nats)"), ("rare_kl", "mean KL of rare rows")]):
      ax = axes[row][column]
      for optimizer, colors in zip(by_optimizer, (("C0", "C1"), ("C2", "C3")), strict=False):
        runs = by_optimizer[optimizer]
        for scaled, marker, color in (("b=1", "o", colors[0]), ("a=1", "s", colors[1])):
          names = sorted((n for n in runs if n.startswith("tied") and (scaled in n or n == TIED)), key=_ratio)
          means, sds = zip(*(_stat(runs[n], key) for n in names), strict=True)
          which = "lookup scaled (b = 1)" if scaled == "b=1" else "projection scaled (a = 1)"
          ax.errorbar([_ratio(n) for n in names], means, yerr=sds, marker=marker, capsize=3, color=color,
                      label=f"{optimizer}, tied, {which}")
        ax.axhline(_stat(runs[UNTIED], key)[0], color=colors[0], linestyle=":", label=f"{optimizer}, untied")
      ax.set_xscale("log", base=2)
      ax.set_yscale("log")
      ax.set_xlabel("a / b (lookup weight over projection weight)")
      ax.set_ylabel(label)
      if row == 0:
        ax.set_title(task)
  axes[0][0].legend(fontsize=7)
  fig.tight_layout()
  return fig


BEGIN, END = "<!-- tables: written by science/path_scaling.py -->", "<!-- end of tables -->"


def write(results: dict, out: pathlib.Path) -> None:
  """<out>.png (`figure`) and the sizes and tables in <out>.md.

  A rerun replaces only what lies between BEGIN and END, so the prose around the tables stays.
  """
  sizes = results["sizes"]
  rates = ", ".join(f"{name} lr {rate:g}" for name, rate in sizes["learning_rates"].items())
  lines = [
      f"V = {sizes['vocab_size']}, D = {sizes['d_model']}, batch {sizes['batch_size']}, {sizes['steps']} steps, "
      f"{sizes['seeds']} seeds (model init and batch order; the task is fixed), {rates}, {sizes['schedule']}; "
      f"the sweep took {results['seconds']:.0f} s. Mean ± standard deviation over seeds (ddof = 1).",
      "",
  ]
  for task, entry in results["tasks"].items():
    lines.append(f"- **{task}**: {entry['note']}; floor {entry['floor']:.4f} nats.")
  for optimizer in sizes["learning_rates"]:
    lines += ["", f"### Sweep, {optimizer}", "", *sweep_table(results, optimizer)]
  lines += ["", f"![sweep]({out.name}.png)", "", "### Asymmetry budget", "", *asymmetry_table(results)]
  body = "\n" + "\n".join(lines) + "\n"
  path = out.with_suffix(".md")
  if not common.rewrite_block(path, BEGIN, END, body):
    path.write_text(f"# Path gradient scaling and the asymmetry budget\n\n{BEGIN}{body}{END}\n")
  figure(results).savefig(out.with_suffix(".png"), dpi=110)
