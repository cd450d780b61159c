"""Render the inspection report dict (`tied_embed.inspection.inspector.inspect_run`) as plain text and Markdown."""

from __future__ import annotations

from typing import Any

from tied_embed.util import printable

_LIST_LIMIT = 20  # longer id lists are cut, with a count, so a big vocabulary doesn't flood the terminal


def format_text(report: dict[str, Any], pictures_line: bool = True) -> str:
  """The human-readable report the CLI prints: report dict → multi-line str (with where report.md is, if any)."""
  run, params, fit, prov = report["run"], report["parameters"], report["fit"], report["provenance"]
  cfg = run["config"]
  vocab_size, d_model = params["table_shape"]
  hidden = cfg.get("hidden", "none")
  hidden_map = f" hidden={hidden} λ={cfg.get('hidden_l2', 0.0):g}" if hidden != "none" else ""
  other = params["tied"] - vocab_size * d_model  # the Params beside the table(s): a hidden map W's D², a mixer's
  extra = "" if not other else " + D²" if other == d_model * d_model else f" + {other:,}"
  lines = [
      f"run      {report['workdir']}  step {report['step']} (checkpoints: {_ids(report['available_steps'])})",
      f"config   source={cfg['source']} V={vocab_size} D={d_model} {'tied' if cfg['tied'] else 'untied'}{hidden_map}"
      f"  {cfg['optimizer']} lr={cfg['learning_rate']} batch={cfg['batch_size']}"
      f" steps={cfg['num_steps']} seed={cfg['seed']}",
      *([f"context  {cfg['context']}"] if cfg.get("context") else []),
      f"loss     train {_logged(run['train_loss'])}  eval {_logged(run['eval_loss'])}"
      f"  floor {run['loss_floor']:.4f}  gap {_gap(run)}",
      *_by_input_frequency(report.get("loss_by_input_frequency")),
      f"params   table {vocab_size}x{d_model}: tied V·D{extra} = {params['tied']:,} vs untied 2·V·D{extra} ="
      f" {params['untied']:,} (tying saves {params['saved']:,}; this model has {params['this_model']:,})",
      f"scores   S = {report['scores']}",
  ]
  own_name = report.get("own_score_name", "|e_i|²" if cfg["tied"] else "in_i·out_i")
  probability_name = run["reference"]  # 'true' or 'empirical', as the source says
  for token in report["tokens"]:
    name = str(token["id"]) if token["label"] == str(token["id"]) else f"{token['label']} (id {token['id']})"
    lines += [
        "",
        f"token {name}: own score {own_name} = {token['own_score']:.4f},"
        f" rank {token['own_rank']} of {vocab_size} in its row",
        f"  {'next':>8}  {'model':>7}  {probability_name:>9}",
        *(f"  {entry['label']:>8}  {entry['model_prob']:7.4f}  {_num(entry['true_prob']):>9}"
          for entry in token["top"]),
    ]
  lines += [
      "",
      f"fit      S vs {probability_name} log P, per-row constants removed: correlation {_num(fit['correlation'])},"
      f" mean abs error {_num(fit['mean_abs_error'])} ({fit['entries']:,} entries, {fit['rows']} rows)",
      "",
      "gradient provenance (per-row gradient norms summed over training steps)",
      f"  path totals: lookup {prov['lookup_sum']:.4g}, projection {prov['projection_sum']:.4g}",
      f"  rows with gradient only through the projection: {len(prov['projection_only'])}"
      + (f" ({_ids(prov['projection_only'])})" if prov["projection_only"] else ""),
      "  lookup share per row: " + ", ".join(f"{key} {_num(value)}" for key, value in prov["lookup_share"].items()),
      "  most lookup-heavy rows: " + _skewed(prov["most_lookup"]),
      "  most projection-heavy looked-up rows: " + _skewed(prov["most_projection"]),
  ]
  lines += _optional_sections(report)
  if pictures_line and report.get("pictures"):
    lines += ["", f"pictures {report['report_md']}"]
  return "\n".join(lines)


