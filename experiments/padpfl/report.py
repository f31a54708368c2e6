"""The paper's claims checked against our runs, and the noise / epsilon table (paper 000).

Reads the JSON files that `scenarios.py` wrote and writes ``claims.md`` (every claim of
the paper's Sec. VI with final and best test loss, mean ± std over seeds, the number of
seeds in which it holds, and a verdict), ``noise.md`` (sigma_C, sigma_AC, sigma_S,
sigma_A and the paper's epsilon beside the accountant's, conditional and guaranteed, per
configuration) and ``claims.json`` (the same numbers, machine-readable). Nothing is
trained: every number comes from the run files (the guarantee epsilons of files written
before issue 13 are computed from the stored configuration when they are loaded,
`padpfl_common.migrate_run`).

Claims (note 000, section 8.2):
  (a) non-private: the paper's named assignment (0-1-2, 0-2-1, 1-3-5, adaptive
      0-1-2 -> 2-1-0) has a lower loss than equal p, in every scenario;
  (b) private, scenarios 1-3: loss(personalised, eps 20) < loss(personalised, eps 5)
      < loss(equal p, eps 20); also, at equal epsilon, personalised < equal;
  (c) scenario 4: adaptive p beats fixed 0-1-2 and equal p without DP; with DP,
      eps 20 beats eps 5 (and, our addition, adaptive beats equal p at equal epsilon).

Verdict of "A < B" (`verdict`): each of the two losses (final, best) orders A below B
when B's mean exceeds A's by more than the standard error of the difference of the means
(sample standard deviations, ddof = 1), above B when A's exceeds B's by as much, and
neither ("=") otherwise. *holds* when both losses order A below B, *mixed* when one does,
*tie* when both are within that noise, *fails* otherwise (neither below, at least one
above). "k/n seeds" counts the seeds whose final test loss orders A < B (runs are paired by
seed: same parts, data and initial model).

Usage:
  python experiments/padpfl/report.py                 # reads and writes results/
  python experiments/padpfl/report.py --results DIR --out DIR
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


sys.path.insert(0, HERE)
import padpfl_common as common  # noqa: E402  (a unique name: amplitude_varying has a common.py)
from fedjax_dp.validation import FedJaxDpError  # noqa: E402

EQUAL = "1-1-1"
PERSONALIZED = {1: "0-1-2", 2: "0-2-1", 3: "1-3-5", 4: "0-1-2>2-1-0"}


class Runs:
  """The runs of one results file, by (ratio, private, epsilon)."""

  def __init__(self, path: str):
    data = common.load(path)
    self.path = path
    self.meta = data["meta"]
    self.runs = data["runs"]

  def get(self, ratio: str, epsilon: Optional[float] = None) -> List[Dict[str, Any]]:
    private = epsilon is not None
    rs = [r for r in self.runs if r["ratio"] == ratio and r["private"] == private and
          (not private or r["epsilon"] == epsilon)]
    return sorted(rs, key=lambda r: r["seed"])

  def labels(self) -> List[Tuple[str, Optional[float]]]:
    return list(dict.fromkeys((r["ratio"], r["epsilon"] if r["private"] else None)
                              for r in self.runs))


def name_of(ratio: str, epsilon: Optional[float]) -> str:
  n = "equal p" if ratio == EQUAL else ("adaptive " + ratio.replace(">", "→")
                                          if ">" in ratio else ratio)
  return f"{n}, ε={epsilon:g}" if epsilon is not None else f"{n} (non-private)"


#: The verdicts of "A < B" (`verdict`).
HOLDS, MIXED, TIE, FAILS = "holds", "mixed", "tie", "fails"


def order(a: Sequence[float], b: Sequence[float], min_margin: float = 0.0) -> str:
  """How the mean of ``a`` compares with the mean of ``b``, allowing for seed noise.

  Args:
    a, b: per-seed values of one loss (floats; None and non-finite values are dropped).
    min_margin: the smallest difference of the means that counts (same unit as the
      values, >= 0); the tolerance is the larger of it and the standard error of the
      difference of the means, ``sqrt(s_a^2 / n_a + s_b^2 / n_b)``, with the sample
      standard deviations (ddof = 1; a side with one value contributes 0).

  Returns:
    ``"<"`` when ``mean(b) - mean(a)`` exceeds the tolerance, ``">"`` when
    ``mean(a) - mean(b)`` does, ``"="`` otherwise (a difference within the tolerance).

  Raises:
    FedJaxDpError: a side with no finite value, or a negative or non-finite
      ``min_margin``.
  """
  if not (math.isfinite(min_margin) and min_margin >= 0):
    raise FedJaxDpError(f"min_margin must be a finite number >= 0, got {min_margin!r}",
                        option="min_margin")
  stats = []
  for name, v in (("a", a), ("b", b)):
    m, s, n = common.mean_std(v)
    if n == 0:
      raise FedJaxDpError(f"{name} has no finite value (got {list(v)!r}); a comparison "
                          "needs at least one run on each side", option=name)
    stats.append((m, s, n))
  (ma, sa, na), (mb, sb, nb) = stats
  tol = max(min_margin, math.sqrt(sa**2 / na + sb**2 / nb))
  if mb - ma > tol:
    return "<"
  if ma - mb > tol:
    return ">"
  return "="


def verdict(a_final: Sequence[float], b_final: Sequence[float], a_best: Sequence[float],
            b_best: Sequence[float], min_margin: float = 0.0) -> str:
  """The verdict of the claim "A has a lower loss than B" from per-seed losses.

  Each loss (final and best test loss, per seed) is ordered by `order`. Returns `HOLDS`
  when both order A below B, `MIXED` when exactly one does, `TIE` when both differences
  are within the tolerance, and `FAILS` otherwise (neither orders A below B and at least
  one orders it above). Raises FedJaxDpError as `order` does.
  """
  of = order(a_final, b_final, min_margin)
  ob = order(a_best, b_best, min_margin)
  if of == ob == "<":
    return HOLDS
  if "<" in (of, ob):
    return MIXED
  if of == ob == "=":
    return TIE
  return FAILS


def compare(a: List[Dict[str, Any]], b: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
  """``A < B`` on final and best test loss (`verdict`); None when either side has no
  runs. Runs are dicts with ``seed``, ``final_test_loss`` and ``best_test_loss``."""
  if not a or not b:
    return None
  out = {}
  for k in ("final_test_loss", "best_test_loss"):
    ma, sa, _ = common.mean_std([r[k] for r in a])
    mb, sb, _ = common.mean_std([r[k] for r in b])
    o = order([r[k] for r in a], [r[k] for r in b])
    out[k] = dict(a=(ma, sa), b=(mb, sb), order=o, holds=o == "<")
  by_seed_b = {r["seed"]: r["final_test_loss"] for r in b}
  paired = [(r["final_test_loss"], by_seed_b[r["seed"]]) for r in a if r["seed"] in by_seed_b]
  out["seeds_won"] = sum(1 for x, y in paired if x < y)
  out["seeds"] = len(paired)
  losses = lambda rs, k: [r[k] for r in rs]  # noqa: E731
  out["verdict"] = verdict(losses(a, "final_test_loss"), losses(b, "final_test_loss"),
                           losses(a, "best_test_loss"), losses(b, "best_test_loss"))
  return out


def _ms(pair: Tuple[float, float], n: int) -> str:
  m, s = pair
  if not math.isfinite(m):
    return "n/a"
  return f"{m:.3f} ± {s:.3f}" if n > 1 else f"{m:.3f}"


def claim_rows(files: Dict[int, Runs]) -> List[Dict[str, Any]]:
  """Every comparison the paper's claims make, for the scenarios present."""
  rows = []

  def add(claim, number, a_key, b_key):
    runs = files[number]
    c = compare(runs.get(*a_key), runs.get(*b_key))
    if c is not None:
      rows.append(dict(claim=claim, scenario=number, a=name_of(*a_key),
                       b=name_of(*b_key), **c))

  ns = sorted(files)
  for number in ns:
    add("a", number, (PERSONALIZED[number], None), (EQUAL, None))
  for number in (n for n in ns if n != 4):
    pers = PERSONALIZED[number]
    add("b", number, (pers, 20.0), (pers, 5.0))
    add("b", number, (pers, 5.0), (EQUAL, 20.0))
  if 4 in files:
    pers = PERSONALIZED[4]
    add("c", 4, (pers, None), ("0-1-2", None))
    add("c", 4, (pers, 20.0), (pers, 5.0))
    add("c", 4, (pers, 5.0), (EQUAL, 20.0))
  for number in ns:  # our addition: personalised against equal p at the same epsilon
    pers = PERSONALIZED[number]
    add("equal ε", number, (pers, 5.0), (EQUAL, 5.0))
    add("equal ε", number, (pers, 20.0), (EQUAL, 20.0))
  return rows


