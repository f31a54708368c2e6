"""DP-MOCHA's claims judged by the reproduction standard's rules
(`experiments/scorecard.py`), from the stored per-seed runs.

Each ``*_row`` function takes the runs of one results JSON (``{"meta", "runs"}``) and
returns a `scorecard.Row`: ours as mean and 95% CI over the trials (a trial is a seed:
trial t = data split seed t = noise key seed t), comparisons paired by trial, and the
verdict computed by a stated rule with its margin or tolerance in the row's setup. The
figure scripts print these verdicts in their reports and ``dp_mocha_scorecard.py``
collects them into ``results/scorecard.{json,md}``, so the two cannot disagree.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
from typing import Any, Dict, List, Sequence, Tuple

_HERE = os.path.dirname(os.path.abspath(__file__))
_SHARED = os.path.join(os.path.dirname(_HERE), "scorecard.py")


def _load_shared():
  """experiments/scorecard.py, loaded by its path (an other folder's ``scorecard.py``
  on ``sys.path`` cannot shadow it)."""
  mod = sys.modules.get("scorecard")
  if mod is not None and os.path.abspath(getattr(mod, "__file__", "") or "") == _SHARED:
    return mod
  mod = sys.modules.get("experiments_scorecard")
  if mod is None:
    spec = importlib.util.spec_from_file_location("experiments_scorecard", _SHARED)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["experiments_scorecard"] = mod
    spec.loader.exec_module(mod)
  return mod


sc = _load_shared()
Row, Verdict = sc.Row, sc.Verdict

PAPER_EPSILON = 8.0
#: Fig. 3 "almost stable": every tau's private error within this of tau = 0's (ours).
FLAT_TOLERANCE = 0.02
#: Fig. 4: the paper's number and where.
PAPER_ERROR, PAPER_DROP = 0.097, 0.2
#: Fig. 4's number "reproduced": the CI of ours - 0.097 inside +-this (ours).
VALUE_TOLERANCE = 0.02
#: Fig. 2 "converges" (plateaus): last / half-way primal within 1 +- this (ours).
PLATEAU_TOLERANCE = 0.05
#: MOCHA's reference errors "reproduced": within this many error points (ours).
BASELINE_TOLERANCE = 0.01
SEEDS_NOTE = "seeds = trials (trial t: data split seed t, noise key seed t)"


def per_seed(runs: Sequence[Dict[str, Any]], key: str = "final_test_error",
             **match) -> Tuple[List[float], List[int]]:
  """``(values, seeds)``: ``key`` of every run whose fields equal ``match``, sorted by
  trial (one value per trial; a duplicate trial is an error)."""
  rows = sorted((r for r in runs if all(r.get(k) == v for k, v in match.items())),
                key=lambda r: r["trial"])
  seeds = [int(r["trial"]) for r in rows]
  if len(set(seeds)) != len(seeds):
    raise ValueError(f"duplicate trials for {match}: {seeds}")
  return [float(r[key]) for r in rows], seeds


def cause(verdict: Any, text: str, if_holds: str = "none") -> str:
  """The row's cause: ``if_holds`` when the claim holds; ``scale`` (with the rule's
  verdict on the seeds there are) when it is inconclusive for want of seeds
  (`scorecard.MIN_SEEDS`); else ``text`` (where the difference comes from: paper / our
  reconstruction / forced data / scale)."""
  if verdict.verdict == "holds":
    return if_holds
  alone = re.findall(r"the rule alone: (holds|fails|inconclusive)", verdict.detail)
  if verdict.verdict == "inconclusive" and alone:
    combined = ("fails" if "fails" in alone else "holds"
                if all(v == "holds" for v in alone) else "inconclusive")
    return (f"scale: fewer than {sc.MIN_SEEDS} trials stored (not re-run within the "
            f"experiment budget); the rule alone: {combined}"
            + ("" if combined == "holds" else f" ({text})"))
  return text


def all_of(parts: Sequence[Tuple[str, Any]]) -> Any:
  """Combines verdicts like `scorecard.monotone` combines its steps: holds when every
  part holds, fails when any part fails, inconclusive otherwise."""
  verdicts = [v.verdict for _, v in parts]
  detail = "; ".join(f"{name}: {v.verdict} ({v.detail})" for name, v in parts)
  if "fails" in verdicts:
    return Verdict("fails", detail)
  if all(v == "holds" for v in verdicts):
    return Verdict("holds", detail)
  return Verdict("inconclusive", detail)


def scale(res: Dict[str, Any], runs: Sequence[Dict[str, Any]]) -> str:
  """``H x K rounds, n trials (seeds ...)`` of a results file."""
  m = res["meta"]
  trials = sorted({int(r["trial"]) for r in runs})
  lam = f", lambda = {m['lam']:g}" if m.get("lam") is not None else ""
  return (f"H = {m['outer_rounds']} x K = {m['inner_rounds']} = "
          f"{m['outer_rounds'] * m['inner_rounds']} rounds (paper: 20,000){lam}, seeds "
          f"{trials} ({SEEDS_NOTE})")


def _private(label: str) -> str:
  return f"{label}, private eps={PAPER_EPSILON:g}"


# --------------------------------------------------------------------------- Fig. 2

FIG2_PANELS = (("a", "(a) homogeneous"), ("b", "(b) tau = 0.5"),
               ("c", "(c) tau = 0.5, P = 0.2"))


def _primal_ratio(run) -> float:
  """Private primal at the last record over the one half-way through the run."""
  p = run["primal"]
  return float(p[-1] / p[len(p) // 2 - 1])


def fig2_rows(res: Dict[str, Any]) -> List[Any]:
  """Fig. 2, target 1: the private primal ends above the non-private one (`greater`,
  paired, in every panel), and it "converges quickly" (last / half-way within
  1 +- `PLATEAU_TOLERANCE`, `matches_value`, every panel)."""
  runs = [r for r in res["runs"] if r["outer_rounds"] == res["meta"]["outer_rounds"]]
  above, flat, ours_a, ours_f = [], [], {}, {}
  labels = {r["label"] for r in runs}
  for key, title in (p for p in FIG2_PANELS if _private(p[1]) in labels):
    pv, ps = per_seed(runs, "final_primal", label=_private(title))
    nv, ns = per_seed(runs, "final_primal", label=f"{title}, non-private")
    pv, nv = [math.log10(x) for x in pv], [math.log10(x) for x in nv]
    above.append((f"panel ({key})", sc.greater(pv, nv, seeds_a=ps, seeds_b=ns)))
    ours_a[f"({key}) log10 P private"] = sc.summarize(pv)
    ours_a[f"({key}) non-private"] = sc.summarize(nv)
    ratios = [_primal_ratio(r) for r in runs if r["label"] == _private(title)]
    flat.append((f"panel ({key})", sc.matches_value(ratios, 1.0, PLATEAU_TOLERANCE)))
    ours_f[f"({key}) last / half-way"] = sc.summarize(ratios)
  where = f"fig2{'_full' if res['meta'].get('full') else ''}.json, {scale(res, runs)}"
  return [
      Row("Fig. 2: the private primal objective ends above the non-private one in (a), "
          "(b), (c)", "curves (above)", ours_a, all_of(above),
          cause(all_of(above), "our reconstruction"),
          f"{where}; ours: log10 of the final primal P(W, Omega); rule: greater(log10 "
          "private, log10 non-private) paired by seed, margin 0, every panel"),
      Row("Fig. 2: the private objective converges quickly (plateaus)",
          "curves (flat)", ours_f, all_of(flat), cause(all_of(flat),
          "paper: Theorem 5's noise (~1e5 x the upload) makes W a random walk whose "
          "objective grows about linearly with the rounds"),
          f"{where}; rule: matches_value(last / half-way primal, 1, tol "
          f"{PLATEAU_TOLERANCE:g}), every panel")]


# --------------------------------------------------------------------------- Figs. 3-5


def _sweep(runs, param: str, values: Sequence[float], private: bool):
  """``{value: (errors, seeds)}`` of a one-parameter sweep."""
  out = {}
  for v in values:
    lab = f"{param}={v:g}, " + (f"private eps={PAPER_EPSILON:g}" if private
                                else "non-private")
    if param == "epsilon":
      lab = f"epsilon={v:g}, private eps={v:g}"
    out[v] = per_seed(runs, label=lab)
  return out


def _current(res):
  m = res["meta"]
  return [r for r in res["runs"] if r["outer_rounds"] == m["outer_rounds"]
          and r["inner_rounds"] == m["inner_rounds"]]


def fig3_rows(res: Dict[str, Any]) -> List[Any]:
  """Fig. 3, target 2: private error almost flat in tau (every tau `within`
  `FLAT_TOLERANCE` of tau = 0, paired) and the non-private error rises with tau
  (`greater`: tau = 1 above tau = 0, paired)."""
  runs = _current(res)
  taus = sorted({r["tau"] for r in runs})
  priv, nonp = _sweep(runs, "tau", taus, True), _sweep(runs, "tau", taus, False)
  lo, hi = taus[0], taus[-1]
  flat = [(f"tau {t:g} vs {lo:g}", sc.within(priv[t][0], priv[lo][0], FLAT_TOLERANCE,
                                             seeds_a=priv[t][1], seeds_b=priv[lo][1]))
          for t in taus[1:]]
  where = f"fig3.json, P = 0, private at epsilon 8, {scale(res, runs)}"
  rises = sc.greater(nonp[hi][0], nonp[lo][0], seeds_a=nonp[hi][1], seeds_b=nonp[lo][1])
  return [
      Row("Fig. 3: the private error is almost stable in tau", "almost stable",
          {f"tau {t:g}": sc.summarize(priv[t][0]) for t in taus}, all_of(flat),
          cause(all_of(flat), "paper: the private errors (0.44-0.46) are "
                "noise-dominated, worse than the constant predictor; their "
                "trial-to-trial spread (~0.07) cannot resolve 0.02"),
          f"{where}; rule: within(private(tau), private({lo:g}), tol {FLAT_TOLERANCE:g}) "
          "paired, every tau"),
      Row("Fig. 3: the non-private error rises with tau (\"affected more\")", "rises",
          {f"tau {lo:g}": sc.summarize(nonp[lo][0]), f"tau {hi:g}":
           sc.summarize(nonp[hi][0])},
          rises, cause(rises, "scale: a +0.001 effect on a 0.005 error at 1,000 "
                       "rounds"),
          f"{where}; rule: greater(non-private(tau {hi:g}), non-private(tau {lo:g})) "
          "paired, margin 0")]


def fig4_rows(res: Dict[str, Any], sigma_note: str = "") -> List[Any]:
  """Fig. 4, target 3: the private error is U-shaped in P (`inverted_u` of -error),
  equals 0.097 at P = 0.2 (`matches_value`, tol `VALUE_TOLERANCE`), and the non-private
  error increases with P (`monotone`, paired). A grid of under 3 values (``--quick``)
  has no U-shape row; one without P = 0.2 no 0.097 row."""
  runs = _current(res)
  drops = sorted({r["drop"] for r in runs})
  priv, nonp = _sweep(runs, "drop", drops, True), _sweep(runs, "drop", drops, False)
  where = (f"fig4.json, tau = 0.5, private at epsilon 8, P in order "
           f"{[float(p) for p in drops]}, {scale(res, runs)}")
  rows = []
  if len(drops) >= 3:
    v = sc.inverted_u([[-e for e in priv[p][0]] for p in drops],
                      seeds=[priv[p][1] for p in drops])
    rows.append(Row(
        "Fig. 4: the private error is U-shaped in P (minimum at P = 0.2)",
        "U, minimum at 0.2", {f"P {p:g}": sc.summarize(priv[p][0]) for p in drops}, v,
        cause(v, "paper: Theorem 5 makes sigma proportional to 1 - P, so the "
              "noise-dominated error falls with P"),
        f"{where}; rule: inverted_u of -error over P (an interior P with lower error than "
        "both ends, paired), margin 0"))
  if PAPER_DROP in priv:
    v = sc.matches_value(priv[PAPER_DROP][0], PAPER_ERROR, VALUE_TOLERANCE)
    rows.append(Row(
        "Fig. 4: the private error at P = 0.2 is 0.097", f"{PAPER_ERROR}",
        {"P 0.2": sc.summarize(priv[PAPER_DROP][0])}, v,
        cause(v, "paper: its epsilon-8 calibration gives noise ~1e5 x the upload"
              + sigma_note),
        f"{where}; rule: matches_value(ours, {PAPER_ERROR}, tol {VALUE_TOLERANCE:g})"))
  v = sc.monotone([nonp[p][0] for p in drops], increasing=True,
                  seeds=[nonp[p][1] for p in drops])
  rows.append(Row(
      "Fig. 4: the non-private error increases with P", "monotone increasing",
      {f"P {p:g}": sc.summarize(nonp[p][0]) for p in drops}, v,
      cause(v, "scale: adjacent steps of 0.0002-0.007 error; 5 trials of 1,000 rounds"),
      f"{where}; rule: monotone increasing, every adjacent step greater() paired, "
      "margin 0"))
  return rows


def fig5_rows(res: Dict[str, Any]) -> List[Any]:
  """Fig. 5, target 4: the error decreases as epsilon grows (`monotone` decreasing,
  paired); beside it, a reference row: every private error is above the constant
  predictor's (`greater`, paired, every epsilon)."""
  runs = _current(res)
  eps = sorted({r["epsilon"] for r in runs if r.get("epsilon_target") is not None})
  priv = _sweep(runs, "epsilon", eps, True)
  const = {e: per_seed(runs, "constant_error", label=f"epsilon={e:g}, private eps={e:g}")
           for e in eps}
  where = (f"fig5.json, tau = 1, P = 0.2, epsilon in order {[float(e) for e in eps]}, "
           f"{scale(res, runs)}")
  worse = [(f"epsilon {e:g}", sc.greater(priv[e][0], const[e][0], seeds_a=priv[e][1],
                                         seeds_b=const[e][1])) for e in eps]
  cv, _ = const[eps[0]]
  dec = sc.monotone([priv[e][0] for e in eps], increasing=False,
                    seeds=[priv[e][1] for e in eps])
  return [
      Row("Fig. 5: the error keeps decreasing as epsilon grows (0.01 to 100)",
          "monotone decreasing", {f"eps {e:g}": sc.summarize(priv[e][0]) for e in eps},
          dec, cause(dec, "paper: Theorem 5's noise swamps the signal at every "
                     "epsilon up to 100, so the error sits near the noise level"),
          f"{where}; rule: monotone decreasing, every adjacent step greater() paired, "
          "margin 0"),
      Row("[reference, beside Fig. 5] every private error is worse than the constant "
          "'always -1' predictor", "– (not in the paper)",
          {"constant": sc.summarize(cv),
           **{f"eps {e:g}": sc.summarize(priv[e][0]) for e in eps}}, all_of(worse),
          cause(all_of(worse), "paper: its calibration (see the Fig. 4 rows)",
                "paper: Theorem 5's noise at every epsilon (see the Fig. 4 rows)"),
          f"{where}; rule: greater(private(eps), constant predictor) paired by seed, "
          "margin 0, every epsilon; holds = worse than never predicting sitting")]


