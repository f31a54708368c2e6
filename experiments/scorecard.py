"""The reproduction standard's arithmetic (experiments/README.md, "The reproduction
standard"): 95% confidence intervals over seeds, verdicts by stated rules, and the
scorecard table every paper README opens with.

Every claim of a paper becomes a `Row`: the paper's value, ours as mean and 95% CI over
the seeds (per-seed values kept), a verdict and the cause of any difference. A verdict
is one of ``holds``, ``fails`` or ``inconclusive`` and is computed, never typed in:

* the 95% CI of a mean over n seeds is Student's t interval
  ``mean +- t_{0.975, n-1} s / sqrt(n)`` (s the sample standard deviation, ddof = 1);
* a comparison of two settings uses the CI of their difference: paired by seed when
  both settings ran the same seeds (each seed's difference; the seeds share the data,
  the initialisation or both), else Welch's interval (unequal variances,
  Welch-Satterthwaite degrees of freedom);
* **"a > b"** (``greater``) holds when the difference's CI lies above 0, fails when it
  lies below ``margin`` (the smallest effect the claim needs; 0 by default, so a claim
  fails only when the opposite is significant), and is inconclusive otherwise;
* **monotone** in a swept value: holds when every adjacent step holds, fails when any
  adjacent step fails, inconclusive otherwise;
* **inverted U**: holds when some interior value beats both ends (each step holds),
  fails when no interior value can (for each interior value, one of its two
  comparisons fails), inconclusive otherwise;
* **within tol** (``|a - b| <= tol``, or ours against the paper's number): holds when
  the CI lies inside ``[-tol, tol]``, fails when it lies outside, inconclusive
  otherwise;
* **not worse by more than tol** (``a >= b - tol``, non-inferiority: "compares
  favourably", "within a point of the best" when being better is fine): holds when the
  CI of ``a - b`` lies above ``-tol``, fails when it lies below, inconclusive
  otherwise;
* fewer than `MIN_SEEDS` seeds on either side make any rule's verdict
  ``inconclusive`` (the detail says what the rule would have said).

The verdict's ``detail`` states the rule and the interval it used, so a reader can check
it from the stored per-seed values.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from scipy import stats

__all__ = ["MIN_SEEDS", "LEVEL", "VERDICTS", "CAUSES", "Summary", "Verdict", "Row",
           "summarize", "difference", "greater", "monotone", "inverted_u", "within",
           "not_worse", "BEGIN", "END", "update_readme",
           "matches_value", "render", "write", "fmt"]

#: The standard's minimum number of seeds per setting.
MIN_SEEDS = 5
#: Confidence level of every interval.
LEVEL = 0.95
VERDICTS = ("holds", "fails", "inconclusive")
#: Where a difference from the paper comes from.
CAUSES = ("paper", "our reconstruction", "forced data", "scale", "none")


@dataclasses.dataclass(frozen=True)
class Summary:
  """A mean with its 95% CI over ``n`` values (``lo``/``hi`` NaN when n < 2)."""
  mean: float
  lo: float
  hi: float
  n: int
  values: tuple = ()
  kind: str = "mean"

  @property
  def half_width(self) -> float:
    return (self.hi - self.lo) / 2.0


@dataclasses.dataclass(frozen=True)
class Verdict:
  """``verdict`` in `VERDICTS`; ``detail`` the rule and the interval it used."""
  verdict: str
  detail: str


def _clean(values: Sequence[Any], name: str) -> np.ndarray:
  v = np.asarray([float(x) for x in values if x is not None], np.float64)
  if v.size == 0:
    raise ValueError(f"{name}: no values (every value was None)")
  if not np.all(np.isfinite(v)):
    raise ValueError(f"{name}: non-finite values {v.tolist()} (a diverged run must be "
                     "reported as such, not averaged)")
  return v


def summarize(values: Sequence[float], level: float = LEVEL) -> Summary:
  """Mean and Student-t CI of per-seed values.

  Args:
    values: one float per seed (None entries are dropped).
    level: the CI's confidence level.

  Returns:
    `Summary`; with one value its bounds are NaN.

  Raises:
    ValueError: no values, or a non-finite value.
  """
  v = _clean(values, "values")
  n = v.size
  m = float(v.mean())
  if n < 2:
    return Summary(m, math.nan, math.nan, n, tuple(v.tolist()))
  half = float(stats.t.ppf(0.5 + level / 2.0, n - 1) * v.std(ddof=1) / math.sqrt(n))
  return Summary(m, m - half, m + half, n, tuple(v.tolist()))


def difference(a: Sequence[float], b: Sequence[float], *,
               seeds_a: Optional[Sequence[Any]] = None,
               seeds_b: Optional[Sequence[Any]] = None,
               level: float = LEVEL) -> Summary:
  """CI of ``mean(a) - mean(b)``: paired (per-seed differences) when both seed lists are
  given and equal as sets, else Welch's interval.

  Args:
    a, b: per-seed values of the two settings.
    seeds_a, seeds_b: their seeds (same order as the values), for pairing.
    level: confidence level.

  Returns:
    `Summary` of the difference (``kind`` "paired" or "welch"; ``n`` the smaller count).
  """
  va, vb = _clean(a, "a"), _clean(b, "b")
  if (seeds_a is not None and seeds_b is not None and len(seeds_a) == va.size
      and len(seeds_b) == vb.size and sorted(seeds_a) == sorted(seeds_b)):
    order = {s: i for i, s in enumerate(seeds_b)}
    d = va - vb[[order[s] for s in seeds_a]]
    s = summarize(d, level)
    return dataclasses.replace(s, kind="paired")
  m = float(va.mean() - vb.mean())
  n = min(va.size, vb.size)
  if va.size < 2 or vb.size < 2:
    return Summary(m, math.nan, math.nan, n, (), "welch")
  sa, sb = va.var(ddof=1) / va.size, vb.var(ddof=1) / vb.size
  se = math.sqrt(sa + sb)
  if se == 0.0:
    return Summary(m, m, m, n, (), "welch")
  dof = (sa + sb) ** 2 / (sa ** 2 / (va.size - 1) + sb ** 2 / (vb.size - 1))
  half = float(stats.t.ppf(0.5 + level / 2.0, dof) * se)
  return Summary(m, m - half, m + half, n, (), "welch")


def _ci(s: Summary) -> str:
  return f"[{s.lo:+.4g}, {s.hi:+.4g}]"


def _enough(rule: Verdict, n: int) -> Verdict:
  if n >= MIN_SEEDS:
    return rule
  return Verdict("inconclusive",
                 f"n = {n} < {MIN_SEEDS} seeds (the rule alone: {rule.verdict}; "
                 f"{rule.detail})")


def greater(a: Sequence[float], b: Sequence[float], *, margin: float = 0.0,
            seeds_a=None, seeds_b=None) -> Verdict:
  """The claim ``a > b``: holds if the CI of ``a - b`` is above 0, fails if it is below
  ``margin`` (>= 0: the smallest effect the claim needs), else inconclusive."""
  if margin < 0:
    raise ValueError(f"margin must be >= 0, got {margin}")
  d = difference(a, b, seeds_a=seeds_a, seeds_b=seeds_b)
  if math.isnan(d.lo):
    return Verdict("inconclusive", f"difference {d.mean:+.4g} with no CI (n = {d.n})")
  text = f"a - b = {d.mean:+.4g}, 95% CI {_ci(d)} ({d.kind}"
  text += f"; margin {margin:g})" if margin else ")"
  if d.lo > 0:
    v = Verdict("holds", text + " above 0")
  elif d.hi < margin:
    v = Verdict("fails", text + (f" below {margin:g}" if margin else " below 0"))
  else:
    v = Verdict("inconclusive", text + " does not separate")
  return _enough(v, d.n)


def monotone(series: Sequence[Sequence[float]], *, increasing: bool = True,
             margin: float = 0.0, seeds: Optional[Sequence[Sequence[Any]]] = None
             ) -> Verdict:
  """The claim "monotone in the swept value": ``series[i]`` the per-seed values at the
  i-th swept value (in the swept order); every adjacent step judged by `greater`
  (reversed when ``increasing`` is False)."""
  if len(series) < 2:
    raise ValueError("monotone needs at least two swept values")
  steps = []
  for i in range(len(series) - 1):
    hi, lo = (series[i + 1], series[i]) if increasing else (series[i], series[i + 1])
    sa = sb = None
    if seeds is not None:
      sa, sb = (seeds[i + 1], seeds[i]) if increasing else (seeds[i], seeds[i + 1])
    steps.append(greater(hi, lo, margin=margin, seeds_a=sa, seeds_b=sb))
  verdicts = [s.verdict for s in steps]
  detail = "; ".join(f"step {i + 1}: {s.verdict} ({s.detail})" for i, s in enumerate(steps))
  if "fails" in verdicts:
    return Verdict("fails", detail)
  if all(v == "holds" for v in verdicts):
    return Verdict("holds", detail)
  return Verdict("inconclusive", detail)


def inverted_u(series: Sequence[Sequence[float]], *, margin: float = 0.0,
               seeds: Optional[Sequence[Sequence[Any]]] = None) -> Verdict:
  """The claim "an interior optimum": holds if some interior value is greater than both
  ends (`greater`), fails if for every interior value one of the two comparisons
  fails, else inconclusive."""
  if len(series) < 3:
    raise ValueError("inverted_u needs at least three swept values")
  last = len(series) - 1
  pick = (lambda i: seeds[i]) if seeds is not None else (lambda i: None)
  details, any_holds, all_fail = [], False, True
  for i in range(1, last):
    left = greater(series[i], series[0], margin=margin, seeds_a=pick(i), seeds_b=pick(0))
    right = greater(series[i], series[last], margin=margin, seeds_a=pick(i),
                    seeds_b=pick(last))
    details.append(f"value {i} vs first: {left.verdict} ({left.detail}); vs last: "
                   f"{right.verdict} ({right.detail})")
    any_holds |= left.verdict == right.verdict == "holds"
    all_fail &= "fails" in (left.verdict, right.verdict)
  verdict = "holds" if any_holds else "fails" if all_fail else "inconclusive"
  return Verdict(verdict, "; ".join(details))


def within(a: Sequence[float], b: Sequence[float], tol: float, *, seeds_a=None,
           seeds_b=None) -> Verdict:
  """The claim ``|a - b| <= tol``: holds if the CI of ``a - b`` lies inside
  ``[-tol, tol]``, fails if it lies outside, else inconclusive."""
  if tol < 0:
    raise ValueError(f"tol must be >= 0, got {tol}")
  d = difference(a, b, seeds_a=seeds_a, seeds_b=seeds_b)
  return _interval_vs_band(d, tol, "a - b")


def not_worse(a: Sequence[float], b: Sequence[float], tol: float, *, seeds_a=None,
              seeds_b=None) -> Verdict:
  """The claim ``a >= b - tol`` (non-inferiority): holds if the CI of ``a - b`` lies
  above ``-tol``, fails if it lies below ``-tol``, else inconclusive."""
  if tol < 0:
    raise ValueError(f"tol must be >= 0, got {tol}")
  d = difference(a, b, seeds_a=seeds_a, seeds_b=seeds_b)
  if math.isnan(d.lo):
    return Verdict("inconclusive", f"a - b = {d.mean:+.4g} with no CI (n = {d.n})")
  text = f"a - b = {d.mean:+.4g}, 95% CI {_ci(d)} ({d.kind}) vs -{tol:g}"
  if d.lo > -tol:
    v = Verdict("holds", text + ": above")
  elif d.hi < -tol:
    v = Verdict("fails", text + ": below")
  else:
    v = Verdict("inconclusive", text + ": straddles it")
  return _enough(v, d.n)


def matches_value(values: Sequence[float], paper_value: float, tol: float) -> Verdict:
  """Ours against a paper's number: holds if the CI of ``mean - paper_value`` lies in
  ``[-tol, tol]``, fails if outside, else inconclusive."""
  if tol < 0:
    raise ValueError(f"tol must be >= 0, got {tol}")
  s = summarize(values)
  d = Summary(s.mean - paper_value, s.lo - paper_value, s.hi - paper_value, s.n, (),
              "mean")
  return _interval_vs_band(d, tol, f"ours - paper ({paper_value:g})")


def _interval_vs_band(d: Summary, tol: float, what: str) -> Verdict:
  if math.isnan(d.lo):
    return Verdict("inconclusive", f"{what} = {d.mean:+.4g} with no CI (n = {d.n})")
  text = f"{what} = {d.mean:+.4g}, 95% CI {_ci(d)} ({d.kind}) vs +-{tol:g}"
  if -tol <= d.lo and d.hi <= tol:
    v = Verdict("holds", text + ": inside")
  elif d.lo > tol or d.hi < -tol:
    v = Verdict("fails", text + ": outside")
  else:
    v = Verdict("inconclusive", text + ": overlaps the band's edge")
  return _enough(v, d.n)


def fmt(s: Summary, digits: int = 3) -> str:
  """``mean [lo, hi] (n)``; ``mean (n = 1)`` without a CI."""
  if math.isnan(s.lo):
    return f"{s.mean:.{digits}f} (n = {s.n})"
  return f"{s.mean:.{digits}f} [{s.lo:.{digits}f}, {s.hi:.{digits}f}] (n = {s.n})"


@dataclasses.dataclass
class Row:
  """One claim of a scorecard.

  Attributes:
    claim: the paper's claim (figure or table, in words).
    paper: the paper's value or the claimed shape.
    ours: what we measured, one `Summary` per setting, keyed by its label.
    verdict: the rule's `Verdict`.
    cause: the cause of any difference (one of `CAUSES`, optionally with words:
      "scale: 30 clients, not 1,000").
    setup: the settings in one line (data, rounds, seeds).
  """
  claim: str
  paper: str
  ours: Dict[str, Summary]
  verdict: Verdict
  cause: str
  setup: str = ""

  def __post_init__(self):
    if self.verdict.verdict not in VERDICTS:
      raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict.verdict!r}")
    if not any(self.cause.startswith(c) for c in CAUSES):
      raise ValueError(f"cause must start with one of {CAUSES}, got {self.cause!r}")


def render(rows: Sequence[Row], digits: int = 3) -> List[str]:
  """The scorecard's markdown: ``| claim | paper | ours mean [95% CI] (n) | verdict |
  cause |``, then each verdict's rule and interval as a numbered footnote."""
  lines = ["| # | claim | paper | ours: mean [95% CI] (n seeds) | verdict | cause |",
           "|---|---|---|---|---|---|"]
  for i, r in enumerate(rows, 1):
    ours = "; ".join(f"{k}: {fmt(s, digits)}" for k, s in r.ours.items())
    lines.append(f"| {i} | {r.claim} | {r.paper} | {ours} | **{r.verdict.verdict}** | "
                 f"{r.cause} |")
  lines += ["", "Rules and intervals behind each verdict (experiments/scorecard.py):", ""]
  for i, r in enumerate(rows, 1):
    setup = f" Setup: {r.setup}." if r.setup else ""
    lines.append(f"{i}. {r.verdict.detail}.{setup}")
  return lines


