"""Reference points DP-MOCHA's paper does not have (clearly labelled ``[reference]``), on the same
task, data, splits, solver and metric as the figure scripts, all non-private except the
DP-MOCHA row:

* the constant "always -1" predictor (never predicts sitting);
* a global SVM: all 30 devices' training rows pooled into ONE task (m = 1, Omega = 1,
  the same SDCA solver; one pass over the pooled rows per round), applied to every
  device's test rows;
* local SVMs: every device alone (``update_omega=False``: Omega = I / m, so the devices'
  problems are independent);
* MOCHA without noise (the learned Omega; the paper's "non-private" baseline in the
  homogeneous scenario);
* DP-MOCHA at the paper's epsilon 8 in the homogeneous scenario (for comparison).

Each method uses its own cross-validated lambda when cv_lambda.json has it (MOCHA's
``baselines.m`` also cross-validates each method). MOCHA's paper reports on UCI HAR's
published features (recalled from the MOCHA paper, unverified): global 2.2%, local
1.3%, MTL 0.5%.

Usage:
  python experiments/dp_mocha/baselines.py          # H = 5, K = 200, 5 trials
  python experiments/dp_mocha/baselines.py --quick  # CI: H = 2, K = 20, 1 trial
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_mocha_common as common  # noqa: E402

#: MOCHA (Smith et al., NeurIPS 2017) on UCI HAR's published features, as recalled
#: (unverified).
MOCHA_PAPER = {"global": 0.022, "local": 0.013, "mtl": 0.005}
#: (key, label, lambda method).
METHODS = (("constant", "[reference] constant 'always -1' predictor", None),
           ("global", "[reference] global SVM (all rows in one task, m = 1)", "global"),
           ("local", "[reference] local SVMs (Omega = I/m, update_omega=False)", "local"),
           ("mtl", "[reference] MOCHA without noise (learned Omega)", "mtl"),
           ("dp", f"DP-MOCHA, epsilon {common.PAPER['epsilon']:g} (homogeneous)", "mtl"))


def run_method(key: str, trial, lam: float, a):
  """One method on one trial: ``run_point``'s dict (the constant predictor: its error)."""
  if key == "constant":
    return dict(final_test_error=trial.constant_error, wall_s=0.0)
  if key == "global":
    return common.run_point(trial, lam, 1, a.outer_rounds * a.inner_rounds,
                            problem=common.pooled(trial.x, trial.y, trial.counts))
  if key == "local":
    return common.run_point(trial, lam, a.outer_rounds, a.inner_rounds, update_omega=False)
  eps = common.PAPER["epsilon"] if key == "dp" else None
  return common.run_point(trial, lam, a.outer_rounds, a.inner_rounds, epsilon=eps)


def main(argv=None) -> int:
  a = common.parse(common.arg_parser(__doc__, outer_rounds=5, inner_rounds=200, trials=5),
                   argv)
  lams = {k: (common.choose_lambda(a, meth) if meth else (None, "–"))
          for k, _, meth in METHODS}
  res = common.Results(
      os.path.join(a.out, "baselines.json"),
      dict(figure="reference points (not in the paper)", data=common.data_label(a.dataset),
           features_note=common.FEATURES_NOTE, dataset=a.dataset,
           outer_rounds=a.outer_rounds, inner_rounds=a.inner_rounds, trials=a.trials,
           quick=a.quick, xi=common.XI, lambdas={k: v for k, v in lams.items()},
           mocha_paper_recalled=MOCHA_PAPER, seeding=common.SEEDING),
      resume=a.resume or a.report_only)
  if not a.report_only:
    for trial_id in range(a.trials):
      for key, label, _ in METHODS:
        lam = lams[key][0]
        ident = dict(method=key, trial=trial_id, outer_rounds=a.outer_rounds,
                     inner_rounds=a.inner_rounds, lam=lam, dataset=a.dataset)
        if res.has(**ident):
          continue
        trial = common.load_trial(trial_id, a.dataset)
        out = run_method(key, trial, lam, a)
        out.update(ident, label=label, constant_error=trial.constant_error,
                   split_seed=trial_id, noise_seed=trial.seed)
        res.add(out)
        print(f"baselines: {label} trial {trial_id}: error {out['final_test_error']:.4f} "
              f"({out['wall_s']:.1f} s)", flush=True)
  runs = [r for r in res.runs if r["outer_rounds"] == a.outer_rounds
          and r["inner_rounds"] == a.inner_rounds and r.get("dataset") == a.dataset]
  lines = [
      "# Reference points DP-MOCHA's paper lacks (labelled [reference]) and DP-MOCHA", "",
      f"Data: {res.meta['data']}.", "",
      f"Scale: H = {a.outer_rounds} x K = {a.inner_rounds} rounds (the global SVM: "
      f"{a.outer_rounds * a.inner_rounds} rounds of one pass over the pooled rows), "
      f"{a.trials} trial(s)" + (" (CI-reduced --quick run)" if a.quick else "")
      + f"; xi = {common.XI}. Error: mean over devices of each device's 0/1 test error "
      "(mean ± std over trials).", "",
      "| method | lambda (source) | test error | MOCHA paper (recalled, UCI HAR's published "
      "features) | eps paper / accountant / provable | s / run |",
      "|---|---|---|---|---|---|"]
  for key, label, _ in METHODS:
    rs = [r for r in runs if r["method"] == key]
    if not rs:
      continue
    lam, src = lams[key]
    eps = ("–" if rs[0].get("epsilon_target") is None else " / ".join(
        common.fmt_eps(max(r[k] for r in rs)) for k in
        ("epsilon_paper", "epsilon_accountant", "epsilon_provable")))
    paper = f"{MOCHA_PAPER[key]:.3f}" if key in MOCHA_PAPER else "–"
    lines.append(f"| {label} | {'–' if lam is None else f'{lam:g} ({src})'} | "
                 f"{common.fmt([r['final_test_error'] for r in rs])} | {paper} | {eps} | "
                 f"{common.mean_std([r['wall_s'] for r in rs])[0]:.1f} |")
  common.write_md(a, "baselines", lines)
  curves = []
  for key, label, _ in METHODS:
    rs = sorted((r for r in runs if r["method"] == key), key=lambda r: r["trial"])
    if rs:
      curves.append((label.replace("[reference] ", ""), [r["trial"] for r in rs],
                     [r["final_test_error"] for r in rs], None))
  common.plot(os.path.join(a.out, "baselines.png"),
              [("mean per-device test error", "trial", curves, [], [])],
              f"Reference points (not in DP-MOCHA's paper); {common.FEATURES_NOTE}; "
              f"H={a.outer_rounds}, K={a.inner_rounds}", logy=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
