"""Fig. 4 of DP-MOCHA: mean per-device test error against the drop probability
P(theta = 1), private (epsilon 8) vs non-private, device variability tau = 0.5.

The paper's only number: the private error "first decreases to 0.097 when
P(theta_t^k = 1) = 0.2" and then rises; the non-private error rises monotonically
(Sec. VII-B). Its explanation: sigma is proportional to p = 1 - P in Theorem 5,
so dropping shrinks the noise. P = 1 is degenerate (nobody uploads) and not run.

Usage:
  python experiments/dp_mocha/fig4_drop.py          # P in 0..0.8, H = 5, K = 200, 5 trials
  python experiments/dp_mocha/fig4_drop.py --quick  # CI: P in {0, 0.2}, H = 2, K = 20
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_mocha_claims as claims  # noqa: E402
import dp_mocha_figures as figures  # noqa: E402

DROPS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8)
PAPER_ERROR = claims.PAPER_ERROR
PAPER_DROP = claims.PAPER_DROP


def main(argv=None) -> int:
  return figures.sweep_figure(
      argv, __doc__, "fig4", "Fig. 4: test error vs drop probability P (tau = 0.5)", "drop",
      "drop probability P(theta = 1)", DROPS, (0.0, 0.2), dict(tau=0.5), claims.fig4_rows,
      paper_points=[("paper: 0.097 at P = 0.2 (private)", PAPER_DROP, PAPER_ERROR)],
      paper_note=("Paper (Fig. 4): private error first decreases to 0.097 at P = 0.2, "
                  "then increases; non-private error increases monotonically."))


if __name__ == "__main__":
  sys.exit(main())
