"""Privately accounted hyper-parameter selection: ``fedjax-dp sweep --select best-of``.

The mechanism (Papernot and Steinke, "Hyperparameter Tuning with Renyi Differential
Privacy", ICLR 2022, arXiv 2110.03620): draw a random number K of trials from a
distribution fixed in advance; for each trial draw a configuration uniformly at random
from the grid (with replacement, independently of the data) and run it with its own
seed; output only the trial with the best score (the configuration, its model and its
score), nothing of the others. K = 0 (possible under the Poisson distribution) outputs
nothing.

Its Renyi DP is bounded from one trial's (`selection_rdp`):

* one trial is a data-independent mixture over the grid of the members' mechanisms
  M_j, with the configuration j part of the output; the Renyi divergence of order
  alpha of such a mixture is ``log(sum_j p_j exp((alpha - 1) D_j)) / (alpha - 1)`` (the
  observer sees which component it is in), at most ``max_j D_j``. So the per-order
  maximum of the members' RDP curves bounds one trial; we use that maximum (the
  log-mean-exp would be smaller, by at most ``log(grid size) / (alpha - 1)``);
* repeating it a random K times and releasing the best adds, at order lambda
  (Papernot and Steinke 2022): Poisson K with mean mu (Thm. 6):
  ``eps(lambda) + mu delta_hat + log(mu) / (lambda - 1)``, ``delta_hat`` the delta of
  one trial at ``eps_hat = log(1 + 1/(lambda - 1))``; truncated negative binomial K
  with shape eta and mean mu (Thm. 2; eta = 0 the logarithmic distribution):
  ``eps(lambda) + (1 + eta)(1 - 1/lambda_hat) eps(lambda_hat) + (1 + eta)
  log(1/gamma) / lambda_hat + log(mu) / (lambda - 1)``, minimised over lambda_hat.
  dp_accounting implements both (``RepeatAndSelectDpEvent(event, mean, shape)`` in its
  RDP accountant): when one member's RDP curve is the largest at every order its
  event is wrapped and composed (the public API); otherwise the per-order maximum
  goes through dp_accounting's own function for that event's RDP
  (``_compute_rdp_repeat_and_select``, private).

With a fixed number of trials and the best one released, no such bound holds: the
selection can leak more than one run's epsilon (Papernot and Steinke 2022; Liu and
Talwar, "Private Selection from Private Candidates", STOC 2019), and composing the trials costs K times. The score must
itself be private or public: the default, ``final_test_accuracy``, is the trial's DP
model evaluated on the central test set outside the clients' data (free only if that
test set is truly public); a score computed from the clients' data without noise (a
diagnostic in summary.json's ``summary_disclosure``, e.g. on HAR, whose test windows
are the clients' own) is refused.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from fedjax_dp.validation import FedJaxDpError, check_choice, check_finite, check_int

__all__ = [
    "DISTRIBUTIONS", "DEFAULT_METRIC", "Selection", "tnb_gamma", "tnb_mean",
    "draw_repetitions", "draw_trials", "score_direction", "check_metric",
    "choose", "selection_rdp", "selection_epsilon", "planned_privacy", "member_curve",
    "selection_summary", "parse_select_args",
]

#: The distributions of the number of trials and their dp_accounting shape
#: (``RepeatAndSelectDpEvent.shape``): Poisson inf, logarithmic 0, truncated negative
#: binomial the ``--repetitions-shape`` eta > 0 (1: geometric).
DISTRIBUTIONS = ("poisson", "logarithmic", "negative_binomial")
#: The default score: the DP model's accuracy on the central test set (maximised).
DEFAULT_METRIC = "final_test_accuracy"


@dataclasses.dataclass(frozen=True)
class Selection:
  """A best-of selection's settings (`fedjax_dp.runs.sweep.run_sweep`'s ``select``).

  Attributes:
    mean: E[K], the mean number of trials, float >= 1 (dp_accounting's bound needs
      it; K itself may be 0 under Poisson).
    distribution: one of `DISTRIBUTIONS`.
    shape: eta > 0 of the truncated negative binomial (only with
      ``"negative_binomial"``; 1 is the geometric distribution).
    metric: the summary.json field that scores a trial (`DEFAULT_METRIC`); a field
      ending in ``loss`` is minimised, any other maximised.
    seed: seed of the draws of K and of the configurations, int in [0, 2**32 - 1]
      (recorded; trial i runs with root seed ``base seed + i``).
    keep_trials: keep every trial's folder (by default only the chosen one is kept:
      publishing the others is not covered by the selection's epsilon).

  Raises:
    FedJaxDpError: naming the field: a mean below 1 or not finite, an unknown
      distribution, a shape missing for or given to the wrong distribution, a shape
      not finite and > 0, an empty metric, a seed out of range.
  """
  mean: float
  distribution: str = "poisson"
  shape: Optional[float] = None
  metric: str = DEFAULT_METRIC
  seed: int = 0
  keep_trials: bool = False

  def __post_init__(self):
    mean = check_finite("repetitions_mean", self.mean, ">= 1")
    if mean < 1:
      raise FedJaxDpError(f"repetitions_mean must be >= 1 (the mean number of trials; "
                          f"dp_accounting's repeat-and-select bound needs it), got "
                          f"{self.mean!r}.", option="repetitions_mean")
    object.__setattr__(self, "mean", mean)
    check_choice("repetitions_distribution", self.distribution, DISTRIBUTIONS)
    if self.distribution == "negative_binomial":
      if self.shape is None:
        raise FedJaxDpError("repetitions_shape is needed with repetitions_distribution "
                            "negative_binomial (eta > 0; 1 is the geometric "
                            "distribution).", option="repetitions_shape")
      shape = check_finite("repetitions_shape", self.shape, "> 0")
      if shape <= 0:
        raise FedJaxDpError(f"repetitions_shape must be > 0 (0 is the logarithmic "
                            f"distribution: --repetitions-distribution logarithmic), got "
                            f"{self.shape!r}.", option="repetitions_shape")
      object.__setattr__(self, "shape", shape)
    elif self.shape is not None:
      raise FedJaxDpError(f"repetitions_shape is only for repetitions_distribution "
                          f"negative_binomial; {self.distribution} has a fixed shape "
                          f"({'inf' if self.distribution == 'poisson' else '0'}).",
                          option="repetitions_shape")
    if not isinstance(self.metric, str) or not self.metric:
      raise FedJaxDpError(f"select_metric must be a summary.json field name, got "
                          f"{self.metric!r}.", option="select_metric")
    object.__setattr__(self, "seed", check_int("selection_seed", self.seed, minimum=0,
                                               maximum=2**32 - 1))

  @property
  def dp_shape(self) -> float:
    """``RepeatAndSelectDpEvent``'s shape: inf (Poisson), 0 (logarithmic) or eta."""
    return {"poisson": math.inf, "logarithmic": 0.0}.get(self.distribution,
                                                          self.shape)  # type: ignore

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


