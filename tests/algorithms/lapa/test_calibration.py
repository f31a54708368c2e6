"""Tests for LAPA's paper calibration (paper 001, eqs. 18, 19, 23; note 001 Sec. 2.6,
2.8, 2.11, 8 item 1): c(delta), Delta_s = 2C/n, sigma = c Delta / eps (inf when the
budget is exhausted), the switch rule's truth table, and the classical sigma against
dp_accounting's RDP / PLD accountants inside and outside the theorem's eps < 1.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.lapa import calibration as cal
from fedjax_dp.validation import FedJaxDpError


# ---------------------------------------------------------------------------
# c(delta), sensitivity.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("delta,expected", [(1e-5, 4.8448), (1e-4, 4.3436),
                                            (1e-3, 3.7765)])
def test_gaussian_constant_values(delta, expected):
  c = cal.gaussian_constant(delta)
  assert c == pytest.approx(expected, abs=5e-5)
  assert c == pytest.approx(math.sqrt(2 * math.log(1.25 / delta)), rel=1e-14)


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-3, float("nan"), "0.1"])
def test_gaussian_constant_rejects_bad_delta(delta):
  with pytest.raises(FedJaxDpError) as e:
    cal.gaussian_constant(delta)
  assert e.value.option == "delta"


def test_paper_sensitivity():
  assert cal.paper_sensitivity(1.0, 32) == pytest.approx(2.0 / 32, rel=1e-15)
  out = cal.paper_sensitivity(0.5, np.array([1, 10, 400]))
  np.testing.assert_allclose(out, [1.0, 0.1, 0.0025], rtol=1e-15)
  assert out.dtype == np.float64


@pytest.mark.parametrize("clip,n,option", [(0.0, 10, "clip_norm"), (-1.0, 10, "clip_norm"),
                                           (1.0, 0, "num_samples"),
                                           (1.0, [5, 0.5], "num_samples"),
                                           (1.0, float("inf"), "num_samples"),
                                           (1.0, True, "num_samples"),
                                           (1.0, "ten", "num_samples")])
def test_paper_sensitivity_errors(clip, n, option):
  with pytest.raises(FedJaxDpError) as e:
    cal.paper_sensitivity(clip, n)
  assert e.value.option == option


# ---------------------------------------------------------------------------
# noise_std (eq. 19).
# ---------------------------------------------------------------------------

def test_noise_std_values_and_exhausted_budget():
  c, sens = 4.8448, 0.0625
  eps = jnp.array([0.0, -1.0, jnp.nan, 0.5, 2.0], jnp.float32)
  sigma = np.asarray(jax.jit(cal.noise_std)(c, sens, eps))
  assert np.all(np.isinf(sigma[:3])) and np.all(sigma[:3] > 0)
  np.testing.assert_allclose(sigma[3:], [c * sens / 0.5, c * sens / 2.0], rtol=1e-6)
  assert sigma.dtype == np.float32


def test_noise_std_broadcasts_per_device_sensitivity():
  sens = jnp.array([0.1, 0.2, 0.4], jnp.float32)
  sigma = cal.noise_std(2.0, sens, jnp.array([1.0, 1.0, 0.0]))
  np.testing.assert_allclose(np.asarray(sigma), [0.2, 0.4, np.inf], rtol=1e-6)


# ---------------------------------------------------------------------------
# switch_ready (eq. 23).
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("sigma_next,sigma_channel,selected,expected", [
    ([1.0, 2.0, 9.0], [1.0, 3.0, 0.1], [1, 1, 0], True),    # equality counts; unselected ignored
    ([1.0, 3.5, 9.0], [1.0, 3.0, 0.1], [1, 1, 0], False),   # one selected device too noisy
    ([1.0, 2.0, 9.0], [1.0, 3.0, 0.1], [1, 1, 1], False),   # the third now selected
    ([1.0, 2.0, 3.0], [1.0, 3.0, 5.0], [0, 0, 0], False),   # nobody selected
    ([0.0, 2.0, 3.0], [0.0, 3.0, 5.0], [1, 1, 1], False),   # no channel noise: never ready
    ([np.inf, 1.0, 1.0], [5.0, 3.0, 5.0], [1, 1, 1], False),  # exhausted budget
    ([np.nan, 1.0, 1.0], [5.0, 3.0, 5.0], [1, 1, 1], False),
    ([0.5, 1.0, 1.0], [5.0, 3.0, 5.0], [1, 1, 1], True),
])
def test_switch_ready_truth_table(sigma_next, sigma_channel, selected, expected):
  out = jax.jit(cal.switch_ready)(jnp.array(sigma_next, jnp.float32),
                                  jnp.array(sigma_channel, jnp.float32),
                                  jnp.array(selected, bool))
  assert out.shape == () and out.dtype == jnp.bool_
  assert bool(out) is expected


def test_classical_valid():
  out = cal.classical_valid(jnp.array([0.0, 1e-3, 0.5, 0.999, 1.0, 3.0, -1.0]))
  np.testing.assert_array_equal(np.asarray(out), [False, True, True, True, False, False,
                                                  False])


# ---------------------------------------------------------------------------
# The classical calibration against dp_accounting (note 8 item 1).
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("delta", [1e-5, 1e-3])
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_classical_sigma_within_budget_below_one(delta, accountant):
  c = cal.gaussian_constant(delta)
  for eps in [0.01, 0.1, 0.5, 0.9, 0.999]:
    measured = cal.gaussian_epsilon_accountant(c / eps, delta, accountant)
    assert 0 < measured <= eps, (eps, measured)


@pytest.mark.parametrize("delta", sorted(cal.CLASSICAL_BREAKPOINTS))
def test_classical_breakpoints_as_documented(delta):
  """The docstring's table: conservative just below each breakpoint, broken above."""
  c = cal.gaussian_constant(delta)
  for accountant, bp in zip(("rdp", "pld"), cal.CLASSICAL_BREAKPOINTS[delta]):
    below, above = bp - 0.01, bp + 0.01
    assert cal.gaussian_epsilon_accountant(c / below, delta, accountant) <= below
    assert cal.gaussian_epsilon_accountant(c / above, delta, accountant) > above
  # far beyond: the accountant's epsilon exceeds the target (delta = 1e-5, eps = 20)
  if delta == 1e-5:
    assert cal.gaussian_epsilon_accountant(c / 20.0, delta) == pytest.approx(27.04,
                                                                             abs=0.05)


def test_gaussian_epsilon_accountant_edges():
  assert cal.gaussian_epsilon_accountant(0.0, 1e-5) == math.inf
  assert cal.gaussian_epsilon_accountant(math.inf, 1e-5) == 0.0
  # monotone in the noise multiplier
  assert (cal.gaussian_epsilon_accountant(1.0, 1e-5)
          > cal.gaussian_epsilon_accountant(2.0, 1e-5))
  for z, delta, acc, option in [(-1.0, 1e-5, "rdp", "noise_multiplier"),
                                (float("nan"), 1e-5, "rdp", "noise_multiplier"),
                                (True, 1e-5, "rdp", "noise_multiplier"),
                                (1.0, 0.0, "rdp", "delta"),
                                (1.0, 1e-5, "moments", "accountant")]:
    with pytest.raises(FedJaxDpError) as e:
      cal.gaussian_epsilon_accountant(z, delta, acc)
    assert e.value.option == option
