"""The scorecard of PADPFL (arXiv 2024) from the stored runs, and the noise / epsilon table.

Reads the JSON files that `scenarios.py` wrote and writes, training nothing:

* ``scorecard.{json,md}``: every claim of the paper's Sec. VI as a row of the reproduction
  standard (`experiments/scorecard.py`): the paper's statement, ours as mean and 95% CI
  over the seeds (both settings and their paired difference), the verdict computed by
  `scorecard.greater` and the cause of any difference;
* ``noise.md``: sigma_C, sigma_AC, sigma_S, sigma_A and the paper's epsilon beside the
  accountant's, conditional and guaranteed, per configuration;
* ``tables.md``: the lowest loss of each non-private sweep, the H = 256 ablation and the
  training wall time.

Claims (the paper's Sec. VI), each "loss(A) < loss(B)" on the final test loss
(cross-entropy on the clean test set at T = 30, our metric):
  (a) non-private: the paper's named assignment (0-1-2, 0-2-1, 1-3-5, adaptive
      0-1-2 -> 2-1-0) beats equal p, in every scenario;
  (b) private, scenarios 1-3: loss(personalised, eps 20) < loss(personalised, eps 5)
      < loss(equal p, eps 20);
  (c) scenario 4: adaptive p beats fixed 0-1-2 without DP; with DP, eps 20 beats eps 5
      and adaptive at eps 5 beats equal p at eps 20;
  (equal eps) personalised beats equal p at the same epsilon (stated for scenarios 2
      and 3, Figs. 5 and 7; our addition in scenarios 1 and 4).

Verdict of "A < B": `scorecard.greater(loss_B, loss_A, margin=0)` paired by seed (every
curve of a seed shares its parts, client data and initial model): *holds* when the 95% CI
of loss_B - loss_A lies above 0, *fails* when it lies below 0, *inconclusive* otherwise
or with fewer than `scorecard.MIN_SEEDS` seeds.

Usage:
  python experiments/padpfl/report.py                 # reads and writes results/
  python experiments/padpfl/report.py --results DIR --out DIR
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import padpfl_common as common  # noqa: E402  (a unique name: amplitude_varying has a common.py)
import scorecard as sc  # noqa: E402  (experiments/scorecard.py)

EQUAL = "1-1-1"
PERSONALIZED = {1: "0-1-2", 2: "0-2-1", 3: "1-3-5", 4: "0-1-2>2-1-0"}
#: The metric every claim is judged on.
METRIC = "final_test_loss"
#: The commit whose noise draw changed every noise-bearing run's random stream (the
#: distribution is unchanged): private runs stored before it are not the current code's.
NOISE_DRAW_COMMIT = "e7be6d8"
#: The results files whose private runs were all (re-)trained after that change.
CURRENT_PRIVATE_RUNS = ("scenario1_fashion_mnist",)


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


class Claim(NamedTuple):
  """One "loss(A) < loss(B)" claim: ``a`` and ``b`` are (ratio, epsilon or None). (A
  NamedTuple, not a dataclass: the tests load this script without registering it.)"""
  tag: str
  scenario: int
  a: Tuple[str, Optional[float]]
  b: Tuple[str, Optional[float]]
  paper: str
  #: The cause when the claim fails at >= MIN_SEEDS seeds.
  cause_if_fails: str = "our reconstruction"


#: Why every private "personalised beats equal p" comparison can fail here (README).
_NOISE_CAUSE = ("paper: its eq. (13) makes the aggregate noise sigma_A proportional to "
                "max p, so the personalised p gets {x} equal p's noise; the data-quality "
                "gain without DP is smaller than that cost at our (unstated) H, B, tau")


def claims() -> List[Claim]:
  """Every claim of the paper's Sec. VI that the runs test, in scorecard order."""
  fig = {1: (2, 3), 2: (4, 5), 3: (6, 7), 4: (8, 9)}
  ratio = {1: "2x", 2: "1.6x", 3: "1.67x", 4: "2x"}
  out = []
  for k in (1, 2, 3, 4):
    pers = PERSONALIZED[k]
    out.append(Claim("a", k, (pers, None), (EQUAL, None),
                     f"{name_of(pers, None)} below equal p (Fig. {fig[k][0]})",
                     "our reconstruction: no image noise in scenario 3, and 30 rounds of "
                     "full-batch GD leave the MLP under-trained"))
  for k in (1, 2, 3):
    pers = PERSONALIZED[k]
    out.append(Claim("b", k, (pers, 20.0), (pers, 5.0),
                     f"{pers}: ε=20 below ε=5 (Fig. {fig[k][1]})"))
    out.append(Claim("b", k, (pers, 5.0), (EQUAL, 20.0),
                     f"{pers} at ε=5 below equal p at ε=20 (Fig. {fig[k][1]})",
                     _NOISE_CAUSE.format(x=ratio[k])))
  pers = PERSONALIZED[4]
  out.append(Claim("c", 4, (pers, None), ("0-1-2", None),
                   "adaptive below fixed 0-1-2 (Fig. 8)"))
  out.append(Claim("c", 4, (pers, 20.0), (pers, 5.0), "adaptive: ε=20 below ε=5 (Fig. 9)"))
  out.append(Claim("c", 4, (pers, 5.0), (EQUAL, 20.0),
                   "adaptive at ε=5 below equal p at ε=20 (scenario 1's claim; Fig. 9 "
                   "has no equal-p curve)", _NOISE_CAUSE.format(x=ratio[4])))
  stated = {(2, 5.0): "Fig. 5", (2, 20.0): "Fig. 5", (3, 20.0): "Fig. 7"}
  for k in (1, 2, 3, 4):
    pers = PERSONALIZED[k]
    for eps in (5.0, 20.0):
      where = stated.get((k, eps))
      shown = name_of(pers, eps).split(",")[0]
      paper = (f"{shown} below equal p at ε={eps:g} ({where})" if where else
               f"not stated (ours): {shown} below equal p at ε={eps:g}")
      out.append(Claim("equal ε", k, (pers, eps), (EQUAL, eps), paper,
                       _NOISE_CAUSE.format(x=ratio[k])))
  return out


