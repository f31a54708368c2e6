"""DP-FTRL (tree), banded MF and independent noise at equal epsilon on Fashion-MNIST.

Claim checked (Kairouz, McMahan, Song, Thakkar, Thakurta, Xu, "Practical and Private
(Deep) Learning without Sampling or Shuffling", ICML 2021, arXiv 2103.00039; Choquette-
Choo, Ganesh, McKenna, McMahan, Rush, Thakurta, Xu, "Amplified Banded Matrix
Factorization: A unified approach to private training", NeurIPS 2023, arXiv 2306.08153):
*correlated noise across rounds beats independent noise when amplification by sampling is
not available.* All three mechanisms run with the same cyclic participation (every client
in the rounds of its group, group_rate 1: no amplification), each with its noise
multiplier calibrated by its own accounting to the same target epsilon (`fedjax-dp run
--target-epsilon`). DP-FedAvg with Poisson sampling of the same expected cohort, calibrated
to the same epsilon *with* amplification, is the reference.

Usage:
  python experiments/dp_ftrl/compare.py            # full: 100 rounds, eps 2 4 8 16, 5 seeds
  python experiments/dp_ftrl/compare.py --quick    # CI: 10 rounds, eps 8, 1 seed, 200 clients
  python experiments/dp_ftrl/compare.py --resume   # only the runs not yet saved
  python experiments/dp_ftrl/compare.py --report-only   # no training: markdown, figure
  python experiments/dp_ftrl/compare.py --out DIR/compare.json

Writes ``compare.json`` (every run), ``compare.md`` (mean and 95% CI per mechanism and
epsilon; the verdicts are ``scorecard.py``'s, from the same file) and ``compare.png``
(accuracy vs epsilon) into the results folder (default ``experiments/dp_ftrl/results``);
each finished run is saved at once (``--resume`` skips runs already saved).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from results_store import Results, plot  # noqa: E402  (also enables the compile cache)
import scorecard  # noqa: E402  (experiments/scorecard.py)

from fedjax_dp.data import load_dataset  # noqa: E402
from fedjax_dp.runs import RunConfig, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MECHANISMS = ("tree", "banded", "independent")
LABELS = {"tree": "DP-FTRL tree (cyclic)", "banded": "banded MF (cyclic)",
          "independent": "independent noise (cyclic)",
          "dp_fedavg": "DP-FedAvg, Poisson (amplified)"}


def settings(quick: bool) -> Dict:
  """The shared configuration (reduced from the papers' scale to fit ~15 CPU minutes:
  1,000 clients instead of StackOverflow/EMNIST populations, an MLP, 100 rounds)."""
  if quick:
    return dict(num_clients=200, rounds=10, cycle_length=5, epsilons=(8.0,), seeds=(0,))
  return dict(num_clients=1000, rounds=100, cycle_length=20, epsilons=(2.0, 4.0, 8.0, 16.0),
              seeds=(0, 1, 2, 3, 4))


def run_config(kind: str, eps: float, seed: int, s: Dict) -> Dict:
  """`RunConfig.from_dict` table of one run."""
  common = dict(dataset="fashion_mnist", num_clients=s["num_clients"], model="mlp",
                hidden="64", rounds=s["rounds"], eval_every=s["rounds"], delta=1e-4,
                target_epsilon=eps, seed=seed, out=None, clip_norm=0.5, batch_size=16,
                client_learning_rate=0.1, server_optimizer="fedavgm",
                server_learning_rate=0.1)
  if kind == "dp_fedavg":  # the same expected cohort N / R, Poisson: amplified
    return dict(common, algorithm="dp_fedavg",
                sampling_rate=1.0 / s["cycle_length"])
  return dict(common, algorithm="dp_ftrl", mechanism=kind, cycle_length=s["cycle_length"])


def _stats(runs, kind, eps):
  accs = [r["final_accuracy"] for r in runs if r["kind"] == kind and r["epsilon"] == eps]
  if not accs:
    return None
  return (statistics.mean(accs), statistics.stdev(accs) if len(accs) > 1 else 0.0, accs)


def report(runs: List[Dict], s: Dict, majority: float) -> str:
  """The markdown table: final accuracy, mean [95% CI] (n seeds), per mechanism and
  epsilon (the verdicts are in ``scorecard.py``'s table)."""
  seeds = len(s["seeds"])
  lines = [
      f"Fashion-MNIST, {s['num_clients']} clients (Dirichlet(0.5) label skew), MLP (64), "
      f"{s['rounds']} rounds, delta = 1e-4, user level (add/remove one client); cyclic "
      f"participation with R = {s['cycle_length']} groups (expected cohort "
      f"{s['num_clients'] // s['cycle_length']}, group_rate 1: no amplification), each "
      f"client in {-(-s['rounds'] // s['cycle_length'])} rounds; tree restarted every R "
      f"rounds, banded C with b = R bands (optimised for prefix sums); DP-FedAvg: Poisson "
      f"q = 1/R (amplified). Noise calibrated per mechanism to each target epsilon; final "
      f"test accuracy, mean [95% Student-t CI] (n = the cell's seeds; the settings ask "
      f"for {seeds}). Majority class {majority:.3f}. Verdicts: results/scorecard.md.", "",
      "| epsilon | " + " | ".join(LABELS[k] for k in (*MECHANISMS, "dp_fedavg")) + " |",
      "|---|" + "---|" * (len(MECHANISMS) + 1)]
  for eps in s["epsilons"]:
    cells = []
    for kind in (*MECHANISMS, "dp_fedavg"):
      st = _stats(runs, kind, eps)
      z = next((r["noise_multiplier"] for r in runs
                if r["kind"] == kind and r["epsilon"] == eps), None)
      cells.append("-" if st is None else
                   f"{scorecard.fmt(scorecard.summarize(st[2]))} (z {z:.2f})")
    lines.append(f"| {eps:g} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--quick", action="store_true", help="CI size: 10 rounds, 1 seed")
  p.add_argument("--out", default=os.path.join(HERE, "results", "compare.json"))
  p.add_argument("--resume", action="store_true", help="skip runs already in --out")
  p.add_argument("--report-only", action="store_true",
                 help="no training: rewrite the markdown and figure from --out's runs")
  args = p.parse_args(argv)
  logging.getLogger("fedjax_dp.privacy.accountants").setLevel(logging.ERROR)
  s = settings(args.quick)
  data = load_dataset("fashion_mnist", num_clients=s["num_clients"])
  majority = data.majority_class_accuracy()
  res = Results(args.out, {"settings": {k: list(v) if isinstance(v, tuple) else v
                                        for k, v in s.items()},
                           "quick": args.quick, "majority_class_accuracy": majority,
                           "dataset": data.describe()}, resume=args.resume or args.report_only)
  for eps in () if args.report_only else s["epsilons"]:
    for kind in (*MECHANISMS, "dp_fedavg"):
      for seed in s["seeds"]:
        if res.has(kind=kind, epsilon=eps, seed=seed):
          continue
        t0 = time.perf_counter()
        out = run(RunConfig.from_dict(run_config(kind, eps, seed, s)), progress=False,
                  data=data)
        sm = out.summary
        res.add(dict(kind=kind, label=LABELS[kind], epsilon=eps, seed=seed,
                     final_accuracy=sm["final_test_accuracy"],
                     epsilon_rdp=sm["epsilon_rdp"], epsilon_pld=sm["epsilon_pld"],
                     noise_multiplier=sm["noise_multiplier"],
                     effective_noise_multiplier=sm.get("effective_noise_multiplier"),
                     wall_time_s=time.perf_counter() - t0))
        print(f"eps {eps:g} {kind:12s} seed {seed}: acc {sm['final_test_accuracy']:.3f} "
              f"z {sm['noise_multiplier']:.3f} eps {sm['epsilon']:.3f} "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
  md = report(res.runs, s, majority)
  base = os.path.splitext(args.out)[0]
  with open(base + ".md", "w") as f:
    f.write(md)
  xs = list(s["epsilons"])
  curves = []
  for kind in (*MECHANISMS, "dp_fedavg"):
    st = [_stats(res.runs, kind, e) for e in xs]
    curves.append((LABELS[kind], xs, [t[0] for t in st], [t[1] for t in st]))
  plot(base + ".png", [("final test accuracy", "target epsilon (delta 1e-4)", curves)],
       "Fashion-MNIST: correlated vs independent noise at equal epsilon")
  print(md)
  return res


if __name__ == "__main__":
  main()
