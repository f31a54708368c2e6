"""Fig. 3 and Table II of the amplitude-varying paper: the final model's test loss and
accuracy against the total number of aggregations M (each point a standalone run with
sigma recalibrated for that M by eq. 8; epsilon = 10), for vartheta in {0.9, 0.95, 1,
1.05, 1.1} and the Laplace baseline; Table II's first-round sigma (M = 30) and minimum loss, and M*.
Fig. 4 is the same sweep for vartheta = 1.05 over epsilon (``--fig4``). With ``--cnn``
the model is the paper's LeNet-5 CNN on Fashion-MNIST: Figs. 8 (c, d) and 10 (FMNIST
panels), in reduced CPU settings (minibatch 50 per local step, eta = 0.05, a coarse M
grid and a 2,000-image test subset); ``--full`` restores full-batch GD and the whole
test set (for a GPU). The CNN's parameter clip defaults to C = 20, not the paper's 5:
under C = 5 the LeNet-5 does not learn at all, even without noise (its LeCun-normal
initial weights have global norm 15.4; scaling all five layers by 5/15.4 shrinks the
logits about 300-fold and the gradients vanish). C = 20 leaves the initial model
unclipped; the noise scales with C (Delta_s = 2C/|D_k|), so the noise-to-clip ratio is
the paper's. ``--clip-norm 5`` runs the paper's value.

With ``--svm`` the model is a linear SVM (hinge loss) on UCI Adult, 100 IID clients
of about 302 rows: Figs. 7 (vartheta sweep) and 9 (``--svm --fig4``: epsilon sweep, M up
to 50). The paper's L2 term lambda_r is not added (parameter clipping bounds the
weights instead).

Usage:
  python experiments/amplitude_varying/fig3_table2_horizon.py               # Fig. 3 + Table II
  python experiments/amplitude_varying/fig3_table2_horizon.py --fig4        # Fig. 4
  python experiments/amplitude_varying/fig3_table2_horizon.py --cnn [--fig4]  # Fig. 8 / 10
  python experiments/amplitude_varying/fig3_table2_horizon.py --svm [--fig4]  # Fig. 7 / 9
  python experiments/amplitude_varying/fig3_table2_horizon.py --fig4 --m-grid 30 --seeds 5
                                                   # Fig. 4 at M = 30 only: fig4_m30.*
  python experiments/amplitude_varying/fig3_table2_horizon.py --quick       # CI

Writes ``results/fig3.json|png|md`` (``fig4.*``, ``fig8.*``, ``fig10.*``); each finished
run is saved at once.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PAPER_TABLE2 = {0.9: (0.003556, 1.03783), 0.95: (0.003654, 0.92706), 1.0: (0.003749, 0.94142),
                1.05: (0.003841, 0.88862), 1.1: (0.003932, 1.01871)}
M_GRID = (1, 3, 5, 8, 11, 14, 17, 20, 25, 30, 35, 40)
CNN_M_GRID = (5, 10, 15, 20, 30)
CNN_CLIP_NORM = 20.0
SVM_M_GRID = (5, 10, 15, 20, 25, 30, 40, 50)
EPSILONS = (5.0, 10.0, 20.0, math.inf)


def main(argv=None) -> int:
  p = common.arg_parser(__doc__, rounds=False)
  p.add_argument("--fig4", action="store_true", help="vartheta = 1.05, epsilon sweep")
  p.add_argument("--cnn", action="store_true", help="LeNet-5 (Figs. 8 and 10)")
  p.add_argument("--full", action="store_true", help="CNN: full batch, full test set")
  p.add_argument("--svm", action="store_true", help="linear SVM on Adult (Figs. 7 and 9)")
  p.add_argument("--clip-norm", type=float, default=None,
                 help="parameter clip C (default: the paper's 5; 20 with --cnn)")
  p.add_argument("--m-grid", type=lambda s: tuple(int(v) for v in s.split(",")),
                 default=None, help="M values to run, e.g. 30 or 14,17,20 (default: the "
                 "figure's grid); another grid writes <name>_m<values>.json")
  a = p.parse_args(argv)
  grid, test_size, model, extra = M_GRID, None, "mlp32", {}
  name = "fig4" if a.fig4 else "fig3"
  if a.cnn:
    name = "fig10" if a.fig4 else "fig8"
    grid, model, extra = CNN_M_GRID, "lenet5", dict(learning_rate=0.05)
    if not a.full:
      test_size, extra["batch_size"] = 2000, 50
    if a.clip_norm is None:
      a.clip_norm = CNN_CLIP_NORM
  if a.clip_norm is not None:
    extra["clip_norm"] = a.clip_norm
    if a.cnn and a.clip_norm != CNN_CLIP_NORM:
      name += f"_c{a.clip_norm:g}"
  if a.svm:
    name = "fig9" if a.fig4 else "fig7"
    grid, model, a.dataset, extra = SVM_M_GRID, "svm", "adult", dict(learning_rate=0.1)
  if a.m_grid is not None and tuple(a.m_grid) != tuple(grid):
    grid = tuple(a.m_grid)
    name += "_m" + "-".join(str(m) for m in grid)
  if a.report_only:
    res = common.stored_results(os.path.join(a.out, f"{name}.json"))
    summarize(res, a.out, name, res.meta["setup"], a.fig4 or a.cnn or a.svm)
    return 0
  if a.fig4:
    configs = [dict(vartheta=1.05, epsilon=e, mechanism="gaussian" if math.isfinite(e)
                    else "none", label=f"epsilon={e:g}" if math.isfinite(e) else "no DP")
               for e in EPSILONS]
  else:
    configs = [dict(vartheta=v, mechanism="gaussian", label=f"vartheta={v:g}")
               for v in common.VARTHETAS] + [dict(vartheta=1.0, mechanism="laplace",
                                                  label="Lap")]
  if a.quick:
    a.seeds, grid, test_size, configs = 1, (1, 3), 1000, configs[:2] + configs[-1:]
    if a.cnn:  # one compiled LeNet-5 program (Gaussian only): CI's time is short
      grid, configs = (1, 2), configs[:2]
    if a.m_grid is not None:  # the named file holds the grid asked for
      grid = tuple(a.m_grid)
  setup = common.Setup(a.dataset, model=model, test_size=test_size)
  res = common.open_results(os.path.join(a.out, f"{name}.json"), dict(
      figure={"fig3": "Fig. 3 + Table II", "fig4": "Fig. 4", "fig8": "Fig. 8 (FMNIST)",
              "fig10": "Fig. 10 (FMNIST)", "fig7": "Fig. 7 (Adult)",
              "fig9": "Fig. 9 (Adult)"}[name.split("_")[0]], setup=setup.description,
      model=model,
      extra=extra,
      m_grid=list(grid), seeds=a.seeds, paper=common.PAPER), resume=a.resume)
  for seed in range(a.seeds):
    for c in configs:
      for m in grid:
        if res.has(label=c["label"], seed=seed, rounds=m):
          continue
        kw = {k: v for k, v in c.items() if k != "label"}
        if not math.isfinite(kw.get("epsilon", 1.0)):
          kw["epsilon"] = 1.0  # unused without noise
        r = common.run(setup, seed, rounds=m, eval_every=m, **kw, **extra)
        r.update(label=c["label"], rounds=m)
        r.pop("test_loss"), r.pop("test_accuracy")  # only the final model matters here
        res.add(r)
        print(f"seed {seed} {c['label']} M={m}: loss {r['final_test_loss']:.4f} acc "
              f"{r['final_test_accuracy']:.4f}", flush=True)
  summarize(res, a.out, name, setup.description, a.fig4 or a.cnn or a.svm)
  return 0


def summarize(res, out, name, description, no_table2):
  labels = list(dict.fromkeys(r["label"] for r in res.runs))
  grid = sorted({r["rounds"] for r in res.runs})
  panels = {"final test loss": [], "final test accuracy": []}
  extra = res.meta.get("extra") or {}  # files of the first sweeps have no model / extra
  lines = [f"{res.meta['figure']} reproduction: {description}; model "
           f"{res.meta.get('model', 'mlp32')} {extra or ''}; "
           "each point is a standalone run calibrated for its M; delta = 1e-3, q = 0.1, "
           f"tau = 5, C = {extra.get('clip_norm', 5.0):g}, "
           f"eta = {extra.get('learning_rate', 0.1)}.", "",
           "| setting | sigma_1 at M=30 | min final loss (M*) | final loss at M=30 | "
           f"acc at M* | {common.EPS_GUARANTEE} at M=30 | eps RDP conditional on Delta_s "
           "at M=30 (fixed-size / Poisson) | paper sigma | paper min loss |",
           "|---|---|---|---|---|---|---|---|---|"]
  for label in labels:
    rs = [r for r in res.runs if r["label"] == label]
    grid = sorted({r["rounds"] for r in rs})  # an interrupted sweep: what this label has
    at = lambda m, k: [r[k] for r in rs if r["rounds"] == m]  # noqa: E731
    loss = np.array([np.mean(at(m, "final_test_loss")) for m in grid])
    lstd = np.array([common.sample_std(at(m, "final_test_loss")) for m in grid])
    acc = np.array([np.mean(at(m, "final_test_accuracy")) for m in grid])
    astd = np.array([common.sample_std(at(m, "final_test_accuracy")) for m in grid])
    n_seeds = len({r["seed"] for r in rs})
    panels["final test loss"].append((label, grid, loss, lstd if n_seeds > 1 else None))
    panels["final test accuracy"].append((label, grid, acc, astd if n_seeds > 1 else None))
    i = int(np.argmin(loss))
    at30 = [r for r in rs if r["rounds"] == 30]
    sig30 = f"{at30[0]['stddevs'][0]:.6f}" if at30 else "n/a"
    l30 = common.mean_spread([r["final_test_loss"] for r in at30]) if at30 else "n/a"
    eps30 = common.format_epsilon(at30[0].get("epsilon_rdp")) if at30 else "n/a"
    cond30 = (f"{common.format_epsilon(at30[0].get('epsilon_rdp_conditional'))} / "
              f"{common.format_epsilon(at30[0].get('epsilon_rdp_poisson'))}"
              if at30 and "epsilon_rdp" in at30[0] else "n/a")
    v = rs[0].get("vartheta")
    paper = (PAPER_TABLE2.get(v) if (not no_table2 and rs[0]["mechanism"] == "gaussian")
             else None)
    lines.append(
        f"| {label} | {sig30} | {common.mean_spread(at(grid[i], 'final_test_loss'))} "
        f"(M*={grid[i]}) | {l30} | "
        f"{acc[i]:.4f} | {eps30} | {cond30} | {paper[0] if paper else '—'} | "
        f"{paper[1] if paper else '—'} |")
  grid = sorted({r["rounds"] for r in res.runs})
  lines.append(f"\nM grid {grid}; mean ± std over {n_seeds} seed(s) (sample std, ddof = 1)."
               + (" The paper reports M* = 17 for every vartheta (Fig. 3)."
                  if name == "fig3" else "") + " " + common.EPSILON_NOTE)
  common.write_report(out, name, lines, panels, "total aggregations M",
                      f"{res.meta['figure']}: {description}")


if __name__ == "__main__":
  sys.exit(main())
