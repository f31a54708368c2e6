"""Participation schemes at equal epsilon: user-level DP-FedAvg with Poisson sampling,
balls-in-bins, random allocation (k = 2) and cyclic Poisson sampling, on HAR and
Fashion-MNIST, 5 seeds each as one vmapped program (`run_sweep`).

References:
* McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent Language
  Models", ICLR 2018 (user-level DP-FedAvg, Poisson sampling);
* Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha, Zhang, "Balls-and-bins sampling for
  DP-SGD", 2024;
* Feldman, Shenfeld, "Privacy amplification by random allocation", 2025;
* Choquette-Choo et al., "Amplified banded matrix factorization", NeurIPS 2023 (cyclic
  Poisson sampling, b-min-separation).

Every scheme's noise multiplier is calibrated by its own accounting to the same target
epsilon at delta 1e-3 (``--target-epsilon``): dp_accounting's RDP for Poisson and cyclic
Poisson (the worst group's), the Monte Carlo accountant for balls-in-bins and random
allocation (an upper confidence bound that holds with probability >= 0.999 over the
Monte Carlo draw). Every scheme has the same expected cohort (q N clients a round).

Usage:
  python experiments/participation/compare.py            # full: 50 rounds, 5 seeds
  python experiments/participation/compare.py --quick    # CI: HAR, 3 rounds, 1 seed
  python experiments/participation/compare.py --resume   # only the cells not saved
  python experiments/participation/compare.py --report-only

Writes ``results/compare.json`` (every seed of every cell, saved as each finishes) and
``results/compare.md`` (final test accuracy, mean and 95% Student-t CI per cell).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from results_store import Results  # noqa: E402  (also enables the compile cache)
import scorecard  # noqa: E402  (experiments/scorecard.py)

from fedjax_dp.data import load_dataset  # noqa: E402
from fedjax_dp.runs import RunConfig  # noqa: E402
from fedjax_dp.runs.sweep import run_sweep  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DELTA = 1e-3
#: (label, sampler options) of each scheme; the rate q is the dataset's.
SCHEMES = {
    "poisson": ("Poisson", dict(sampler="poisson")),
    # The Monte Carlo accountant is close to exact; RDP is not: Poisson accounted with
    # the PLD accountant is the like-for-like baseline (Chua et al. compare with PLD).
    "poisson_pld": ("Poisson, PLD accountant", dict(sampler="poisson", accountant="pld")),
    "balls_in_bins": ("balls-in-bins (t = 1/q)", dict(sampler="balls_in_bins")),
    "random_allocation": ("random allocation, k = 2 (t = 2/q)",
                          dict(sampler="random_allocation", participations_per_epoch=2)),
    "cyclic_poisson": ("cyclic Poisson, b = 2 (q_group = 2q)",
                       dict(sampler="cyclic_poisson", min_separation=2)),
}
#: Per dataset: the run's options (HAR: 30 natural clients; Fashion-MNIST: 100 clients).
DATASETS: Dict[str, Dict[str, Any]] = {
    "har": dict(dataset="har", sampling_rate=0.2),
    "fashion_mnist": dict(dataset="fashion_mnist", num_clients=100, model="mlp",
                          hidden="32", batch_size=32, sampling_rate=0.1),
}
FULL = dict(datasets=("har", "fashion_mnist"), rounds=50, seeds=[0, 1, 2, 3, 4],
            epsilon=4.0, overrides={})
QUICK = dict(datasets=("har",), rounds=3, seeds=[0], epsilon=8.0,
             overrides={"har": dict(model="mlp", hidden="16")})


def base_config(dataset: str, scheme: str, s: Dict[str, Any]) -> RunConfig:
  """The `RunConfig` of one cell (its seeds are the sweep's)."""
  table = dict(algorithm="dp_fedavg", rounds=s["rounds"], eval_every=s["rounds"],
               delta=DELTA, target_epsilon=s["epsilon"], clip_norm=0.5, out=None,
               logger="none", seed=s["seeds"][0], **DATASETS[dataset],
               **s["overrides"].get(dataset, {}), **SCHEMES[scheme][1])
  return RunConfig.from_dict(table)


def run_cell(dataset: str, scheme: str, s: Dict[str, Any], data) -> List[Dict[str, Any]]:
  """Every seed of one (dataset, scheme) cell, as one vmapped sweep."""
  t0 = time.perf_counter()
  sw = run_sweep(base_config(dataset, scheme, s), seeds=s["seeds"], progress=False,
                 data=data)
  wall = time.perf_counter() - t0
  return [dict(dataset=dataset, kind=scheme, label=SCHEMES[scheme][0], seed=m.axes["seed"],
               target_epsilon=s["epsilon"], final_accuracy=m.summary["final_test_accuracy"],
               epsilon=m.summary.get("epsilon"),
               noise_multiplier=m.summary.get("noise_multiplier"),
               accounting_method=m.summary.get(
                   "accounting_method", f"dp_accounting {m.summary.get('accountant')}"),
               wall_time_s=wall, rounds=s["rounds"]) for m in sw.members]


def _cell(runs: List[Dict[str, Any]], dataset: str, kind: str):
  accs = [r["final_accuracy"] for r in runs if r["dataset"] == dataset and r["kind"] == kind]
  return scorecard.summarize(accs) if accs else None


def report(runs: List[Dict[str, Any]], s: Dict[str, Any]) -> str:
  """The markdown table: final test accuracy, mean [95% CI] (n seeds), per dataset."""
  lines = [f"User-level DP-FedAvg, {s['rounds']} rounds, clip norm 0.5, every scheme "
           f"calibrated by its own accounting to epsilon {s['epsilon']:g} at delta "
           f"{DELTA:g} (add/remove one user); HAR q = 0.2, Fashion-MNIST (100 clients) "
           "q = 0.1. Final test accuracy, mean [95% Student-t CI] (n seeds).", "",
           "| dataset | scheme | accuracy | noise multiplier | epsilon spent | accounting |",
           "|---|---|---|---|---|---|"]
  for dataset in s["datasets"]:
    for kind, (label, _) in SCHEMES.items():
      c = _cell(runs, dataset, kind)
      if c is None:
        continue
      r0 = next(r for r in runs if r["dataset"] == dataset and r["kind"] == kind)
      method = str(r0["accounting_method"]).split(":")[0]
      lines.append(f"| {dataset} | {label} | {scorecard.fmt(c)} | "
                   f"{r0['noise_multiplier']:.3f} | {r0['epsilon']:.3f} | {method} |")
  return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--quick", action="store_true", help="CI size: HAR, 3 rounds, 1 seed")
  p.add_argument("--out", default=os.path.join(HERE, "results", "compare.json"))
  p.add_argument("--resume", action="store_true", help="skip cells already in --out")
  p.add_argument("--report-only", action="store_true")
  args = p.parse_args(argv)
  logging.getLogger("fedjax_dp.privacy.accountants").setLevel(logging.ERROR)
  s = QUICK if args.quick else FULL
  res = Results(args.out, {"settings": s, "quick": args.quick},
                resume=args.resume or args.report_only)
  for dataset in ([] if args.report_only else s["datasets"]):
    data = None
    for kind in SCHEMES:
      if res.has(dataset=dataset, kind=kind):
        continue
      if data is None:
        opts = {k: v for k, v in DATASETS[dataset].items() if k == "num_clients"}
        data = load_dataset(dataset, **opts)
      for row in run_cell(dataset, kind, s, data):
        res.add(row)
      print(f"{dataset:14s} {kind:18s}: {scorecard.fmt(_cell(res.runs, dataset, kind))}",
            flush=True)
  md = report(res.runs, s)
  with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
    f.write(md)
  print(md)
  return res


if __name__ == "__main__":
  main()
