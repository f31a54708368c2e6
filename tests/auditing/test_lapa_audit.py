"""The canary audits of LAPA (paper 001) through its shipped round: one device holds the
canary record (x, 0) or (x, 1) and two fillers, its minibatch all three (B = |D_i| = 3);
the uniform allocator fixes the artificial noise sigma = c Delta_s T / eps_T (eqs. 18-19)
and the channel noise, 1.25 sigma, makes the switch (eq. 23) turn the artificial noise
off after round 1. The model's change is -eta times the device's upload, so the audit
observes the very release the per-device ledger composes.

Checked here: the canary moves every upload by exactly the enforced sensitivity (2C/B
with per-example clipping, 2C with eq. 17's clipping of the minibatch mean), the noise is
the SD the round reports (artificial plus channel, then channel alone), the claims are
the ledger's, and the audits (20,000 scored repetitions per world, the size
tests/auditing/test_targets.py runs for every target; a simulation of both worlds takes
about 2 s of CPU here) pass the shipped code and catch half the noise and, for eq. 17's
clipping, the paper's sensitivity 2C/|D_i|. Measured over seeds 0-2 (both targets): the
shipped round bounded by 1.32-1.58 against a claim of 2.07, half the noise by 3.35-3.42;
the paper-sensitivity claim is 0.56. At 3,000 + 2,000 repetitions the shipped bound fell
to 0.35 (seed 0) and paper-sensitivity was not caught, hence the full size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import auditing
from fedjax_dp.algorithms import audit_targets
from fedjax_dp.algorithms.lapa import calibration
from fedjax_dp.privacy import device_ledger

NAMES = ("lapa/per_example", "lapa/aggregate")
ETA = 1e-4          # the targets' learning rate: the model's change is -ETA x the upload
KEYS = 20000


def _target(name):
  return next(t for t in audit_targets.TARGETS if t.name == name)


def _expected(name):
  """(sensitivity, artificial SD, channel SD, paper's sensitivity) of a target, from its
  parameters and the paper's formulas (eqs. 18-19), not from the algorithm."""
  p = audit_targets.PARAMS[name]
  b, c_norm = 3, 1.0
  paper = 2 * c_norm / b                                  # 2C/|D_i|, |D_i| = 3
  sigma = calibration.gaussian_constant(audit_targets.DELTA) * paper * p["rounds"] / \
      p["epsilon_total"]
  sens = 2 * c_norm / b if p["clipping"] == "per_example" else 2 * c_norm
  return sens, sigma, p["channel_ratio"] * sigma, paper


def _z_effective(name, sensitivity=None):
  """Round 1 (artificial and channel noise) and round 2 (channel alone) composed."""
  sens, sa, sc, _ = _expected(name)
  sens = sens if sensitivity is None else sensitivity
  return (sens ** 2 / (sa ** 2 + sc ** 2) + sens ** 2 / sc ** 2) ** -0.5


def _pld(z):
  return device_ledger.gaussian_epsilon(z ** -2.0, audit_targets.DELTA, "pld")


@pytest.fixture(scope="module")
def reports():
  out = {}
  for name in NAMES:
    cache, target = {}, _target(name)
    out[name] = {b: auditing.run(target.build(b), key=jax.random.key(0), cache=cache)
                 for b in target.breaks}
  return out


def _simulate(setup):
  """Both rounds of ``setup`` in each world, KEYS repetitions: ``{world: (changes [KEYS,
  2, P], z, sigma_devices, sigma_channel, switched, sensitivity)}``."""
  hp = setup.schedule()
  assert setup.round_in is setup.round_out  # replace-one: one round, one compilation

  def one(data, key):
    def body(state, hp_t):
      new, m = setup.round_in(state, data, hp_t, key)
      change = (jax.flatten_util.ravel_pytree(new.params)[0]
                - jax.flatten_util.ravel_pytree(state.params)[0])
      return new, (change, m.client_noise_multipliers, m.extras["sigma_devices"],
                   m.extras["sigma_channel"], m.extras["switched"], m.sensitivity)
    return jax.lax.scan(body, setup.init, hp)[1]

  fn = jax.jit(jax.vmap(one, in_axes=(None, 0)))
  keys = jax.random.split(jax.random.key(3), KEYS)
  return {w: jax.device_get(fn(d, keys))
          for w, d in (("in", setup.data_in), ("out", setup.data_out))}


@pytest.fixture(scope="module")
def simulated():
  out = {}
  for name in NAMES:
    setup = _target(name).build()
    out[name] = (setup, _simulate(setup))
  return out


def _canary_direction(setup):
  """The unit direction of the canary's gradient (the same for both labels)."""
  model = audit_targets._model()
  params = setup.init.params
  x = jnp.asarray(setup.data_in.x[0, :1])

  def loss(p):
    return model.per_example_loss(model.apply(p, x), jnp.zeros((1,), jnp.int32))[0]

  g = jax.flatten_util.ravel_pytree(jax.grad(loss)(params))[0]
  return np.asarray(g / jnp.linalg.norm(g), np.float64)


def test_targets_are_registered_with_their_breaks():
  assert [t.name for t in audit_targets.targets_for("lapa")] == list(NAMES)
  per_example, aggregate = (_target(n) for n in NAMES)
  assert set(per_example.breaks) == {"none", "noise-half"}
  assert set(aggregate.breaks) == {"none", "noise-half", "paper-sensitivity"}
  for target in (per_example, aggregate):
    shipped, half = target.build(), target.build("noise-half")
    assert shipped.rounds == 2 and shipped.inclusion_prob == 1.0
    assert shipped.delta == audit_targets.DELTA
    assert half.simulation_key != shipped.simulation_key
    np.testing.assert_allclose(half.hparams.channel_std, shipped.hparams.channel_std / 2)
    np.testing.assert_allclose(half.hparams.paper_sensitivity,
                               shipped.hparams.paper_sensitivity / 2)
  assert (aggregate.build("paper-sensitivity").simulation_key
          == aggregate.build().simulation_key)
  with pytest.raises(Exception, match="break"):
    per_example.build("paper-sensitivity")


@pytest.mark.parametrize("name", NAMES)
def test_the_round_reports_its_noise_and_switches_after_round_one(simulated, name):
  _, out = simulated[name]
  sens, sa, sc, _ = _expected(name)
  _, z, sd_art, sd_ch, switched, reported_sens = out["in"]
  np.testing.assert_allclose(reported_sens, sens, rtol=1e-6)
  np.testing.assert_allclose(sd_art[:, 0, 0], sa, rtol=1e-5)   # round 1: eqs. 18-19
  np.testing.assert_array_equal(sd_art[:, 1, 0], 0.0)          # round 2: switched off
  np.testing.assert_array_equal(switched, [[0, 1]] * KEYS)
  np.testing.assert_allclose(sd_ch, sc, rtol=1e-5)
  np.testing.assert_allclose(z[:, 0, 0], np.hypot(sa, sc) / sens, rtol=1e-5)
  np.testing.assert_allclose(z[:, 1, 0], sc / sens, rtol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_the_canary_moves_each_upload_by_the_enforced_sensitivity(simulated, name):
  """The upload (the model's change over -ETA) is N(g +- sens/2 u, SD^2 I) in the two
  worlds, SD the round's reported total: the Gaussian mechanism the ledger composes,
  at its worst case."""
  setup, out = simulated[name]
  sens, sa, sc, _ = _expected(name)
  u = _canary_direction(setup)
  up_in = np.asarray(out["in"][0], np.float64) / -ETA     # [KEYS, 2, P]
  up_out = np.asarray(out["out"][0], np.float64) / -ETA
  diff = up_in.mean(0) - up_out.mean(0)                   # [2, P]
  for t, sd in enumerate((np.hypot(sa, sc), sc)):
    se = sd * np.sqrt(2.0 / KEYS)
    # in: the canary's clipped gradient is +C u (label 0), out: -C u (over B).
    assert diff[t] @ u == pytest.approx(sens, abs=5 * se)
    np.testing.assert_allclose(diff[t] - (diff[t] @ u) * u, 0.0, atol=5 * se)
    np.testing.assert_allclose(up_out[:, t].std(0), sd, rtol=0.03)


def test_claims_are_the_ledgers(reports):
  for name in NAMES:
    rep = reports[name]
    shipped = rep["none"].claimed_epsilon
    assert shipped == pytest.approx(_pld(_z_effective(name)), rel=1e-4)
    assert 1.5 < shipped < 2.5
    # noise-half: the claim is for the configured noise (unchanged).
    assert rep["noise-half"].claimed_epsilon == pytest.approx(shipped, rel=1e-9)
  rep = reports["lapa/aggregate"]
  paper = _expected("lapa/aggregate")[3]
  assert rep["paper-sensitivity"].claimed_epsilon == pytest.approx(
      _pld(_z_effective("lapa/aggregate", sensitivity=paper)), rel=1e-4)
  assert rep["paper-sensitivity"].lower_bound == rep["none"].lower_bound


@pytest.mark.parametrize("name", NAMES)
def test_audit_passes_the_shipped_code_and_catches_the_breaks(reports, name):
  rep = reports[name]
  shipped = rep["none"]
  assert not shipped.violated, auditing.describe(shipped)
  assert shipped.lower_bound.epsilon_lower_bound > 0.3 * shipped.claimed_epsilon, \
      auditing.describe(shipped)
  for brk, report in rep.items():
    if brk != "none":
      assert report.violated, (brk, auditing.describe(report))