def _values(runs: List[Dict[str, Any]]) -> Tuple[List[float], List[int]]:
  return [float(r[METRIC]) for r in runs], [int(r["seed"]) for r in runs]


def cause_of(claim: Claim, verdict: str, a: List[Dict[str, Any]],
             b: List[Dict[str, Any]], stale_private: bool = False) -> str:
  """The cause column: compute scale below `scorecard.MIN_SEEDS` seeds (saying so when
  ``stale_private`` and a side is private: runs older than `NOISE_DRAW_COMMIT`), seed
  noise when 5+ seeds do not separate, the claim's cause when it fails, none when it
  holds."""
  n = min(len(a), len(b))
  if n < sc.MIN_SEEDS:
    stale = stale_private and any(r["private"] for r in a + b)
    return (f"scale: compute (n = {n}: the stored seeds were not extended"
            + (f"; these private runs predate the noise-draw change {NOISE_DRAW_COMMIT} "
               "and were not re-run" if stale else "") + ")")
  if verdict == "holds":
    return "none"
  if verdict == "fails":
    return claim.cause_if_fails
  return f"scale: the 95% CI at n = {n} seeds straddles 0"


def claim_row(claim: Claim, runs: Runs) -> Optional[sc.Row]:
  """The scorecard row of one claim (None when either side has no runs)."""
  a, b = runs.get(*claim.a), runs.get(*claim.b)
  if not a or not b:
    return None
  va, sa = _values(a)
  vb, sb = _values(b)
  verdict = sc.greater(vb, va, seeds_a=sb, seeds_b=sa)
  diff = sc.difference(vb, va, seeds_a=sb, seeds_b=sa)
  m = runs.meta
  seeds = sorted(set(sa) | set(sb))
  setup = (f"{m['dataset']}, scenario {claim.scenario}, N = 60, T = {m['rounds']}, "
           f"tau = {m['local_steps']}, B = {m['clip_bound']:g}, H = {m['hidden']}; final "
           f"test loss; rule: loss(B) - loss(A) > 0 (scorecard.greater, margin 0; paired "
           f"by seed when both sides have the same seeds); seeds {seeds}")
  return sc.Row(
      claim=(f"({claim.tag}) scenario {claim.scenario}: loss of {name_of(*claim.a)} < "
             f"{name_of(*claim.b)}"),
      paper=claim.paper,
      ours={f"A {name_of(*claim.a)}": sc.summarize(va),
            f"B {name_of(*claim.b)}": sc.summarize(vb), "B − A": diff},
      verdict=verdict, cause=cause_of(claim, verdict.verdict, a, b, stale_private(runs)),
      setup=setup)


