"""Paper 001, Fig. 5: final accuracy against the initial artificial noise level, ideal
channel (Sec. V-C), on MNIST (the paper's; here the 5,000-image subset).

The paper's x-axis unit is stripped (note B6); we sweep each device's total budget eps_T
(which sets every method's initial noise sigma_i[1] = c Delta_s / eps_i[1]) and report
the mean initial SD per method beside the accuracy, because equal initial noise is not
equal privacy. Methods: no DP (Configuration 4), uniform DP (Benchmark 3), ARB-approx
(Benchmark 4), LAPA (Configuration 3), all with the Wasserstein weights (note section 6
[D]). Paper's claims (no numbers): no DP best; ARB and LAPA clearly beat uniform under
non-IID data; LAPA close to no DP and above ARB.

  python experiments/lapa/fig5_noise.py            # the reduced CPU scale
  python experiments/lapa/fig5_noise.py --quick    # CI
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lapa_common as lc  # noqa: E402

BUDGETS = (30.0, 60.0, 120.0)
METHODS = ("uniform", "arb", "lapa")


def settings(scale, budgets):
  base = {"channel": "ideal"}
  rows = [(ds, "no DP", {**base, "allocator": "none"}) for ds in scale.datasets]
  for ds in scale.datasets:
    for b in budgets:
      for m in METHODS:
        rows.append((ds, f"{m} eps_T={b:g}", {**base, "allocator": m, "epsilon_total": b}))
  return rows


def initial_sigma(res, ds, label):
  vals = [float(np.mean(r["records"][0]["sigma_devices"])) for r in res.runs
          if r["dataset"] == ds and r["label"] == label and r["records"]]
  return float(np.mean(vals)) if vals else None


def report(res, scale, budgets):
  lines = []
  for ds in scale.datasets:
    nodp = lc.final(res, ds, "no DP")
    lines += [f"## {ds}", "", f"no DP: {lc.fmt(*nodp)}", "",
              "| eps_T | " + " | ".join(f"{m} (sigma_1)" for m in METHODS) + " |",
              "|---|" + "---|" * len(METHODS)]
    holds = {"LAPA > ARB": [], "ARB > uniform": [], "LAPA > uniform": [],
             "LAPA within 2 points of no DP": []}
    for b in budgets:
      cells, acc = [], {}
      for m in METHODS:
        lab = f"{m} eps_T={b:g}"
        mean, std = lc.final(res, ds, lab)
        acc[m] = mean
        sig = initial_sigma(res, ds, lab)
        cells.append(f"{lc.fmt(mean, std)} ({sig:.3g})" if sig is not None else "n/a")
      lines.append(f"| {b:g} | " + " | ".join(cells) + " |")
      if None not in acc.values():
        holds["LAPA > ARB"].append(acc["lapa"] > acc["arb"])
        holds["ARB > uniform"].append(acc["arb"] > acc["uniform"])
        holds["LAPA > uniform"].append(acc["lapa"] > acc["uniform"])
        if nodp[0] is not None:
          holds["LAPA within 2 points of no DP"].append(nodp[0] - acc["lapa"] <= 0.02)
    lines.append("")
    for claim, vals in holds.items():
      v = None if not vals else all(vals)
      lines.append(f"- {ds}: {claim} at every budget: **{lc.verdict(v)}** "
                   f"({sum(vals)}/{len(vals)} budgets)")
  return lines


def main(argv=None):
  ap = lc.parser(__doc__.splitlines()[0])
  ap.set_defaults(datasets="mnist")
  args = ap.parse_args(argv)
  scale = lc.scale_from(args)
  budgets = BUDGETS[1:2] if scale.quick else BUDGETS
  rows = settings(scale, budgets)
  res = lc.sweep("fig5_noise", rows, scale, args.out, args.resume,
                 meta={"budgets": list(budgets)})
  lc.write_markdown(res, "Fig. 5: accuracy vs initial noise level (ideal channel)",
                    report(res, scale, budgets), scale)
  labels = sorted({r["label"] for r in res.runs})
  lc.plot_curves(res, res.path[:-5] + ".png", "Paper 001 Fig. 5: allocators",
                 scale.datasets, labels)
  return res


if __name__ == "__main__":
  main()
