"""Fig. 2 of RDP-PFL: personalised test accuracy against the round for epsilon 2, 4, 6
(delta = 1e-3, T = 200), in two versions side by side, plus the baselines the paper
lacks (clearly labelled):

* ``ours``: the default ``clip_mode="first_order"`` (per-example clipping, first-order
  meta-gradient) with sigma calibrated by the run's accountant to epsilon;
* ``paper``: eqs. (6)-(11) as printed (``clip_mode="paper"``) with the paper's own
  sigma (its Theorem 1 calibration, `paper_accounting.paper_calibrate_sigma`); each run
  reports the accountant's epsilon for that sigma beside the paper's;
* baselines: exact batch MAML without clipping or noise (the paper mode's update with
  C = inf, sigma = 0), clipping only (ours, sigma = 0), DP-FedAvg with the same
  personalisation at MAML's local work (one DP-SGD step per local epoch) and with two
  steps, and the former default ``per_example_hessian`` (not the paper's
  meta-gradient).

"No personalisation" is every run's accuracy without adaptation (column "no
adaptation"). Every configuration runs 5 seeds as one vmapped program on one data
partition.

Usage:
  python experiments/rdp_pfl/fig2_epsilon.py            # 5 seeds, T = 200
  python experiments/rdp_pfl/fig2_epsilon.py --quick    # CI: 1 seed, T = 4, small
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdp_pfl_common as common  # noqa: E402


def configs(a):
  """The figure's configurations (labels are the results' keys)."""
  eps = (2.0, 4.0, 6.0) if a.model == "mlp" else (2.0, 6.0, 10.0)
  ours = [dict(label=f"ours: epsilon={e:g}", target_epsilon=e) for e in eps]
  paper = [dict(common.PAPER_MODE, label=f"paper: epsilon={e:g} (paper's sigma)",
                noise_multiplier=common.paper_sigma(a, e)) for e in eps]
  exact = dict(common.PAPER_MODE, label="[baseline] exact batch MAML, non-private",
               mechanism="none", power_iterations=1)   # C = inf: c1 = 1 whatever it is
  if a.quick:  # CI's reduced run: both versions and one baseline
    return ours + paper + [exact]
  # In the order of the claims' importance (each config is stored when it finishes).
  return ours + [paper[0], paper[2], exact, dict(
      label="[baseline] DP-FedAvg 1 step + personalisation, epsilon=2",
      clip_mode="dp_fedavg_one_step", target_epsilon=2.0), paper[1],
      dict(label="[baseline] clipping only", mechanism="clip_only"),
      dict(label="[baseline] DP-FedAvg 2 steps + personalisation, epsilon=2",
           clip_mode="dp_fedavg", target_epsilon=2.0),
      dict(label="[former default] per-example Hessian, epsilon=2",
           clip_mode="per_example_hessian", target_epsilon=2.0)]


def main(argv=None) -> int:
  p = common.arg_parser(__doc__)
  p.add_argument("--labels", default=None,
                 help="run only the configurations whose label starts with one of these "
                      "(a '|'-separated list), e.g. 'paper: |[baseline]'")
  a = p.parse_args(argv)
  if a.quick:
    a.seeds, a.rounds = 1, 4
  todo = configs(a)
  if a.labels:
    prefixes = tuple(x for x in a.labels.split("|") if x)
    todo = [c for c in todo if c["label"].startswith(prefixes)]
    if not todo:
      raise SystemExit(f"--labels {a.labels!r} matches no configuration")
  res = common.sweep(a, "fig2", todo, dict(figure="Fig. 2 (+ baselines)"))
  groups = common.by_label(res)
  lines = common.table(groups, common.STANDARD_COLUMNS)
  lines += ["", "Paper: a larger epsilon gives a higher accuracy at every round (curves "
            "only, no numbers in the text). The verdicts are in scorecard.md "
            "(`experiments/rdp_pfl/scorecard.py`)."]
  common.write_report(a, res, "fig2", "Fig. 2: accuracy vs round for epsilon (+ baselines)",
                      lines, [("accuracy (adapted)", "round",
                               common.curves_panel(groups))])
  return 0


if __name__ == "__main__":
  sys.exit(main())
