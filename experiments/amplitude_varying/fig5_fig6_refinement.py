"""Figs. 5 and 6 of the amplitude-varying paper: online refinement (Theorem 2, eq. 9).
When the test loss stops decreasing, the horizon becomes M' = ceil(alpha_d M) and sigma
is recomputed; alpha_d in {0.8, 0.9}, M = 30, epsilon = 10. Fig. 5 plots M' against m,
Fig. 6 the test loss and accuracy. Both refinement modes run: ``paper`` (eq. 9 as printed) and
``exact_budget`` (our variant, which never exceeds the budget).

Usage:
  python experiments/amplitude_varying/fig5_fig6_refinement.py [--quick]

Writes ``results/fig5_fig6.json|png|md``.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from fedjax_dp.algorithms import amplitude_varying as av  # noqa: E402

VARTHETAS = (0.9, 0.95, 1.05, 1.1)  # Fig. 6 has four curves (values unstated)
ALPHAS = (0.8, 0.9)
MODES = ("paper", "exact_budget")


def main(argv=None) -> int:
  a = common.arg_parser(__doc__).parse_args(argv)
  if a.report_only:
    res = common.stored_results(os.path.join(a.out, "fig5_fig6.json"))
    summarize(res, a.out, res.meta["rounds"], res.meta["setup"])
    return 0
  varthetas, alphas, modes, test_size = VARTHETAS, ALPHAS, MODES, None
  if a.quick:
    a.seeds, a.rounds, varthetas, alphas, test_size = 1, 6, (1.05,), (0.8,), 1000
  setup = common.Setup(a.dataset, test_size=test_size)
  res = common.open_results(os.path.join(a.out, "fig5_fig6.json"), dict(
      figure="Figs. 5 and 6", setup=setup.description, rounds=a.rounds, seeds=a.seeds,
      paper=common.PAPER), resume=a.resume)
  for seed in range(a.seeds):
    for v in varthetas:
      for alpha in alphas:
        for mode in modes:
          label = f"vartheta={v:g}, alpha_d={alpha:g}, {mode}"
          if res.has(label=label, seed=seed):
            continue
          r = common.run(setup, seed, refinement=av.OnlineRefinement(alpha, mode),
                         vartheta=v, rounds=a.rounds)
          r.update(label=label, alpha_d=alpha, mode=mode)
          res.add(r)
          print(f"seed {seed} {label}: {r['rounds_run']} rounds, final loss "
                f"{r['final_test_loss']:.4f}, eps paper {r['epsilon_paper']:.2f}, RDP "
                f"guarantee {r['epsilon_rdp']:.4g}, conditional "
                f"{r['epsilon_rdp_conditional']:.2f}", flush=True)
      if not res.has(label=f"vartheta={v:g}, no refinement", seed=seed):
        r = common.run(setup, seed, vartheta=v, rounds=a.rounds)
        r.update(label=f"vartheta={v:g}, no refinement")
        res.add(r)
  summarize(res, a.out, a.rounds, setup.description)
  return 0


def summarize(res, out, rounds, description):
  labels = list(dict.fromkeys(r["label"] for r in res.runs))
  lines = [f"Figs. 5/6 reproduction: {description}; M = {rounds}, epsilon = 10.", "",
           "| setting | rounds run | final M' | final loss | min loss | final acc | "
           f"eps paper | {common.EPS_GUARANTEE} | {common.EPS_CONDITIONAL} |",
           "|---|---|---|---|---|---|---|---|---|"]
  panels = {"planned rounds M'": [], "test loss": [], "test accuracy": []}
  for label in labels:
    rs = [r for r in res.runs if r["label"] == label]
    fmt = lambda k: common.mean_spread([r.get(k) for r in rs])
    eps = lambda k: common.epsilon_spread([r.get(k) for r in rs])
    n = min(len(r["test_loss"]) for r in rs)
    loss = np.array([r["test_loss"][:n] for r in rs], float)
    acc = np.array([r["test_accuracy"][:n] for r in rs], float)
    plan = np.array([r["planned_rounds"][:n] for r in rs], float)
    xs = np.arange(1, n + 1)
    if "seed" in rs[0] and rs[0]["seed"] == 0:
      panels["planned rounds M'"].append((label, xs, plan.mean(0), None))
    panels["test loss"].append((label, xs, loss.mean(0), None))
    panels["test accuracy"].append((label, xs, acc.mean(0), None))
    lines.append(f"| {label} | {fmt('rounds_run')} | {rs[0]['planned_rounds'][-1]} (seed 0) | "
                 f"{fmt('final_test_loss')} | {loss.mean(0).min():.4f} | "
                 f"{fmt('final_test_accuracy')} | {eps('epsilon_paper')} | "
                 f"{eps('epsilon_rdp')} | {eps('epsilon_rdp_conditional')} |")
  lines.append("\nmean ± std over seeds (sample std, ddof = 1). " + common.EPSILON_NOTE)
  common.write_report(out, "fig5_fig6", lines, panels, "aggregation index m",
                      f"Figs. 5/6: {description}")


if __name__ == "__main__":
  sys.exit(main())