# --------------------------------------------------------------------------- baselines

#: MOCHA (Smith et al. 2017) on UCI HAR's published features (recalled from the MOCHA
#: paper, unverified).
MOCHA_PAPER = {"mtl": 0.005, "global": 0.022, "local": 0.013}
_BASELINE_NAMES = {"mtl": "MOCHA without noise", "global": "global SVM (one task)",
                   "local": "local SVMs"}


def baseline_rows(res: Dict[str, Any]) -> List[Any]:
  """[reference] MOCHA's published HAR errors against ours (`matches_value`, tol
  `BASELINE_TOLERANCE`) and DP-MOCHA at epsilon 8 against the constant predictor
  (`greater`, paired)."""
  runs = _current(res)
  where = f"baselines.json, each method's CV lambda, {scale(res, runs)}"
  rows = []
  for key, paper in MOCHA_PAPER.items():
    v, _ = per_seed(runs, method=key)
    verdict = sc.matches_value(v, paper, BASELINE_TOLERANCE)
    rows.append(Row(f"[reference] {_BASELINE_NAMES[key]} on HAR sitting-vs-rest matches "
                    "MOCHA's published error", f"{paper} (MOCHA paper, recalled)",
                    {key: sc.summarize(v)}, verdict,
                    cause(verdict, "forced data: features rebuilt from the raw HAPT "
                          "recordings; MOCHA's numbers recalled from its paper, "
                          "unverified"),
                    f"{where}; rule: matches_value(ours, {paper}, tol "
                    f"{BASELINE_TOLERANCE:g})"))
  dv, ds = per_seed(runs, method="dp")
  cv, cs = per_seed(runs, method="constant")
  worse = sc.greater(dv, cv, seeds_a=ds, seeds_b=cs)
  rows.append(Row("[reference] DP-MOCHA at epsilon 8 (homogeneous) is worse than the "
                  "constant predictor", "– (not in the paper)",
                  {"DP-MOCHA": sc.summarize(dv), "constant": sc.summarize(cv)},
                  worse, cause(worse, "paper: its calibration (see the Fig. 4 rows)",
                               "paper: its calibration (see the Fig. 4 rows)"),
                  f"{where}; rule: greater(DP-MOCHA, constant) paired, margin 0"))
  return rows


def report_lines(rows: Sequence[Any]) -> List[str]:
  """One line per row for a figure's report: the claim, the verdict and its rule."""
  return [f"Claim '{r.claim}': **{r.verdict.verdict}** ({r.verdict.detail}). Setup: "
          f"{r.setup}." for r in rows]
