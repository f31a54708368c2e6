"""Calibration: the noise that meets an (epsilon, delta) budget, by inverting the
accountant (via `dp_accounting.calibrate_dp_mechanism`).

* `calibrate`: the smallest noise parameter for which a whole run's event (built from
  that parameter by the caller) meets the target.
* `calibrate_noise_multiplier`: the same for a constant schedule, the inverse of
  `fedjax_dp.privacy.accountants.compute_epsilon`.

Events follow the one convention of `fedjax_dp.privacy.events` ("this module's
convention" below); epsilons come from the accountants of
`fedjax_dp.privacy.accountants`.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import dp_accounting

from fedjax_dp.privacy.accountants import (ACCOUNTANTS,
                                           DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL,
                                           _check_event_supported, _check_orders,
                                           _check_pld_interval, _make_accountant,
                                           deduplicate_rdp_convergence_warnings)
from fedjax_dp.privacy.events import (_check_count, _constant_schedule_event,
                                      dp_accounting_relation)
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_delta, check_epsilon,
                                  check_int, check_positive)

__all__ = ["calibrate", "calibrate_noise_multiplier"]


def calibrate(make_event: Callable[[float], dp_accounting.DpEvent], target_epsilon: float,
              delta: float, accountant: str = "rdp", tol: float = 1e-5,
              orders: Optional[Sequence[float]] = None,
              pld_value_discretization_interval: float =
              DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL, name: str = "noise_multiplier"
              ) -> float:
  """The smallest noise parameter ``x`` with ``epsilon(make_event(x)) <= target``.

  ``make_event(x)`` must build the whole run's `DpEvent` (every round) from the
  parameter being calibrated, with this module's convention, and its epsilon must
  decrease in ``x``: an algorithm passes the function that maps *its own*
  hyper-parameter (e.g. DP-FedAvg's noise multiplier, noise std / clip norm) to the
  events its rounds release, so that no layer re-interprets another's number. A
  bracket ``[lo, hi]`` with eps(lo) > target >= eps(hi) is found by doubling /
  halving from x = 1, then `dp_accounting.calibrate_dp_mechanism` (Brent's method)
  returns an ``x`` within ``tol`` of the exact threshold whose epsilon is <= target.

  Args:
    make_event: ``x -> DpEvent``.
    target_epsilon: epsilon budget, finite and > 0.
    delta: delta in (0, 1).
    accountant: ``"rdp"`` or ``"pld"`` (each evaluation composes from scratch).
    tol: absolute tolerance on ``x`` (> 0).
    orders: RDP orders (default `DEFAULT_RDP_ORDERS`).
    pld_value_discretization_interval: PLD loss grid step in nats (> 0).
    name: what ``x`` is called in error messages.

  Returns:
    ``x`` (float).

  Raises:
    FedJaxDpError: invalid arguments, or a target so large that even x < 1e-3 meets it
      (possible when q is below delta) or so small that x > 2**40 is needed.
  """
  target_epsilon = check_epsilon(target_epsilon, "target_epsilon")
  delta = check_delta(delta)
  check_choice("accountant", accountant, ACCOUNTANTS)
  tol = check_positive("tol", tol)
  orders = _check_orders(orders)
  interval = _check_pld_interval(pld_value_discretization_interval)
  probe = make_event(1.0)
  _check_event_supported(accountant, probe)
  relation = dp_accounting_relation(probe)

  def make_accountant() -> dp_accounting.PrivacyAccountant:
    return _make_accountant(accountant, relation, orders, interval)

  def gap(x: float) -> float:
    return make_accountant().compose(make_event(x)).get_epsilon(delta) - target_epsilon

  with deduplicate_rdp_convergence_warnings():
    lo, hi = 1.0, 1.0
    if gap(1.0) > 0:
      while gap(hi) > 0:
        lo, hi = hi, 2.0 * hi
        if hi > 2.0 ** 40:
          raise FedJaxDpError(
              f"target_epsilon={target_epsilon!r} needs a {name} above 2**40 at "
              f"delta={delta!r}; it is unreachable in practice.")
    else:
      while gap(lo) <= 0:
        lo, hi = lo / 2.0, lo
        if lo < 1e-3:
          raise FedJaxDpError(
              f"target_epsilon={target_epsilon!r} is met even with {name} {hi!r} "
              f"(delta={delta!r}); calibration below 1e-3 is not supported.")
    x = dp_accounting.calibrate_dp_mechanism(
        make_accountant, make_event, target_epsilon, delta,
        bracket_interval=dp_accounting.ExplicitBracketInterval(lo, hi), tol=tol)
  return float(x)


def calibrate_noise_multiplier(target_epsilon: float, delta: float,
                               sampling_rate: Optional[float], rounds: int,
                               steps_per_round: int = 1, sampler: str = "poisson",
                               accountant: str = "rdp",
                               population_size: Optional[int] = None,
                               cohort_size: Optional[int] = None, tol: float = 1e-5,
                               orders: Optional[Sequence[float]] = None,
                               pld_value_discretization_interval: float =
                               DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL) -> float:
  """The smallest noise multiplier (of the event, `make_dp_event`'s convention) whose
  epsilon after ``rounds`` identical rounds is <= target (`calibrate`).

  For a fixed-size cohort this ``z`` is relative to the replace-one sensitivity: a
  DP-FedAvg round whose noise std is ``z_hp * C`` on a sum of updates clipped to C has
  ``z = z_hp / 2`` (`fedjax_dp.privacy.sensitivity.sum_sensitivity`); the algorithms'
  `PrivacySpec` does this conversion (``calibrate_noise_multiplier`` there).

  Args:
    target_epsilon: epsilon budget, finite and > 0.
    delta: delta in (0, 1).
    sampling_rate: q in (0, 1] (see `make_dp_event` for ``"fixed_size"``).
    rounds: number of rounds, int >= 1.
    steps_per_round: noisy releases per round (int >= 1).
    sampler: one of `SAMPLERS`.
    accountant: ``"rdp"`` or ``"pld"`` (with ``"pld"`` calibration takes seconds to
      tens of seconds).
    population_size: n (``"fixed_size"`` only).
    cohort_size: m (``"fixed_size"`` only).
    tol: absolute tolerance on z (> 0).
    orders: RDP orders (default `DEFAULT_RDP_ORDERS`).
    pld_value_discretization_interval: PLD loss grid step in nats (> 0).

  Returns:
    z (float) with ``compute_epsilon(z, ...) <= target_epsilon``.

  Raises:
    FedJaxDpError: invalid arguments, or an unreachable target (see `calibrate`).
  """
  rounds = check_int("rounds", rounds, minimum=1)
  steps_per_round = _check_count(steps_per_round, "steps_per_round")
  # Validates sampler / q / steps / sizes once, with the argument names.
  _constant_schedule_event(1.0, sampling_rate, rounds, steps_per_round, sampler,
                           population_size, cohort_size)
  return calibrate(
      lambda z: _constant_schedule_event(z, sampling_rate, rounds, steps_per_round, sampler,
                                         population_size, cohort_size),
      target_epsilon, delta, accountant, tol, orders, pld_value_discretization_interval)
