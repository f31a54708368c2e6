"""The one-run estimator's formulas (fedjax_dp.auditing.empirical) against independent
computations: the equal-variance case against the GDP closed form (Dong, Roth, Su 2022,
Cor. 2.13, via dp_accounting's Gaussian mechanism), unequal variances against numerical
integration of the hockey-stick divergence."""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from fedjax_dp.auditing import empirical
from fedjax_dp.validation import FedJaxDpError


def _hockey_stick_quad(m1, s1, m0, s0, eps):
  """integral of max(0, p - e^eps q) by quadrature (independent of the closed form)."""
  f = lambda x: max(0.0, stats.norm.pdf(x, m1, s1) - math.exp(eps) * stats.norm.pdf(x, m0, s0))
  lo = min(m0 - 40 * s0, m1 - 40 * s1)
  hi = max(m0 + 40 * s0, m1 + 40 * s1)
  pts = sorted({m0, m1})
  return integrate.quad(f, lo, hi, points=pts, limit=500, epsabs=1e-13)[0]


@pytest.mark.parametrize("m1,s1,m0,s0,eps", [
    (1.0, 1.0, 0.0, 1.0, 0.5), (2.5, 1.0, 0.0, 1.0, 3.0), (1.0, 1.3, 0.0, 1.0, 1.0),
    (0.3, 0.7, 0.0, 1.0, 0.2), (0.02, 0.009, 0.001, 0.008, 1.5), (0.0, 2.0, 0.0, 1.0, 0.4)])
def test_hockey_stick_closed_form_matches_quadrature(m1, s1, m0, s0, eps):
  got = empirical.gaussian_pair_delta(m1, s1, m0, s0, eps)
  want = _hockey_stick_quad(m1, s1, m0, s0, eps)
  assert got == pytest.approx(want, abs=1e-9, rel=1e-6)


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0, 4.0])
def test_equal_variances_are_gaussian_dp(mu):
  # Cor. 2.13 written out independently, and the Gaussian mechanism's (eps, delta) curve
  # of dp_accounting (sensitivity 1, sigma = 1 / mu) at the same eps.
  import dp_accounting
  for eps in (0.1, 1.0, 3.0):
    closed = stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
    assert empirical.gdp_delta(mu, eps) == pytest.approx(closed, rel=1e-9, abs=1e-15)
    assert empirical.gaussian_pair_delta(mu * 0.3, 0.3, 0.0, 0.3, eps) == pytest.approx(
        closed, rel=1e-7, abs=1e-13)
  delta = 1e-5
  eps = empirical.gaussian_pair_epsilon(0.0, 1.0, mu, 1.0, delta)
  acct = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
  acct.compose(dp_accounting.GaussianDpEvent(1.0 / mu))
  assert eps == pytest.approx(acct.get_epsilon(delta), rel=2e-3)


def test_epsilon_is_symmetric_and_monotone():
  a = empirical.gaussian_pair_epsilon(0.0, 1.0, 1.0, 1.5, 1e-3)
  b = empirical.gaussian_pair_epsilon(1.0, 1.5, 0.0, 1.0, 1e-3)
  assert a == pytest.approx(b)
  # Further apart: larger epsilon; the delta at the returned epsilon is delta.
  assert empirical.gaussian_pair_epsilon(0.0, 1.0, 2.0, 1.5, 1e-3) > a
  worst = max(empirical.gaussian_pair_delta(1.0, 1.5, 0.0, 1.0, a),
              empirical.gaussian_pair_delta(0.0, 1.0, 1.0, 1.5, a))
  assert worst == pytest.approx(1e-3, rel=1e-5)
  assert empirical.gaussian_pair_epsilon(0.0, 1.0, 0.0, 1.0, 1e-3) == 0.0
  assert math.isinf(empirical.gaussian_pair_epsilon(0.0, 1.0, 1e4, 1.0, 1e-3))


def test_estimate_and_lower_bound_from_scores():
  rng = np.random.default_rng(0)
  out = rng.normal(0.0, 1.0, 500)
  for mu, lo, hi in ((0.0, 0.0, 0.8), (2.0, 5.0, 12.0)):
    est = empirical.estimate_epsilon(rng.normal(mu, 1.0, 500), out, 1e-3)
    assert lo <= est["epsilon"] <= hi, (mu, est)
  far = rng.normal(12.0, 1.0, 500)
  bound = empirical.one_run_lower_bound(far, out, 1e-6)
  assert bound["confidence"] == 0.95 and bound["epsilon"] > 2.0
  assert empirical.one_run_lower_bound(rng.normal(0.0, 1.0, 500), out, 1e-6)["epsilon"] < 0.5


def test_bad_input_names_the_option():
  with pytest.raises(FedJaxDpError, match="canary scores") as e:
    empirical.fit_gaussian([1.0])
  assert e.value.option == "canaries"
  with pytest.raises(FedJaxDpError, match="s0"):
    empirical.gaussian_pair_epsilon(0.0, 0.0, 1.0, 1.0, 1e-3)
  with pytest.raises(FedJaxDpError, match="delta"):
    empirical.gaussian_pair_epsilon(0.0, 1.0, 1.0, 1.0, 2.0)
  with pytest.raises(FedJaxDpError, match="confidence"):
    empirical.one_run_lower_bound([1.0, 2.0], [0.0, 1.0], 1e-3, confidence=1.0)


def test_equal_variance_estimate_and_reliability_note():
  """The equal-variance estimate is the GDP curve of (mu1 - mu0) / s0, independent of
  the inserted scores' spread; with few canaries the report says the fit is
  unreliable, with many it does not."""
  from fedjax_dp.auditing import empirical
  rng = np.random.default_rng(0)
  out = rng.normal(0.0, 1.0, 400)
  ins_narrow = rng.normal(1.0, 0.5, 400)
  ins_wide = (ins_narrow - ins_narrow.mean()) * 3.0 + ins_narrow.mean()
  a = empirical.estimate_epsilon(ins_narrow, out, 1e-3)
  b = empirical.estimate_epsilon(ins_wide, out, 1e-3)
  assert a["epsilon_equal_variance"] == pytest.approx(b["epsilon_equal_variance"], rel=1e-9)
  # the two-variance estimate depends on s1 (either way: its loss is unbounded)
  assert abs(b["epsilon"] - a["epsilon"]) > 1.0
  mu = a["gdp_mu"]
  eps = a["epsilon_equal_variance"]
  assert empirical.gdp_delta(mu, eps) == pytest.approx(1e-3, rel=1e-3)
  assert empirical._reliability(20, 20).startswith("UNRELIABLE")
  assert not empirical._reliability(400, 400).startswith("UNRELIABLE")
