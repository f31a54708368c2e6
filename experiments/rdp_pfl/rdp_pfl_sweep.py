"""One-parameter sweeps of paper 003 (Figs. 3, 5, 6, 7, Table II), shared by the
figure scripts: run, tabulate, check the paper's claim (monotone or inverted U)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdp_pfl_common as common  # noqa: E402


def run_sweep(argv, doc, name, title, param, values, label_fmt, claim, paper_note,
              quick_values=None, extra=None, key="final_accuracy"):
  """``claim``: ``"increasing"`` or ``"inverted_u"`` (of ``key`` against the values);
  ``extra``: more columns."""
  a = common.arg_parser(doc).parse_args(argv)
  if a.quick:
    a.seeds, a.rounds = 1, 4
    values = quick_values or values[:2]
  configs = [dict(label=label_fmt(v), **{param: v}) for v in values]
  res = common.sweep(a, name, configs, dict(figure=title, parameter=param,
                                            values=list(values)))
  groups = common.by_label(res)
  lines = common.table(groups, common.STANDARD_COLUMNS + (extra or []))
  lines += ["", paper_note]
  means = [common.mean_std([r[key] for r in groups[label_fmt(v)]])[0]
           for v in values if label_fmt(v) in groups]
  if len(means) >= 2:
    sign = -1 if key.endswith("loss") else 1
    vals = [sign * m for m in means]
    best = max(range(len(vals)), key=lambda i: vals[i])
    if claim == "increasing":
      ok = all(x <= y for x, y in zip(vals, vals[1:]))
      verdict = f"Claim 'monotone increasing': {'holds' if ok else 'fails'}"
    else:
      ok = 0 < best < len(vals) - 1
      verdict = (f"Claim 'inverted U': {'holds' if ok else 'fails'} (best at "
                 f"{param} = {values[best]})")
    lines.append(f"{verdict}; {key} by {param}: "
                 + ", ".join(f"{v}: {m:.4f}" for v, m in zip(values, means)) + ".")
  common.write_report(a, res, name, title, lines,
                      [("accuracy (adapted)", "round", common.curves_panel(groups))])
  return 0