def _optional_sections(report: dict[str, Any]) -> list[str]:
  """The report's under-trained rows, path directions and asymmetry budget, where it has them."""
  lines: list[str] = []
  if "undertrained" in report:
    under = report["undertrained"]
    lines += [
        "",
        f"under-trained rows (least lookup gradient; Spearman of lookup total vs train count: "
        f"{_num(under['spearman'], '.3f')})",
        f"  never looked up: {under['never_looked_up']} rows ({under['of_them_never_in_train']} of them never"
        f" current in train)",
        f"  {'token':>12}  {'train':>7}  {'lookup':>8}  {'proj share':>10}  {'norm':>6}  nearest (cosine)",
    ]
    for row in under["rows"]:
      neighbours = ", ".join(f"{n['label']} ({n['cosine']:.2f})" for n in row["neighbours"])
      lines.append(f"  {row['label']:>12}  {row['train_count']:7d}  {row['lookup_total']:8.3g}"
                   f"  {_num(row['projection_share'], '.3f'):>10}  {row['norm']:6.3f}  {neighbours}")
  if report.get("path_directions"):  # the first 8 tracked rows, most frequent first
    paths = report["path_directions"]
    lines += [
        "",
        f"path directions (the most frequent rows: cosine between each path's summed gradient; median "
        f"{paths['median_cosine']:.3f})",
        f"  {'token':>12} {'cosine':>8} {'|lookup|':>9} {'|projection|':>13}",
        *(f"  {row['label']:>12} {row['cosine']:8.3f} {row['lookup_norm']:9.3g} {row['projection_norm']:13.3g}"
          for row in paths["rows"][:8]),
    ]
  if report.get("asymmetry"):
    budget = report["asymmetry"]
    sampled = f", estimated on {int(budget['tokens'])} sampled tokens" if budget["sampled"] else ""
    lines += ["", f"asymmetry {budget['antisymmetric_share']:.3f} of the task's row-centred log-probabilities is "
              f"antisymmetric{sampled}: what no tied table (symmetric E·Eᵀ) can fit"]
    if "hidden_map" in budget:
      hidden = budget["hidden_map"]
      learned = hidden.get("learned_antisymmetric_share")
      fitted = "" if learned is None else f"; the learned log-probabilities' antisymmetric share is {learned:.3f}"
      lines += [f"hidden map ‖W − I‖ = {hidden['identity_distance']:.3f}, W's antisymmetric share "
                f"{hidden['kernel_antisymmetric_share']:.3f}: what lets E·W·Eᵀ fit that part{fitted}"]
  return lines


def format_markdown(report: dict[str, Any]) -> str:
  """`report.md` for WORKDIR/report/: the text report in a code block, then the pictures linked beside it."""
  titles = {"heatmaps": "Learned vs true log-probabilities", "loss_curves": "Loss curves vs the floor",
            "provenance": "Gradient provenance per row vs input count"}
  parts = [f"# Inspection of step {report['step']}", "", "```", format_text(report, pictures_line=False), "```"]
  for name, path in report["pictures"].items():
    parts += ["", f"## {titles.get(name, name)}", "", f"![{name}]({path})"]
  return "\n".join(parts) + "\n"


def format_continuation(result: dict[str, Any]) -> str:
  """The CLI's text for `continue_prompt`'s dict, control characters escaped, the sample's line breaks kept."""
  tokens = " ".join(printable(token["label"]) for token in result["prompt_tokens"])
  last = result["prompt_tokens"][-1]
  lines = [f"prompt   {result['prompt']!r} → tokens {tokens}  (step {result['step']})",
           f"after {printable(last['label'])} (id {last['id']}):", f"  {'next':>12}  {'prob':>7}"]
  lines += [f"  {printable(entry['label']):>12}  {entry['prob']:7.4f}" for entry in result["next"]]
  if "generated" in result:
    shown = printable(result["text"], keep="\n").replace("\n", "\n  ")
    lines += ["", f"sampled  {len(result['generated'])} tokens, temperature {result['temperature']:g},"
              f" seed {result['seed']}:", f"  {shown}"]
  return "\n".join(lines)


def _by_input_frequency(buckets: dict[str, dict[str, Any]] | None) -> list[str]:
  """'by input rare 2.1 (200 tokens, 9% of train, 1,024 eval pairs) | middle ... | frequent ...', or no line."""
  if not buckets:
    return []
  train_pairs = sum(bucket["train_pairs"] for bucket in buckets.values())
  parts = []
  for name, bucket in buckets.items():
    share = f"{100 * bucket['train_pairs'] / train_pairs:.0f}% of train" if train_pairs else "no train pairs"
    eval_pairs = "" if bucket["eval_pairs"] is None else f", {bucket['eval_pairs']:,} eval pairs"
    loss = "n/a" if bucket["loss"] is None else f"{bucket['loss']['value']:.4f}"
    parts.append(f"{name} {loss} ({bucket['tokens']} tokens, {share}{eval_pairs})")
  return ["by input " + " | ".join(parts)]


def _logged(entry: dict[str, float] | None) -> str:
  return "n/a" if entry is None else f"{entry['value']:.4f} (step {entry['step']})"


def _gap(run: dict[str, Any]) -> str:
  if run["gap"] is None:
    return "n/a"
  if run["loss_floor"] == 0:  # a text whose validation bytes each have one successor
    return f"{run['gap']:.4f}"
  return f"{run['gap']:.4f} ({100 * run['gap'] / run['loss_floor']:.2f}% of floor)"


def _num(value: float | None, spec: str = ".4f") -> str:
  return "n/a" if value is None else format(value, spec)


def _ids(ids: list[int]) -> str:
  shown = ", ".join(map(str, ids[:_LIST_LIMIT]))
  return shown + (f", … ({len(ids)} in all)" if len(ids) > _LIST_LIMIT else "")


def _skewed(rows: list[dict[str, Any]]) -> str:
  return ", ".join(f"{row['label']} ({row['lookup_share']:.3f})" for row in rows) or "none"
