"""Fig. 2 of paper 003: personalised test accuracy against the round for epsilon 2, 4, 6
(delta = 1e-3, T = 200), plus the baselines the paper lacks (clearly labelled):
non-private federated MAML, clipping only, first-order MAML, DP-FedAvg with the same
one-step personalisation; "no personalisation" is every run's accuracy without
adaptation (column "no adaptation").

Usage:
  python experiments/rdp_pfl/fig2_epsilon.py            # 3 seeds, T = 200
  python experiments/rdp_pfl/fig2_epsilon.py --quick    # CI: 1 seed, T = 4, small, one baseline
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdp_pfl_common as common  # noqa: E402


def main(argv=None) -> int:
  a = common.arg_parser(__doc__).parse_args(argv)
  if a.quick:
    a.seeds, a.rounds = 1, 4
  eps = (2.0, 4.0, 6.0) if a.model == "mlp" else (2.0, 6.0, 10.0)
  configs = [dict(label=f"epsilon={e:g}", target_epsilon=e) for e in eps] + [
      dict(label="[baseline] non-private MAML", mechanism="none")]
  if not a.quick:  # CI's reduced run keeps the private sweep and one baseline
    configs += [
        dict(label="[baseline] clipping only", mechanism="clip_only"),
        dict(label="[baseline] first-order MAML, epsilon=2", clip_mode="first_order",
             target_epsilon=2.0),
        dict(label="[baseline] DP-FedAvg + personalisation, epsilon=2",
             clip_mode="dp_fedavg", target_epsilon=2.0)]
  res = common.sweep(a, "fig2", configs, dict(figure="Fig. 2 (+ baselines)"))
  groups = common.by_label(res)
  lines = common.table(groups, common.STANDARD_COLUMNS)
  lines += ["", "Paper: a larger epsilon gives a higher accuracy at every round (curves "
            "only, no numbers in the text)."]
  dp = [g for g in groups if g.startswith("epsilon=")]
  if len(dp) > 1:
    accs = [common.mean_std([r["final_accuracy"] for r in groups[g]])[0] for g in dp]
    mono = all(x <= y for x, y in zip(accs, accs[1:]))
    lines.append(f"Claim 'monotone in epsilon': {'holds' if mono else 'fails'} "
                 f"(final accuracy {', '.join(f'{x:.4f}' for x in accs)} for {', '.join(dp)}).")
  common.write_report(a, res, "fig2", "Fig. 2: accuracy vs round for epsilon (+ baselines)",
                      lines, [("accuracy (adapted)", "round",
                               common.curves_panel(groups))])
  return 0


if __name__ == "__main__":
  sys.exit(main())
