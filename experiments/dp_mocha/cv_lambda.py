"""Lambda of the DP-MOCHA runs by 5-fold interleaved cross-validation on NON-private MOCHA.

The paper picks "lambda and gamma" by 5-fold cross-validation without a grid
(Sec. VII-A). As MOCHA's ``cross_val_1.m``: fold f's validation rows are
``fold::5`` of every device's TRAINING rows (te_idx = fold:5:n_t), the other rows train,
the score is the mean per-device validation error averaged over the folds, and the
lambda with the lowest score wins (the first in grid order on a tie). Selecting on the
non-private run is our choice (CV on private data would itself
cost privacy, which the paper ignores). Grid {1e-3, 1e-2, 0.1, 1, 10, 100} (the loss is
a SUM over samples). Beside MOCHA ("mtl", the lambda every figure script
reads), the reference baselines' own lambdas: local SVMs (Omega = I / m fixed) and the
global SVM (all rows pooled in one task, m = 1; its regulariser is lam ||w||^2 against
the local SVMs' lam m ||w_t||^2, so the same lambda would not be comparable).

Writes ``<out>/cv_lambda.json`` (``meta.chosen_lambda``, ``meta.chosen_lambda_by_method``;
the other scripts read it), ``.md`` and ``.png``.

Usage:
  python experiments/dp_mocha/cv_lambda.py          # H = 5, K = 100, trial 0, 5 folds
  python experiments/dp_mocha/cv_lambda.py --quick  # CI: 2 lambdas x 2 folds, MOCHA only
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_mocha_common as common  # noqa: E402

GRID = (1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0)
FOLDS = 5
METHODS = ("mtl", "local", "global")
METHOD_NAMES = {"mtl": "MOCHA (learned Omega)", "local": "local SVMs (Omega = I/m)",
                "global": "global SVM (one task, m = 1)"}
QUICK_GRID = (1e-3, 0.1)
QUICK_FOLDS_RUN = (0, 1)


def fold_rows(counts, fold: int, folds: int = FOLDS):
  """``(train rows, validation rows)`` per device: validation = ``fold::folds`` of the
  device's training rows (MOCHA's interleaved folds)."""
  tr, va = [], []
  for n in counts:
    idx = np.arange(int(n))
    v = idx[fold::folds]
    va.append(v)
    tr.append(np.setdiff1d(idx, v))
  return tr, va


def fold_problems(trial, fold: int, method: str):
  """``(train Problem, validation Problem)`` of one fold, padded to the trial's shapes
  (so the folds share compiled programs); ``global``: the training rows pooled, m = 1."""
  tr, va = fold_rows(trial.counts, fold)
  n_pad = trial.x.shape[1]
  xt, yt, ct = common.subset_rows(trial.x, trial.y, tr, n_pad)
  val = common.make_problem(*common.subset_rows(trial.x, trial.y, va, n_pad))
  if method == "global":
    return common.pooled(xt, yt, ct), val
  return common.make_problem(xt, yt, ct), val


def main(argv=None) -> int:
  parser = common.arg_parser(__doc__, outer_rounds=5, inner_rounds=100, trials=1)
  parser.add_argument("--methods", default=",".join(METHODS),
                      help="comma-separated subset of mtl,local,global")
  parser.add_argument("--global-rounds", type=int, default=100,
                      help="rounds of the global SVM (m = 1: one pass over all rows "
                           "per round; Omega is fixed, so H does not matter)")
  a = common.parse(parser, argv)
  methods = [x for x in a.methods.split(",") if x]
  bad = [x for x in methods if x not in METHODS]
  if bad:
    raise common.FedJaxDpError(f"--methods must be in {METHODS}, got {bad}.",
                               option="methods")
  grid, folds_run = GRID, tuple(range(FOLDS))
  if a.quick:
    grid, folds_run, methods, a.global_rounds = QUICK_GRID, QUICK_FOLDS_RUN, ["mtl"], 10
  res = common.Results(
      os.path.join(a.out, "cv_lambda.json"),
      dict(figure="lambda by 5-fold CV (non-private)", data=common.data_label(a.dataset),
           features_note=common.FEATURES_NOTE, dataset=a.dataset, grid=list(grid),
           folds=FOLDS, folds_run=list(folds_run), methods=methods,
           outer_rounds=a.outer_rounds, inner_rounds=a.inner_rounds,
           global_rounds=a.global_rounds, trials=a.trials, quick=a.quick, xi=common.XI),
      resume=a.resume or a.report_only)
  if not a.report_only:
    for trial_id in range(a.trials):
      for method in methods:
        h, k = ((1, a.global_rounds) if method == "global"
                else (a.outer_rounds, a.inner_rounds))
        for lam in grid:
          for fold in folds_run:
            key = dict(method=method, lam=lam, fold=fold, trial=trial_id, outer_rounds=h,
                       inner_rounds=k, dataset=a.dataset)
            if res.has(**key):
              continue
            trial = common.load_trial(trial_id, a.dataset)
            train, val = fold_problems(trial, fold, method)
            out = common.run_point(trial, lam, h, k, problem=train, test=val,
                                   update_omega=(method == "mtl"))
            res.add(dict(key, val_error=out["final_test_error"], wall_s=out["wall_s"],
                         final_primal=out["final_primal"]))
            print(f"cv {method} lam {lam:g} fold {fold} trial {trial_id}: "
                  f"val error {out['final_test_error']:.4f} ({out['wall_s']:.1f} s)",
                  flush=True)
  report(a, res, grid, methods)
  return 0


def scores(res, method: str, grid):
  """``{lam: (mean validation error over folds and trials, number of runs)}``."""
  out = {}
  for lam in grid:
    v = [r["val_error"] for r in res.runs if r["method"] == method and r["lam"] == lam
         and r.get("dataset", "har_features") == res.meta["dataset"]]
    if v:
      out[lam] = (float(np.mean(v)), len(v))
  return out


def report(a, res, grid, methods) -> None:
  """Chooses lambda per method (into the JSON's meta) and writes the .md and .png."""
  chosen = {}
  table = {}
  for method in methods:
    sc = scores(res, method, grid)
    if sc:
      best = min(sc, key=lambda lam: sc[lam][0])  # first minimum in grid order
      chosen[method] = best
      table[method] = sc
  res.meta["chosen_lambda_by_method"] = chosen
  res.meta["chosen_lambda"] = chosen.get("mtl")
  res.save()
  m = res.meta
  lines = [
      "# Lambda by 5-fold interleaved cross-validation (non-private)", "",
      f"Data: {m['data']} (trial 0's training rows: the test rows are never used).", "",
      f"Scale: MOCHA and local SVMs H = {m['outer_rounds']} x K = {m['inner_rounds']} "
      f"rounds; global SVM {m['global_rounds']} rounds (m = 1, one pass over the pooled "
      f"rows per round); xi = {m['xi']}; folds run: {m['folds_run']} of {m['folds']} "
      f"(validation rows fold::5 of each device, MOCHA's cross_val_1.m); "
      f"{m['trials']} trial(s)" + (" (CI-reduced --quick run)" if m.get("quick") else "")
      + ". Score: mean per-device validation error, averaged over folds.", "",
      "| lambda | " + " | ".join(METHOD_NAMES[x] for x in table) + " |",
      "|---|" + "---|" * len(table)]
  for lam in grid:
    cells = [(f"**{table[x][lam][0]:.4f}**" if chosen.get(x) == lam else
              f"{table[x][lam][0]:.4f}") if lam in table[x] else "n/a" for x in table]
    lines.append(f"| {lam:g} | " + " | ".join(cells) + " |")
  lines += ["", "Chosen (lowest mean validation error): " + ", ".join(
      f"{METHOD_NAMES[x]}: lambda = {v:g}" for x, v in chosen.items()) + ".",
      "", "The figure scripts read `chosen_lambda` (MOCHA's) from this file; baselines.py "
      "reads each baseline's own. The grid's smallest value winning means the optimum may "
      "lie below 1e-3 (not searched: the paper's sum-of-losses lambda grid is unknown)."
      if any(v == grid[0] for v in chosen.values()) else ""]
  common.write_md(a, "cv_lambda", lines)
  curves = [(METHOD_NAMES[x], list(table[x]), [table[x][k][0] for k in table[x]], None)
            for x in table]
  common.plot(os.path.join(a.out, "cv_lambda.png"),
              [("mean validation error", "lambda", curves, [], [])],
              f"5-fold CV of lambda (non-private); {common.FEATURES_NOTE}", logx=True)


if __name__ == "__main__":
  sys.exit(main())