def best_of_sweep(runs: Runs) -> Optional[str]:
  """The non-private curve with the lowest mean final test loss."""
  best, arg = float("inf"), None
  for ratio, eps in runs.labels():
    if eps is not None:
      continue
    m, _, n = common.mean_std([r["final_test_loss"] for r in runs.get(ratio)])
    if n and m < best:
      best, arg = m, f"{name_of(ratio, None)}: {m:.3f}"
  return arg


def claims_table(rows: List[Dict[str, Any]]) -> List[str]:
  lines = ["| claim | scenario | A | B | A < B? | final loss A | final loss B | best loss A "
           "| best loss B | seeds (final) |", "|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    n = r["seeds"]
    fl, bl = r["final_test_loss"], r["best_test_loss"]
    lines.append(
        f"| {r['claim']} | {r['scenario']} | {r['a']} | {r['b']} | **{r['verdict']}** | "
        f"{_ms(fl['a'], n)} | {_ms(fl['b'], n)} | {_ms(bl['a'], n)} | {_ms(bl['b'], n)} | "
        f"{r['seeds_won']}/{n} |")
  return lines


def noise_table(files: Dict[str, Runs]) -> List[str]:
  lines = ["| results file | scenario | configuration | max p | sum p^2 | m_min | sigma_C | "
           "sigma_AC | sigma_S | sigma_A | eps paper | eps RDP uplink (R = 1), conditional | "
           "eps RDP uplink (all T uploads), conditional | eps RDP downlink (T broadcasts), "
           "conditional | **eps RDP guarantee (all T uploads, Δ = 2B)** | "
           "eps RDP guarantee, downlink (T broadcasts) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for fname, runs in files.items():
    for ratio, eps in runs.labels():
      if eps is None:
        continue
      r = runs.get(ratio, eps)[0]
      f = common.fmt_eps
      lines.append(
          f"| {fname} | {runs.meta['scenario']} | {name_of(ratio, eps)} | {r['max_p']:.4f} | "
          f"{r['sum_p2']:.5f} | {r['min_local_dataset_size']} | {r['sigma_c']:.5f} | "
          f"{r['sigma_ac']:.5f} | {r['sigma_s']:.5f} | {r['sigma_a']:.5f} | "
          f"{f(r['epsilon_paper'])} | {f(r['epsilon_rdp_uplink_conditional'])} | "
          f"{f(r['epsilon_rdp_uplink_all_uploads_conditional'])} | "
          f"{f(r['epsilon_rdp_downlink_conditional'])} | {f(r['epsilon_rdp'])} | "
          f"{f(r['epsilon_rdp_downlink'])} |")
  return lines


def ablation_table(base: Runs, wide: Runs) -> List[str]:
  """H = 64 against H = 256, scenario 1 private curves, the seeds both have."""
  seeds = sorted({r["seed"] for r in wide.runs})
  lines = ["| configuration | H | parameters d | B | sigma_A | sigma_A sqrt(d) / B | "
           "final test loss | best test loss | final test acc | seeds |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for ratio, eps in wide.labels():
    for runs in (base, wide):
      rs = [r for r in runs.get(ratio, eps) if r["seed"] in seeds]
      if not rs:
        continue
      r0 = rs[0]
      d = _params(r0["hidden"])
      lines.append(
          f"| {name_of(ratio, eps)} | {r0['hidden']} | {d} | {r0['clip_bound']:g} | "
          f"{r0['sigma_a']:.5f} | {r0['sigma_a'] * math.sqrt(d) / r0['clip_bound']:.2f} | "
          f"{common.fmt_ms([r['final_test_loss'] for r in rs])} | "
          f"{common.fmt_ms([r['best_test_loss'] for r in rs])} | "
          f"{common.fmt_ms([r['final_test_accuracy'] for r in rs])} | {len(rs)} |")
  return lines


def _params(hidden: int) -> int:
  return 784 * hidden + hidden + hidden * 10 + 10


def wall_table(files: Dict[str, Runs]) -> List[str]:
  lines = ["| results file | runs | total train time (s) | per run: mean | min | max (s) |",
           "|---|---|---|---|---|---|"]
  for fname, runs in files.items():
    w = [r["wall_time_s"] for r in runs.runs]
    lines.append(f"| {fname} | {len(w)} | {sum(w):.0f} | {np.mean(w):.1f} | {min(w):.1f} | "
                 f"{max(w):.1f} |")
  return lines


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--results", default=common.RESULTS, help="folder of scenarios.py outputs")
  p.add_argument("--out", default=None, help="default: --results")
  a = p.parse_args(argv)
  out = a.out or a.results
  os.makedirs(out, exist_ok=True)
  found: Dict[str, Runs] = {}
  for fn in sorted(os.listdir(a.results)):
    if fn.startswith("scenario") and fn.endswith(".json"):
      found[fn[:-5]] = Runs(os.path.join(a.results, fn))
  if not found:
    print(f"no scenario*.json in {a.results}; run scenarios.py first", file=sys.stderr)
    return 1
  lines = ["# PADPFL (paper 000): the paper's claims against our runs", "",
           "Generated by `report.py` from the `scenario*.json` files; loss = cross-entropy "
           "on the clean test set (note A8), mean ± std over seeds (sample std, ddof = 1). "
           "Each loss (final, best) orders A < B when B's mean exceeds A's by more than "
           "the standard error of the difference of the means, A > B the other way "
           "round, and is a tie within it; A < B *holds* when both losses order A < B, "
           "is *mixed* when one does, a *tie* when both are ties, and *fails* otherwise. "
           "The last column counts the seeds whose final loss orders A < B.", ""]
  summary: Dict[str, Any] = {}
  groups: Dict[Tuple[str, int], Dict[int, Runs]] = {}
  for fname, runs in found.items():
    key = (runs.meta["dataset"], runs.meta["hidden"])
    groups.setdefault(key, {})[runs.meta["scenario"]] = runs
  for (dataset, hidden), files in sorted(groups.items()):
    meta = next(iter(files.values())).meta
    rows = claim_rows(files)
    if not rows:
      continue
    summary[f"{dataset}_h{hidden}"] = rows
    lines += [f"## {meta['setup']}", "",
              f"T = {meta['rounds']}, tau = {meta['local_steps']}, B = "
              f"{meta['clip_bound']:g}, seeds: {meta['seeds']}"
              f"{' (quick mode)' if meta['quick'] else ''}.", ""]
    lines += claims_table(rows)
    best = [f"scenario {n}: {best_of_sweep(files[n])}" for n in sorted(files)
            if best_of_sweep(files[n]) is not None]
    lines += [""]
    if best:
      lines += ["Lowest mean final test loss in each non-private sweep: " + "; ".join(best)
                + ".", ""]
  base, wide = found.get("scenario1_fashion_mnist"), found.get("scenario1_fashion_mnist_h256")
  if base is not None and wide is not None:
    lines += ["## Ablation: hidden width 256 (scenario 1, private)", ""]
    lines += ablation_table(base, wide)
    lines += ["", "sigma_A sqrt(d) / B: the norm of the round's aggregate noise relative to "
              "the clip bound (the largest possible model norm).", ""]
  lines += ["## Wall time", ""] + wall_table(found)
  with open(os.path.join(out, "claims.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  noise = ["# PADPFL noise levels and epsilons per configuration", "",
           "From the run files (`scenario*.json`); sigma per coordinate in units of the "
           "weights. eps paper: the calibration target (classical Gaussian mechanism, "
           "linear R/T scaling). eps RDP: dp_accounting, record level, replace-one, "
           "delta = 0.01, no subsampling. *Conditional* (z relative to the paper's upload "
           "sensitivity 2B/m_min, which assumes local training moves a client's weights "
           "by at most that much when one example is replaced; the gradients are not "
           "clipped, so the code does not enforce it): uplink over the R = 1 upload the "
           "paper assumes seen, over all T uploads, and downlink over the T broadcasts. "
           "*Guarantee* (what the code enforces: Δ = 2B, the diameter of the ball the "
           "weights are clipped to): all T uploads (the run's ledger, `epsilon_rdp`) and "
           "the T broadcasts (sensitivity 2B max p).", ""]
  noise += noise_table(found)
  with open(os.path.join(out, "noise.md"), "w") as f:
    f.write("\n".join(noise) + "\n")
  with open(os.path.join(out, "claims.json"), "w") as f:
    json.dump(summary, f, indent=1)
  print("\n".join(lines))
  print("\n".join(noise))
  return 0


if __name__ == "__main__":
  sys.exit(main())
