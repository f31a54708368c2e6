"""The canary audit of DP-MOCHA (Hu et al. 2020) through its shipped round: the canary
device's one record flips (x, +1) <-> (-x, -1), one SDCA step lands on the box corners
(both releases at their provable worst case), the audit observes the device's dalpha~ and du
whitened, and the claim is the algorithm's own `DeviceLedger` on what the round reports.

The full 20,000-repetition audit of every break runs in tests/auditing/test_targets.py
(it parametrises over every target; a few seconds here). This file checks the worst
case is realised, the observation is exactly the Gaussian the ledger composes, the
claims, and a reduced audit: 3,000 scored repetitions per world and 2,000 to fix the test
(one batch of 5,000, the program test_targets.py compiles too). Over seeds 0-9 it bounded
the half-noise round by 2.42-3.03 and the shipped one by 0.81-1.33, against a claim of
2.10; with 2,000 scored repetitions the half noise was caught by as little as 0.03, and
with 4,000 + 1,000 the shipped bound fell to 0 for one seed (a poorly chosen test).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from fedjax_dp import auditing
from fedjax_dp.algorithms import audit_targets
from fedjax_dp.algorithms.dp_mocha import audit as dp_mocha_audit
from fedjax_dp.algorithms.dp_mocha import mechanism
from fedjax_dp.privacy import accountants

P = dp_mocha_audit.PARAMS["dp_mocha"]
REDUCED = dict(repetitions=3000, calibration=2000)


def _target():
  (target,) = audit_targets.targets_for("dp_mocha")
  return target


def _z():
  """(z1, z2): line 6's noise multiplier with the provable sensitivity 2 (n_t = 1, one
  step) and line 7's (sigma2), from the shipped functions."""
  s1 = float(mechanism.dual_sensitivity_paper(P["lam"], P["xi"] * P["devices"], 1))
  return s1 * P["sigma1"] / float(mechanism.dual_sensitivity_provable(1, 1)), P["sigma2"]


def _pld(z):
  return accountants.compute_epsilon(z, 1.0, 1, audit_targets.DELTA, accountant="pld")


@pytest.fixture(scope="module")
def reports():
  cache, target = {}, _target()
  return {b: auditing.run(target.build(b), key=jax.random.key(0), cache=cache, **REDUCED)
          for b in target.breaks}


@pytest.fixture(scope="module")
def one_round():
  """One audited round in each world, 20,000 keys: (state, metrics) per world."""
  setup = _target().build()
  hp = jax.tree_util.tree_map(lambda v: v[0], setup.schedule())
  keys = jax.random.split(jax.random.key(3), 20000)
  assert setup.round_in is setup.round_out  # replace-one: one round, one compilation
  fn = jax.jit(jax.vmap(setup.round_in, in_axes=(None, None, None, 0)))
  out = {world: jax.device_get(fn(setup.init, data, hp, keys))
         for world, data in (("in", setup.data_in), ("out", setup.data_out))}
  return setup, out


def test_target_is_registered_with_its_breaks():
  target = _target()
  assert target.name == "dp_mocha" and target.algorithm == "dp_mocha"
  assert set(target.breaks) == {"none", "noise-half", "paper-sensitivity"}
  shipped, half = target.build(), target.build("noise-half")
  assert shipped.rounds == 1 and shipped.inclusion_prob == 1.0
  assert shipped.observation == "attributable"  # the device's releases, with its name
  assert shipped.delta == audit_targets.DELTA
  # paper-sensitivity changes only the claim: it shares the shipped simulation.
  assert target.build("paper-sensitivity").simulation_key == shipped.simulation_key
  assert half.simulation_key != shipped.simulation_key
  np.testing.assert_allclose(half.hparams.sigma1, shipped.hparams.sigma1 / 2)
  np.testing.assert_allclose(half.hparams.sigma2, shipped.hparams.sigma2 / 2)
  with pytest.raises(Exception, match="break"):
    target.build("noise-off")


