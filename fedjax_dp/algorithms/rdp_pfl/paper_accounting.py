"""The paper's own privacy calibration for RDP-PFL (IEEE TIFS 2023, Theorem 1, Eqs. 12-14).

This is *the paper's* accounting, kept separate from the library's accountants
(`fedjax_dp.privacy`) so that results can be labelled as such:

* per step and per stage (inner on D^Q, outer on D^S), the RDP of the Poisson-subsampled
  Gaussian mechanism with sensitivity 1, ``log(I^Q)/(alpha - 1)`` and
  ``log(I^S)/(alpha - 1)`` (Eqs. 13-14 with mu_0 = N(0, sigma^2), mu_1 = N(1, sigma^2),
  where the paper's text calls mu_1 a mixture). These values come from
  `dp_accounting.rdp.RdpAccountant` (Mironov, Talwar and Zhang 2019, the method the
  paper cites via Opacus); nothing is re-integrated here;
* composed by summation over both stages and all T tau0 local steps,
  ``eps'(alpha) = T tau0 (rdp_Q(alpha) + rdp_S(alpha))`` (Appendix A, Eqs. 41-46);
* converted with the paper's Eq. (12) (Balle et al. 2020, Theorem 20; Appendix Eq. 34)
  ``eps = eps'(alpha) + [log(1/delta) + (alpha - 1) log(1 - 1/alpha) - log(alpha)]/(alpha-1)``
  minimised over the Opacus default orders `OPACUS_ORDERS` (the paper does not state the
  minimum or the grid);
* the noise is "the smallest sigma whose budget is no more than the required one", found
  by bisection (`paper_calibrate_sigma`).

With the same RDP values, dp-accounting's own conversion is the same formula (plus a KL
shortcut for tiny budgets) over a superset of orders (it adds 11 and 128 ... 1024), so its
epsilon is <= this one, and equal when the best order is on both grids.

The run's own guarantee is not this sum: each record is in one stage and
influences only its release, so a record spends one stage's T tau0 releases and the run's
epsilon is the larger stage's (`fedjax_dp.algorithms.rdp_pfl.privacy`); the paper's sum
is reported beside it as the paper's claim (``epsilon_paper``), above the run's epsilon
for the same sigma.

Errors are `fedjax_dp.validation.FedJaxDpError` naming the argument.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Dict, Sequence, Tuple, Union

import dp_accounting
from dp_accounting import rdp as dp_rdp
import numpy as np

from fedjax_dp.privacy.accountants import deduplicate_rdp_convergence_warnings
from fedjax_dp.validation import (FedJaxDpError, check_delta, check_epsilon, check_int,
                                  check_positive, check_probability)

__all__ = [
    "OPACUS_ORDERS", "per_step_rdp", "paper_conversion", "paper_epsilon_stages",
    "paper_epsilon", "paper_calibrate_sigma", "budget_split",
]

#: Opacus' default Renyi orders: 1.1, 1.2, ..., 10.9, then 12, 13, ..., 63 (no 11).
OPACUS_ORDERS: Tuple[float, ...] = tuple(
    [1.0 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(12, 64)])

_MAX_BISECTION_STEPS = 200
_SIGMA_MAX = 1e7

_log = logging.getLogger(__name__)


class _DebugSummary:
  """Receives `deduplicate_rdp_convergence_warnings`' summary and logs it at DEBUG: a
  calibration evaluates hundreds of sigmas, and the orders dp-accounting drops (small
  fractional ones, +inf RDP) only loosen, never invalidate, the bound."""

  def warning(self, fmt, *args):
    _log.debug(fmt, *args)


def _check_orders(orders: Sequence[float]) -> Tuple[float, ...]:
  arr = np.asarray(orders, dtype=np.float64)
  if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 1.0):
    raise FedJaxDpError(f"orders must be a non-empty 1-D sequence of finite Renyi orders "
                        f"> 1, got {orders!r}.", option="orders")
  return tuple(float(a) for a in arr)


@functools.lru_cache(maxsize=8192)
def _rdp_cached(q: float, sigma: float, orders: Tuple[float, ...]) -> np.ndarray:
  with deduplicate_rdp_convergence_warnings(_DebugSummary()):  # type: ignore[arg-type]
    accountant = dp_rdp.RdpAccountant(list(orders))
    accountant.compose(dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(sigma)))
  vec = accountant.rdp
  vec.setflags(write=False)
  return vec


def per_step_rdp(q: float, sigma: float, orders: Sequence[float] = OPACUS_ORDERS
                 ) -> np.ndarray:
  """RDP of one Poisson-subsampled Gaussian step, ``log(I)/(alpha - 1)`` (Eqs. 13-14).

  Sensitivity 1 (sigma is the noise multiplier), add/remove-one adjacency, values from
  `dp_accounting.rdp.RdpAccountant`. ``q = 1`` gives ``alpha / (2 sigma^2)``; ``q = 0``
  gives 0. At a few small fractional orders dp-accounting's series may not converge; it
  returns +inf there (still a valid bound: those orders never win the minimum).

  Args:
    q: Poisson sampling rate, in [0, 1].
    sigma: noise multiplier, > 0.
    orders: Renyi orders (> 1), default `OPACUS_ORDERS`.

  Returns:
    float64 ``[len(orders)]`` (read-only), nats.

  Raises:
    FedJaxDpError: q outside [0, 1], sigma <= 0, bad orders.
  """
  q = check_probability("q", q, allow_zero=True)
  sigma = check_positive("sigma", sigma)
  return _rdp_cached(q, sigma, _check_orders(orders))


def paper_conversion(rdp_total: Union[Sequence[float], np.ndarray],
                     orders: Sequence[float], delta: float) -> Tuple[float, float]:
  """The paper's RDP -> (eps, delta) conversion (Eq. 12 / Appendix Eq. 34, Balle et al.
  2020 Theorem 20), minimised over the orders:

  ``eps = min_alpha rdp_total(alpha) + [log(1/delta) + (alpha - 1) log(1 - 1/alpha)
  - log(alpha)] / (alpha - 1)``.

  Args:
    rdp_total: ``[K]`` composed RDP per order (nats, >= 0; +inf allowed).
    orders: ``[K]`` Renyi orders > 1.
    delta: in (0, 1).

  Returns:
    (eps, best_alpha); eps is +inf (best_alpha nan) if every order is +inf.

  Raises:
    FedJaxDpError: shapes differ, negative or NaN RDP, bad orders or delta.
  """
  a = np.asarray(_check_orders(orders))
  r = np.asarray(rdp_total, dtype=np.float64)
  if r.shape != a.shape:
    raise FedJaxDpError(f"rdp_total must have one value per order ({a.size}), got shape "
                        f"{r.shape}.", option="rdp_total")
  if np.any(np.isnan(r)) or np.any(r < 0):
    raise FedJaxDpError("rdp_total must be >= 0 (and not NaN).", option="rdp_total")
  delta = check_delta(delta)
  eps = r + (math.log(1.0 / delta) + (a - 1.0) * np.log1p(-1.0 / a) - np.log(a)) / (a - 1.0)
  k = int(np.argmin(eps))
  if not np.isfinite(eps[k]):
    return math.inf, math.nan
  return float(eps[k]), float(a[k])


def paper_epsilon_stages(sigma: float, stages: Sequence[Tuple[float, int]], delta: float,
                         orders: Sequence[float] = OPACUS_ORDERS) -> Tuple[float, float]:
  """Epsilon of several Poisson-subsampled Gaussian stages composed by summing their RDP
  (Theorem 1's composition, generalised to any list), converted with Eq. (12).

  ``stages = [(q_Q, T tau0), (q_S, T tau0)]`` is Theorem 1; a single ``[(q, steps)]`` is
  plain DP-SGD with the paper's conversion.

  Args:
    sigma: noise multiplier shared by all stages, > 0.
    stages: non-empty sequence of ``(q, steps)``: rate in [0, 1], steps int >= 0.
    delta: in (0, 1).
    orders: Renyi orders, default `OPACUS_ORDERS`.

  Returns:
    (eps, best_alpha).

  Raises:
    FedJaxDpError: empty stages or invalid values.
  """
  if len(stages) == 0:
    raise FedJaxDpError("stages must contain at least one (q, steps) pair.", option="stages")
  orders = _check_orders(orders)
  total = np.zeros(len(orders))
  for k, stage in enumerate(stages):
    if len(stage) != 2:
      raise FedJaxDpError(f"stages[{k}] must be a (q, steps) pair, got {stage!r}.",
                          option="stages")
    steps = check_int(f"stages[{k}] steps", stage[1], minimum=0)
    if steps:
      total = total + steps * per_step_rdp(stage[0], sigma, orders)
    else:
      check_probability(f"stages[{k}] q", stage[0], allow_zero=True)
  return paper_conversion(total, orders, delta)


def _theorem1_stages(q_query: float, q_support: float, rounds: int, local_epochs: int
                     ) -> Tuple[Tuple[float, int], Tuple[float, int]]:
  q_query = check_probability("q_query", q_query)
  q_support = check_probability("q_support", q_support, allow_zero=True)
  steps = (check_int("rounds", rounds, minimum=1)
           * check_int("local_epochs", local_epochs, minimum=1))
  return (q_query, steps), (q_support, steps)


def paper_epsilon(sigma: float, q_query: float, q_support: float, rounds: int,
                  local_epochs: int, delta: float, orders: Sequence[float] = OPACUS_ORDERS
                  ) -> Tuple[float, float]:
  """Theorem 1 (Eq. 12): epsilon after T rounds of tau0 local epochs, each one inner
  (rate q^Q) and one outer (rate q^S) DP-SGD step with noise multiplier sigma.

  ``eps = min_alpha T tau0 (log I^Q + log I^S)/(alpha - 1) + [log(1/delta)
  + (alpha - 1) log(1 - 1/alpha) - log(alpha)]/(alpha - 1)``.

  Args:
    sigma: noise multiplier, > 0.
    q_query: inner-stage Poisson rate q^Q, in (0, 1].
    q_support: outer-stage rate q^S, in [0, 1] (0 drops the outer stage: a single stage).
    rounds: T, int >= 1.
    local_epochs: tau0, int >= 1.
    delta: in (0, 1).
    orders: Renyi orders, default `OPACUS_ORDERS`.

  Returns:
    (eps, best_alpha).

  Raises:
    FedJaxDpError: invalid arguments.
  """
  return paper_epsilon_stages(sigma, _theorem1_stages(q_query, q_support, rounds,
                                                      local_epochs), delta, orders)


def paper_calibrate_sigma(target_epsilon: float, delta: float, q_query: float,
                          q_support: float, rounds: int, local_epochs: int,
                          tol: float = 0.01, orders: Sequence[float] = OPACUS_ORDERS) -> float:
  """The paper's noise search (Section III-B): the smallest sigma with `paper_epsilon`
  <= target, by bisection (epsilon decreases in sigma).

  A bracket [lo, hi] with eps(lo) > target >= eps(hi) is found by doubling / halving from
  sigma = 1, then bisected until ``target - eps(hi) <= tol`` (as Opacus does) or the
  bracket is below 1e-12 relative. The returned sigma always satisfies eps <= target.

  Args:
    target_epsilon: > 0.
    delta: in (0, 1).
    q_query, q_support, rounds, local_epochs, orders: as `paper_epsilon`.
    tol: tolerance on epsilon, > 0 (0.01 is Opacus'; use ~1e-4 for 3-decimal sigmas).

  Returns:
    sigma (float).

  Raises:
    FedJaxDpError: invalid arguments, or the target is below the conversion's floor
      (no sigma up to 1e7 reaches it).
  """
  target = check_epsilon(target_epsilon, "target_epsilon")
  tol = check_positive("tol", tol)
  delta = check_delta(delta)
  stages = _theorem1_stages(q_query, q_support, rounds, local_epochs)
  orders = _check_orders(orders)

  def eps(sigma: float) -> float:
    return paper_epsilon_stages(sigma, stages, delta, orders)[0]

  hi = 1.0
  while eps(hi) > target:
    hi *= 2.0
    if hi > _SIGMA_MAX:
      raise FedJaxDpError(f"target_epsilon={target!r} is not reachable with delta={delta!r}: "
                          f"even sigma={_SIGMA_MAX:g} gives more.", option="target_epsilon")
  lo = hi / 2.0
  while eps(lo) <= target:
    hi, lo = lo, lo / 2.0
  for _ in range(_MAX_BISECTION_STEPS):
    if target - eps(hi) <= tol or hi - lo <= 1e-12 * hi:
      break
    mid = 0.5 * (lo + hi)
    if eps(mid) > target:
      lo = mid
    else:
      hi = mid
  return hi


def budget_split(sigma: float, q_query: float, q_support: float, rounds: int,
                 local_epochs: int, delta: float, orders: Sequence[float] = OPACUS_ORDERS
                 ) -> Dict[str, float]:
  """Theorem 1's "privacy budget allocation" between the inner and outer stages.

  At the order alpha* that minimises the composed epsilon, the inner stage spends
  ``T tau0 log(I^Q)/(alpha* - 1)`` and the outer ``T tau0 log(I^S)/(alpha* - 1)`` of the
  RDP; the inner share is ``log I^Q / (log I^Q + log I^S)`` (1/2 when q^Q = q^S, more
  than 1/2 when q^Q > q^S).

  Args:
    As `paper_epsilon` (q_support > 0 here).

  Returns:
    dict with ``epsilon`` and ``alpha`` (composed, Eq. 12), ``rdp_inner`` and
    ``rdp_outer`` (each stage's composed RDP at alpha*, nats), ``inner_share`` and
    ``outer_share`` (fractions summing to 1), ``epsilon_inner_alone`` /
    ``epsilon_outer_alone`` and ``alpha_inner_alone`` / ``alpha_outer_alone`` (each
    stage's T tau0 steps converted alone, Eq. 12).

  Raises:
    FedJaxDpError: invalid arguments, or q_support = 0.
  """
  check_probability("q_support", q_support)
  (qq, steps), (qs, _) = _theorem1_stages(q_query, q_support, rounds, local_epochs)
  orders = _check_orders(orders)
  eps, alpha = paper_epsilon_stages(sigma, [(qq, steps), (qs, steps)], delta, orders)
  if not math.isfinite(eps):
    raise FedJaxDpError(f"sigma={sigma!r} gives an infinite epsilon at every order.",
                        option="sigma")
  k = orders.index(alpha)
  r_in = steps * float(per_step_rdp(qq, sigma, orders)[k])
  r_out = steps * float(per_step_rdp(qs, sigma, orders)[k])
  e_in, a_in = paper_epsilon_stages(sigma, [(qq, steps)], delta, orders)
  e_out, a_out = paper_epsilon_stages(sigma, [(qs, steps)], delta, orders)
  share = r_in / (r_in + r_out)
  return {"epsilon": eps, "alpha": alpha, "rdp_inner": r_in, "rdp_outer": r_out,
          "inner_share": share, "outer_share": 1.0 - share,
          "epsilon_inner_alone": e_in, "alpha_inner_alone": a_in,
          "epsilon_outer_alone": e_out, "alpha_outer_alone": a_out}
