"""Fig. 5 of DP-MOCHA: mean per-device test error against the privacy budget epsilon
at tau = 1 and P = 0.2 (the "optimal" drop rate of Fig. 4), delta = 1e-3.

The paper sweeps epsilon from 0.01 to 100 (grid not given; ours) and says
the error "keeps decreasing" as epsilon grows (Sec. VII-B). The
non-private run at the same tau and P is the reference line.

Usage:
  python experiments/dp_mocha/fig5_epsilon.py          # 6 epsilons, H = 5, K = 200, 5 trials
  python experiments/dp_mocha/fig5_epsilon.py --quick  # CI: epsilon in {1, 100}
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_mocha_claims as claims  # noqa: E402
import dp_mocha_figures as figures  # noqa: E402

EPSILONS = (0.01, 0.1, 1.0, 8.0, 10.0, 100.0)


def main(argv=None) -> int:
  return figures.sweep_figure(
      argv, __doc__, "fig5", "Fig. 5: test error vs epsilon (tau = 1, P = 0.2)", "epsilon",
      "epsilon (delta = 1e-3)", EPSILONS, (1.0, 100.0), dict(tau=1.0, drop=0.2),
      claims.fig5_rows,
      logx=True, paper_note=("Paper (Fig. 5, no numbers): the test error keeps decreasing "
                             "as epsilon grows from 0.01 to 100."))


if __name__ == "__main__":
  sys.exit(main())
