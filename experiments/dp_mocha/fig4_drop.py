"""Fig. 4 of paper 002: mean per-device test error against the drop probability
P(theta = 1), private (epsilon 8) vs non-private, device variability tau = 0.5.

The paper's only number: the private error "first decreases to 0.097 when
P(theta_t^k = 1) = 0.2" and then rises; the non-private error rises monotonically (note
002 Sec. 12, target 3). Its explanation: sigma is proportional to p = 1 - P in Theorem 5,
so dropping shrinks the noise. P = 1 is degenerate (nobody uploads) and not run.

Usage:
  python experiments/dp_mocha/fig4_drop.py          # P in 0..0.8, H = 5, K = 200, 3 trials
  python experiments/dp_mocha/fig4_drop.py --quick  # CI: P in {0, 0.2}, H = 2, K = 20
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_mocha_common as common  # noqa: E402

DROPS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8)
PAPER_ERROR = 0.097
PAPER_DROP = 0.2
#: Non-private "monotone": no decrease larger than this between neighbours (ours).
MONOTONE_TOLERANCE = 0.005


def claim(priv, nonp, const):
  """Target 3: private U-shape with its minimum near P = 0.2 at about 0.097; non-private
  monotone non-decreasing (tolerance MONOTONE_TOLERANCE)."""
  lines = []
  if len(priv[0]) >= 3:
    i = int(np.argmin(priv[1]))
    interior = 0 < i < len(priv[0]) - 1
    lines.append(f"Claim 'private error U-shaped in P, minimum near P = {PAPER_DROP}': "
                 f"{common.verdict(interior and abs(priv[0][i] - PAPER_DROP) <= 0.1)} "
                 f"(minimum {priv[1][i]:.4f} at P = {priv[0][i]:g}; "
                 f"{'interior' if interior else 'at the end of the grid'})."
                 + common.chance_note(priv[1], const))
  if PAPER_DROP in list(priv[0]):
    j = list(priv[0]).index(PAPER_DROP)
    lines.append(f"The paper's number: private error 0.097 at P = 0.2; ours "
                 f"{priv[1][j]:.4f} ± {priv[2][j]:.4f} "
                 f"({'within' if abs(priv[1][j] - PAPER_ERROR) <= 0.02 else 'not within'}"
                 f" 0.02 of it; the constant predictor: {const:.4f}).")
  if len(nonp[0]) >= 2:
    ok = common.monotone(nonp[1], True, MONOTONE_TOLERANCE)
    rise = float(nonp[1][-1] - nonp[1][0])
    lines.append(f"Claim 'non-private error increases with P': {common.verdict(ok)} "
                 f"(no decrease above {MONOTONE_TOLERANCE}; P = {nonp[0][-1]:g} minus "
                 f"P = {nonp[0][0]:g}: {rise:+.4f}"
                 + common.significance_note(rise, [nonp[2][0], nonp[2][-1]])
                 + "; non-private error by P: "
                 + ", ".join(f"{v:g}: {m:.4f}" for v, m in zip(*nonp[:2])) + ").")
  if len(priv[0]) >= 2:
    lines.append("Private error by P: " + ", ".join(
        f"{v:g}: {m:.4f}" for v, m in zip(*priv[:2])) + ".")
  return lines


def main(argv=None) -> int:
  return common.sweep_figure(
      argv, __doc__, "fig4", "Fig. 4: test error vs drop probability P (tau = 0.5)", "drop",
      "drop probability P(theta = 1)", DROPS, (0.0, 0.2), dict(tau=0.5), claim,
      paper_points=[("paper: 0.097 at P = 0.2 (private)", PAPER_DROP, PAPER_ERROR)],
      paper_note=("Paper (Fig. 4): private error first decreases to 0.097 at P = 0.2, "
                  "then increases; non-private error increases monotonically."))


if __name__ == "__main__":
  sys.exit(main())
