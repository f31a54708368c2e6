"""RDP-PFL's scorecard (the reproduction standard, experiments/README.md): every claim
of the paper, in our default mode (``first_order``) and in the paper's own mode
(``paper``, eqs. 6-11 as printed, the paper's sigma) side by side, with its verdict by
`experiments/scorecard.py`'s rules, computed from the stored per-seed results
(``results/*.json``); trains nothing. Writes ``results/scorecard.{json,md}``.

Usage:
  python experiments/rdp_pfl/scorecard.py [--results DIR] [--readme]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import scorecard as sc  # noqa: E402  (experiments/scorecard.py)

#: The smallest accuracy effect a claim of a figure needs (one point): a flat result
#: whose CI excludes a one-point gain fails the claim instead of staying inconclusive.
MARGIN = 0.01
#: Cause of the differences at our scale.
SCALE = ("scale: Fashion-MNIST at the paper's structure (50 clients, 30 source), "
         "not MNIST; 5 seeds on one partition")
#: Why ours (the sound per-example default) does not show the noise-driven trends.
OURS = ("our reconstruction: per-example clipping adds sigma C to the sum and divides "
        "by q n = 30, 30x less noise per coordinate than the paper's eq. (7) at the "
        "same sigma, so the noise is negligible and only the clipped step matters; "
        "also " + SCALE[len("scale: "):])


def _cause(verdict: sc.Verdict, cause: str) -> str:
  """A claim that holds needs no cause."""
  return "none" if verdict.verdict == "holds" else cause


def _load(results: str, name: str) -> Optional[dict]:
  path = os.path.join(results, f"{name}.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def _runs(data: dict, label: str) -> List[dict]:
  return sorted((r for r in data["runs"] if r["label"] == label), key=lambda r: r["seed"])


def _values(data: dict, label: str, key: str = "final_accuracy") -> List[float]:
  return [r[key] for r in _runs(data, label)]


def _seeds(data: dict, label: str) -> List[int]:
  return [r["seed"] for r in _runs(data, label)]


def _sigma_eps(data: dict, label: str) -> str:
  r = _runs(data, label)[0]
  out = f"sigma {r['noise_multiplier']:.3f}"
  if r.get("epsilon_rdp") is not None:
    out += f", accountant epsilon {r['epsilon_rdp']:.2f}"
  if r.get("epsilon_paper") is not None:
    out += f", paper's epsilon {r['epsilon_paper']:.2f}"
  return out


def _monotone_row(data, labels: Sequence[str], names: Sequence[str], claim: str,
                  paper: str, setup: str, key="final_accuracy", increasing=True,
                  cause: str = SCALE) -> sc.Row:
  series = [_values(data, l, key) for l in labels]
  seeds = [_seeds(data, l) for l in labels]
  margin = MARGIN if key == "final_accuracy" else 0.0
  verdict = sc.monotone(series, increasing=increasing, margin=margin, seeds=seeds)
  ours = {n: sc.summarize(v) for n, v in zip(names, series)}
  return sc.Row(claim, paper, ours, verdict, _cause(verdict, cause),
                setup + (f"; margin {margin:g} per step" if margin else ""))


def _u_row(data, labels, names, claim, paper, setup, key="final_accuracy",
           cause: str = SCALE) -> sc.Row:
  series = [_values(data, l, key) for l in labels]
  if key.endswith("loss"):  # an interior minimum of a loss: a U of its negative
    series = [[-x for x in s] for s in series]
  seeds = [_seeds(data, l) for l in labels]
  verdict = sc.inverted_u(series, seeds=seeds)
  ours = {n: sc.summarize([abs(x) for x in s] if key.endswith("loss") else s)
          for n, s in zip(names, series)}
  return sc.Row(claim, paper, ours, verdict, _cause(verdict, cause), setup)


def _greater_row(data, a: str, b: str, names, claim, paper, setup, key_a="final_accuracy",
                 key_b="final_accuracy", cause=SCALE) -> sc.Row:
  va, vb = _values(data, a, key_a), _values(data, b, key_b)
  verdict = sc.greater(va, vb, seeds_a=_seeds(data, a), seeds_b=_seeds(data, b))
  return sc.Row(claim, paper, {names[0]: sc.summarize(va), names[1]: sc.summarize(vb)},
                verdict, _cause(verdict, cause), setup)


def fig2_rows(data: dict) -> List[sc.Row]:
  """Fig. 2 and the baselines: both modes' epsilon curves, personalisation, the
  non-private ceiling, DP-FedAvg at equal local work."""
  t = data["meta"]["rounds"]
  rows = []
  eps = ("2", "4", "6")
  have = {r["label"] for r in data["runs"]}
  for mode, fmt, cause in (
      ("ours (first-order, accountant's sigma)", "ours: epsilon={}", OURS),
      ("paper's mode and sigma", "paper: epsilon={} (paper's sigma)", SCALE)):
    pairs_ = [(e, fmt.format(e)) for e in eps if fmt.format(e) in have]
    labels = [l for _, l in pairs_]
    if len(labels) >= 2:  # every stored epsilon, in increasing order
      rows.append(_monotone_row(
          data, labels, [f"eps {e}" for e, _ in pairs_],
          f"Fig. 2: larger epsilon, higher accuracy; {mode}",
          "increasing (curves)", f"T = {t}; " + "; ".join(
              f"eps {e}: {_sigma_eps(data, l)}" for e, l in pairs_),
          cause=cause))
    if len(labels) >= 3:  # the figure's ends alone: the largest vs the smallest epsilon
      rows.append(_greater_row(
          data, labels[-1], labels[0], (f"eps {pairs_[-1][0]}", f"eps {pairs_[0][0]}"),
          f"Fig. 2 (its ends): epsilon {pairs_[-1][0]} > epsilon {pairs_[0][0]}; {mode}",
          "higher at the larger epsilon", f"T = {t}; paired by seed", cause=cause))
  pairs = [
      ("ours: epsilon=2", "ours: epsilon=2", "final_accuracy", "final_accuracy_no_adapt",
       "personalisation helps (eq. 4): adapted > not adapted, ours eps 2",
       "yes (all figures)", ("adapted", "no adaptation")),
      ("paper: epsilon=2 (paper's sigma)", "paper: epsilon=2 (paper's sigma)",
       "final_accuracy", "final_accuracy_no_adapt",
       "personalisation helps: adapted > not adapted, paper's mode eps 2",
       "yes (all figures)", ("adapted", "no adaptation")),
      ("[baseline] exact batch MAML, non-private", "ours: epsilon=6", "final_accuracy",
       "final_accuracy", "non-private MAML is the ceiling (implied): exact batch MAML > "
       "ours at eps 6", "implied", ("exact MAML", "ours eps 6")),
      ("ours: epsilon=2", "[baseline] DP-FedAvg 1 step + personalisation, epsilon=2",
       "final_accuracy", "final_accuracy", "[not claimed] federated MAML beats DP-FedAvg + "
       "the same personalisation at equal local work (eps 2)", "not in the paper",
       ("ours", "DP-FedAvg 1 step")),
      ("[baseline] DP-FedAvg 2 steps + personalisation, epsilon=2", "ours: epsilon=2",
       "final_accuracy", "final_accuracy", "[not claimed] DP-FedAvg with two local steps "
       "(twice MAML's local work) beats federated MAML (eps 2): the former README's "
       "confounded comparison", "not in the paper", ("DP-FedAvg 2 steps", "ours")),
      ("[baseline] clipping only", "ours: epsilon=2", "final_accuracy", "final_accuracy",
       "[not claimed] the noise costs accuracy: clipping only > ours at eps 2",
       "not in the paper", ("clipping only", "ours eps 2")),
      ("ours: epsilon=2", "[former default] per-example Hessian, epsilon=2",
       "final_accuracy", "final_accuracy", "[not claimed] the default's first-order "
       "step vs the former per-example-Hessian default (eps 2)", "not in the paper",
       ("first-order", "per-example Hessian")),
  ]
  for a, b, ka, kb, claim, paper, names in pairs:
    if a in have and b in have:
      rows.append(_greater_row(data, a, b, names, claim, paper, f"T = {t}; paired by seed",
                               ka, kb))
  rows += _paper_epsilon_rows(data, have)
  return rows


#: Relative tolerance of "the paper's sigma gives the paper's epsilon".
EPS_TOL = 0.05


def _paper_epsilon_rows(data: dict, have) -> List[sc.Row]:
  """Theorem 1 as the paper uses it: its sigma for epsilon e gives epsilon e. Ours: the
  accountant's epsilon of the paper's mode at that sigma (the same in every seed)."""
  rows = []
  for e in ("2", "4", "6"):
    label = f"paper: epsilon={e} (paper's sigma)"
    if label not in have:
      continue
    eps = _values(data, label, "epsilon_rdp")
    paper_eps = _values(data, label, "epsilon_paper")
    verdict = sc.matches_value(eps, float(e), EPS_TOL * float(e))
    rows.append(sc.Row(
        f"Theorem 1: the paper's sigma for epsilon {e} gives epsilon {e} (its mode, "
        f"T = {data['meta']['rounds']})", f"epsilon {e}",
        {"accountant's epsilon": sc.summarize(eps),
         "paper's own epsilon": sc.summarize(paper_eps)}, verdict,
        "none" if verdict.verdict == "holds" else
        "paper: batch-mean clipping has sensitivity 2C, not C, and the outer step "
        "reads the query draw again (eq. 10's Hessian): the accountant charges the "
        "query pair at sigma / (2 sqrt 2) and the support stage at sigma / 2",
        f"{_sigma_eps(data, label)}; tolerance {EPS_TOL:.0%} of the claim"))
  return rows


#: The sweeps' claims: (results name, claim, the paper's, rule, key).
SWEEPS = [("table2", "Table II / Fig. 7: interior optimum in C (test loss)",
           "U: best test loss at C = 3.2 (MNIST)", "u", "final_loss"),
          ("table2", "Table II / Fig. 7: interior optimum in C (accuracy)",
           "implied by the loss U", "u", "final_accuracy"),
          ("fig3", "Fig. 3: larger delta, higher accuracy", "increasing", "mono",
           "final_accuracy"),
          ("fig5", "Fig. 5: more samples per client, higher accuracy", "increasing",
           "mono", "final_accuracy"),
          ("fig6", "Fig. 6: interior optimum in the last hidden width", "inverted U",
           "u", "final_accuracy"),
          ("optimal_rounds", "Theorem 3: an interior optimal T at fixed epsilon",
           "inverted U", "u", "final_accuracy")]
#: Where each mode's sweep results are: (folder under results, label prefix, mode).
FORMER = ("scale: 1 seed, the former default's stored sweep (not re-run under the "
          "standard: compute)")
SWEEP_MODES = [("", "ours: ", "ours", OURS),
               ("", "paper: ", "paper's mode and sigma", SCALE),
               ("former_default", "", "former default (per-example Hessian; sigma "
                "calibrated under the earlier accounting)", FORMER)]


def sweep_rows(results: str) -> List[sc.Row]:
  """Table II / Fig. 7 (C), Fig. 3 (delta), Fig. 5 (samples), Fig. 6 (width), optimal
  T: each stored sweep, per mode (ours, the paper's, and the former default's
  stored runs, whose 1 seed makes every verdict inconclusive)."""
  rows = []
  for name, claim, paper, kind, key in SWEEPS:
    for folder, prefix, mode, cause in SWEEP_MODES:
      data = _load(os.path.join(results, folder), name)
      if data is None:
        continue
      labels = [l for l in dict.fromkeys(r["label"] for r in data["runs"])
                if l.startswith(prefix) and (prefix or ":" not in l)]
      if len(labels) < (3 if kind == "u" else 2):
        continue
      names = [l[len(prefix):] for l in labels]
      setup = f"T = {data['meta']['rounds']}; values in the swept order"
      fn = _u_row if kind == "u" else _monotone_row
      rows.append(fn(data, labels, names, f"{claim}; {mode}", paper, setup, key=key,
                     cause=cause))
  return rows


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--results", default=os.path.join(HERE, "results"))
  p.add_argument("--readme", action="store_true",
                 help="also replace the README's table between the scorecard markers")
  a = p.parse_args(argv)
  rows: List[sc.Row] = []
  fig2 = _load(a.results, "fig2")
  if fig2 is not None:
    rows += fig2_rows(fig2)
  rows += sweep_rows(a.results)
  if not rows:
    raise SystemExit(f"no stored results in {a.results}: run the figure scripts first")
  sc.write(os.path.join(a.results, "scorecard"), rows,
           meta=dict(paper="003 RDP-PFL (Wei et al., IEEE TIFS 2023)", margin=MARGIN))
  if a.readme:
    sc.update_readme(os.path.join(HERE, "README.md"), rows)
  print("\n".join(sc.render(rows)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
