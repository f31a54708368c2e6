"""Tests for `fedjax_dp.algorithms.rdp_pfl.paper_accounting` (paper 003's own privacy
calibration, Theorem 1, Eqs. 12-14)."""

from __future__ import annotations

import math

import dp_accounting
from dp_accounting import rdp as dp_rdp
import numpy as np
import pytest

from fedjax_dp.algorithms.rdp_pfl import paper_accounting as pa
from fedjax_dp.validation import FedJaxDpError

ORDERS = np.array(pa.OPACUS_ORDERS)


def _conversion(orders, delta):
  """Eq. (12)'s second term, written out independently."""
  return (np.log(1 / delta) + (orders - 1) * np.log(1 - 1 / orders) - np.log(orders)) / (
      orders - 1)


def test_opacus_orders():
  assert len(pa.OPACUS_ORDERS) == 99 + 52
  assert pa.OPACUS_ORDERS[:3] == pytest.approx((1.1, 1.2, 1.3))
  assert pa.OPACUS_ORDERS[98] == pytest.approx(10.9)
  assert pa.OPACUS_ORDERS[99:] == tuple(float(a) for a in range(12, 64))  # no 11


# The note's 3.5 table (T = 200, delta = 1e-3, q^Q = q^S = q).
@pytest.mark.parametrize("tau0,q,eps,sigma", [
    (1, 0.10, 2.0, 3.349),
    (1, 0.10, 4.0, 1.983),
    (1, 0.10, 6.0, 1.509),
    (5, 0.05, 2.0, 3.691),
])
def test_sigma_table(tau0, q, eps, sigma):
  found = pa.paper_calibrate_sigma(eps, 1e-3, q, q, rounds=200, local_epochs=tau0, tol=1e-4)
  assert found == pytest.approx(sigma, abs=0.01)
  spent, _ = pa.paper_epsilon(found, q, q, 200, tau0, 1e-3)
  assert eps - 1e-4 <= spent <= eps
  # The smallest such sigma: a little less noise breaks the budget.
  assert pa.paper_epsilon(found * 0.995, q, q, 200, tau0, 1e-3)[0] > eps


def test_default_tolerance_is_on_epsilon():
  sigma = pa.paper_calibrate_sigma(2.0, 1e-3, 0.1, 0.1, 200, 1)
  eps, _ = pa.paper_epsilon(sigma, 0.1, 0.1, 200, 1, 1e-3)
  assert 2.0 - 0.01 <= eps <= 2.0


def test_regression_value_single_stage():
  """q = 256/60000, sigma = 1.1, 60 epochs of 234 steps, delta = 1e-5: eps ~ 2.597
  (the note's Opacus-equivalent value; dp-accounting's RDP gives 2.594), alpha = 8.1."""
  eps, alpha = pa.paper_epsilon_stages(1.1, [(256 / 60000, 14040)], 1e-5)
  assert eps == pytest.approx(2.597, abs=0.01)
  assert alpha == pytest.approx(8.1)
  # The same through paper_epsilon with the outer stage switched off (q^S = 0).
  assert pa.paper_epsilon(1.1, 256 / 60000, 0.0, 14040, 1, 1e-5) == (eps, alpha)
  assert pa.paper_epsilon(1.1, 256 / 60000, 0.0, 7020, 2, 1e-5)[0] == pytest.approx(eps)


def test_full_sampling_closed_form():
  sigma, steps, delta = 2.5, 30, 1e-4
  np.testing.assert_allclose(pa.per_step_rdp(1.0, sigma), ORDERS / (2 * sigma**2),
                             rtol=1e-12)
  eps, alpha = pa.paper_epsilon(sigma, 1.0, 1.0, steps, 1, delta)
  by_hand = 2 * steps * ORDERS / (2 * sigma**2) + _conversion(ORDERS, delta)
  assert eps == pytest.approx(by_hand.min(), rel=1e-12)
  assert alpha == ORDERS[np.argmin(by_hand)]
  np.testing.assert_array_equal(pa.per_step_rdp(0.0, sigma), 0.0)


def test_composition_is_a_sum_over_stages_and_steps():
  sigma, delta = 1.7, 1e-3
  r_q, r_s = pa.per_step_rdp(0.1, sigma), pa.per_step_rdp(0.03, sigma)
  by_hand = 40 * 3 * (r_q + r_s) + _conversion(ORDERS, delta)
  eps, alpha = pa.paper_epsilon(sigma, 0.1, 0.03, rounds=40, local_epochs=3, delta=delta)
  assert eps == pytest.approx(np.nanmin(by_hand), rel=1e-12)
  assert alpha == ORDERS[np.nanargmin(by_hand)]
  assert pa.paper_epsilon(sigma, 0.03, 0.1, 40, 3, delta) == (eps, alpha)  # symmetric
  assert pa.paper_epsilon_stages(sigma, [(0.1, 120), (0.03, 120)], delta) == (eps, alpha)


def test_epsilon_decreases_in_sigma_and_increases_in_rounds():
  sigmas = np.linspace(0.6, 8.0, 25)
  eps = [pa.paper_epsilon(s, 0.1, 0.1, 200, 1, 1e-3)[0] for s in sigmas]
  assert all(b < a for a, b in zip(eps, eps[1:]))
  by_rounds = [pa.paper_epsilon(2.0, 0.1, 0.1, T, 1, 1e-3)[0] for T in (10, 50, 200, 1000)]
  assert all(b > a for a, b in zip(by_rounds, by_rounds[1:]))


