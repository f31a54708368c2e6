"""Fig. 2 of the amplitude-varying paper: test loss and accuracy against the aggregation
index m (M = 30, epsilon = 10) for vartheta in {0.9, 0.95, 1, 1.05, 1.1} and the Laplace baseline.

Usage:
  python experiments/amplitude_varying/fig2_rounds.py            # 3 seeds, M = 30
  python experiments/amplitude_varying/fig2_rounds.py --quick    # CI: 1 seed, M = 4

Writes ``results/fig2.json`` (every run, rewritten after each), ``fig2.png`` and
``fig2.md`` (final and minimum loss, the round of the minimum, the paper's epsilon,
the accountant's guarantee and its epsilons conditional on the paper's Delta_s).
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main(argv=None) -> int:
  a = common.arg_parser(__doc__).parse_args(argv)
  if a.report_only:
    res = common.stored_results(os.path.join(a.out, "fig2.json"))
    summarize(res, a.out, res.meta["rounds"], res.meta["setup"])
    return 0
  varthetas, test_size = common.VARTHETAS, None
  if a.quick:
    a.seeds, a.rounds, varthetas, test_size = 1, 4, (0.9, 1.05), 1000
  setup = common.Setup(a.dataset, test_size=test_size)
  res = common.open_results(os.path.join(a.out, "fig2.json"), dict(
      figure="Fig. 2", setup=setup.description, rounds=a.rounds, seeds=a.seeds,
      paper=common.PAPER), resume=a.resume)
  configs = [dict(vartheta=v, mechanism="gaussian", label=f"vartheta={v:g}")
             for v in varthetas] + [dict(vartheta=1.0, mechanism="laplace", label="Lap")]
  for seed in range(a.seeds):
    for c in configs:
      if res.has(label=c["label"], seed=seed):
        continue
      kw = {k: v for k, v in c.items() if k != "label"}
      r = common.run(setup, seed, rounds=a.rounds, **kw)
      r["label"] = c["label"]
      res.add(r)
      print(f"seed {seed} {c['label']}: final loss {r['final_test_loss']:.4f} acc "
            f"{r['final_test_accuracy']:.4f} ({r['wall_time_s']:.1f} s)", flush=True)
  summarize(res, a.out, a.rounds, setup.description)
  return 0


def summarize(res, out, rounds, description):
  labels = list(dict.fromkeys(r["label"] for r in res.runs))
  xs = np.arange(1, rounds + 1)
  curves = {"test loss": [], "test accuracy": []}
  lines = [f"Fig. 2 reproduction: {description}; M = {rounds}, epsilon = 10, "
           f"delta = 1e-3, q = 0.1, tau = 5, C = 5, eta = 0.1.", "",
           "| setting | sigma_1 | sigma_M | final loss | min loss (round) | final acc | "
           f"eps paper | {common.EPS_GUARANTEE} | {common.EPS_CONDITIONAL} | "
           f"{common.EPS_CONDITIONAL_POISSON} |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for label in labels:
    rs = [r for r in res.runs if r["label"] == label]
    loss = np.array([r["test_loss"] for r in rs], float)
    acc = np.array([r["test_accuracy"] for r in rs], float)
    multi = len(rs) > 1
    curves["test loss"].append((label, xs, loss.mean(0),
                                common.sample_std(loss) if multi else None))
    curves["test accuracy"].append((label, xs, acc.mean(0),
                                    common.sample_std(acc) if multi else None))
    mean_loss = loss.mean(0)
    fmt = lambda k: common.mean_spread([r.get(k) for r in rs])
    eps = lambda k: common.epsilon_spread([r.get(k) for r in rs])
    lines.append(
        f"| {label} | {rs[0]['stddevs'][0]:.5f} | {rs[0]['stddevs'][-1]:.5f} | "
        f"{fmt('final_test_loss')} | {mean_loss.min():.4f} ({int(mean_loss.argmin()) + 1}) | "
        f"{fmt('final_test_accuracy')} | {eps('epsilon_paper')} | {eps('epsilon_rdp')} | "
        f"{eps('epsilon_rdp_conditional')} | {eps('epsilon_rdp_poisson')} |")
  lines.append(f"\n{len(res.runs) // max(len(labels), 1)} seed(s); mean ± std over seeds "
               "(sample std, ddof = 1). "
               + common.EPSILON_NOTE)
  common.write_report(out, "fig2", lines, curves, "aggregation index m",
                      f"Fig. 2: {description}")


if __name__ == "__main__":
  sys.exit(main())
