"""PADPFL with a provable upload sensitivity: the paper's calibration against
``sensitivity_mode="clipped_gradients"``, scenario 1.

The paper calibrates sigma_C (eq. 8) and sigma_S (eq. 13) with the upload sensitivity
2B / m_min, which assumes that local training moves a client's weights by at most that
much when one example is replaced; the local gradients are not clipped, so nothing
enforces it and the guarantee of a ``"paper"`` run is the weight ball's, Delta = 2B. In
``"clipped_gradients"`` mode every per-example gradient is clipped to G and eqs. (8)
and (13) use the provable Delta = `fedjax_dp.privacy.sensitivity.clipped_gd_sensitivity`
(2 eta G / m for the first full-batch step, plus 2 eta G per further step; at most 2B)
in place of 2B / m_min, so every noise SD scales by Delta / (2B / m_min).

Runs (scenario 1, Fashion-MNIST, the README's settings: H = 64, lr 0.02, mu = 0.01,
R = 1, B = 9, delta = 0.01, T = 30), impact factors equal and 0-1-2, epsilon 5 and 20:

* paper mode, tau = 10 full-batch steps (the scenario runs' configuration);
* clipped_gradients, tau = 10, G = `padpfl_common.GRAD_CLIP_NORM` (the median
  per-example gradient norm, measured here): Delta = 0.36 G, far above 2B / m_min;
* clipped_gradients, tau = 1: Delta = 2 eta G / m_min, far below it;
* clipped_gradients, tau = 1, with R (eq. 8's uploads revealed) the smallest for which
  the guarantee over all T uploads is at most epsilon (`exposures_for_guarantee`: R = 6
  at epsilon 5, 9 at 20): the paper's R = 1 protects one upload, the server sees T;
* non-private references at tau = 10 and tau = 1.

The clipped tau = 10 runs materialise every per-example gradient of 10 steps x 60
clients x 150 examples per round (about 5 minutes a run on a 2-core CPU), so by default
they run for the first seed only (``--slow-seeds``); everything else for 3 seeds.

Usage:
  python experiments/padpfl/provable_mode.py                 # 3 seeds (clipped tau = 10: 1)
  python experiments/padpfl/provable_mode.py --quick         # CI: T = 3, tau = 2, equal p, eps 5,
                                                             # no clipped tau = 2 run

Writes ``results/provable_mode.json`` (every run, rewritten after each; ``meta`` holds
the per-example gradient norms G was chosen from), ``.md`` (sensitivities, noise,
epsilons, final and best test loss/accuracy) and ``.png`` (curves, mean ± std).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any, Dict, List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


sys.path.insert(0, HERE)
import padpfl_common as common  # noqa: E402  (a unique name: amplitude_varying has a common.py)

from fedjax_dp.algorithms.padpfl import nbafl  # noqa: E402

SCENARIO = 1
EQUAL = "1-1-1"
RATIOS = (EQUAL, "0-1-2")
NONPRIVATE, PAPER, CLIPPED = "non-private", "paper", "clipped_gradients"
#: Clients trained at once in the clipped runs: per-example gradients of one client at a
#: time are much faster on a CPU than the default chunks (results do not depend on it).
CLIPPED_CHUNK_SIZE = 1


def exposures_for_guarantee(epsilon: float, rounds: int,
                            delta: float = common.PAPER["delta"]) -> int:
  """The smallest R in 1..T for which the T uploads calibrated by eq. (8) with R (z = R c
  / epsilon over the calibration sensitivity, plain Gaussian events, RDP) compose to at
  most ``epsilon``: with the provable Delta this makes ``epsilon`` the guarantee over
  everything the server sees (the broadcasts are computed from the uploads). T when no
  R does."""
  c = nbafl.gaussian_constant(delta)
  for r in range(1, rounds + 1):
    if nbafl.gaussian_epsilon(r * c / epsilon, delta, releases=rounds) <= epsilon:
      return r
  return rounds


def configs(local_steps: int, epsilons, ratios, slow: bool, rounds: int,
            reference_steps=None) -> List[Dict[str, Any]]:
  """``slow=False``: the non-private references (at ``reference_steps``, default tau and
  1), paper mode (tau), clipped mode (tau = 1, R = 1 and R from
  `exposures_for_guarantee`); ``slow=True``: clipped mode at tau (empty when tau = 1)."""
  one = common.DEFAULTS["exposures"]
  if slow:
    return ([dict(mode=CLIPPED, local_steps=local_steps, ratio=r, epsilon=e, exposures=one)
             for e in epsilons for r in ratios] if local_steps > 1 else [])
  taus = list(dict.fromkeys(reference_steps or (local_steps, 1)))
  out = [dict(mode=NONPRIVATE, local_steps=t, ratio=r, epsilon=None, exposures=one)
         for t in taus for r in ratios]
  out += [dict(mode=PAPER, local_steps=local_steps, ratio=r, epsilon=e, exposures=one)
          for e in epsilons for r in ratios]
  out += [dict(mode=CLIPPED, local_steps=1, ratio=r, epsilon=e, exposures=one)
          for e in epsilons for r in ratios]
  out += [dict(mode=CLIPPED, local_steps=1, ratio=r, epsilon=e,
               exposures=exposures_for_guarantee(e, rounds))
          for e in epsilons for r in ratios]
  return [c for i, c in enumerate(out) if c not in out[:i]]


def label(c: Dict[str, Any], g: Optional[float] = None) -> str:
  p = "equal p" if c["ratio"] == EQUAL else c["ratio"]
  if c["mode"] == NONPRIVATE:
    return f"non-private, τ={c['local_steps']}, {p}"
  mode = "paper" if c["mode"] == PAPER else f"clipped G={g:g}"
  r = f", R={c['exposures']}" if c["exposures"] != common.DEFAULTS["exposures"] else ""
  return f"{mode}, τ={c['local_steps']}{r}, {p}, ε={c['epsilon']:g}"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--slow-seeds", type=int, default=1,
                 help="seeds of the clipped runs at tau > 1 (about 5 min each on a CPU)")
  p.add_argument("--rounds", type=int, default=common.PAPER["rounds"])
  p.add_argument("--local-steps", type=int, default=common.DEFAULTS["local_steps"])
  p.add_argument("--grad-clip-norm", type=float, default=None,
                 help="G (default padpfl_common.GRAD_CLIP_NORM[64])")
  p.add_argument("--quick", action="store_true")
  p.add_argument("--out", default=common.RESULTS)
  p.add_argument("--resume", action="store_true", help="skip runs already in the JSON")
  a = p.parse_args(argv)
  hidden = common.DEFAULTS["hidden"]
  test_size, epsilons, ratios, norm_rounds = None, list(common.PAPER["epsilons"]), RATIOS, 5
  reference_steps = None
  if a.quick:  # the clipped tau > 1 runs differ from tau = 1 only in tau: skipped
    a.seeds, a.slow_seeds, a.rounds, a.local_steps, test_size = 1, 0, 3, 2, 1000
    epsilons, ratios, norm_rounds, reference_steps = [5.0], (EQUAL,), 1, (2,)
  g = common.GRAD_CLIP_NORM[hidden] if a.grad_clip_norm is None else a.grad_clip_norm
  b = common.CLIP_BOUND[hidden]
  setup = common.get_setup("fashion_mnist", hidden=hidden, test_size=test_size)
  path = os.path.join(a.out, "provable_mode.json")
  stored = common.load(path)["meta"] if a.resume and os.path.exists(path) else {}
  norms = stored.get("grad_norms")
  if norms is None or norms.get("rounds") != norm_rounds:
    norms = common.per_example_grad_norms(setup, SCENARIO, seed=0, rounds=norm_rounds,
                                          local_steps=a.local_steps)
  meta = dict(scenario=SCENARIO, setup=setup.description, dataset="fashion_mnist",
              hidden=hidden, n_params=setup.n_params, clip_bound=b, grad_clip_norm=g,
              rounds=a.rounds, local_steps=a.local_steps, seeds=a.seeds,
              slow_seeds=min(a.slow_seeds, a.seeds), quick=a.quick, epsilons=epsilons,
              ratios=list(ratios), grad_norms=norms, paper=common.PAPER,
              defaults=common.DEFAULTS)
  res = common.open_results(path, meta, resume=a.resume)
  print(f"per-example gradient norms (scenario 1, equal p, seed 0, non-private rounds "
        f"1..{norm_rounds}): median {norms['median']:.3f}, quartiles "
        f"{norms['quartiles'][0]:.3f} / {norms['quartiles'][1]:.3f}; G = {g:g}", flush=True)
  todo = [(seed, c) for seed in range(a.seeds)
          for c in configs(a.local_steps, epsilons, ratios, slow=False, rounds=a.rounds,
                           reference_steps=reference_steps)]
  todo += [(seed, c) for seed in range(min(a.slow_seeds, a.seeds))
           for c in configs(a.local_steps, epsilons, ratios, slow=True, rounds=a.rounds)]
  for seed, c in todo:
    if res.has(seed=seed, **c):
      continue
    clipped = c["mode"] == CLIPPED
    r = common.run(setup, SCENARIO, seed, ratio=c["ratio"], private=c["mode"] != NONPRIVATE,
                   epsilon=c["epsilon"] or 1.0, rounds=a.rounds, local_steps=c["local_steps"],
                   clip_bound=b, sensitivity_mode=CLIPPED if clipped else "paper",
                   grad_clip_norm=g if clipped else None,
                   chunk_size=CLIPPED_CHUNK_SIZE if clipped else None,
                   exposures=c["exposures"])
    r.update(mode=c["mode"], epsilon=c["epsilon"], label=label(c, g))
    res.add(r)
    print(f"seed {seed} {r['label']}: final loss {r['final_test_loss']:.4f} best "
          f"{r['best_test_loss']:.4f} acc {r['final_test_accuracy']:.4f} sigma_C "
          f"{r['sigma_c']:.5f} Delta {r['sensitivity']:.4g} ({r['wall_time_s']:.1f} s)",
          flush=True)
  summarize(res, a.out)
  return 0


def _order(r: Dict[str, Any]):
  mode = {NONPRIVATE: 0, PAPER: 1, CLIPPED: 2}[r["mode"]]
  return (r["epsilon"] or 0.0, RATIOS.index(r["ratio"]) if r["ratio"] in RATIOS else 9,
          mode, -r["local_steps"], r["exposures"])


def table(res: common.Results) -> List[str]:
  meta = res.meta
  d, b = meta["n_params"], meta["clip_bound"]
  groups: Dict[str, List[Dict[str, Any]]] = {}
  for r in sorted(res.runs, key=_order):
    groups.setdefault(r["label"], []).append(r)
  lines = [
      "| configuration | τ | R | upload Δ of the guarantee | noise × paper's (Δ_cal / (2B/m_min)) "
      "| sigma_C | aggregate noise SD | its norm / B | final test loss | best test loss | "
      "final test acc | eps paper | **eps RDP guarantee (all T uploads, Δ)** | "
      "eps RDP guarantee, downlink | eps RDP conditional (all T uploads, Δ_cal) | "
      "eps RDP conditional (the R uploads) | seeds |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for lab, rs in groups.items():
    r0 = rs[0]
    f = lambda k, digits=3: common.fmt_ms([r[k] for r in rs], digits)
    e = lambda k: common.fmt_eps(r0.get(k))
    if r0["private"]:
      agg = math.hypot(r0["sigma_ac"], r0["sigma_s"])
      noise = (f"{r0['sensitivity']:.4g} | "
               f"{r0['calibration_sensitivity'] / r0['sensitivity_paper']:.4g} | "
               f"{r0['sigma_c']:.5f} | {agg:.5f} | {agg * math.sqrt(d) / b:.3g}")
    else:
      noise = "– | – | 0 | 0 | 0"
    lines.append(
        f"| {lab} | {r0['local_steps']} | {r0['exposures'] if r0['private'] else '–'} | "
        f"{noise} | {f('final_test_loss')} | "
        f"{f('best_test_loss')} | {f('final_test_accuracy')} | {e('epsilon_paper')} | "
        f"{e('epsilon_rdp')} | {e('epsilon_rdp_downlink')} | "
        f"{e('epsilon_rdp_uplink_all_uploads_conditional')} | "
        f"{e('epsilon_rdp_uplink_conditional')} | {len(rs)} |")
  return lines


def summarize(res: common.Results, out: str, quiet: bool = False) -> None:
  meta = res.meta
  n = meta["grad_norms"]
  lines = [
      f"PADPFL, paper mode against the provable clipped_gradients mode: scenario "
      f"{meta['scenario']}, {meta['setup']}; N = 60, T = {meta['rounds']}, full-batch "
      f"local steps, lr 0.02, mu = 0.01, B = {meta['clip_bound']:g}, R = 1, delta = 0.01, "
      f"m_min = 150.", "",
      f"G = {meta['grad_clip_norm']:g}: the per-example gradient norms (cross-entropy, "
      f"before clipping) of scenario 1's clients at the global models of non-private "
      f"rounds 1..{n['rounds']} (equal p, seed 0, tau = {n['local_steps']}) have median "
      f"{n['median']:.3f} (per round: "
      + ", ".join(f"{v:.2f}" for v in n["median_per_round"])
      + f"), quartiles {n['quartiles'][0]:.2f} / {n['quartiles'][1]:.2f}, maximum "
      f"{n['max']:.2f} ({n['examples']} example-rounds); G is the median rounded, as B "
      f"is (clipping then binds for about half the examples).", ""]
  lines += table(res)
  lines += ["", "Mean ± std over seeds (each seed: its own parts, client data, noise and "
            "initial model, shared by every configuration). Δ: the upload sensitivity the "
            "run's guarantee uses, 2B in paper mode (the weight ball; the paper's 2B/m_min "
            "is not enforced), `clipped_gd_sensitivity(0.02, G, tau, 150, mu, B)` in "
            "clipped mode. Noise × paper's: the factor every sigma of eqs. (8) and (13) is "
            "scaled by (Δ_cal, the calibration sensitivity: 2B/m_min in paper mode, Δ in "
            "clipped mode). sigma per coordinate; aggregate noise SD: sqrt(sigma_AC^2 + "
            "sigma_S^2), the noise in the broadcast model (sigma_A of eq. 13 when sigma_S > "
            "0; with equal p and R = 6 or 9, T is below eq. (13)'s threshold, sigma_S = 0 "
            "and it is sigma_AC > sigma_A); its norm / B: its norm, times sqrt(d), "
            "relative to the clip bound. eps RDP: dp_accounting, "
            "record level, replace-one, delta = 0.01; guarantee: all T uploads with Δ "
            "(the run's ledger) and the T broadcasts (sensitivity Δ max p); conditional: "
            "with Δ_cal, i.e. the paper's 2B/m_min in paper mode (not a guarantee) and the "
            "same as the guarantee in clipped mode; R = 1: the one upload the paper "
            "assumes seen (with R > 1: the R uploads eq. (8) was calibrated for). R: eq. "
            "(8)'s number of uploads revealed; the rows with R > 1 take the smallest R "
            "whose guarantee over all T uploads is at most eps paper."]
  with open(os.path.join(out, "provable_mode.md"), "w") as fh:
    fh.write("\n".join(lines) + "\n")
  rounds = meta["rounds"]
  xs = np.arange(0, rounds + 1)
  # One column per impact-factor ratio (at most 10 curves each, one colour apiece).
  names = {r: "equal p" if r == EQUAL else r for r in meta["ratios"]}
  panels = {f"{names[r]}: {what}": [] for what in ("test accuracy", "test loss (log10)")
            for r in meta["ratios"]}
  groups: Dict[str, List[Dict[str, Any]]] = {}
  for r in sorted(res.runs, key=_order):
    groups.setdefault(r["label"], []).append(r)
  for lab, rs in groups.items():
    acc = np.array([r["test_accuracy"] for r in rs], float)
    loss = np.log10(np.array([r["test_loss"] for r in rs], float))
    std = (lambda v: v.std(0, ddof=1)) if len(rs) > 1 else (lambda v: None)
    name = names[rs[0]["ratio"]]
    short = lab.replace(f", {name}", "")
    panels[f"{name}: test accuracy"].append((short, xs, acc.mean(0), std(acc)))
    panels[f"{name}: test loss (log10)"].append((short, xs, loss.mean(0), std(loss)))
  common.plot(os.path.join(out, "provable_mode.png"),
              [(k, "aggregation round t", v) for k, v in panels.items() if v],
              f"PADPFL scenario 1, paper mode vs clipped gradients (G = "
              f"{meta['grad_clip_norm']:g}): {meta['setup']}")
  if not quiet:
    print("\n".join(lines))


if __name__ == "__main__":
  sys.exit(main())
