"""The canary audit: sound for a calibrated Gaussian mechanism, catches broken ones."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.privacy import accounting, audit
from fedjax_dp.validation import FedJaxDpError

DELTA = 1e-5
Z = 1.0
N = 2000


@pytest.fixture(scope="module")
def setup():
  rng = np.random.default_rng(0)
  others = jnp.asarray(rng.normal(size=(5, 40)), jnp.float32)
  canary = jnp.zeros(40, jnp.float32).at[3].set(1.0)
  claimed = accounting.compute_epsilon(Z, 1.0, 1, DELTA, accountant="pld")
  return others, canary, claimed


def _max_provable(n, alpha=0.05):
  ub = 1.0 - (alpha / 2) ** (1.0 / n)  # Clopper-Pearson upper bound for 0 errors
  return np.log((1.0 - DELTA - ub) / ub)


def test_separated_scores_give_the_largest_provable_bound():
  res = audit.epsilon_lower_bound(np.zeros(1000), np.ones(1000), DELTA)
  np.testing.assert_allclose(res.epsilon_lower_bound, _max_provable(1000), rtol=1e-6)
  assert res.fpr_upper == res.fnr_upper and 0.0 <= res.threshold < 1.0


def test_identical_distributions_prove_almost_nothing():
  rng = np.random.default_rng(1)
  res = audit.epsilon_lower_bound(rng.normal(size=N), rng.normal(size=N), DELTA)
  assert res.epsilon_lower_bound < 0.3


def test_clopper_pearson_upper_bounds_cover_the_rate():
  ub = audit.clopper_pearson_upper(np.array([0, 10, 100]), 100, 0.05)
  assert ub[0] == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-6)
  assert 0.1 < ub[1] < 0.2 and ub[2] == 1.0


def test_calibrated_gaussian_mechanism_stays_below_the_accountant(setup):
  others, canary, claimed = setup
  res = audit.audit_mechanism(audit.gaussian_sum_mechanism(1.0, Z), others, canary,
                              delta=DELTA, repetitions=N)
  assert 0.0 < res.epsilon_lower_bound < claimed
  assert claimed < _max_provable(N)  # so that a broken mechanism can be caught


@pytest.mark.parametrize("name,mechanism,canary_scale", [
    ("noise off", audit.gaussian_sum_mechanism(1.0, 0.0), 1.0),
    ("noise 10x too small", audit.gaussian_sum_mechanism(1.0, Z / 10), 1.0),
    # Clipping skipped: a canary with norm 10 C moves the sum by 10 C, not C.
    ("clipping skipped", lambda u, k: jnp.sum(u, 0) + Z * jax.random.normal(k, u.shape[1:]),
     10.0),
])
def test_broken_mechanisms_are_caught(setup, name, mechanism, canary_scale):
  others, canary, claimed = setup
  res = audit.audit_mechanism(mechanism, others, canary * canary_scale, delta=DELTA,
                              repetitions=N)
  assert res.epsilon_lower_bound > claimed, name


def test_the_clipped_mechanism_is_not_fooled_by_a_huge_canary(setup):
  """With clipping on, a canary of norm 10 C still moves the sum by only C."""
  others, canary, claimed = setup
  res = audit.audit_mechanism(audit.gaussian_sum_mechanism(1.0, Z), others, canary * 10.0,
                              delta=DELTA, repetitions=N)
  assert res.epsilon_lower_bound < claimed


@pytest.mark.parametrize("kwargs,match", [
    (dict(updates=jnp.zeros((3, 4)), canary=jnp.zeros(5)), "canary"),
    (dict(updates=jnp.zeros(4), canary=jnp.ones(4)), "updates"),
    (dict(updates=jnp.zeros((3, 4)), canary=jnp.zeros(4)), "canary norm"),
    (dict(updates=jnp.zeros((3, 4)), canary=jnp.ones(4), repetitions=5), "repetitions"),
    (dict(updates=jnp.zeros((3, 4)), canary=jnp.ones(4), delta=0.0), "delta"),
    (dict(updates=jnp.zeros((3, 4)), canary=jnp.ones(4), alpha=1.0), "alpha"),
])
def test_audit_rejects_bad_input(kwargs, match):
  args = dict(delta=DELTA, repetitions=20)
  args.update(kwargs)
  with pytest.raises(FedJaxDpError, match=match):
    audit.audit_mechanism(audit.gaussian_sum_mechanism(1.0, 1.0), **args)


def test_lower_bound_rejects_bad_scores():
  with pytest.raises(FedJaxDpError, match="equal size"):
    audit.epsilon_lower_bound(np.zeros(3), np.zeros(4), DELTA)
  with pytest.raises(FedJaxDpError, match="finite"):
    audit.epsilon_lower_bound(np.array([np.nan]), np.zeros(1), DELTA)