def write(path: str, rows: Sequence[Row], meta: Optional[Dict[str, Any]] = None) -> None:
  """``<path>.json`` (every row with its per-seed values) and ``<path>.md``
  (`render`)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
  data = dict(meta=meta or {}, standard=dict(min_seeds=MIN_SEEDS, level=LEVEL),
              rows=[dict(claim=r.claim, paper=r.paper, verdict=r.verdict.verdict,
                         detail=r.verdict.detail, cause=r.cause, setup=r.setup,
                         ours={k: dataclasses.asdict(s) for k, s in r.ours.items()})
                    for r in rows])
  with open(path + ".json", "w") as f:
    json.dump(data, f, indent=1)
  with open(path + ".md", "w") as f:
    f.write("\n".join(render(rows)) + "\n")


#: The markers around a README's generated scorecard table (`update_readme`).
BEGIN = "<!-- scorecard:begin -->"
END = "<!-- scorecard:end -->"


def update_readme(path: str, rows: Sequence[Row], footnotes: bool = False) -> None:
  """Replaces the lines between `BEGIN` and `END` in the README at ``path`` by the
  table of `render` (its ``|`` lines; with ``footnotes`` also each verdict's rule and
  interval), so the README shows the stored scorecard.

  Raises:
    ValueError: the markers are missing.
  """
  table = render(rows) if footnotes else [ln for ln in render(rows) if ln.startswith("|")]
  replace_block(path, "scorecard", "\n".join(table) + "\n")


def replace_block(path: str, name: str, text: str) -> None:
  """Replaces what stands between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` in
  the file at ``path`` by ``text`` (written atomically).

  Raises:
    ValueError: the markers are missing.
  """
  begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
  with open(path) as f:
    content = f.read()
  if begin not in content or end not in content:
    raise ValueError(f"{path}: no {begin} ... {end} block")
  head, rest = content.split(begin, 1)
  _, tail = rest.split(end, 1)
  with open(path + ".tmp", "w") as f:
    f.write(head + begin + "\n" + text + end + tail)
  os.replace(path + ".tmp", path)
