"""Calibrates PADPFL's weight-clip bound B (the paper does not give it).

Procedure (ours): run the non-private configuration (scenario 1, equal p, tau = 10
full-batch steps, lr 0.02, mu = 0.01) for 5 rounds, record the L2 norm ||x_i|| of every
client's local model after its local steps (before any clipping), and take the median
over clients and rounds, rounded to an integer. ``common.CLIP_BOUND`` holds the values
this script printed for the hidden widths used (64 for the reproduction, 256 for the
ablation).

Usage:
  python experiments/padpfl/calibrate_b.py                 # H = 64 and 256, Fashion-MNIST
  python experiments/padpfl/calibrate_b.py --quick         # CI: H = 64, 2 rounds, tau = 2

Writes ``results/calibrate_b.json`` and ``calibrate_b.md``.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


sys.path.insert(0, HERE)
import padpfl_common as common  # noqa: E402  (a unique name: amplitude_varying has a common.py)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--dataset", nargs="+", default=["fashion_mnist", "mnist"])
  p.add_argument("--hidden", type=int, nargs="+", default=[64, 256])
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument("--local-steps", type=int, default=common.DEFAULTS["local_steps"])
  p.add_argument("--quick", action="store_true")
  p.add_argument("--out", default=common.RESULTS)
  a = p.parse_args(argv)
  test_size = None
  if a.quick:
    a.dataset, a.hidden, a.rounds, a.local_steps, test_size = (
        ["fashion_mnist"], [64], 2, 2, 1000)
  res = common.Results(os.path.join(a.out, "calibrate_b.json"), dict(
      procedure="median ||x_i|| of the non-private local models, scenario 1, equal p, "
                "seed 0, first rounds (our procedure)", rounds=a.rounds,
      local_steps=a.local_steps, clip_bound_used=common.CLIP_BOUND))
  lines = ["B calibration (our procedure): median L2 norm of the non-private local models "
           f"(scenario 1, equal p, seed 0, tau = {a.local_steps}, lr 0.02, mu = 0.01), "
           f"rounds 1..{a.rounds}.", "",
           "| dataset | H | parameters | ||x^(0)|| | median per round | median | B (rounded) "
           "| B used (common.CLIP_BOUND) |", "|---|---|---|---|---|---|---|---|"]
  for ds in a.dataset:
    for h in a.hidden:
      setup = common.get_setup(ds, hidden=h, test_size=test_size)
      r = common.local_model_norms(setup, rounds=a.rounds, local_steps=a.local_steps)
      r["n_params"] = setup.n_params
      res.add(r)
      per = ", ".join(f"{v:.2f}" for v in r["median_per_round"])
      lines.append(f"| {ds} | {h} | {setup.n_params} | {r['initial_model_norm']:.2f} | "
                   f"{per} | {r['median']:.3f} | {r['clip_bound']:g} | "
                   f"{common.CLIP_BOUND.get(h, float('nan')):g} |")
      print(lines[-1], flush=True)
  with open(os.path.join(a.out, "calibrate_b.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines))
  return 0


if __name__ == "__main__":
  sys.exit(main())
