"""Shakespeare by speaking role: FedAvg, DP-FedAvg, adaptive clipping, DP-FTRL tree and
banded MF at equal epsilon, 5 seeds each as one vmapped program (`run_sweep`).

References:
* McMahan, Moore, Ramage, Hampson, Aguera y Arcas, "Communication-Efficient Learning of
  Deep Networks from Decentralized Data", AISTATS 2017: FedAvg on Shakespeare (1,146
  role clients, a 2 x 256 character LSTM predicting every character of 80-character
  windows) reaches 54% next-character test accuracy (its Table 2 target).
* McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent Language
  Models", ICLR 2018 (user-level DP-FedAvg); Andrew, Thakkar, McMahan, Ramaswamy,
  "Differentially Private Learning with Adaptive Clipping", NeurIPS 2021; Kairouz et al.,
  ICML 2021 (DP-FTRL tree); Choquette-Choo et al., NeurIPS 2023 (banded MF).

Our scale (2 CPU cores): LEAF's task (one next character per 80-character window, 81
classes), the character LSTM cut to one layer of 64 units, 80 rounds of 20 clients
(about 2% of 987) each taking 2 local steps of 16 windows (client SGD, lr 1.0), server
SGD with momentum 0.9 at lr 0.5 for every variant (DP-FTRLM's server optimiser; it
reached 27.6% in 30 non-private rounds against 20.9% for plain FedAvg's and 24.4% for
FedAdam at lr 0.02, one seed each), clip norm 0.5 (mean update norm 0.87 without
clipping). Every DP
mechanism's noise multiplier is calibrated by its own accounting to the same target
epsilon (``--target-epsilon``); DP-FedAvg and adaptive clipping sample Poisson cohorts
(amplified), DP-FTRL and banded MF use cyclic participation (no amplification).

Usage:
  python experiments/shakespeare/compare.py              # full (about 25 CPU minutes)
  python experiments/shakespeare/compare.py --quick      # CI: 3 rounds, 1 seed, tiny
  python experiments/shakespeare/compare.py --resume     # only the variants not saved
  python experiments/shakespeare/compare.py --report-only

Writes ``results/compare.json`` (every seed of every variant, saved as each variant
finishes), ``results/compare.md`` (mean and 95% CI per variant) and ``compare.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from results_store import Results, plot  # noqa: E402  (also enables the compile cache)
import scorecard  # noqa: E402  (experiments/scorecard.py)

from fedjax_dp.data import load_dataset  # noqa: E402
from fedjax_dp.runs import RunConfig, run  # noqa: E402
from fedjax_dp.runs.sweep import run_sweep  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLISHED_FEDAVG = 0.54  # McMahan et al. 2017, Table 2 (LSTM, Shakespeare)
#: (label, algorithm, epsilon or None, extra options)
VARIANTS = {
    "fedavg": ("FedAvg (non-private)", "fedavg", None, {}),
    "dp_fedavg": ("DP-FedAvg, Poisson (amplified)", "dp_fedavg", "eps", {}),
    "adaptive": ("DP-FedAvg, adaptive clipping (eta_C 0.2, the paper's)", "dp_fedavg", "eps",
                 {"clip_norm": "adaptive", "initial_clip_norm": 0.1,
                  "clip_learning_rate": 0.2, "target_quantile": 0.5}),
    "adaptive_slow": ("DP-FedAvg, adaptive clipping (eta_C 0.05)", "dp_fedavg", "eps",
                      {"clip_norm": "adaptive", "initial_clip_norm": 0.1,
                       "clip_learning_rate": 0.05, "target_quantile": 0.5}),
    "tree": ("DP-FTRL tree (cyclic)", "dp_ftrl", "eps", {"mechanism": "tree"}),
    "banded": ("banded MF (cyclic)", "dp_ftrl", "eps", {"mechanism": "banded"}),
}


def settings(quick: bool) -> Dict[str, Any]:
  """The shared configuration (see the module docstring)."""
  if quick:
    return dict(hidden="16", rounds=3, cohort=4, local_steps=1, epsilons=[8.0], seeds=[0],
                curve_epsilons=[], max_train_windows=32)
  return dict(hidden="64", rounds=80, cohort=20, local_steps=2, epsilons=[8.0],
              seeds=[0, 1, 2, 3, 4], curve_epsilons=[2.0, 32.0], max_train_windows=512)


def base_config(key: str, eps: Optional[float], s: Dict[str, Any], n: int) -> RunConfig:
  """The `RunConfig` of one variant (its seeds are the sweep's)."""
  _, algorithm, uses_eps, extra = VARIANTS[key]
  table: Dict[str, Any] = dict(
      algorithm=algorithm, dataset="shakespeare", model="char_lstm", hidden=s["hidden"],
      rounds=s["rounds"], eval_every=s["rounds"], delta=1e-4, seed=s["seeds"][0],
      out=None, logger="none", local_steps=s["local_steps"], batch_size=16,
      client_learning_rate=1.0, server_optimizer="fedavgm", server_learning_rate=0.5,
      **extra)
  if algorithm == "dp_ftrl":
    table.update(cycle_length=max(1, n // s["cohort"]))
  else:
    table.update(clients_per_round=s["cohort"])
  if algorithm != "fedavg" and "clip_norm" not in extra:
    table["clip_norm"] = 0.5
  if uses_eps:
    table["target_epsilon"] = eps
  return RunConfig.from_dict(table)


def run_variant(key: str, eps: Optional[float], s: Dict[str, Any], data) -> List[Dict]:
  """Every seed of one variant: one vmapped sweep, or for DP-FTRL (whose seed fixes the
  cyclic groups, so each seed is its own program) one run per seed."""
  t0 = time.perf_counter()
  base = base_config(key, eps, s, data.num_clients)
  if VARIANTS[key][1] == "dp_ftrl":
    summaries = [(seed, run(dataclasses.replace(base, seed=seed), progress=False,
                            data=data).summary) for seed in s["seeds"]]
  else:
    sw = run_sweep(base, seeds=s["seeds"], progress=False, data=data)
    summaries = [(m.axes["seed"], m.summary) for m in sw.members]
  wall = time.perf_counter() - t0
  return [dict(kind=key, label=VARIANTS[key][0], target_epsilon=eps, seed=seed,
               final_accuracy=sm["final_test_accuracy"], epsilon=sm.get("epsilon"),
               noise_multiplier=sm.get("noise_multiplier"), wall_time_s=wall,
               rounds=s["rounds"], vmapped=VARIANTS[key][1] != "dp_ftrl")
          for seed, sm in summaries]


def _cell(runs, kind, eps):
  accs = [r["final_accuracy"] for r in runs
          if r["kind"] == kind and r["target_epsilon"] == eps]
  return scorecard.summarize(accs) if accs else None


def report(runs: List[Dict], s: Dict[str, Any], meta: Dict[str, Any]) -> str:
  """The markdown table: final test accuracy, mean [95% CI] (n seeds)."""
  lines = [
      f"Shakespeare ({meta['num_clients']} role clients), char LSTM 1 x {s['hidden']}, "
      f"{s['rounds']} rounds, cohort {s['cohort']} ({s['local_steps']} local steps of 16 "
      f"windows, client lr 1.0; server momentum 0.9, lr 0.5), clip norm 0.5 (adaptive: "
      f"from 0.1, median quantile), delta 1e-4, user level. Final test accuracy on "
      f"{meta['num_test']} held-out windows, mean [95% Student-t CI] (n seeds). "
      f"Majority class {meta['majority']:.3f}. Published FedAvg (full LSTM, many more "
      f"rounds): {PUBLISHED_FEDAVG:.2f}.", "",
      "| variant | epsilon | accuracy | noise multiplier | epsilon spent | s/round (all seeds) |",
      "|---|---|---|---|---|---|"]
  for key, (label, *_rest) in VARIANTS.items():
    for eps in sorted({r["target_epsilon"] for r in runs if r["kind"] == key},
                      key=lambda e: -1 if e is None else e):
      c = _cell(runs, key, eps)
      r0 = next(r for r in runs if r["kind"] == key and r["target_epsilon"] == eps)
      z = r0["noise_multiplier"]
      spent = r0["epsilon"]
      lines.append(
          f"| {label} | {'inf' if eps is None else f'{eps:g}'} | {scorecard.fmt(c)} | "
          f"{'-' if z is None else f'{z:.3f}'} | "
          f"{'-' if spent is None or spent == float('inf') else f'{spent:.2f}'} | "
          f"{r0['wall_time_s'] / r0['rounds']:.2f} |")
  return "\n".join(lines) + "\n"


def _todo(s: Dict[str, Any]):
  yield "fedavg", None
  for eps in s["epsilons"]:
    for key in ("dp_fedavg", "adaptive", "tree", "banded"):
      yield key, eps
  for eps in s["curve_epsilons"]:
    yield "dp_fedavg", eps
  for eps in s["epsilons"]:
    yield "adaptive_slow", eps


def main(argv: Optional[List[str]] = None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--quick", action="store_true", help="CI size: 3 rounds, 1 seed")
  p.add_argument("--out", default=os.path.join(HERE, "results", "compare.json"))
  p.add_argument("--resume", action="store_true", help="skip variants already in --out")
  p.add_argument("--report-only", action="store_true")
  args = p.parse_args(argv)
  logging.getLogger("fedjax_dp.privacy.accountants").setLevel(logging.ERROR)
  s = settings(args.quick)
  data = load_dataset("shakespeare", max_train_windows=s["max_train_windows"])
  meta = dict(num_clients=data.num_clients, majority=data.majority_class_accuracy(),
              num_test=int(len(data.test_y)), dataset=data.describe())
  res = Results(args.out, {"settings": s, "quick": args.quick, **meta},
                resume=args.resume or args.report_only)
  for key, eps in ([] if args.report_only else _todo(s)):
    if res.has(kind=key, target_epsilon=eps):
      continue
    for row in run_variant(key, eps, s, data):
      res.add(row)
    c = _cell(res.runs, key, eps)
    print(f"{key:10s} eps {eps}: {scorecard.fmt(c)}", flush=True)
  md = report(res.runs, s, meta)
  base = os.path.splitext(args.out)[0]
  with open(base + ".md", "w") as f:
    f.write(md)
  if not args.quick:
    scorecard.replace_block(os.path.join(HERE, "README.md"), "compare", md)
  xs = sorted({r["target_epsilon"] for r in res.runs
               if r["kind"] == "dp_fedavg" and r["target_epsilon"] is not None})
  if len(xs) > 1:
    cells = [_cell(res.runs, "dp_fedavg", e) for e in xs]
    plot(base + ".png", [("final test accuracy", "target epsilon (delta 1e-4)",
                          [("DP-FedAvg", xs, [c.mean for c in cells],
                            [(c.hi - c.lo) / 2 for c in cells])])],
         "Shakespeare: DP-FedAvg accuracy vs epsilon (95% CI half-widths)")
  print(md)
  return res


if __name__ == "__main__":
  main()