def test_budget_split():
  equal = pa.budget_split(3.349, 0.1, 0.1, 200, 1, 1e-3)
  assert equal["inner_share"] == pytest.approx(0.5) and equal["outer_share"] == pytest.approx(0.5)
  assert (equal["epsilon"], equal["alpha"]) == pa.paper_epsilon(3.349, 0.1, 0.1, 200, 1, 1e-3)
  assert equal["epsilon_inner_alone"] == equal["epsilon_outer_alone"] < equal["epsilon"]
  k = pa.OPACUS_ORDERS.index(equal["alpha"])
  assert equal["rdp_inner"] == pytest.approx(200 * pa.per_step_rdp(0.1, 3.349)[k])
  unequal = pa.budget_split(3.349, 0.2, 0.1, 200, 1, 1e-3)
  assert unequal["inner_share"] > 0.5
  assert unequal["inner_share"] == pytest.approx(
      unequal["rdp_inner"] / (unequal["rdp_inner"] + unequal["rdp_outer"]))
  assert unequal["epsilon_inner_alone"] > unequal["epsilon_outer_alone"]
  assert pa.budget_split(3.349, 0.05, 0.1, 200, 1, 1e-3)["inner_share"] < 0.5


@pytest.mark.parametrize("sigma,q_q,q_s,T,tau0,delta", [
    (3.349, 0.1, 0.1, 200, 1, 1e-3),
    (1.1, 256 / 60000, 256 / 60000, 7020, 1, 1e-5),
    (2.0, 0.05, 0.2, 100, 5, 1e-3),
    (20.0, 1.0, 1.0, 200, 1, 1e-3),
])
def test_close_to_dp_accountings_own_epsilon(sigma, q_q, q_s, T, tau0, delta):
  """dp-accounting's conversion is the same formula over a superset of orders (adds 11
  and 128 ... 1024), so its epsilon is <= the paper's and within a few %; with the
  Opacus orders the two agree."""
  event = dp_accounting.ComposedDpEvent([
      dp_accounting.SelfComposedDpEvent(
          dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)),
          T * tau0) for q in (q_q, q_s)])
  ours, _ = pa.paper_epsilon(sigma, q_q, q_s, T, tau0, delta)
  theirs = dp_rdp.RdpAccountant().compose(event).get_epsilon(delta)
  assert theirs <= ours * (1 + 1e-12) and ours <= 1.03 * theirs
  same_orders = dp_rdp.RdpAccountant(list(pa.OPACUS_ORDERS)).compose(event).get_epsilon(delta)
  assert ours == pytest.approx(same_orders, rel=1e-9)


def test_opacus_grid_is_looser_when_the_best_order_is_above_63():
  """Small budgets want orders > 63, which the Opacus grid lacks (dp-accounting goes to
  1024): there the paper's epsilon is markedly larger (here ~50%)."""
  sigma, q, steps, delta = 4.0, 0.01, 50, 1e-6
  event = dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), 2 * steps)
  ours, alpha = pa.paper_epsilon(sigma, q, q, steps, 1, delta)
  theirs, their_alpha = dp_rdp.RdpAccountant().compose(event).get_epsilon_and_optimal_order(
      delta)
  assert alpha == 63.0 and their_alpha > 63
  assert 1.3 * theirs < ours < 2.0 * theirs


@pytest.mark.parametrize("call,match", [
    (lambda: pa.paper_epsilon(0.0, 0.1, 0.1, 10, 1, 1e-3), "sigma must be > 0"),
    (lambda: pa.paper_epsilon(1.0, 1.5, 0.1, 10, 1, 1e-3), "q_query must be in"),
    (lambda: pa.paper_epsilon(1.0, 0.1, 0.1, 0, 1, 1e-3), "rounds must be >= 1"),
    (lambda: pa.paper_epsilon(1.0, 0.1, 0.1, 10, 1, 1.0), "delta must be in"),
    (lambda: pa.paper_epsilon(1.0, 0.1, 0.1, 10, 1, 1e-3, orders=[0.5, 2]), "orders"),
    (lambda: pa.paper_epsilon_stages(1.0, [], 1e-3), "stages"),
    (lambda: pa.paper_calibrate_sigma(0.0, 1e-3, 0.1, 0.1, 10, 1), "target_epsilon"),
    (lambda: pa.paper_calibrate_sigma(0.01, 1e-3, 0.1, 0.1, 10, 1), "not reachable"),
    (lambda: pa.paper_calibrate_sigma(2.0, 1e-3, 0.1, 0.1, 10, 1, tol=0), "tol must be > 0"),
    (lambda: pa.budget_split(1.0, 0.1, 0.0, 10, 1, 1e-3), "q_support must be in"),
])
def test_errors(call, match):
  with pytest.raises(FedJaxDpError, match=match):
    call()


def test_paper_conversion_handles_infinite_orders():
  rdp = np.full(3, math.inf)
  assert pa.paper_conversion(rdp, [2.0, 3.0, 4.0], 1e-3)[0] == math.inf
  rdp[1] = 0.5
  eps, alpha = pa.paper_conversion(rdp, [2.0, 3.0, 4.0], 1e-3)
  assert alpha == 3.0 and eps == pytest.approx(0.5 + _conversion(np.array(3.0), 1e-3))
