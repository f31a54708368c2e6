"""The canary audits of LAPA (paper 001) through its shipped round.

``lapa/per_example`` and ``lapa/aggregate``: one device holds the canary record (x, 0)
or (x, 1) and two fillers, its minibatch all three (B = |D_i| = 3); the uniform
allocator fixes the artificial noise sigma = c Delta_s T / eps_T (eqs. 18-19) in both
rounds, on an ideal channel (the channel's noise is not counted by the guarantee, issue
30 F3). The model's change is -eta times the device's upload, so the audit observes the
very release the per-device ledger composes; the claim is the ledger's privacy-filter
bound (issue 30 F4), whose budget is the uniform schedule's spend (+0.1%).

``lapa/label_statistics`` (issue 30 F2): two devices, the canary's label changes device
0's label histogram by (+1, -1); the audit observes the histogram the base station
received in round 1 (what the Wasserstein weights are computed from), whitened by the
configured noise. Its breaks: half the label noise, and the paper's exact label
statistics claimed as covered (the old code), which moves the weights deterministically.

Checked here: the canary moves every upload by exactly the enforced sensitivity (2C/B
with per-example clipping, 2C with eq. 17's clipping of the minibatch mean) and the
label release by exactly sqrt(2) counts, the noise is the SD the round reports, the
claims are the ledger's bound recomputed from the definitions, and the audits (20,000
scored repetitions per world, the size tests/auditing/test_targets.py runs for every
target; a simulation of both worlds takes a few seconds of CPU here) pass the shipped
code and catch every break. Measured (seed 0, the README's audit table): per_example
claimed 2.070, shipped bound 1.331, noise-half 3.262; aggregate 2.077, 1.342, 3.266,
paper-sensitivity claimed 0.558; label_statistics 2.300, 1.477, noise-half 3.315,
exact-label-statistics 8.597 (the most 20,000 repetitions can prove).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import auditing
from fedjax_dp.algorithms import audit_targets
from fedjax_dp.algorithms.lapa import audit as lapa_audit
from fedjax_dp.privacy import device_ledger

UPLOADS = ("lapa/per_example", "lapa/aggregate")
LABELS = "lapa/label_statistics"
NAMES = UPLOADS + (LABELS,)
ETA = 1e-4          # the targets' learning rate: the model's change is -ETA x the upload
KEYS = 20000


def _target(name):
  return audit_targets.target(name)


def _c():
  return math.sqrt(2 * math.log(1.25 / audit_targets.DELTA))


def _expected(name):
  """(sensitivity, artificial SD, paper's sensitivity) of an upload target, from its
  parameters and the paper's formulas (eqs. 18-19), not from the algorithm."""
  p = lapa_audit.PARAMS[name]
  b, c_norm = 3, 1.0
  paper = 2 * c_norm / b                                  # 2C/|D_i|, |D_i| = 3
  sigma = _c() * paper * p["rounds"] / p["epsilon_total"]
  sens = 2 * c_norm / b if p["clipping"] == "per_example" else 2 * c_norm
  return sens, sigma, paper


def _budget(name, sensitivity=None):
  """The filter's budget of an upload target from its definition: T rounds of
  (sensitivity / sigma)^2, times 1.001."""
  sens, sigma, _ = _expected(name)
  sens = sens if sensitivity is None else sensitivity
  return lapa_audit.PARAMS[name]["rounds"] * (sens / sigma) ** 2 * 1.001


def _label_budget():
  """The label target's: one round at eps_T, provable calibration (z = c / eps_T), plus
  the label release's 1 / z_h^2."""
  p = lapa_audit.PARAMS[LABELS]
  return (p["epsilon_total"] / _c()) ** 2 * 1.001 + p["label_noise_multiplier"] ** -2


def _pld(rho):
  return device_ledger.gaussian_epsilon(rho, audit_targets.DELTA, "pld")


@pytest.fixture(scope="module")
def reports():
  out = {}
  for name in NAMES:
    cache, target = {}, _target(name)
    out[name] = {b: auditing.run(target.build(b), key=jax.random.key(0), cache=cache)
                 for b in target.breaks}
  return out


def _simulate(setup, keys=KEYS):
  """Every round of ``setup`` in each world, ``keys`` repetitions: ``{world: (changes
  [keys, T, P], z, sigma_devices, sigma_channel, switched, sensitivity)}``."""
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
  ks = jax.random.split(jax.random.key(3), keys)
  return {w: jax.device_get(fn(d, ks))
          for w, d in (("in", setup.data_in), ("out", setup.data_out))}


@pytest.fixture(scope="module")
def simulated():
  out = {}
  for name in UPLOADS:
    setup = _target(name).build()
    out[name] = (setup, _simulate(setup))
  return out


def _canary_direction(setup):
  """The unit direction of the canary's gradient (the same for both labels)."""
  model = audit_targets.audit_model()
  params = setup.init.params
  x = jnp.asarray(setup.data_in.x[0, :1])

  def loss(p):
    return model.per_example_loss(model.apply(p, x), jnp.zeros((1,), jnp.int32))[0]

  g = jax.flatten_util.ravel_pytree(jax.grad(loss)(params))[0]
  return np.asarray(g / jnp.linalg.norm(g), np.float64)


def test_targets_are_registered_with_their_breaks():
  assert [t.name for t in audit_targets.targets_for("lapa")] == list(NAMES)
  # Issue 30: each device's upload and its label histogram are seen with their sender.
  for name in ("lapa/per_example", "lapa/label_statistics"):
    assert _target(name).build().observation == "attributable", name
  per_example, aggregate, labels = (_target(n) for n in NAMES)
  assert set(per_example.breaks) == {"none", "noise-half"}
  assert set(aggregate.breaks) == {"none", "noise-half", "paper-sensitivity"}
  assert set(labels.breaks) == {"none", "noise-half", "exact-label-statistics"}
  for target in (per_example, aggregate):
    shipped, half = target.build(), target.build("noise-half")
    assert shipped.rounds == 2 and shipped.inclusion_prob == 1.0
    assert shipped.delta == audit_targets.DELTA
    assert half.simulation_key != shipped.simulation_key
    np.testing.assert_array_equal(shipped.hparams.channel_std, 0.0)   # ideal channel
    np.testing.assert_allclose(half.hparams.paper_sensitivity,
                               shipped.hparams.paper_sensitivity / 2)
  assert (aggregate.build("paper-sensitivity").simulation_key
          == aggregate.build().simulation_key)
  shipped, exact = labels.build(), labels.build("exact-label-statistics")
  assert exact.simulation_key != shipped.simulation_key and shipped.rounds == 1
  np.testing.assert_array_equal(exact.hparams.label_noise_std, 0.0)
  np.testing.assert_allclose(shipped.hparams.label_noise_std, 1.5 * math.sqrt(2),
                             rtol=1e-6)
  with pytest.raises(Exception, match="break"):
    per_example.build("paper-sensitivity")


@pytest.mark.parametrize("name", UPLOADS)
def test_the_round_reports_its_artificial_noise(simulated, name):
  _, out = simulated[name]
  sens, sa, _ = _expected(name)
  _, z, sd_art, sd_ch, switched, reported_sens = out["in"]
  np.testing.assert_allclose(reported_sens, sens, rtol=1e-6)
  np.testing.assert_allclose(sd_art[..., 0], sa, rtol=1e-5)     # eqs. 18-19, every round
  np.testing.assert_array_equal(sd_ch, 0.0)
  np.testing.assert_array_equal(switched, 0)
  np.testing.assert_allclose(z[..., 0], sa / sens, rtol=1e-5)


@pytest.mark.parametrize("name", UPLOADS)
def test_the_canary_moves_each_upload_by_the_enforced_sensitivity(simulated, name):
  """The upload (the model's change over -ETA) is N(g +- sens/2 u, SD^2 I) in the two
  worlds, SD the round's reported artificial noise: the Gaussian mechanism the ledger
  composes, at its worst case."""
  setup, out = simulated[name]
  sens, sd, _ = _expected(name)
  u = _canary_direction(setup)
  up_in = np.asarray(out["in"][0], np.float64) / -ETA     # [KEYS, 2, P]
  up_out = np.asarray(out["out"][0], np.float64) / -ETA
  diff = up_in.mean(0) - up_out.mean(0)                   # [2, P]
  se = sd * np.sqrt(2.0 / KEYS)
  for t in range(2):
    # in: the canary's clipped gradient is +C u (label 0), out: -C u (over B).
    assert diff[t] @ u == pytest.approx(sens, abs=5 * se)
    np.testing.assert_allclose(diff[t] - (diff[t] @ u) * u, 0.0, atol=5 * se)
    np.testing.assert_allclose(up_out[:, t].std(0), sd, rtol=0.03)


def test_the_canary_moves_the_label_release_by_its_sensitivity():
  """The observed histogram (over the configured sigma_h) is N(h / sigma_h, I) in each
  world, h differing by (+1, -1) counts: shift 1 / z_h along the canary's direction.
  With the paper's exact statistics the observation, and the Wasserstein weights, are
  deterministic and differ between the worlds."""
  target = _target(LABELS)
  z_h = lapa_audit.PARAMS[LABELS]["label_noise_multiplier"]
  sigma_h = z_h * math.sqrt(2)
  setup = target.build()
  keys = jax.random.split(jax.random.key(5), 4000)

  def observe(s, data):
    def one(key):
      new, m = s.round_in(s.init, data, jax.tree_util.tree_map(lambda a: a[0],
                                                              s.schedule()), key)
      return new.params["labels"], m.extras
    return jax.device_get(jax.jit(jax.vmap(one))(keys))

  o_in, _ = observe(setup, setup.data_in)
  o_out, _ = observe(setup, setup.data_out)
  np.testing.assert_allclose(o_in.mean(0) * sigma_h, [2.0, 1.0], atol=5 * sigma_h / 63)
  np.testing.assert_allclose(o_out.mean(0) * sigma_h, [1.0, 2.0], atol=5 * sigma_h / 63)
  np.testing.assert_allclose(o_in.std(0), 1.0, rtol=0.05)
  exact = target.build("exact-label-statistics")
  e_in, m_in = observe(exact, exact.data_in)
  e_out, m_out = observe(exact, exact.data_out)
  np.testing.assert_allclose(e_in * sigma_h, np.broadcast_to([2.0, 1.0], e_in.shape),
                             rtol=1e-6)
  np.testing.assert_allclose(e_out * sigma_h, np.broadcast_to([1.0, 2.0], e_out.shape),
                             rtol=1e-6)
  w_in, w_out = m_in["aggregation_weights_exact"], m_out["aggregation_weights_exact"]
  assert np.ptp(w_in, axis=0).max() == 0 and np.ptp(w_out, axis=0).max() == 0
  assert np.abs(w_in[0] - w_out[0]).max() > 0.01                 # moved by one label


def test_claims_are_the_ledgers_filter_bound(reports):
  for name in UPLOADS:
    rep = reports[name]
    shipped = rep["none"].claimed_epsilon
    assert shipped == pytest.approx(_pld(_budget(name)), rel=1e-4)
    assert 1.9 < shipped < 2.2
    # noise-half: the claim is for the configured noise (unchanged).
    assert rep["noise-half"].claimed_epsilon == pytest.approx(shipped, rel=1e-9)
  rep = reports["lapa/aggregate"]
  paper = _expected("lapa/aggregate")[2]
  assert rep["paper-sensitivity"].claimed_epsilon == pytest.approx(
      _pld(_budget("lapa/aggregate", sensitivity=paper)), rel=1e-4)
  assert rep["paper-sensitivity"].lower_bound == rep["none"].lower_bound
  rep = reports[LABELS]
  assert rep["none"].claimed_epsilon == pytest.approx(_pld(_label_budget()), rel=1e-4)
  for brk in ("noise-half", "exact-label-statistics"):
    assert rep[brk].claimed_epsilon == pytest.approx(rep["none"].claimed_epsilon,
                                                     rel=1e-9)


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