# --- the number of trials -------------------------------------------------------------


def tnb_mean(gamma: float, shape: float) -> float:
  """E[K] of the truncated negative binomial D_{eta, gamma} (Papernot and Steinke 2022,
  Def. 1: ``P[K = k] ∝ C(k + eta - 1, k) (1 - gamma)^k`` for k >= 1):
  ``eta (1 - gamma) / (gamma (1 - gamma^eta))``, and for eta = 0 (logarithmic)
  ``(1 - gamma) / (gamma log(1/gamma))``; 1 at gamma = 1."""
  if gamma >= 1.0:
    return 1.0
  if shape == 0:
    return (1.0 - gamma) / (gamma * math.log(1.0 / gamma))
  return shape * (1.0 - gamma) / (gamma * -math.expm1(shape * math.log(gamma)))


def tnb_gamma(mean: float, shape: float) -> float:
  """gamma in (0, 1] with ``tnb_mean(gamma, shape) == mean`` (the mean decreases in
  gamma; bisection in log space to 1e-13 relative).

  Raises:
    FedJaxDpError: mean < 1 or shape < 0.
  """
  if mean < 1 or shape < 0:
    raise FedJaxDpError(f"the truncated negative binomial needs mean >= 1 and shape >= 0, "
                        f"got mean={mean!r}, shape={shape!r}.", option="repetitions_mean")
  if mean == 1.0:
    return 1.0
  lo, hi = 1e-300, 1.0  # tnb_mean(lo) > mean >= tnb_mean(hi) = 1
  for _ in range(400):
    mid = math.sqrt(lo * hi) if hi / lo > 4 else 0.5 * (lo + hi)
    if tnb_mean(mid, shape) > mean:
      lo = mid
    else:
      hi = mid
    if hi - lo <= 1e-13 * hi:
      break
  return 0.5 * (lo + hi)


