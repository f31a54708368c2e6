"""Fig. 2 of DP-MOCHA: the primal objective P(W, Omega) (eq. 1, on the training data)
against the round, private (epsilon 8, delta 1e-3) vs non-private, in three scenarios:
(a) homogeneous (tau = 0, P = 0), (b) device variability tau = 0.5, (c) tau = 0.5 and
drop probability P = 0.2.

The paper's claim (Sec. VII-B): the private approach "will converge
quickly" but "only converge[s] to a suboptimal value compared with the non-private
approach", in all three scenarios (curves only, no numbers; the x axis is "running
time", proportional to the round).

Default: a reduced scale H = 10 outer x K = 200 inner rounds (the paper: H = 10,
K = 2000), 5 trials. ``--full`` runs the paper's H = 10, K = 2000 for one trial of panel
(a) into ``fig2_full.*`` (timed).

Usage:
  python experiments/dp_mocha/fig2_objective.py          # 3 panels, H = 10, K = 200
  python experiments/dp_mocha/fig2_objective.py --full   # panel (a), H = 10, K = 2000
  python experiments/dp_mocha/fig2_objective.py --quick  # CI: H = 2, K = 20, 1 trial
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_mocha_claims as claims  # noqa: E402
import dp_mocha_common as common  # noqa: E402

#: (key, title, tau, P).
PANELS = (("a", "(a) homogeneous", 0.0, 0.0), ("b", "(b) tau = 0.5", 0.5, 0.0),
          ("c", "(c) tau = 0.5, P = 0.2", 0.5, 0.2))


def curve(runs, key="primal"):
  """``(rounds, mean, std over trials)`` of ``key`` (None values as NaN)."""
  arr = np.array([[np.nan if v is None else v for v in r[key]] for r in runs], np.float64)
  return runs[0]["rounds"], arr.mean(0), (arr.std(0) if len(runs) > 1 else None)


def claim_lines(groups, panels, meta, runs):
  """Per panel: final primal of both runs, the private curve's change over the second
  half, the non-private duality gap; the verdicts of target 1 (`claims.fig2_rows`)."""
  lines = ["| panel | final primal, private | final primal, non-private | private / "
           "non-private | private: last / half-way | non-private duality gap (end) | test "
           "error private / non-private |", "|---|---|---|---|---|---|---|"]
  for key, title, _, _ in panels:
    pr = groups.get(f"{title}, private eps={common.PAPER['epsilon']:g}")
    nonp = groups.get(f"{title}, non-private")
    if not pr or not nonp:
      continue
    _, pm, _ = curve(pr)
    _, nm, _ = curve(nonp)
    _, gap, _ = curve(nonp, "duality_gap")
    growth = pm[-1] / pm[len(pm) // 2 - 1]
    lines.append(
        f"| {title} | {common.fmt_g([r['final_primal'] for r in pr])} | "
        f"{common.fmt_g([r['final_primal'] for r in nonp])} | {pm[-1] / nm[-1]:.3g} | "
        f"{growth:.3g} | {gap[-1]:.3g} | "
        f"{common.fmt([r['final_test_error'] for r in pr])} / "
        f"{common.fmt([r['final_test_error'] for r in nonp])} |")
  if len(lines) > 2:
    lines += ["", "Verdicts by the reproduction standard's rules (experiments/scorecard.py; "
              "95% CIs over the trials, paired by trial):", ""]
    lines += claims.report_lines(claims.fig2_rows(dict(meta=meta, runs=runs)))
  return lines


def main(argv=None) -> int:
  parser = common.arg_parser(__doc__, outer_rounds=10, inner_rounds=200, trials=5)
  parser.add_argument("--full", action="store_true",
                      help="the paper's H = 10, K = 2000, one trial, panel (a) only")
  a = common.parse(parser, argv)
  name, panels = "fig2", PANELS
  if a.full and not a.quick:
    a.outer_rounds, a.inner_rounds, a.trials = 10, 2000, 1
    name, panels = "fig2_full", PANELS[:1]
  points = []
  for key, title, tau, drop in panels:
    points.append(dict(label=f"{title}, private eps={common.PAPER['epsilon']:g}",
                       panel=key, tau=tau, drop=drop, epsilon=common.PAPER["epsilon"]))
    points.append(dict(label=f"{title}, non-private", panel=key, tau=tau, drop=drop))
  res = common.sweep(a, name, points, dict(figure="Fig. 2: primal objective vs round",
                                           full=bool(a.full)), curves=True)
  runs = common.current_runs(a, res)
  groups = common.by_label(runs)
  lines = common.header(res, "Fig. 2: primal objective vs round (private eps 8 vs "
                        "non-private)", "Primal: P(W, Omega) of eq. (1) on the training "
                        "rows (sum of hinge losses + lambda tr(W Omega^-1 W^T)) at the "
                        "server's (noisy) W, recorded every K/10 rounds.")
  lines += common.table_rows(groups) + [""]
  lines += ["Paper (Fig. 2, curves only): the private approach converges quickly, to a "
            "value above the non-private one, in all three scenarios.", ""]
  lines += claim_lines(groups, panels, res.meta, runs)
  if a.full:
    walls = [r["wall_s"] for r in res.runs if r.get("inner_rounds") == a.inner_rounds]
    lines += ["", f"Timing: {len(walls)} run(s) of {a.outer_rounds * a.inner_rounds} rounds "
              f"took " + ", ".join(f"{w:.0f} s" for w in walls) + " on this machine."]
  common.write_md(a, name, lines)
  figs = []
  for key, title, _, _ in panels:
    cs = []
    for lab in (f"{title}, private eps={common.PAPER['epsilon']:g}", f"{title}, non-private"):
      if lab in groups:
        xs, mean, std = curve(groups[lab])
        cs.append((lab.split(", ")[-1], xs, mean, std))
    figs.append((f"primal objective {title}", "round", cs, [], []))
  common.plot(os.path.join(a.out, f"{name}.png"), figs,
              f"Fig. 2: primal objective; {common.FEATURES_NOTE}; H={a.outer_rounds}, "
              f"K={a.inner_rounds}, {a.trials} trial(s)", logy=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
