"""Privacy-utility trade-off of user-level DP-FedAvg on HAR (30 natural clients).

Baseline for the paper reproductions: McMahan, Ramage, Talwar, Zhang, "Learning
Differentially Private Recurrent Language Models" (ICLR 2018), Algorithm 1, run with the
main job's settings (`fedjax-dp run` defaults) for a sweep of noise multipliers z, plus
the non-private FedAvg baseline and clipping without noise (z = 0). For each setting it
reports the mean and spread of the final test accuracy over seeds and the epsilon spent
(RDP and PLD, delta = 1e-3, add/remove-one-user neighbouring datasets).

Usage:
  python experiments/dp_fedavg_har_tradeoff.py                 # full: 50 rounds, 3 seeds
  python experiments/dp_fedavg_har_tradeoff.py --quick         # CI: 10 rounds, 1 seed
  python experiments/dp_fedavg_har_tradeoff.py --out DIR       # where results go

Writes ``DIR/results.json`` (every run) and ``DIR/results.md`` (the table), default
``experiments/results/dp_fedavg_har_tradeoff``. Each finished run is written out
immediately, so an interrupted sweep keeps what it computed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time

from fedjax_dp import compilation_cache
from fedjax_dp.data import load_dataset
from fedjax_dp.runs import RunConfig, json_safe, run

NOISE_MULTIPLIERS = (0.0, 1.0, 2.0, 3.0)


def settings(rounds: int):
  """(label, RunConfig.from_dict table) for each row of the table."""
  rows = [("FedAvg (non-private)", dict(algorithm="fedavg"))]  # no noise multiplier
  for z in NOISE_MULTIPLIERS:
    label = "DP-FedAvg, clip only (z = 0)" if z == 0 else f"DP-FedAvg, z = {z:g}"
    rows.append((label, dict(algorithm="dp_fedavg", noise_multiplier=z)))
  return [(label, dict(kw, rounds=rounds, eval_every=rounds)) for label, kw in rows]


def table(results, rounds, seeds):
  lines = [f"HAR (UCI HAPT), 30 natural clients, q = 0.5, C = 0.5, {rounds} rounds, "
           f"seeds {seeds}; epsilon at delta = 1e-3 (user level, add/remove one user).",
           "",
           "| setting | test accuracy (mean, min..max) | epsilon RDP | epsilon PLD | s/run |",
           "|---|---|---|---|---|"]
  for label in dict.fromkeys(r["label"] for r in results):
    rs = [r for r in results if r["label"] == label]
    accs = [r["final_test_accuracy"] for r in rs]
    fmt = lambda e: "inf" if e is None or e == float("inf") else f"{e:.2f}"
    lines.append(
        f"| {label} | {statistics.mean(accs):.3f} ({min(accs):.3f}..{max(accs):.3f}) | "
        f"{fmt(rs[0]['epsilon_rdp'])} | {fmt(rs[0]['epsilon_pld'])} | "
        f"{statistics.mean(r['wall_time_s'] for r in rs):.0f} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--quick", action="store_true", help="10 rounds, 1 seed (for CI)")
  p.add_argument("--rounds", type=int, default=None)
  p.add_argument("--seeds", type=int, default=None, help="number of seeds")
  p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                               "dp_fedavg_har_tradeoff"))
  args = p.parse_args(argv)
  compilation_cache.enable()  # before anything compiles (FEDJAX_DP_COMPILATION_CACHE=0: off)
  rounds = args.rounds or (10 if args.quick else 50)
  seeds = list(range(args.seeds or (1 if args.quick else 3)))
  logging.getLogger("fedjax_dp.privacy.accountants").setLevel(logging.ERROR)
  os.makedirs(args.out, exist_ok=True)
  data = load_dataset("har")
  majority = data.majority_class_accuracy()
  results = []
  for label, kw in settings(rounds):
    for seed in seeds:
      t0 = time.perf_counter()
      res = run(RunConfig.from_dict(dict(kw, seed=seed, out=None)), progress=False,
                data=data)
      s = res.summary
      results.append(dict(label=label, seed=seed, noise_multiplier=s["noise_multiplier"],
                          final_test_accuracy=s["final_test_accuracy"],
                          epsilon_rdp=s["epsilon_rdp"], epsilon_pld=s["epsilon_pld"],
                          wall_time_s=time.perf_counter() - t0, rounds=rounds))
      print(f"{label:32s} seed {seed}: acc {s['final_test_accuracy']:.3f} "
            f"eps {s['epsilon_rdp']:.2f}", flush=True)
      with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(json_safe({"majority_class_accuracy": majority, "runs": results}), f,
                  indent=1)
  md = table(results, rounds, seeds) + f"\nMajority-class accuracy: {majority:.3f}.\n"
  with open(os.path.join(args.out, "results.md"), "w") as f:
    f.write(md)
  print(md)
  return 0


if __name__ == "__main__":
  sys.exit(main())
