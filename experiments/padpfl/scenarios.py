"""Scenarios 1-4 of PADPFL (Table I; Figs. 2-9): test loss per round for the
non-private impact-factor sweep and the private runs.

For each scenario: the non-private sweep ``heterogeneity.SCENARIOS[k].nonprivate_ratios``
(Figs. 2, 4, 6, 8; scenario 4 includes the adaptive "0-1-2>2-1-0", switching weights and
data after round 10), and the private runs (Figs. 3, 5, 7, 9): the personalised p
(0-1-2, 0-2-1, 1-3-5, adaptive) at epsilon 5 and 20 and equal p at epsilon 20, as in the
paper, plus equal p at epsilon 5 (the comparison at equal privacy). N = 60, T = 30,
delta = 0.01, R = 1, B from `calibrate_b.py`.

Usage:
  python experiments/padpfl/scenarios.py                       # scenarios 1-4, Fashion-MNIST, 3 seeds
  python experiments/padpfl/scenarios.py --scenario 1 --dataset mnist      # MNIST-5k cross-check
  python experiments/padpfl/scenarios.py --scenario 1 --hidden 256 --only private --seeds 1
  python experiments/padpfl/scenarios.py --quick               # CI: T = 3, tau = 2, 1 seed, 4 curves

Writes, per scenario, ``results/scenario<k>_<dataset>[_h<H>].json`` (every run, rewritten
after each), ``.md`` (noise levels, both epsilons, final and best test loss/accuracy) and
``.png`` (test loss and accuracy per round, mean ± std over seeds).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


sys.path.insert(0, HERE)
import padpfl_common as common  # noqa: E402  (a unique name: amplitude_varying has a common.py)

from fedjax_dp.algorithms.padpfl import impact_factors as imp  # noqa: E402
from fedjax_dp.algorithms.padpfl import scenarios as het  # noqa: E402

EQUAL = "1-1-1"


def personalized(number: int) -> str:
  """The private figures' personalised ratio ("a>b" for scenario 4's switch)."""
  return ">".join(r for _, r in het.SCENARIOS[number].impact_phases)


#: Scenarios whose private curves the quick (CI) mode runs: 4 covers the adaptive schedule
#: under DP, 1 the fixed one; 2 and 3 add no new code path, and scenario 3's larger client
#: arrays would cost one more private compilation (the noise programs compile slowly).
QUICK_PRIVATE = (1, 4)


def configs(number: int, only: str = "all", quick: bool = False) -> List[Dict[str, Any]]:
  """The runs of one scenario (full: the paper's curves plus equal p at epsilon 5; quick:
  equal and personalised p without DP, personalised at 5 and equal at 20 with DP)."""
  sc = het.SCENARIOS[number]
  pers = personalized(number)
  nonpriv = list(sc.nonprivate_ratios)
  priv = [(pers, 5.0), (pers, 20.0), (EQUAL, 20.0), (EQUAL, 5.0)]
  if quick:
    nonpriv = [EQUAL, pers]
    priv = [(pers, 5.0), (EQUAL, 20.0)] if number in QUICK_PRIVATE else []
  out = []
  if only in ("all", "nonprivate"):
    out += [dict(ratio=r, private=False, epsilon=None) for r in nonpriv]
  if only in ("all", "private"):
    out += [dict(ratio=r, private=True, epsilon=e) for r, e in priv]
  return out


def label(run: Dict[str, Any]) -> str:
  r = run["ratio"]
  name = "equal p" if r == EQUAL else ("adaptive " + r.replace(">", "→") if ">" in r else r)
  return f"{name}, ε={run['epsilon']:g}" if run["private"] else f"{name} (non-private)"


def part_p(number: int, ratio: str) -> str:
  """Per-client p of each part, e.g. "0, 1/60, 1/30" as decimals."""
  sc = het.SCENARIOS[number]
  out = []
  for r in ratio.split(">"):
    v = imp.parse_ratio(r)
    p = v / float(np.dot(v, sc.part_sizes))
    out.append("/".join(f"{x:.4f}" for x in p))
  return " → ".join(out)


def output_name(number: int, dataset: str, hidden: int) -> str:
  suffix = "" if hidden == common.DEFAULTS["hidden"] else f"_h{hidden}"
  return f"scenario{number}_{dataset}{suffix}"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--scenario", type=int, nargs="+", default=[1, 2, 3, 4],
                 choices=sorted(het.SCENARIOS))
  p.add_argument("--dataset", default="fashion_mnist", choices=["fashion_mnist", "mnist"])
  p.add_argument("--hidden", type=int, default=common.DEFAULTS["hidden"])
  p.add_argument("--clip-bound", type=float, default=None,
                 help="B (default common.CLIP_BOUND[hidden], from calibrate_b.py)")
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--rounds", type=int, default=common.PAPER["rounds"])
  p.add_argument("--local-steps", type=int, default=common.DEFAULTS["local_steps"])
  p.add_argument("--only", default="all", choices=["all", "nonprivate", "private"])
  p.add_argument("--quick", action="store_true")
  p.add_argument("--out", default=common.RESULTS)
  p.add_argument("--resume", action="store_true",
                 help="skip runs already in the JSON (runs written before commit 3dab836 get "
                      "today's epsilon keys, padpfl_common.migrate_run); with every run "
                      "present this only rewrites the .md and .png")
  a = p.parse_args(argv)
  test_size = None
  if a.quick:
    a.seeds, a.rounds, a.local_steps, test_size = 1, 3, 2, 1000
  b = common.CLIP_BOUND[a.hidden] if a.clip_bound is None else a.clip_bound
  setup = common.get_setup(a.dataset, hidden=a.hidden, test_size=test_size)
  results = {}
  for number in a.scenario:
    sc = het.SCENARIOS[number]
    name = output_name(number, a.dataset, a.hidden)
    results[number] = (name, common.open_results(os.path.join(a.out, f"{name}.json"), dict(
        scenario=number, figures=list(sc.figures), description=sc.description,
        setup=setup.description, dataset=a.dataset, is_subset=setup.is_subset,
        size_scale=setup.size_scale, hidden=a.hidden, clip_bound=b, rounds=a.rounds,
        local_steps=a.local_steps, seeds=a.seeds, quick=a.quick,
        switch_after=common.switch_after(a.rounds) if len(sc.noise_phases) > 1 else None,
        densities=dict(het.DENSITIES), paper=common.PAPER, defaults=common.DEFAULTS),
        resume=a.resume))
  # Seeds outermost: an interrupted sweep leaves every scenario with the same seeds.
  for seed in range(a.seeds):
    for number in a.scenario:
      name, res = results[number]
      for c in configs(number, a.only, a.quick):
        if res.has(seed=seed, **c):
          continue
        r = common.run(setup, number, seed, ratio=c["ratio"], private=c["private"],
                       epsilon=c["epsilon"] or 1.0, rounds=a.rounds,
                       local_steps=a.local_steps, clip_bound=b)
        r["epsilon"] = c["epsilon"]
        r["label"] = label(r)
        res.add(r)
        print(f"scenario {number} seed {seed} {r['label']}: final loss "
              f"{r['final_test_loss']:.4f} best {r['best_test_loss']:.4f} acc "
              f"{r['final_test_accuracy']:.4f} sigma_A {r['sigma_a']:.5f} "
              f"({r['wall_time_s']:.1f} s)", flush=True)
      if res.runs:
        summarize(res, a.out, name, quiet=seed < a.seeds - 1)
  return 0


def summarize(res: common.Results, out: str, name: str, quiet: bool = False) -> None:
  meta = res.meta
  number = meta["scenario"]
  rounds = meta["rounds"]
  labels = list(dict.fromkeys(r["label"] for r in res.runs))
  xs = np.arange(0, rounds + 1)
  lines = [
      f"Scenario {number} (paper Figs. {meta['figures'][0]} and {meta['figures'][1]}): "
      f"{meta['setup']}; N = 60, T = {rounds}, tau = {meta['local_steps']} full-batch "
      f"steps, lr 0.02, mu = 0.01, B = {meta['clip_bound']:g}, R = 1, delta = 0.01.",
      "", f"Table I: {meta['description']}", "",
      "| curve | p per client, parts 1/2/3 | sigma_C | sigma_AC | sigma_S | sigma_A | final test loss "
      "| best test loss | best round (mean curve) | final test acc | eps paper | "
      "eps RDP uplink (R=1), conditional | eps RDP all uploads, conditional | "
      "eps RDP downlink, conditional | **eps RDP guarantee (all T uploads, Δ = 2B)** | "
      "eps RDP guarantee, downlink | seeds |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  panels = {k: [] for k in ("non-private: test loss", "private: test loss",
                            "non-private: test accuracy", "private: test accuracy")}
  for lab in labels:
    rs = [r for r in res.runs if r["label"] == lab]
    r0 = rs[0]
    loss = np.array([r["test_loss"] for r in rs], float)
    acc = np.array([r["test_accuracy"] for r in rs], float)
    std = (lambda v: v.std(0, ddof=1)) if len(rs) > 1 else (lambda v: None)
    kind = "private" if r0["private"] else "non-private"
    panels[f"{kind}: test loss"].append((lab, xs, loss.mean(0), std(loss)))
    panels[f"{kind}: test accuracy"].append((lab, xs, acc.mean(0), std(acc)))
    f = lambda k: common.fmt_ms([r[k] for r in rs])
    sig = (lambda k: f"{r0[k]:.5f}") if r0["private"] else (lambda k: "0")
    eps = lambda k: common.fmt_eps(r0.get(k))
    lines.append(
        f"| {lab} | {part_p(number, r0['ratio'])} | {sig('sigma_c')} | {sig('sigma_ac')} | "
        f"{sig('sigma_s')} | "
        f"{sig('sigma_a')} | {f('final_test_loss')} | {f('best_test_loss')} | "
        f"{int(np.nanargmin(loss.mean(0)[1:])) + 1} | {f('final_test_accuracy')} | "
        f"{eps('epsilon_paper')} | {eps('epsilon_rdp_uplink_conditional')} | "
        f"{eps('epsilon_rdp_uplink_all_uploads_conditional')} | "
        f"{eps('epsilon_rdp_downlink_conditional')} | {eps('epsilon_rdp')} | "
        f"{eps('epsilon_rdp_downlink')} | {len(rs)} |")
  lines += ["", "Mean ± std over seeds (each seed: its own parts, client data, noise and "
            "initial model, shared by every curve). sigma_* per coordinate, in units of "
            "the weights: sigma_AC = sigma_C sqrt(sum p^2) is the client noise left in the "
            "p-weighted average, sigma_S the server's top-up (eq. 13), sigma_A the total "
            "when sigma_S > 0 (else the total is sigma_AC). Best test loss: the minimum "
            "over rounds 1..T of each seed's curve. eps RDP: dp_accounting, record "
            "level, replace-one, delta = 0.01, no subsampling. *Conditional*: z = sigma / "
            "(2B/m_min), the paper's upload sensitivity, which holds only if local "
            "training moves a client's weights by at most 2B/m_min when one example is "
            "replaced (its gradients are not clipped, so nothing enforces it); uplink over "
            "R = 1 upload (the paper's assumption), over all T uploads, and downlink over "
            "the T broadcasts (sensitivity 2B max p / m_min). *Guarantee*: what the code "
            "enforces, z = sigma_C / Δ with Δ = 2B, the diameter of the ball the weights "
            "are clipped to, over all T uploads (the run's ledger), and the T broadcasts "
            "with sensitivity 2B max p."]
  with open(os.path.join(out, f"{name}.md"), "w") as fh:
    fh.write("\n".join(lines) + "\n")
  panels = [(k, "aggregation round t", v) for k, v in panels.items() if v]
  common.plot(os.path.join(out, f"{name}.png"), panels,
              f"PADPFL scenario {number}: {meta['setup']}")
  if not quiet:
    print("\n".join(lines))


if __name__ == "__main__":
  sys.exit(main())