def stale_private(runs: Runs) -> bool:
  """Whether the private runs of ``runs`` predate `NOISE_DRAW_COMMIT` (full-scale files
  not in `CURRENT_PRIVATE_RUNS`; quick runs are always current)."""
  name = os.path.splitext(os.path.basename(runs.path))[0]
  return not runs.meta.get("quick") and name not in CURRENT_PRIVATE_RUNS


def scorecard_rows(files: Dict[int, Runs]) -> List[sc.Row]:
  """The rows of every claim whose scenario is in ``files`` (scenario -> runs)."""
  rows = []
  for claim in claims():
    if claim.scenario in files:
      row = claim_row(claim, files[claim.scenario])
      if row is not None:
        rows.append(row)
  return rows


def best_of_sweep(runs: Runs) -> Optional[str]:
  """The non-private curve with the lowest mean final test loss (descriptive)."""
  best, arg = float("inf"), None
  for ratio, eps in runs.labels():
    if eps is not None:
      continue
    m, _, n = common.mean_std([r["final_test_loss"] for r in runs.get(ratio)])
    if n and m < best:
      best, arg = m, f"{name_of(ratio, None)}: {m:.3f} (n = {n})"
  return arg


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


def _groups(found: Dict[str, Runs]) -> Dict[Tuple[str, int], Dict[int, Runs]]:
  groups: Dict[Tuple[str, int], Dict[int, Runs]] = {}
  for runs in found.values():
    key = (runs.meta["dataset"], runs.meta["hidden"])
    groups.setdefault(key, {})[runs.meta["scenario"]] = runs
  return groups


def write_scorecard(found: Dict[str, Runs], out: str) -> List[sc.Row]:
  """``scorecard.{json,md}`` from the main setting (Fashion-MNIST, H = 64; the first
  group present otherwise, e.g. in quick mode on another dataset)."""
  groups = _groups(found)
  key = ("fashion_mnist", common.DEFAULTS["hidden"])
  if key not in groups:
    key = sorted(groups)[0]
  files = groups[key]
  rows = scorecard_rows(files)
  meta = next(iter(files.values())).meta
  sc.write(os.path.join(out, "scorecard"), rows, dict(
      paper="000: PADPFL, Talaei and Izadi, arXiv:2406.18491", dataset=key[0],
      hidden=key[1], setup=meta["setup"], rounds=meta["rounds"],
      local_steps=meta["local_steps"], clip_bound=meta["clip_bound"],
      quick=meta["quick"], metric=METRIC,
      files=sorted(os.path.basename(r.path) for r in files.values()),
      seeds={f"scenario{k}": sorted({r["seed"] for r in v.runs})
             for k, v in sorted(files.items())}))
  return rows


def write_tables(found: Dict[str, Runs], out: str) -> List[str]:
  """``tables.md``: lowest loss per non-private sweep, the ablation, the wall time."""
  lines = ["# PADPFL: descriptive tables (no verdicts; see scorecard.md)", ""]
  for (dataset, hidden), files in sorted(_groups(found).items()):
    best = [f"scenario {n}: {best_of_sweep(files[n])}" for n in sorted(files)
            if best_of_sweep(files[n]) is not None]
    if best:
      lines += [f"Lowest mean final test loss in each non-private sweep ({dataset}, "
                f"H = {hidden}): " + "; ".join(best) + ".", ""]
  base, wide = found.get("scenario1_fashion_mnist"), found.get("scenario1_fashion_mnist_h256")
  if base is not None and wide is not None:
    lines += ["## Ablation: hidden width 256 (scenario 1, private)", ""]
    lines += ablation_table(base, wide)
    lines += ["", "sigma_A sqrt(d) / B: the norm of the round's aggregate noise relative to "
              "the clip bound (the largest possible model norm). Mean ± std over the seeds "
              "both widths have (sample std, ddof = 1).", ""]
  lines += ["## Wall time", ""] + wall_table(found)
  with open(os.path.join(out, "tables.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  return lines


_NOISE_HEAD = [
    "# PADPFL noise levels and epsilons per configuration", "",
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


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Reads ``--results``, writes ``scorecard.{json,md}``, ``noise.md`` and ``tables.md``
  to ``--out``; returns 1 when no ``scenario*.json`` is there."""
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
  rows = write_scorecard(found, out)
  write_tables(found, out)
  with open(os.path.join(out, "noise.md"), "w") as f:
    f.write("\n".join(_NOISE_HEAD + noise_table(found)) + "\n")
  print("\n".join(sc.render(rows)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
