"""Fig. 3 of paper 002: mean per-device test error against the device variability tau,
private (epsilon 8) vs non-private, no dropping (P = 0).

Local steps ~ U[(1 - tau) n_min, n_min] (Sec. VII-A). The paper's claim (note 002 Sec. 12,
target 2): the private error is almost flat in tau ("the randomness introduced by the
device variability reduces the size of noises": q_t = (1 - tau/2) n_min / n_t shrinks,
and sigma with sqrt(q^2 + r^2)), the non-private error rises with tau. No numbers.

Usage:
  python experiments/dp_mocha/fig3_tau.py          # tau in 0..1, H = 5, K = 200, 3 trials
  python experiments/dp_mocha/fig3_tau.py --quick  # CI: tau in {0, 1}, H = 2, K = 20
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_mocha_common as common  # noqa: E402

TAUS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
#: "Almost flat": the private mean errors span at most this much (our tolerance).
FLAT_TOLERANCE = 0.02


def claim(priv, nonp, const):
  """Target 2: private flat in tau (range <= FLAT_TOLERANCE), non-private rising (last
  minus first > 0 and a positive least-squares slope)."""
  lines = []
  if len(priv[0]) >= 2:
    span = float(np.max(priv[1]) - np.min(priv[1]))
    lines.append(f"Claim 'private error almost flat in tau': "
                 f"{common.verdict(span <= FLAT_TOLERANCE)} (range {span:.4f}, tolerance "
                 f"{FLAT_TOLERANCE}; private error by tau: "
                 + ", ".join(f"{v:g}: {m:.4f}" for v, m in zip(*priv[:2])) + ")."
                 + common.chance_note(priv[1], const))
  if len(nonp[0]) >= 2:
    slope = float(np.polyfit(nonp[0], nonp[1], 1)[0])
    rise = float(nonp[1][-1] - nonp[1][0])
    lines.append(f"Claim 'non-private error rises with tau': "
                 f"{common.verdict(rise > 0 and slope > 0)} (tau = {nonp[0][-1]:g} minus "
                 f"tau = {nonp[0][0]:g}: {rise:+.4f}, slope {slope:+.4f}; non-private "
                 "error by tau: " + ", ".join(f"{v:g}: {m:.4f}" for v, m in zip(*nonp[:2]))
                 + ")" + common.significance_note(rise, [nonp[2][0], nonp[2][-1]]) + ".")
  if len(priv[0]) and len(nonp[0]):
    lines.append(f"Private vs non-private at every tau: the private error is "
                 f"{np.mean(priv[1]):.4f} on average against {np.mean(nonp[1]):.4f} "
                 f"(constant predictor {const:.4f}).")
  return lines


def main(argv=None) -> int:
  return common.sweep_figure(
      argv, __doc__, "fig3", "Fig. 3: test error vs device variability tau (P = 0)", "tau",
      "device variability tau", TAUS, (0.0, 1.0), dict(drop=0.0), claim,
      paper_note=("Paper (Fig. 3, no numbers): private error almost stable in tau; "
                  "non-private affected more (rises)."))


if __name__ == "__main__":
  sys.exit(main())
