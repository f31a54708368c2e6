"""One-parameter sweeps of RDP-PFL (Figs. 3, 5, 6, 7, Table II), shared by the
figure scripts: each value runs in our default mode (``ours``: first-order, sigma
calibrated by the run's accountant to epsilon 2) and in the paper's own mode
(``paper``: eqs. 6-11, the paper's sigma for epsilon 2), 5 seeds each; tabulate, and
judge the paper's claim (monotone or inverted U) by the reproduction standard's rules
(`experiments/scorecard.py`)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import rdp_pfl_common as common  # noqa: E402
import scorecard as sc  # noqa: E402  (experiments/scorecard.py)

#: The modes every sweep runs, in this order (``--modes`` picks).
MODES = ("ours", "paper")


def mode_config(a, mode: str, param: str, value, label: str):
  """One value's run options in ``mode``: ours at target epsilon 2; the paper's mode at
  the paper's sigma for epsilon 2 (at this value's delta or rounds when swept)."""
  base = {param: value}
  if mode == "ours":
    return dict(base, label=f"ours: {label}", target_epsilon=2.0)
  delta = value if param == "delta" else common.PAPER["delta"]
  rounds = value if param == "rounds" else a.rounds
  saved, a.rounds = a.rounds, rounds
  sigma = common.paper_sigma(a, 2.0, delta=delta)
  a.rounds = saved
  return dict(common.PAPER_MODE, **base, label=f"paper: {label}", noise_multiplier=sigma)


def verdict_lines(groups, labels, claim: str, key: str):
  """The claim's verdict per mode by `scorecard.monotone` / `scorecard.inverted_u`."""
  out = []
  for mode in MODES:
    ls = [l for l in labels if l.startswith(mode + ":") and l in groups]
    need = 3 if claim == "inverted_u" else 2
    if len(ls) < need:
      out.append(f"- {mode}: claim '{claim}': **inconclusive** (needs {need} swept "
                 f"values, {len(ls)} run).")
      continue
    sign = -1.0 if key.endswith("loss") else 1.0
    series = [[sign * r[key] for r in groups[l]] for l in ls]
    seeds = [[r["seed"] for r in groups[l]] for l in ls]
    v = (sc.inverted_u(series, seeds=seeds) if claim == "inverted_u"
         else sc.monotone(series, seeds=seeds))
    out.append(f"- {mode}: claim '{claim}' of {key}: **{v.verdict}** ({v.detail}).")
  return out


def run_sweep(argv, doc, name, title, param, values, label_fmt, claim, paper_note,
              quick_values=None, extra=None, key="final_accuracy"):
  """``claim``: ``"increasing"`` or ``"inverted_u"`` (of ``key`` against the values);
  ``extra``: more columns."""
  p = common.arg_parser(doc)
  p.add_argument("--modes", default=",".join(MODES),
                 help="comma list of modes to run: ours, paper")
  p.add_argument("--values", default=None,
                 help=f"comma list: a subset of the swept {param} values (default: all)")
  a = p.parse_args(argv)
  if a.values:
    wanted = [float(v) for v in a.values.split(",")]
    values = [v for v in values if any(abs(v - w) <= 1e-9 * max(1.0, abs(w))
                                       for w in wanted)]
    if len(values) != len(wanted):
      raise SystemExit(f"--values: each must be one of the swept {param} values")
  if a.quick:
    a.seeds, a.rounds = 1, 4
    values = quick_values or values[:2]
  modes = [m for m in a.modes.split(",") if m]
  bad = [m for m in modes if m not in MODES]
  if bad:
    raise SystemExit(f"--modes: unknown {bad}; allowed: {', '.join(MODES)}")
  configs = [mode_config(a, m, param, v, label_fmt(v)) for m in modes for v in values]
  res = common.sweep(a, name, configs, dict(figure=title, parameter=param,
                                            values=list(values)))
  groups = common.by_label(res)
  lines = common.table(groups, common.STANDARD_COLUMNS + (extra or []))
  lines += ["", paper_note, ""]
  lines += verdict_lines(groups, [c["label"] for c in configs], claim, key)
  common.write_report(a, res, name, title, lines,
                      [("accuracy (adapted)", "round", common.curves_panel(groups))])
  return 0
