"""Fig. 3 of DP-MOCHA: mean per-device test error against the device variability tau,
private (epsilon 8) vs non-private, no dropping (P = 0).

Local steps ~ U[(1 - tau) n_min, n_min] (Sec. VII-A). The paper's claim (Sec. VII-B): the
private error is almost flat in tau ("the randomness introduced by the device variability
reduces the size of noises": q_t = (1 - tau/2) n_min / n_t shrinks, and sigma with
sqrt(q^2 + r^2)), the non-private error rises with tau. No numbers.

Usage:
  python experiments/dp_mocha/fig3_tau.py          # tau in 0..1, H = 5, K = 200, 5 trials
  python experiments/dp_mocha/fig3_tau.py --quick  # CI: tau in {0, 1}, H = 2, K = 20
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_mocha_claims as claims  # noqa: E402
import dp_mocha_figures as figures  # noqa: E402

TAUS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)

def main(argv=None) -> int:
  return figures.sweep_figure(
      argv, __doc__, "fig3", "Fig. 3: test error vs device variability tau (P = 0)", "tau",
      "device variability tau", TAUS, (0.0, 1.0), dict(drop=0.0), claims.fig3_rows,
      paper_note=("Paper (Fig. 3, no numbers): private error almost stable in tau; "
                  "non-private affected more (rises)."))


if __name__ == "__main__":
  sys.exit(main())