def test_the_canary_step_hits_the_box_corners_and_the_round_reports_the_provable_z(
    one_round):
  _, out = one_round
  xi = P["xi"]
  alpha_in = out["in"][0].opt_state.opt_state.alpha[:, 0, 0]  # noise-free alpha = xi dalpha
  alpha_out = out["out"][0].opt_state.opt_state.alpha[:, 0, 0]
  np.testing.assert_allclose(alpha_in, xi)
  np.testing.assert_allclose(alpha_out, -xi)
  # |dalpha - dalpha'| = 2: the provable sensitivity, attained.
  assert float(mechanism.dual_sensitivity_provable(1, 1)) == pytest.approx(2.0)
  z1, z2 = _z()
  extras = out["in"][1].extras
  np.testing.assert_allclose(extras["device_dual_noise_multiplier"][:, 0], z1, rtol=1e-5)
  np.testing.assert_allclose(extras["device_primal_noise_multiplier"][:, 0], z2, rtol=1e-5)
  z = (z1 ** -2 + z2 ** -2) ** -0.5
  np.testing.assert_allclose(out["in"][1].client_noise_multipliers, z, rtol=1e-5)


def test_the_observation_is_the_rounds_own_release(one_round):
  """The observed du is the one the round applied to W (w += Omega du / (2 lam), Omega =
  I / m): undo the whitening with the round's noise scales and compare."""
  setup, out = one_round
  lam, xi, m = P["lam"], P["xi"], P["devices"]
  state = out["in"][0]
  o1, o2 = state.params["releases"][:, 0], state.params["releases"][:, 1]
  s1 = float(mechanism.dual_sensitivity_paper(lam, xi * m, 1))
  a = o1 * s1 * P["sigma1"]                          # dalpha~ = o1 std_b
  du = np.sign(a) * o2 * 2 * xi * np.abs(a) * P["sigma2"]   # std_p = 2 xi |dalpha~| sigma2
  w0 = np.asarray(setup.init.opt_state.params["w"])[0, 0]
  du_round = (state.opt_state.params["w"][:, 0, 0] - w0) * 2 * lam * m
  np.testing.assert_allclose(du, du_round, rtol=2e-3, atol=1e-4)
  np.testing.assert_allclose(state.opt_state.opt_state.u[:, 0, 0], du_round, rtol=2e-3,
                             atol=1e-4)


def test_the_observation_is_the_composed_gaussian_the_ledger_claims(one_round):
  """o ~ N(+-(1/z1, 1/z2) / 2, I) in the two worlds: the mechanism the ledger composes,
  exactly (so the audit can be tight)."""
  _, out = one_round
  z1, z2 = _z()
  for world, sign in (("in", 1.0), ("out", -1.0)):
    o = np.asarray(out[world][0].params["releases"], np.float64)
    n = o.shape[0]
    np.testing.assert_allclose(o.mean(0), sign * np.array([1 / z1, 1 / z2]) / 2,
                               atol=4.5 / np.sqrt(n))
    np.testing.assert_allclose(np.cov(o.T), np.eye(2), atol=0.1)


def test_claims_are_the_ledgers(reports):
  z1, z2 = _z()
  shipped = reports["none"].claimed_epsilon
  assert shipped == pytest.approx(_pld((z1 ** -2 + z2 ** -2) ** -0.5), rel=1e-4)
  assert 1.0 < shipped < 3.0
  # noise-half: the claim is for the configured noise (unchanged).
  assert reports["noise-half"].claimed_epsilon == pytest.approx(shipped, rel=1e-9)
  # paper-sensitivity: line 6 accounted as std_b / s1 = sigma1.
  paper = (P["sigma1"] ** -2 + z2 ** -2) ** -0.5
  assert reports["paper-sensitivity"].claimed_epsilon == pytest.approx(_pld(paper),
                                                                       rel=1e-4)
  assert reports["paper-sensitivity"].lower_bound == reports["none"].lower_bound


def test_reduced_audit_passes_the_shipped_code_and_catches_half_the_noise(reports):
  shipped, half = reports["none"], reports["noise-half"]
  assert not shipped.violated, auditing.describe(shipped)
  assert shipped.lower_bound.epsilon_lower_bound > 0.3 * shipped.claimed_epsilon, \
      auditing.describe(shipped)
  assert half.violated, auditing.describe(half)
