"""The Shakespeare scorecard: the published claims tested on our runs, each as a row with
ours as mean and 95% CI over the seeds and a verdict by `experiments/scorecard.py`'s
rules, computed from the per-seed final accuracies that ``compare.py`` stored
(results/compare.json). Every variant ran the same seeds, so comparisons are paired.

Claims:
* McMahan et al. 2017 (AISTATS), Table 2: FedAvg reaches 54% next-character accuracy on
  Shakespeare (ours within 2 points);
* Andrew et al. 2021 (NeurIPS): adaptive clipping at the median quantile is not worse
  than a well-chosen fixed clip norm (ours: not worse than C = 0.5 by more than 1 point);
* Kairouz et al. 2021 (ICML), abstract: DP-FTRL without sampling "compares favorably" to
  amplified DP-SGD (not worse than Poisson DP-FedAvg by more than 1 point);
* Choquette-Choo et al. 2023 (NeurIPS): banded MF beats the tree under multiple
  participations (cyclic here);
* every DP-FL paper's premise: accuracy rises with epsilon (DP-FedAvg at 2, 8, 32).

Usage:
  python experiments/shakespeare/scorecard.py   # writes results/scorecard.{json,md} and
                                                # the README's scorecard block
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import scorecard as sc  # noqa: E402  (experiments/scorecard.py)

PUBLISHED_FEDAVG = 0.54
#: The cause of a difference, per variant (numbers from results/compare.json).
CAUSES = {
    "adaptive": ("scale: at the paper's eta_C = 0.2 the clip norm moves by up to "
                 "exp(0.1) a round on noisy counts of 20-client cohorts, and every "
                 "seed collapsed below the majority class (the library's default "
                 "eta_C is 0.05 for this reason); the paper's cohorts are 100 or more"),
    "adaptive_slow": ("scale: from C_0 = 0.1 with every update clipped, eta_C = 0.05 "
                      "raises the clip norm by at most exp(0.025) a round, so it nears "
                      "the updates' norm (0.87) only after about 80 rounds, this run's "
                      "length; the paper trains for thousands of rounds"),
    "tree": ("scale: Poisson sampling at q = 20/987 lets DP-FedAvg reach epsilon 8 with "
             "z = 0.52, where the cyclic tree needs z = 1.93 for its 80 rounds; the "
             "paper compares over far more rounds and clients"),
    "banded": "scale",
}
TOL = 0.01


def _acc(runs: List[Dict], kind: str, eps: Optional[float]):
  rows = sorted((r for r in runs if r["kind"] == kind and r["target_epsilon"] == eps),
                key=lambda r: r["seed"])
  return [r["final_accuracy"] for r in rows], [r["seed"] for r in rows]


def rows_of(data: Dict) -> List[sc.Row]:
  """The scorecard rows from compare.json's content."""
  runs, s = data["runs"], data["meta"]["settings"]
  setup = (f"Shakespeare {data['meta']['num_clients']} role clients, char LSTM 1 x "
           f"{s['hidden']}, {s['rounds']} rounds of {s['cohort']} clients, delta 1e-4, "
           f"user level, seeds {s['seeds']}")
  fed, fed_seeds = _acc(runs, "fedavg", None)
  rows = [sc.Row(
      "FedAvg next-character accuracy (non-private)", f"{PUBLISHED_FEDAVG:.2f} "
      "(McMahan et al. 2017, Table 2: 2 x 256 LSTM)", {"FedAvg": sc.summarize(fed)},
      sc.matches_value(fed, PUBLISHED_FEDAVG, 0.02),
      f"scale: a 1 x {s['hidden']} LSTM for {s['rounds']} rounds of {s['cohort']} clients "
      "on 2 CPU cores against the paper's 2 x 256 LSTM trained to convergence with a loss "
      "on every character of the window (LEAF's task, ours, scores one target per "
      "window)", setup)]
  for eps in s["epsilons"]:
    dp, seeds = _acc(runs, "dp_fedavg", eps)
    pairs = [("adaptive", "adaptive clipping (eta_C 0.2, the paper's) not worse than fixed "
              "C = 0.5 by > 1 point",
              "Andrew et al. 2021: adaptive matches a tuned fixed clip", "dp_fedavg"),
             ("adaptive_slow", "adaptive clipping (eta_C 0.05) not worse than fixed "
              "C = 0.5 by > 1 point",
              "Andrew et al. 2021: adaptive matches a tuned fixed clip", "dp_fedavg"),
             ("tree", "DP-FTRL tree (cyclic, no sampling) not worse than amplified "
              "DP-FedAvg by > 1 point", "Kairouz et al. 2021: compares favorably",
              "dp_fedavg"),
             ("banded", "banded MF > DP-FTRL tree (cyclic)",
              "Choquette-Choo et al. 2023: banded MF > tree", "tree")]
    for kind, claim, paper, other in pairs:
      a, sa = _acc(runs, kind, eps)
      b, sb = _acc(runs, other, eps)
      if not a or not b:
        continue
      rule = (sc.greater(a, b, seeds_a=sa, seeds_b=sb) if kind == "banded" else
              sc.not_worse(a, b, TOL, seeds_a=sa, seeds_b=sb))
      rows.append(sc.Row(f"{claim}, epsilon {eps:g}", paper,
                         {kind: sc.summarize(a), other: sc.summarize(b)}, rule,
                         CAUSES[kind] if rule.verdict != "holds" else "none", setup))
  curve = sorted({r["target_epsilon"] for r in runs
                  if r["kind"] == "dp_fedavg" and r["target_epsilon"] is not None})
  if len(curve) > 1:
    series = [_acc(runs, "dp_fedavg", e) for e in curve]
    rule = sc.monotone([v for v, _ in series], seeds=[sd for _, sd in series])
    rows.append(sc.Row(
        f"DP-FedAvg accuracy rises with epsilon ({', '.join(f'{e:g}' for e in curve)})",
        "monotone (every DP-FL paper)",
        {f"epsilon {e:g}": sc.summarize(v) for e, (v, _) in zip(curve, series)}, rule,
        "scale" if rule.verdict != "holds" else "none", setup))
  return rows


def main(argv: Optional[List[str]] = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--results", default=os.path.join(HERE, "results", "compare.json"))
  args = p.parse_args(argv)
  with open(args.results) as f:
    data = json.load(f)
  rows = rows_of(data)
  sc.write(os.path.join(os.path.dirname(args.results), "scorecard"), rows,
           meta={"source": os.path.basename(args.results)})
  readme = os.path.join(HERE, "README.md")
  if os.path.exists(readme):
    sc.update_readme(readme, rows)
  print("\n".join(sc.render(rows)))


if __name__ == "__main__":
  main()
