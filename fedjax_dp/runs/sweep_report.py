"""A sweep's comparison of its configurations: one row per setting of the non-seed axes
over the seeds (`comparison_rows`), as a Markdown table (`comparison_table`), in
``sweep.json`` and ``sweep.md`` (`write_comparison`) and ``sweep.png`` (`plot_sweep`).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from fedjax_dp.runs import outputs
from fedjax_dp.runs.sweep_axes import format_value

__all__ = [
    "comparison_rows", "comparison_table", "write_comparison", "plot_sweep",
    "selection_lines",
]

def _finite_or_none(v: Any) -> Optional[float]:
  return None if v is None or not math.isfinite(float(v)) else float(v)


def comparison_rows(members: Sequence[Any], axis_names: Sequence[str]
                    ) -> List[Dict[str, Any]]:
  """One row per setting of the non-seed axes (in sweep order), over its seeds.

  Each row: the axis values; ``seeds``; ``runs``; the final test accuracy's
  ``accuracy_mean``, ``accuracy_std`` (the *sample* standard deviation over the seeds,
  ddof = 1; None for a single seed), ``accuracy_min``, ``accuracy_max``; ``epsilon``
  (the summaries' epsilon, the same for every seed: it depends on the noise, sampling
  and rounds only; when the seeds disagree, e.g. a budget guard stopping at different
  rounds, it is None and ``epsilon_range`` gives [min, max]); ``delta``; ``rounds``
  (or [min, max]); ``wall_time_s`` (the sweep's, all configurations ran together);
  ``members`` (their folder names); ``curve``: ``{"round": [...], "mean": [...],
  "min": [...], "max": [...]}`` of the test accuracy over the evaluated rounds.
  """
  settings: Dict[Tuple, List[Any]] = {}
  for m in members:
    settings.setdefault(tuple(m.axes[a] for a in axis_names), []).append(m)
  rows = []
  for key, ms in settings.items():
    accs = np.asarray([m.summary["final_test_accuracy"] for m in ms], np.float64)
    eps = [m.summary.get("epsilon") for m in ms]
    eps_f = [float("inf") if e is None else float(e) for e in eps]
    rounds = [m.summary["rounds"] for m in ms]
    row = dict(zip(axis_names, key))
    row.update(
        seeds=[m.axes["seed"] for m in ms], runs=len(ms),
        accuracy_mean=float(np.mean(accs)),
        accuracy_std=float(np.std(accs, ddof=1)) if len(ms) > 1 else None,
        accuracy_min=float(np.min(accs)), accuracy_max=float(np.max(accs)),
        epsilon=_finite_or_none(eps_f[0]) if len(set(eps_f)) == 1 else None,
        epsilon_range=(None if len(set(eps_f)) == 1 else
                       [_finite_or_none(min(eps_f)), _finite_or_none(max(eps_f))]),
        delta=ms[0].summary.get("delta"),
        rounds=rounds[0] if len(set(rounds)) == 1 else [min(rounds), max(rounds)],
        wall_time_s=max(m.summary.get("wall_time_s", 0.0) for m in ms),
        members=[m.name for m in ms])
    curves = [[(r["round"], r["test_accuracy"]) for r in m.records
               if r.get("test_accuracy") is not None] for m in ms]
    common = sorted(set.intersection(*(set(t for t, _ in c) for c in curves))) if curves else []
    table = np.asarray([[dict(c)[t] for t in common] for c in curves], np.float64)
    row["curve"] = {"round": common,
                    "mean": table.mean(0).tolist() if common else [],
                    "min": table.min(0).tolist() if common else [],
                    "max": table.max(0).tolist() if common else []}
    rows.append(row)
  return rows


def _num(v: Any, digits: int = 4) -> str:
  if v is None:
    return "-"
  if isinstance(v, list):
    return f"{_num(v[0], digits)}-{_num(v[1], digits)}"
  if isinstance(v, float):
    return f"{v:.{digits}f}" if abs(v) < 1e4 else f"{v:.4g}"
  return str(v)


def comparison_table(rows: Sequence[Dict[str, Any]], axis_names: Sequence[str]) -> str:
  """The rows as a Markdown table (what sweep.md and the command line show)."""
  head = list(axis_names) + ["seeds", "final test accuracy (mean)", "std (ddof=1)",
                             "min", "max", "epsilon", "delta", "rounds", "wall time (s)"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    eps = r["epsilon"] if r["epsilon_range"] is None else r["epsilon_range"]
    if eps is None:
      eps = "inf (non-private)"
    cells = [format_value(r[a]) for a in axis_names] + [
        str(r["runs"]), _num(r["accuracy_mean"]), _num(r["accuracy_std"]),
        _num(r["accuracy_min"]), _num(r["accuracy_max"]),
        eps if isinstance(eps, str) else _num(eps, 3), f"{r['delta']:g}",
        _num(r["rounds"]), f"{r['wall_time_s']:.1f}"]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def write_comparison(result: Any, axes: Mapping[str, List[Any]],
                     seeds: Sequence[int], data_seed: int, sweep_chunk: Optional[int],
                     plot: bool = True) -> None:
  """Writes ``sweep.json``, ``sweep.md`` and (``plot``) ``sweep.png`` into
  ``result.out`` (``result``: a `fedjax_dp.runs.sweep.SweepResult`)."""
  out, members = result.out, result.members
  names = list(axes)
  s0 = members[0].summary
  doc = {
      "algorithm": s0["algorithm"], "dataset": s0["dataset"], "axes": dict(axes),
      "seeds": list(seeds), "data_seed": data_seed, "configurations": len(members),
      "sweep_chunk": sweep_chunk, "programs": result.programs,
      "wall_time_s": result.wall_time_s, "interrupted": result.interrupted,
      "std": "sample standard deviation over the seeds (ddof = 1)",
      "rows": result.rows,
      "selection": getattr(result, "selection", None),
      "members": [{"index": m.index, "name": m.name, "axes": m.axes, "folder": m.name,
                   "final_test_accuracy": m.summary["final_test_accuracy"],
                   "epsilon": m.summary["epsilon"], "rounds": m.summary["rounds"]}
                  for m in members]}
  outputs.write_atomic(os.path.join(out, "sweep.json"),
                       json.dumps(outputs.json_safe(doc), indent=2))
  outputs.write_atomic(os.path.join(out, "sweep.md"),
                       "\n".join(_markdown(result, axes, seeds, data_seed)) + "\n")
  if plot:
    plot_sweep(result.rows, names, os.path.join(out, "sweep.png"),
               f"{s0['algorithm']} on {s0['dataset']}: {len(members)} configurations, "
               f"seeds {', '.join(str(s) for s in seeds)}")


def _markdown(result: Any, axes: Mapping[str, List[Any]], seeds: Sequence[int],
              data_seed: int) -> List[str]:
  """The lines of ``sweep.md``."""
  members, s0 = result.members, result.members[0].summary
  seeds_txt = ", ".join(str(s) for s in seeds)
  axes_txt = "; ".join(f"{k} in {', '.join(format_value(v) for v in vs)}"
                       for k, vs in axes.items())
  md = [f"# Sweep: {s0['algorithm']} on {s0['dataset']}", "",
        f"{len(members)} configurations ({axes_txt}{'; ' if axes else ''}seeds "
        f"{seeds_txt}), trained in "
        f"{result.programs} vmapped program(s) side by side, on one dataset (data seed "
        f"{data_seed}) in {result.wall_time_s:.1f} s. Final test accuracy over the seeds: "
        "mean, sample standard deviation (ddof = 1), min and max. Epsilon is each "
        "configuration's own ledger's (the same for every seed of a setting; a range "
        "where they differ). Each configuration's folder holds its metrics.jsonl, "
        "summary.json and curves.png; `fedjax-dp run --config <folder>/summary.json` "
        "repeats it alone.", ""]
  if getattr(result, "selection", None):  # the trials are not a Cartesian product
    md[2] = (f"{len(members)} trial(s) of a best-of selection over the grid "
             f"({axes_txt or 'one configuration'}; trial i has root seed {seeds_txt} + i), "
             f"on one dataset (data seed {data_seed}) in {result.wall_time_s:.1f} s. "
             "Each trial's folder holds its metrics.jsonl, summary.json and curves.png.")
  stop = result.interrupted
  if stop:
    md += [f"Interrupted ({stop['signal']}) after {stop['rounds_done']} of "
           f"{stop['rounds_planned']} rounds: the table is of the rounds in the newest "
           f"checkpoint; continue with `{stop['resume']}`.", ""]
  md += selection_lines(getattr(result, "selection", None))
  md += [comparison_table(result.rows, list(axes)), "",
         "| configuration | final test accuracy | epsilon | rounds |", "|---|---|---|---|"]
  for m in members:
    eps = m.summary["epsilon"]
    md.append(f"| [{m.name}]({m.name}/summary.json) | "
              f"{m.summary['final_test_accuracy']:.4f} | "
              f"{'inf' if eps is None or not math.isfinite(eps) else f'{eps:.3f}'} | "
              f"{m.summary['rounds']} |")
  return md


def selection_lines(sel: Optional[Dict[str, Any]]) -> List[str]:
  """The lines of a best-of selection (`fedjax_dp.runs.sweep_select.selection_summary`)
  for sweep.md and the command line; [] without one."""
  if not sel:
    return []
  dist = sel["distribution"] + (f" (shape {sel['shape']:g})" if sel.get("shape") else "")
  lines = [f"Best-of selection (Papernot and Steinke, ICLR 2022): K = {sel['repetitions']} "
           f"trials drawn from a {dist} distribution with mean {sel['mean']:g} (seed "
           f"{sel['seed']}), each a configuration drawn uniformly from the "
           f"{len(sel.get('grid', []))} of the grid; score {sel['metric']} "
           f"({'highest' if sel.get('direction', 'max') == 'max' else 'lowest'} wins).", ""]
  if sel.get("chosen") is not None:
    lines += [f"Chosen: {sel['chosen']} (configuration {sel['chosen_configuration']}, "
              f"{sel['metric']} {sel['chosen_score']:.4f}).", ""]
  eps = sel.get("epsilon_selection_rdp")
  if eps is not None:
    own = [t["epsilon_rdp"] for t in sel.get("trials", []) if t.get("epsilon_rdp") is not None]
    text = (f"Epsilon of the selection (RDP, delta {sel['delta']:g}): {eps:.3f}; each "
            f"trial's own: {', '.join(f'{e:.3f}' for e in own)}.")
    if sel.get("epsilon_all_trials_rdp") is not None:
      text += f" Publishing every trial: {sel['epsilon_all_trials_rdp']:.3f}."
    lines += [text, ""]
  if sel.get("note"):
    lines += [f"Note: {sel['note']}.", ""]
  return lines


def plot_sweep(rows: Sequence[Dict[str, Any]], axis_names: Sequence[str], path: str,
               title: str) -> str:
  """``sweep.png``: test accuracy against the round, one colour per setting of the
  non-seed axes: the mean over the seeds (line) and the min-max band over them; beside
  it the final accuracy's mean with +-1 sample std error bars against epsilon. Returns
  ``path``."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
  for k, r in enumerate(rows):
    label = ", ".join(f"{a}={format_value(r[a])}" for a in axis_names) or "all"
    label += f" ({r['runs']} seed{'s' if r['runs'] > 1 else ''})"
    c = r["curve"]
    color = f"C{k % 10}"
    if c["round"]:
      a1.plot(c["round"], c["mean"], "-o", ms=3, color=color, label=label)
      a1.fill_between(c["round"], c["min"], c["max"], color=color, alpha=0.2, lw=0)
    eps = r["epsilon"] if r["epsilon"] is not None else (
        r["epsilon_range"][1] if r["epsilon_range"] else None)
    if eps is not None:
      a2.errorbar([eps], [r["accuracy_mean"]], yerr=[[r["accuracy_std"] or 0.0]],
                  fmt="o", color=color, capsize=4, label=label)
  a1.set_xlabel("round")
  a1.set_ylabel("test accuracy (mean; band: min-max over seeds)")
  a1.grid(alpha=0.3)
  a1.legend(fontsize=7)
  a2.set_xlabel("epsilon")
  a2.set_ylabel("final test accuracy (mean +- std, ddof=1)")
  a2.grid(alpha=0.3)
  if not a2.lines and not a2.collections:
    a2.text(0.5, 0.5, "non-private (epsilon = inf)", ha="center", transform=a2.transAxes)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path