def draw_repetitions(sel: Selection, rng: np.random.Generator,
                     size: Optional[int] = None) -> Any:
  """K (int, or int64 ``[size]``) drawn from ``sel``'s distribution: Poisson(mean);
  logarithmic ``P[K = k] = (1 - gamma)^k / (k log(1/gamma))`` (numpy's ``logseries``
  with p = 1 - gamma); truncated negative binomial: numpy's ``negative_binomial(eta,
  gamma)`` (``P[k] = C(k + eta - 1, k) gamma^eta (1 - gamma)^k``, k >= 0) redrawn until
  positive. gamma from `tnb_gamma`."""
  n = 1 if size is None else int(size)
  if sel.distribution == "poisson":
    out = rng.poisson(sel.mean, n)
  else:
    gamma = tnb_gamma(sel.mean, sel.dp_shape)
    if gamma >= 1.0:
      out = np.ones(n, np.int64)
    elif sel.distribution == "logarithmic":
      out = rng.logseries(1.0 - gamma, n)
    else:
      out = rng.negative_binomial(sel.dp_shape, gamma, n)
      while np.any(out == 0):
        zero = out == 0
        out[zero] = rng.negative_binomial(sel.dp_shape, gamma, int(zero.sum()))
  out = np.asarray(out, np.int64)
  return int(out[0]) if size is None else out


def draw_trials(sel: Selection, grid_size: int) -> Tuple[int, List[int]]:
  """``(K, [grid index of each trial])``: K from `draw_repetitions`, then K indices
  uniform on ``range(grid_size)`` with replacement, from one generator seeded with
  ``sel.seed`` (neither looks at the data)."""
  grid_size = check_int("grid_size", grid_size, minimum=1)
  rng = np.random.default_rng(sel.seed)
  k = draw_repetitions(sel, rng)
  return k, [int(i) for i in rng.integers(0, grid_size, size=k)]


# --- the score ------------------------------------------------------------------------


def score_direction(metric: str) -> str:
  """``"min"`` for a field ending in ``loss``, else ``"max"``."""
  return "min" if metric.endswith("loss") else "max"


def check_metric(metric: str, labels: Dict[str, Tuple[str, str]],
                 numeric: Sequence[str]) -> Tuple[str, str]:
  """The disclosure label ``(kind, why)`` of the score ``metric``.

  Args:
    metric: a summary.json field.
    labels: ``{field: (kind, why)}`` of the run's summary
      (`fedjax_dp.privacy.disclosure.summary_labels_for_run`, or summary.json's
      ``summary_disclosure``).
    numeric: the numeric fields the score may be.

  Raises:
    FedJaxDpError (option ``select_metric``): a field that is not numeric, or one
      computed from the clients' data without noise (a ``diagnostic``): its value is
      not covered by epsilon, so selecting on it leaks.
  """
  if metric not in numeric:
    raise FedJaxDpError(f"select_metric {metric!r} is not a numeric summary field; "
                        f"choose one of: {', '.join(sorted(numeric))}.",
                        option="select_metric")
  kind, why = labels.get(metric, ("diagnostic", "unlabelled"))
  if kind == "diagnostic":
    raise FedJaxDpError(
        f"select_metric {metric!r} is computed from the clients' data without noise "
        f"({why}): selecting the best trial by it leaks that data, which no epsilon "
        "covers. Score on a central test set outside the clients' data (the default "
        f"{DEFAULT_METRIC} on a dataset with one), or on a score released with DP.",
        option="select_metric")
  return kind, why


