"""The one-parameter figures of DP-MOCHA (Figs. 3-5: error against tau, P or epsilon):
runs, report and plot shared by ``fig3_tau.py``, ``fig4_drop.py`` and
``fig5_epsilon.py``. The reports' verdicts come from `dp_mocha_claims` (the reproduction
standard's rules on the per-seed values), the same rows as ``results/scorecard.md``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_mocha_common as common  # noqa: E402
import dp_mocha_claims as claims  # noqa: E402

PAPER = common.PAPER


def sweep_curves(groups, param: str, private: bool) -> Tuple[List[float], np.ndarray,
                                                            np.ndarray]:
  """``(values, mean error, std error)`` of the labels whose runs have ``private`` and
  parameter ``param``, sorted by the parameter."""
  rows = []
  for runs in groups.values():
    if (runs[0].get("epsilon_target") is not None) != private or param not in runs[0]:
      continue
    m, s = common.mean_std([r["final_test_error"] for r in runs])
    rows.append((runs[0][param], m, s))
  rows.sort()
  return ([r[0] for r in rows], np.array([r[1] for r in rows]),
          np.array([r[2] for r in rows]))


def constant_error(runs) -> float:
  """The "always -1" predictor's mean per-device test error, averaged over the trials
  present (one value per trial)."""
  per_trial = {r["trial"]: r["constant_error"] for r in runs}
  return common.mean_std(list(per_trial.values()))[0]


def sweep_points(param: str, values: Sequence[float],
                 fixed: Dict[str, float]) -> List[Dict[str, Any]]:
  """For every value of ``param`` a private run at the paper's epsilon (or the value)
  and a non-private one (for ``epsilon``: one non-private run)."""
  points = []
  for v in values:
    kw = dict(fixed, **{param: v})
    eps = kw.pop("epsilon", PAPER["epsilon"])
    points.append(dict(label=f"{param}={v:g}, private eps={eps:g}", epsilon=eps, **kw))
    if param != "epsilon":
      points.append(dict(label=f"{param}={v:g}, non-private", **kw))
  if param == "epsilon":
    points.append(dict(label="non-private", **{k: x for k, x in fixed.items()
                                                if k != "epsilon"}))
  return points


def by_value_lines(curves, what: str) -> List[str]:
  """``<what> by value: v: mean, ...`` for a `sweep_curves` result."""
  if not len(curves[0]):
    return []
  return [f"{what}: " + ", ".join(f"{v:g}: {m:.4f}" for v, m in zip(*curves[:2])) + "."]


def sweep_figure(argv, doc: str, name: str, title: str, param: str, xlabel: str,
                 values: Sequence[float], quick_values: Sequence[float],
                 fixed: Dict[str, float], rows: Callable[[Dict[str, Any]], List[Any]], *,
                 logx: bool = False, paper_points=(), paper_note: str = "",
                 outer_rounds: int = 5, inner_rounds: int = 200, trials: int = 5) -> int:
  """A one-parameter figure (Figs. 3-5), ``--trials`` trials per point; writes
  ``<name>.json``, ``.md`` (table, the paper's claim, ``rows``' verdicts) and ``.png``
  (error vs the parameter, the constant predictor, ``paper_points``).

  Args:
    rows: ``fn({"meta", "runs"}) -> [scorecard.Row]``, the figure's claims
      (`dp_mocha_claims`).
  """
  a = common.parse(common.arg_parser(doc, outer_rounds, inner_rounds, trials), argv)
  vals = list(quick_values if a.quick else values)
  res = common.sweep(a, name, sweep_points(param, vals, fixed),
                     dict(figure=title, parameter=param, values=vals, fixed=fixed))
  runs = common.current_runs(a, res)
  groups = common.by_label(runs)
  const = constant_error(runs) if runs else float("nan")
  priv = sweep_curves(groups, param, True)
  nonp = sweep_curves(groups, param, False)
  fixed_txt = ", ".join(f"{k} = {v:g}" for k, v in fixed.items())
  lines = common.header(res, title, f"Swept: {param} over {vals}; fixed: {fixed_txt}"
                        + ("" if "epsilon" in fixed or param == "epsilon"
                           else f", private runs at epsilon = {PAPER['epsilon']:g}") + ".")
  lines += common.table_rows(groups)
  lines += ["", f"Reference: the constant 'always -1' predictor errs on {const:.4f} "
            "(mean per-device share of sitting rows in the test splits).", ""]
  if paper_note:
    lines += [paper_note, ""]
  if runs:
    lines += ["Verdicts by the reproduction standard's rules (experiments/scorecard.py; "
              "95% CIs over the trials, paired by trial):", ""]
    lines += claims.report_lines(rows(dict(meta=res.meta, runs=runs))) + [""]
    lines += by_value_lines(priv, "Private error by " + param)
    lines += by_value_lines(nonp, "Non-private error by " + param)
  common.write_md(a, name, lines)
  _plot(a, name, title, xlabel, param, groups, priv, nonp, const, paper_points, logx)
  return 0


def _plot(a, name, title, xlabel, param, groups, priv, nonp, const, paper_points,
          logx) -> None:
  """``<name>.png``: private and non-private error against the parameter."""
  curves = []
  if len(priv[0]):
    curves.append((f"private (eps {PAPER['epsilon']:g})" if param != "epsilon"
                   else "private", priv[0], priv[1], priv[2] if a.trials > 1 else None))
  hl = [("constant -1 predictor", const)] if groups else []
  if param != "epsilon" and len(nonp[0]):
    curves.append(("non-private", nonp[0], nonp[1], nonp[2] if a.trials > 1 else None))
  elif param == "epsilon" and "non-private" in groups:
    hl.append(("non-private", common.mean_std(
        [r["final_test_error"] for r in groups["non-private"]])[0]))
  common.plot(os.path.join(a.out, f"{name}.png"),
              [("mean per-device test error", xlabel, curves, hl, list(paper_points))],
              f"{title}\n{common.FEATURES_NOTE}; H={a.outer_rounds}, K={a.inner_rounds}, "
              f"{a.trials} trial(s)", logx=logx)
