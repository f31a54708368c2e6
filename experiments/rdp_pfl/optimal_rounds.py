"""RDP-PFL's optimal number of rounds: the theory's T* (Theorem 3 with our
derivation and illustrative constants: the paper never estimates L, B, lambda, ...)
against a measured sweep over T at epsilon 2 (sigma recalibrated for every T, so a
longer run is noisier per round).

Usage: python experiments/rdp_pfl/optimal_rounds.py [--quick] [--seeds S]
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdp_pfl_common as common  # noqa: E402
import rdp_pfl_sweep  # noqa: E402

from fedjax_dp.algorithms.rdp_pfl import paper_accounting, theory  # noqa: E402

#: Illustrative constants (theory_readme): the bound's T* depends on them.
CONSTANTS = theory.Constants(L=1.0, rho=0.0, B=1.0, lam=1.0, l=0.0, eps_het=0.1,
                             gamma_het=0.1, sigma_G=1.0, sigma_H=1.0)
S_MLP = 199_210


def theory_rows(eps: float = 2.0, q: float = 0.1, delta: float = 1e-3):
  """T* of the closed form and of the exact-sigma minimisation (exact and paper Theta)."""
  rows = []
  for th in ("exact", "paper"):
    closed = theory.optimal_rounds_nonconvex(CONSTANTS, 1, 0.01, 0.01, 2.4, S_MLP, q, eps,
                                             delta, math.log(10), theta=th)
    grid = [10, 15, 20, 25, 30, 40, 50, 60, 70, 80, 100, 150, 200]
    numeric, _ = theory.optimal_rounds_numeric(
        lambda T, s: theory.theorem3_bound(CONSTANTS, T, 1, 0.01, 0.01, 2.4, S_MLP, s, 300,
                                           math.log(10), theta=th),
        lambda T: paper_accounting.paper_calibrate_sigma(eps, delta, q, q, int(T), 1),
        grid)
    rows.append((th, closed, numeric))
  return rows


def main(argv=None) -> int:
  p = common.arg_parser(__doc__, rounds=0)
  p.add_argument("--modes", default="ours", help="comma list: ours, paper")
  p.add_argument("--values", default="25,50,100,200,400", help="comma list of T")
  a = p.parse_args(argv)
  values = [int(v) for v in a.values.split(",")]
  if a.quick:
    a.seeds, values = 1, [2, 4]
  modes = [m for m in a.modes.split(",") if m]
  # Each T is its own run length: one configuration per value (the rounds option).
  res = None
  for mode in modes:
    for T in values:
      a.rounds = T
      res = common.sweep(a, "optimal_rounds",
                         [rdp_pfl_sweep.mode_config(a, mode, "rounds", T, f"T={T}")],
                         dict(figure="optimal T", values=values))
      a.resume = True  # the next T adds to this file
  assert res is not None
  groups = common.by_label(res)
  lines = common.table(groups, common.STANDARD_COLUMNS)
  lines += ["", "Theory (Theorem 3, our derivation; illustrative constants L = B = lambda = 1, "
            "G(w0) - G* = ln 10, MLP S = 199,210, eta = beta = 0.01, C = 2.4, q = 0.1):", "",
            "| Theta | T* closed form | T* with the exact sigma(T) |", "|---|---|---|"]
  for th, closed, numeric in theory_rows():
    lines.append(f"| {th} | {closed:.1f} | {numeric:.0f} |")
  lines += [""] + rdp_pfl_sweep.verdict_lines(groups, list(groups), "inverted_u",
                                               "final_accuracy")
  a.rounds = max(values)
  res.meta["rounds"] = "varied"
  common.write_report(a, res, "optimal_rounds", "Optimal number of rounds T (epsilon 2)",
                      lines, [("accuracy (adapted)", "round", common.curves_panel(groups))])
  return 0


if __name__ == "__main__":
  sys.exit(main())