def choose(scores: Sequence[Optional[float]], direction: str) -> Optional[int]:
  """Index of the best score (``"max"`` or ``"min"``); a missing or non-finite score
  is the worst; ties go to the first trial (an order fixed before any trial ran); None
  when no score is finite (or there are none)."""
  sign = 1.0 if direction == "max" else -1.0
  keyed = [sign * float(s) if s is not None and math.isfinite(float(s)) else -math.inf
           for s in scores]
  if not keyed or max(keyed) == -math.inf:
    return None
  return int(np.argmax(keyed))


# --- the privacy of the selection -----------------------------------------------------


def selection_rdp(curves: Sequence[Sequence[float]], orders: Sequence[float],
                  sel: Selection, events: Optional[Sequence[Any]] = None
                  ) -> Tuple[np.ndarray, Dict[str, Any]]:
  """RDP of the best-of selection over members with RDP ``curves`` at ``orders``.

  Args:
    curves: float ``[M, A]``: each grid member's RDP (nats) at the A orders.
    orders: Renyi orders > 1, float ``[A]``.
    sel: the `Selection` (mean and shape of K).
    events: the members' DpEvents (optional, ``[M]``): when one member's curve is
      the largest at every order and plain dp_accounting gives its event exactly that
      curve, ``RepeatAndSelectDpEvent(event, mean, shape)`` is composed in a fresh
      `dp_accounting.rdp.RdpAccountant`.

  Returns:
    ``(rdp [A], how)``: ``how`` = ``{"method": "RepeatAndSelectDpEvent" or
    "per-order maximum", "dominating_member": index or None}``.
  """
  from dp_accounting import dp_event
  from dp_accounting import rdp as dp_rdp
  from dp_accounting.rdp import rdp_privacy_accountant as rpa
  from fedjax_dp.privacy.accountants import deduplicate_rdp_convergence_warnings
  from fedjax_dp.privacy.events import dp_accounting_relation, has_visible_participation
  c = np.asarray(curves, np.float64)
  top = c.max(axis=0)
  dom = [i for i in range(c.shape[0]) if np.array_equal(c[i], top)]
  how: Dict[str, Any] = {"dominating_member": dom[0] if dom else None}
  if dom and events is not None and events[dom[0]] is not None:
    ev = events[dom[0]]
    try:
      if not has_visible_participation(ev):
        rel = dp_accounting_relation(ev)
        with deduplicate_rdp_convergence_warnings():
          plain = dp_rdp.RdpAccountant(list(orders), rel).compose(ev).rdp
          if np.allclose(plain, top, rtol=1e-12, atol=0):
            acc = dp_rdp.RdpAccountant(list(orders), rel).compose(
                dp_event.RepeatAndSelectDpEvent(ev, sel.mean, sel.dp_shape))
            return (np.asarray(acc.rdp, np.float64),
                    dict(how, method="RepeatAndSelectDpEvent"))
    except (ValueError, TypeError, NotImplementedError):
      pass  # an event plain dp_accounting cannot compose: the curve below
  out = rpa._compute_rdp_repeat_and_select(  # pylint: disable=protected-access
      list(orders), list(top), sel.mean, sel.dp_shape)
  return np.asarray(out, np.float64), dict(how, method="per-order maximum")


def selection_epsilon(curves: Sequence[Sequence[float]], orders: Sequence[float],
                      sel: Selection, delta: float,
                      events: Optional[Sequence[Any]] = None) -> Tuple[float, Dict[str, Any]]:
  """``(epsilon, how)`` of the selection at ``delta`` (`selection_rdp` converted by
  dp_accounting's ``compute_epsilon``, Canonne, Kamath and Steinke 2020, Prop. 12)."""
  from dp_accounting.rdp import rdp_privacy_accountant as rpa
  rdp, how = selection_rdp(curves, orders, sel, events)
  eps, order = rpa.compute_epsilon(list(orders), list(rdp), delta)
  return float(eps), dict(how, order=float(order))


