"""Does simulating a larger cohort's noise predict the larger cohort's utility?

`--noise-cohort-size K'` trains K clients a round with the noise a K'-client cohort
adds to its average (`fedjax_dp.algorithms.dp_fedavg.noise_cohort`; pfl-research's
``noise_cohort_size``). This experiment checks the premise on Fashion-MNIST split over
1,000 clients, DP-FedAvg with the same noise multiplier z in every variant:

* ``deployment``: the real K' = 100 cohort (q = 0.1);
* ``simulated``: K = 10 (q = 0.01) with the noise of K' = 100;
* ``naive``: K = 10 with its own noise (what a simulation without the option trains).

Claims (verdict rules of `experiments/scorecard.py`, paired by seed, 95% CI):
* the simulated run is within 3 accuracy points of the deployment (``within``);
* the simulated run beats the naive one (``greater``).

Each variant's 5 seeds are one vmapped program (`run_sweep`). The table gives each
run's own epsilon and, for the simulation, the epsilon of the deployment it stands for.

Usage:
  python experiments/noise_cohort/compare.py            # full: 60 rounds, 5 seeds
  python experiments/noise_cohort/compare.py --quick    # CI: 3 rounds, 1 seed
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
import scorecard  # noqa: E402

from fedjax_dp.data import load_dataset  # noqa: E402
from fedjax_dp.runs import RunConfig  # noqa: E402
from fedjax_dp.runs.sweep import run_sweep  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
#: label, clients per round, noise cohort size
VARIANTS = {
    "deployment": ("deployment: 100 clients a round", 100, None),
    "simulated": ("simulated: 10 clients, the noise of 100", 10, 100),
    "naive": ("naive: 10 clients, their own noise", 10, None),
}
TOLERANCE = 0.03
#: Where the two differ: a 10-client average has more client-sampling variance.
CAUSE = "scale: a 10-client average has more client-sampling variance than 100"


def settings(quick: bool) -> Dict[str, Any]:
  if quick:
    return dict(rounds=3, seeds=[0], num_clients=200, scale=0.2, z=1.0, hidden="8")
  return dict(rounds=60, seeds=[0, 1, 2, 3, 4], num_clients=1000, scale=1.0, z=1.0,
              hidden="32")


def base_config(key: str, s: Dict[str, Any]) -> RunConfig:
  _, cohort, noise_cohort = VARIANTS[key]
  table: Dict[str, Any] = dict(
      algorithm="dp_fedavg", dataset="fashion_mnist", num_clients=s["num_clients"],
      model="mlp", hidden=s["hidden"], rounds=s["rounds"], eval_every=s["rounds"],
      delta=1e-5, seed=s["seeds"][0], out=None, logger="none",
      sampling_rate=cohort * s["scale"] / s["num_clients"], batch_size=32,
      clip_norm=0.3, noise_multiplier=s["z"], client_learning_rate=0.1,
      server_optimizer="fedavgm", server_learning_rate=1.0)
  if noise_cohort is not None:
    table["noise_cohort_size"] = max(1, round(noise_cohort * s["scale"]))
  return RunConfig.from_dict(table)


def run_variant(key: str, s: Dict[str, Any], data) -> List[Dict[str, Any]]:
  t0 = time.perf_counter()
  sw = run_sweep(base_config(key, s), seeds=s["seeds"], progress=False, data=data)
  wall = time.perf_counter() - t0
  out = []
  for m in sw.members:
    sm = m.summary
    sim = sm.get("noise_cohort_simulation") or {}
    out.append(dict(kind=key, label=VARIANTS[key][0], seed=m.axes["seed"],
                    final_accuracy=sm["final_test_accuracy"], epsilon=sm.get("epsilon"),
                    deployment_epsilon=sim.get("deployment_epsilon"),
                    sampling_rate=sm.get("sampling_rate"), wall_time_s=wall))
  return out


def _acc(runs, key):
  rs = sorted((r for r in runs if r["kind"] == key), key=lambda r: r["seed"])
  return [r["final_accuracy"] for r in rs], [r["seed"] for r in rs]


def verdicts(runs: List[Dict[str, Any]]) -> List[scorecard.Row]:
  sim, ss = _acc(runs, "simulated")
  dep, sd = _acc(runs, "deployment")
  nai, sn = _acc(runs, "naive")
  ours = {"simulated": scorecard.summarize(sim), "deployment": scorecard.summarize(dep),
          "naive": scorecard.summarize(nai)}
  return [
      scorecard.Row("simulated within 3 points of the 100-client deployment",
                    "premise of pfl-research's noise_cohort_size", ours,
                    scorecard.within(sim, dep, TOLERANCE, seeds_a=ss, seeds_b=sd),
                    CAUSE),
      scorecard.Row("simulated better than the naive 10-client run",
                    "the option changes what a simulation concludes", ours,
                    scorecard.greater(sim, nai, seeds_a=ss, seeds_b=sn), CAUSE),
  ]


def report(runs, s, meta) -> str:
  lines = [f"Fashion-MNIST over {meta['num_clients']} clients, MLP 1 x {s['hidden']}, "
           f"{s['rounds']} rounds, clip norm 0.3, z = {s['z']:g} in every variant, server "
           f"momentum 0.9; delta 1e-5. Final test accuracy, mean [95% CI] (n seeds).", "",
           "| variant | q | accuracy | this run's epsilon | deployment's epsilon |",
           "|---|---|---|---|---|"]
  for key, (label, *_r) in VARIANTS.items():
    rs = [r for r in runs if r["kind"] == key]
    if not rs:
      continue
    d = rs[0]["deployment_epsilon"]
    lines.append(f"| {label} | {rs[0]['sampling_rate']:.3g} | "
                 f"{scorecard.fmt(scorecard.summarize(_acc(runs, key)[0]))} | "
                 f"{rs[0]['epsilon']:.3g} | {'-' if d is None else f'{d:.3g}'} |")
  return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--quick", action="store_true")
  p.add_argument("--out", default=os.path.join(HERE, "results", "compare.json"))
  p.add_argument("--resume", action="store_true")
  args = p.parse_args(argv)
  logging.getLogger("fedjax_dp.privacy.accountants").setLevel(logging.ERROR)
  s = settings(args.quick)
  data = load_dataset("fashion_mnist", num_clients=s["num_clients"])
  meta = dict(num_clients=data.num_clients)
  res = Results(args.out, {"settings": s, "quick": args.quick, **meta}, resume=args.resume)
  for key in VARIANTS:
    if not res.has(kind=key):
      for row in run_variant(key, s, data):
        res.add(row)
  md = report(res.runs, s, meta)
  rows = verdicts(res.runs)
  md += "\n" + "\n".join(scorecard.render(rows)) + "\n"
  with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
    f.write(md)
  print(md)
  return res


if __name__ == "__main__":
  main()
