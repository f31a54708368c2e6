"""Fig. 5 of paper 002: mean per-device test error against the privacy budget epsilon
at tau = 1 and P = 0.2 (the "optimal" drop rate of Fig. 4), delta = 1e-3.

The paper sweeps epsilon from 0.01 to 100 (grid not given; note 14.16's grid) and says
the error "keeps decreasing" as epsilon grows (note 002 Sec. 12, target 4). The
non-private run at the same tau and P is the reference line.

Usage:
  python experiments/dp_mocha/fig5_epsilon.py          # 6 epsilons, H = 5, K = 200, 3 trials
  python experiments/dp_mocha/fig5_epsilon.py --quick  # CI: epsilon in {1, 100}
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_mocha_common as common  # noqa: E402

EPSILONS = (0.01, 0.1, 1.0, 8.0, 10.0, 100.0)
MONOTONE_TOLERANCE = 0.005


def claim(priv, nonp, const):
  """Target 4: error monotone non-increasing in epsilon (tolerance MONOTONE_TOLERANCE)."""
  lines = []
  if len(priv[0]) >= 2:
    ok = common.monotone(priv[1], False, MONOTONE_TOLERANCE)
    lines.append(f"Claim 'error keeps decreasing as epsilon grows': {common.verdict(ok)} "
                 f"(tolerance {MONOTONE_TOLERANCE}; private error by epsilon: "
                 + ", ".join(f"{v:g}: {m:.4f}" for v, m in zip(*priv[:2])) + ").")
    rise = float(priv[1][0] - priv[1][-1])
    lines.append(f"Smallest minus largest epsilon's error: {rise:+.4f}"
                 + common.significance_note(rise, [priv[2][0], priv[2][-1]]) + ".")
    below = [v for v, m in zip(*priv[:2]) if m < const]
    lines.append("Epsilons whose private error beats the constant predictor "
                 f"({const:.4f}): {below if below else 'none'}; non-private at the same "
                 f"tau, P: {nonp[1][0]:.4f}.")
  return lines


def main(argv=None) -> int:
  return common.sweep_figure(
      argv, __doc__, "fig5", "Fig. 5: test error vs epsilon (tau = 1, P = 0.2)", "epsilon",
      "epsilon (delta = 1e-3)", EPSILONS, (1.0, 100.0), dict(tau=1.0, drop=0.2), claim,
      logx=True, paper_note=("Paper (Fig. 5, no numbers): the test error keeps decreasing "
                             "as epsilon grows from 0.01 to 100."))


if __name__ == "__main__":
  sys.exit(main())