def planned_privacy(alg: Any, z: Any, rounds: int, delta: float
                    ) -> Optional[Tuple[Tuple[float, ...], np.ndarray, Any]]:
  """``(orders, RDP [A], DpEvent or None)`` of ``rounds`` planned rounds of ``alg`` (an
  `fedjax_dp.algorithms.base.Algorithm` built with noise multiplier ``z``) at
  ``delta``: a fresh ledger (``alg.privacy.make_ledger``) recording
  ``planned_report(z, rounds)``, read through ``guarantee_ledger`` (as the budget
  guard reads it); None for a non-private algorithm. A run never composes more than
  its planned rounds, so this bounds its RDP at every order."""
  spec = alg.privacy
  if spec is None:
    return None
  ledger = spec.make_ledger(delta)
  ledger.record(spec.planned_report(z, rounds))
  single = spec.guarantee_ledger(ledger, "rdp")
  event = single.dp_event() if callable(getattr(single, "dp_event", None)) else None
  return tuple(single.orders), np.asarray(single.rdp(), np.float64), event


def member_curve(ledger: Any, spec: Any) -> Optional[Tuple[Tuple[float, ...], np.ndarray]]:
  """``(orders, RDP [A])`` of a finished member's own ledger (its guarantee ledger), or
  None without one."""
  if ledger is None or spec is None:
    return None
  single = spec.guarantee_ledger(ledger, "rdp")
  return tuple(single.orders), np.asarray(single.rdp(), np.float64)


def selection_summary(sel: Selection, k: int, indices: Sequence[int],
                      grid: Sequence[str], grid_privacy: Sequence[Any],
                      trials: Sequence[Dict[str, Any]], delta: float) -> Dict[str, Any]:
  """sweep.json's ``selection``: the settings, the realised K and draws, each trial's
  own epsilon and score, the chosen trial, and the selection's epsilon.

  Args:
    sel: the `Selection`.
    k: the realised number of trials.
    indices: the grid index of each trial ``[k]``.
    grid: the grid configurations' names ``[G]``.
    grid_privacy: per grid configuration ``(orders, RDP [A], event or None)`` (the
      per-order maximum of its planned and realised curves), or None (non-private).
    trials: per trial ``{"name", "epsilon", "epsilon_rdp", "score", "kind", "why"}``
      (``kind``, ``why``: the score's disclosure label).
    delta: the members' delta.
  """
  direction = score_direction(sel.metric)
  best = choose([t["score"] for t in trials], direction)
  out: Dict[str, Any] = {
      "method": "best-of (Papernot and Steinke, ICLR 2022): a random number K of trials, "
                "each a configuration drawn uniformly from the grid, only the best output",
      **sel.to_dict(), "dp_accounting_shape": sel.dp_shape, "direction": direction,
      "repetitions": k, "grid": list(grid), "drawn": [grid[i] for i in indices],
      "trials": list(trials), "chosen": None if best is None else trials[best]["name"],
      "chosen_score": None if best is None else trials[best]["score"],
      "chosen_configuration": None if best is None else grid[indices[best]],
      "delta": delta, "epsilon_selection_rdp": None, "how": None,
      "score_data": None if not trials else {
          "kind": trials[0]["kind"], "what": trials[0].get("why"),
          "privacy": ("computed from each trial's DP release and data outside the "
                      "clients' (the central test set): no privacy cost beyond the "
                      "trials', which the selection's epsilon covers, provided that "
                      "test set is truly public" if trials[0]["kind"] == "dp" else
                      "configuration or accounting only: no privacy cost")},
      "published": ("only the chosen trial's folder" if not sel.keep_trials else
                    "every trial's folder (--keep-trials): their release is the "
                    "composition of all K, epsilon_all_trials_rdp")}
  if best is None and trials:
    out["note"] = "no trial has a finite score: nothing is selected"
  if any(g is None for g in grid_privacy):
    out["note"] = "a grid configuration is non-private: epsilon = inf"
    return out
  orders = grid_privacy[0][0]
  eps, how = selection_epsilon([g[1] for g in grid_privacy], orders, sel, delta,
                               [g[2] for g in grid_privacy])
  out.update(epsilon_selection_rdp=eps, how=dict(how, member=(
      None if how["dominating_member"] is None else grid[how["dominating_member"]])))
  if sel.keep_trials and k:
    from dp_accounting.rdp import rdp_privacy_accountant as rpa
    total = np.sum([np.asarray(grid_privacy[i][1]) for i in indices], axis=0)
    out["epsilon_all_trials_rdp"] = float(rpa.compute_epsilon(list(orders), list(total),
                                                              delta)[0])
  return out


