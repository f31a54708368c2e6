"""DP-FTRL's tree vs banded MF vs BLT MF at equal epsilon on Fashion-MNIST.

Question (Dvijotham, McMahan, Pillutla, Steinke, Thakurta, FOCS 2024, arXiv 2404.16706;
McMahan, Xu, Zhang, "A Hassle-free Algorithm for Private Learning in Practice: Don't Use
Tree Aggregation, Use BLTs", arXiv 2408.08868): *a BLT with a few buffers matches banded
MF's accuracy and beats the tree's, with a noise state of nbuf model copies instead of b
(banded) or log2(R) + 1 (tree).* The three mechanisms run with the same cyclic
participation as experiments/dp_ftrl/compare.py (R groups, group_rate 1: no
amplification, the same data, model and optimiser: its `run_config`), each with its noise
multiplier calibrated by its own accounting to the same target epsilon (``fedjax-dp run
--target-epsilon``).

Usage:
  python experiments/dp_ftrl/blt_compare.py          # full: 100 rounds, eps 2 4 8 16, 5 seeds
  python experiments/dp_ftrl/blt_compare.py --quick  # CI: 10 rounds, eps 8, 1 seed, 200 clients
  python experiments/dp_ftrl/blt_compare.py --resume # only the runs not yet saved
  python experiments/dp_ftrl/blt_compare.py --report-only

Writes ``blt_compare.json`` (every run, with its z, effective z and noise-state buffers),
``blt_compare.md`` (final test accuracy, mean and 95% Student-t CI over the seeds, per
mechanism and epsilon; and the per-seed paired differences BLT - banded and BLT - tree,
mean and 95% CI) and ``blt_compare.png`` into the results folder (default
``experiments/dp_ftrl/results``).
"""

from __future__ import annotations

import argparse
import importlib.util
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
MECHANISMS = ("tree", "banded", "blt")
LABELS = {"tree": "DP-FTRL tree", "banded": "banded MF (b = R)",
          "blt": "BLT MF (jax-privacy optimised)"}


def _compare():
  """experiments/dp_ftrl/compare.py (its settings and `run_config`), loaded by path."""
  spec = importlib.util.spec_from_file_location("dp_ftrl_compare",
                                                os.path.join(HERE, "compare.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def _accs(runs, kind, eps) -> Dict[int, float]:
  return {r["seed"]: r["final_accuracy"] for r in runs
          if r["kind"] == kind and r["epsilon"] == eps}


def report(runs: List[Dict], s: Dict, majority: float) -> str:
  """Markdown: accuracy per mechanism and epsilon, and BLT's paired differences."""
  head = (f"Fashion-MNIST, {s['num_clients']} clients, MLP (64), {s['rounds']} rounds, "
          f"delta = 1e-4, user level; cyclic participation, R = {s['cycle_length']} groups, "
          f"group_rate 1 (no amplification); tree restarted every R rounds, banded with "
          f"b = R bands, BLT optimised by jax-privacy for {s['rounds']} rounds at "
          f"min-separation R. Noise calibrated per mechanism to each epsilon. Final test "
          f"accuracy, mean [95% Student-t CI] (n seeds); z: noise multiplier, z_eff = z / "
          f"sqrt(sensitivity^2), buf: noise-state buffers (model copies). Majority class "
          f"{majority:.3f}.")
  lines = [head, "", "| epsilon | " + " | ".join(LABELS[k] for k in MECHANISMS)
           + " | BLT - banded | BLT - tree |", "|---|" + "---|" * (len(MECHANISMS) + 2)]
  for eps in s["epsilons"]:
    cells = []
    for kind in MECHANISMS:
      accs = _accs(runs, kind, eps)
      one = next((r for r in runs if r["kind"] == kind and r["epsilon"] == eps), None)
      cells.append("-" if not accs else
                   f"{scorecard.fmt(scorecard.summarize(list(accs.values())))} (z "
                   f"{one['noise_multiplier']:.2f}, z_eff "
                   f"{one['effective_noise_multiplier']:.2f}, buf {one['buffers']})")
    blt = _accs(runs, "blt", eps)
    for other in ("banded", "tree"):
      o = _accs(runs, other, eps)
      diff = [blt[k] - o[k] for k in sorted(set(blt) & set(o))]
      cells.append(scorecard.fmt(scorecard.summarize(diff)) if diff else "-")
    lines.append(f"| {eps:g} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def _buffers(sm: Dict) -> int:
  p = sm["participation"]
  if sm["mechanism"] == "blt":
    return int(p["blt_buffers"])
  if sm["mechanism"] == "banded":
    return int(p["bands"])
  return int(p["restart_every"]).bit_length()  # the tree's levels


def main(argv: Optional[List[str]] = None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--quick", action="store_true", help="CI size: 10 rounds, 1 seed")
  p.add_argument("--out", default=os.path.join(HERE, "results", "blt_compare.json"))
  p.add_argument("--resume", action="store_true", help="skip runs already in --out")
  p.add_argument("--report-only", action="store_true",
                 help="no training: rewrite the markdown and figure from --out's runs")
  args = p.parse_args(argv)
  logging.getLogger("fedjax_dp.privacy.accountants").setLevel(logging.ERROR)
  compare = _compare()
  s = compare.settings(args.quick)
  data = load_dataset("fashion_mnist", num_clients=s["num_clients"])
  majority = data.majority_class_accuracy()
  res = Results(args.out, {"settings": {k: list(v) if isinstance(v, tuple) else v
                                        for k, v in s.items()},
                           "quick": args.quick, "majority_class_accuracy": majority,
                           "dataset": data.describe()}, resume=args.resume or args.report_only)
  for eps in () if args.report_only else s["epsilons"]:
    for seed in s["seeds"]:
      for kind in MECHANISMS:  # interleaved per seed: a slow stretch hits all three
        if res.has(kind=kind, epsilon=eps, seed=seed):
          continue
        t0 = time.perf_counter()
        out = run(RunConfig.from_dict(compare.run_config(kind, eps, seed, s)),
                  progress=False, data=data)
        sm = out.summary
        res.add(dict(kind=kind, label=LABELS[kind], epsilon=eps, seed=seed,
                     final_accuracy=sm["final_test_accuracy"],
                     epsilon_rdp=sm["epsilon_rdp"], epsilon_pld=sm["epsilon_pld"],
                     noise_multiplier=sm["noise_multiplier"],
                     effective_noise_multiplier=sm["effective_noise_multiplier"],
                     sensitivity_squared=sm["sensitivity_squared"], buffers=_buffers(sm),
                     wall_time_s=time.perf_counter() - t0))
        print(f"eps {eps:g} {kind:7s} seed {seed}: acc {sm['final_test_accuracy']:.3f} "
              f"z {sm['noise_multiplier']:.3f} eps {sm['epsilon']:.3f} "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
  md = report(res.runs, s, majority)
  base = os.path.splitext(args.out)[0]
  with open(base + ".md", "w") as f:
    f.write(md)
  xs = list(s["epsilons"])
  curves = []
  for kind in MECHANISMS:
    accs = [list(_accs(res.runs, kind, e).values()) for e in xs]
    curves.append((LABELS[kind], xs,
                   [statistics.mean(a) if a else float("nan") for a in accs],
                   [statistics.stdev(a) if len(a) > 1 else 0.0 for a in accs]))
  plot(base + ".png", [("final test accuracy", "target epsilon (delta 1e-4)", curves)],
       "Fashion-MNIST: tree vs banded vs BLT at equal epsilon")
  print(md)
  return res


if __name__ == "__main__":
  main()