# --- the command line -----------------------------------------------------------------

#: ``--flag: (key, option name)`` of the selection's options (``--keep-trials`` takes
#: no value).
_FLAGS = {"--select": ("select", "select"),
          "--repetitions-mean": ("mean", "repetitions_mean"),
          "--repetitions-distribution": ("distribution", "repetitions_distribution"),
          "--repetitions-shape": ("shape", "repetitions_shape"),
          "--select-metric": ("metric", "select_metric"),
          "--selection-seed": ("seed", "selection_seed")}


def parse_select_args(argv: Sequence[str]
                      ) -> Tuple[Optional[Selection], List[str], Dict[str, str]]:
  """``(Selection or None, argv without the selection's flags, {option: where})``.

  Raises:
    FedJaxDpError: a flag without a value, ``--select`` other than ``best-of``, a
      selection option without ``--select best-of``, a value that is not a number, or
      bad values (`Selection`); naming the option.
  """
  argv = list(argv)
  rest: List[str] = []
  got: Dict[str, Tuple[str, str]] = {}  # key -> (value, flag)
  i, keep = 0, False
  while i < len(argv):
    flag, eq, value = argv[i].partition("=")
    if flag == "--keep-trials" and not eq:
      keep, i = True, i + 1
      continue
    if flag not in _FLAGS:
      rest.append(argv[i])
      i += 1
      continue
    if not eq:
      if i + 1 >= len(argv):
        raise FedJaxDpError(f"{flag} needs a value.", option=_FLAGS[flag][1])
      value, i = argv[i + 1], i + 1
    got[_FLAGS[flag][0]] = (value, flag)
    i += 1
  options = {k: o for k, o in _FLAGS.values()}
  where = {options[k]: f"option {flag}" for k, (_, flag) in got.items()}
  if "select" not in got:
    extra = [flag for _, flag in got.values()] + (["--keep-trials"] if keep else [])
    if extra:
      raise FedJaxDpError(f"{extra[0]} is an option of --select best-of; add --select "
                          "best-of --repetitions-mean MU.", option="select")
    return None, rest, {}
  if got["select"][0] != "best-of":
    raise FedJaxDpError(f"select must be best-of, got {got['select'][0]!r}.",
                        option="select")
  if "mean" not in got:
    raise FedJaxDpError("--select best-of needs --repetitions-mean MU (the mean number "
                        "of trials, >= 1).", option="repetitions_mean")
  kw: Dict[str, Any] = {}
  for key, kind in (("mean", float), ("shape", float), ("seed", int)):
    if key in got:
      try:
        kw[key] = kind(got[key][0])
      except ValueError:
        raise FedJaxDpError(f"{got[key][1]} {got[key][0]!r} is not "
                            f"{'an integer' if kind is int else 'a number'}.",
                            option=options[key]) from None
  sel = Selection(distribution=got.get("distribution", ("poisson",))[0],
                  metric=got.get("metric", (DEFAULT_METRIC,))[0], keep_trials=keep, **kw)
  return sel, rest, where
