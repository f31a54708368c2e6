"""What LAPA's guarantee covers (issue 30): the Wasserstein weights come from label
histograms released once with Gaussian noise and composed into each device's ledger
(exact label statistics, the paper's, give no finite guarantee); the wireless channel's
noise is never counted as DP noise (no artificial noise: no guarantee); the per-round
budgets are chosen adaptively, so the guarantee is a privacy filter's bound, enforced in
the round, never the realised composition. Every expected number is recomputed here from
the definitions (dp_accounting's Gaussian events, the formulas of eqs. 18-19), not by the
code under test."""

from __future__ import annotations

import json
import math

import dp_accounting
from dp_accounting import rdp as dp_rdp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.lapa import aggregation
from fedjax_dp.algorithms.lapa import algorithm as A
from fedjax_dp.algorithms.lapa import allocators as al
from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.federated import PopulationData
from fedjax_dp.models import create_model
from fedjax_dp.privacy import device_ledger as dl
from fedjax_dp.validation import FedJaxDpError

from .test_lapa_round import run_jitted_rounds

N, M, F, K = 4, 40, 5, 4          # devices, rows per device, features, classes
DELTA = 1e-5


@pytest.fixture(scope="module")
def problem():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(N, M, F)).astype(np.float32)
  y = rng.integers(0, K, (N, M)).astype(np.int32)
  y[2] = rng.integers(0, 2, M)                     # a non-IID device
  counts = np.array([40, 31, 36, 25])
  for i, c in enumerate(counts):
    x[i, c:], y[i, c:] = 0, 0
  fd = FederatedData(name="toy", x=x, y=y, counts=counts, num_classes=K,
                     test_x=x[0], test_y=y[0])
  pop = PopulationData(jnp.asarray(x), jnp.asarray(y), jnp.asarray(counts))
  return fd, pop, create_model("linear", (F,), K)


def _exact_histograms(fd):
  return np.stack([np.bincount(fd.y[i, :c], minlength=K)
                   for i, c in enumerate(fd.counts)]).astype(np.float64)


def _paper_weights(fd, selected=None):
  """The paper's Wasserstein weights from the exact label PMFs (host side, eqs. 20-22)."""
  dist = aggregation.wasserstein_1d(aggregation.label_pmfs(fd.y, fd.counts, K),
                                    aggregation.global_pmf(fd.y, fd.counts, K))
  return dist, aggregation.wasserstein_weights(dist, selected)


def _gaussian_eps(zs, delta=DELTA):
  """dp_accounting's RDP epsilon of the composition of GaussianDpEvent(z) for z in zs."""
  acc = dp_rdp.RdpAccountant(neighboring_relation=
                             dp_accounting.NeighboringRelation.REPLACE_ONE)
  acc.compose(dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(z)
                                             for z in zs]))
  return acc.get_epsilon(delta)


def _uniform_budget(fd, eps_t, rounds, batch, clip=1.0):
  """The filter's "uniform" budget from its definition: T (eps_T / T)^2 at
  sigma = c Delta_s / eps (eqs. 18-19, Delta_s = 2C/|D_i|), over the enforced
  sensitivity 2C/B (per-example clipping), times 1.001."""
  c = math.sqrt(2 * math.log(1.25 / DELTA))
  ds = 2 * clip / np.asarray(fd.counts, np.float64)
  return rounds * (eps_t / rounds) ** 2 * (2 * clip / batch / (c * ds)) ** 2 * 1.001


# ---------------------------------------------------------------------------
# F2: the label statistics.
# ---------------------------------------------------------------------------

def test_label_histograms_are_released_once_with_their_noise(problem):
  """The BS receives each device's exact label counts plus N(0, sigma_h^2), sigma_h =
  z_h sqrt(2) (replace-one moves two counts by 1): measured over 1,500 draws of round 1
  (24,000 residuals); the weights it uses are their post-processing, not the exact
  ones; round 2 keeps the round-1 release."""
  fd, pop, model = problem
  z_h = 2.0
  alg = A.lapa(model, fd, allocator=al.AllocatorConfig("uniform", 5.0, 3),
               label_noise_multiplier=z_h, delta=DELTA)
  s0 = alg.init(jax.random.PRNGKey(0))

  def first(key):
    s1, m = alg.round_fn(s0, pop, alg.hparams, key)
    return s1.opt_state.label_hist, s1.opt_state.label_weights, m.extras[
        "aggregation_weights"]

  keys = jax.random.split(jax.random.PRNGKey(7), 1500)
  hist, w, w_used = jax.device_get(jax.jit(jax.vmap(first))(keys))
  res = np.asarray(hist, np.float64) - _exact_histograms(fd)[None]
  sigma_h = z_h * math.sqrt(2)
  assert abs(res.mean()) < 3 * sigma_h / math.sqrt(res.size)
  assert res.std() == pytest.approx(sigma_h, rel=0.03)
  _, exact_w = _paper_weights(fd)
  assert np.mean(np.abs(w - exact_w[None]).max(axis=1) > 1e-3) > 0.99   # not the exact
  np.testing.assert_allclose(w_used, w, rtol=1e-5, atol=1e-7)   # every device uploads
  # post-processing of the received histograms (clip at 0, normalise, W1, softmax)
  _, _, w0 = A.label_statistics(hist[0], fd.counts, np.ones(N, bool))
  np.testing.assert_allclose(w[0], w0, rtol=1e-6)
  s, ms = run_jitted_rounds(alg, pop, 2)
  np.testing.assert_array_equal(np.asarray(ms[0].extras["label_distances"]),
                                np.asarray(ms[1].extras["label_distances"]))
  assert float(ms[0].extras["label_noise_multiplier"]) == pytest.approx(z_h)
  assert float(ms[1].extras["label_noise_multiplier"]) == np.inf   # released once


def test_label_release_is_composed_into_each_device_ledger(problem):
  """Round 1's noise multiplier is the upload's and the histogram's composed; the
  ledger's realised epsilon of every device equals dp_accounting's composition of
  GaussianDpEvent(sigma_i[t] / Delta) over its uploads and GaussianDpEvent(z_h)."""
  fd, pop, model = problem
  rounds, z_h = 3, 3.0
  alg = A.lapa(model, fd, allocator=al.AllocatorConfig("lapa", 4.0, rounds),
               label_noise_multiplier=z_h, delta=DELTA, batch_size=8,
               channel_std=np.full(N, 0.05))
  _, ms = run_jitted_rounds(alg, pop, rounds)
  sens = 2 * 1.0 / 8
  sig = np.array([np.asarray(m.extras["sigma_devices"], np.float64) for m in ms])
  up = np.array([np.asarray(m.extras["device_uploaded"]) for m in ms], bool)
  assert up.all() and np.all(sig > 0)
  z = np.array([np.asarray(m.client_noise_multipliers, np.float64) for m in ms])
  np.testing.assert_allclose(z[0], ((sens / sig[0]) ** 2 + z_h ** -2) ** -0.5, rtol=1e-5)
  np.testing.assert_allclose(z[1:], sig[1:] / sens, rtol=1e-5)
  ledger = alg.privacy.make_ledger(DELTA)
  ledger.record_many(z)
  for i in range(N):
    want = _gaussian_eps([z_h] + [s / sens for s in sig[:, i]])
    assert ledger.realised_epsilons()[i] == pytest.approx(want, rel=1e-6)


def test_exact_label_statistics_have_no_finite_guarantee(problem):
  """--label-statistics exact (the paper's): the weights are the exact ones, the label
  fields are the diagnostic ``*_exact`` ones, and the ledger's epsilon is inf."""
  fd, pop, model = problem
  alg = A.lapa(model, fd, allocator=al.AllocatorConfig("uniform", 5.0, 2),
               label_statistics="exact", delta=DELTA)
  s, ms = run_jitted_rounds(alg, pop, 2)
  dist, w = _paper_weights(fd)
  np.testing.assert_allclose(ms[0].extras["aggregation_weights_exact"], w, rtol=1e-5)
  np.testing.assert_allclose(ms[0].extras["label_distances_exact"], dist, rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_allclose(s.opt_state.label_hist, _exact_histograms(fd))
  assert "aggregation_weights" not in ms[0].extras
  assert "label_distances" not in ms[0].extras
  np.testing.assert_array_equal(np.asarray(ms[0].client_noise_multipliers), 0.0)
  ledger = alg.privacy.make_ledger(DELTA)
  ledger.record_many(np.array([np.asarray(m.client_noise_multipliers) for m in ms]))
  assert ledger.worst_epsilon() == np.inf
  assert np.all(np.isinf(ledger.epsilons()))
  assert "EXACT label histogram" in alg.privacy.note
  # FedAvg uses no label statistics: the option changes nothing there
  fa = A.lapa(model, fd, allocator=al.AllocatorConfig("uniform", 5.0, 2),
              aggregator="fedavg", label_statistics="exact", delta=DELTA)
  _, ms = run_jitted_rounds(fa, pop, 1)
  assert np.all(np.isfinite(np.asarray(ms[0].client_noise_multipliers)))


# ---------------------------------------------------------------------------
# F3: the channel noise.
# ---------------------------------------------------------------------------

def test_channel_noise_is_not_in_the_guarantee(problem):
  """Without artificial noise the run is not private, however loud the channel; with
  it, the noise multipliers are the artificial noise's alone; the paper's switch-off
  leaves uploads with noise multiplier 0 (epsilon inf)."""
  fd, pop, model = problem
  loud = np.full(N, 100.0)
  none = A.lapa(model, fd, allocator=al.AllocatorConfig("none", 1.0, 3), channel_std=loud)
  assert none.privacy is None
  alg = A.lapa(model, fd, allocator=al.AllocatorConfig("uniform", 5.0, 4), batch_size=8,
               channel_std=np.full(N, 0.3), switch=False, aggregator="fedavg")
  _, ms = run_jitted_rounds(alg, pop, 2)
  sig = np.asarray(ms[1].extras["sigma_devices"], np.float64)
  np.testing.assert_allclose(ms[1].client_noise_multipliers, sig / alg.config["sensitivity"],
                             rtol=1e-5)
  np.testing.assert_allclose(ms[1].extras["device_noise_multiplier_channel_assumption"],
                             np.hypot(sig, 0.3) / alg.config["sensitivity"], rtol=1e-5)
  sw = A.lapa(model, fd, allocator=al.AllocatorConfig("uniform", 30.0, 4), batch_size=8,
              channel_std=np.full(N, 50.0))
  _, ms = run_jitted_rounds(sw, pop, 3)
  assert [int(m.extras["switched"]) for m in ms] == [0, 1, 1]
  ledger = sw.privacy.make_ledger(DELTA)
  z = np.array([np.asarray(m.client_noise_multipliers) for m in ms])
  assert np.isfinite(ledger.record_many(z[:1]))[0]
  assert ledger.record_many(z[1:])[-1] == np.inf


# ---------------------------------------------------------------------------
# F4: the privacy filter.
# ---------------------------------------------------------------------------

def test_headline_epsilon_is_the_filter_bound(problem):
  """LAPA's budgets are adaptive: the ledger reports the filter's bound, dp_accounting's
  Gaussian mechanism with z^-2 = the uniform budget (from its definition) + 1/z_h^2,
  not the realised composition (smaller here)."""
  fd, pop, model = problem
  rounds, eps_t, z_h = 4, 4.0, 2.0
  alg = A.lapa(model, fd, allocator=al.AllocatorConfig("lapa", eps_t, rounds),
               delta=DELTA, batch_size=8)
  _, ms = run_jitted_rounds(alg, pop, rounds)
  budget = _uniform_budget(fd, eps_t, rounds, batch=8)
  np.testing.assert_allclose(alg.config["rho_budget"], budget, rtol=1e-9)
  np.testing.assert_allclose(ms[0].extras["device_rho_budget"], budget, rtol=1e-6)
  ledger = alg.privacy.make_ledger(DELTA)
  ledger.record_many(np.array([np.asarray(m.client_noise_multipliers) for m in ms]))
  want = [_gaussian_eps([(b + z_h ** -2) ** -0.5]) for b in budget]
  np.testing.assert_allclose(ledger.epsilons(), want, rtol=1e-6)
  assert ledger.worst_epsilon() == pytest.approx(max(want), rel=1e-6)
  assert ledger.worst_client() == int(np.argmax(want))
  assert ledger.realised_worst_epsilon() < 0.9 * ledger.worst_epsilon()


@pytest.mark.parametrize("kind", ["lapa", "arb"])
def test_the_filter_is_enforced_under_adaptive_budgets(problem, kind):
  """A budget of epsilon 5 per device (rho 1.1 with the label release), below what
  eps_T = 40 over 8 rounds would spend at the provable calibration (about 1.07 a round
  if spent evenly): where the paper's sigma = c Delta / eps_i[t] would pass the budget,
  the round adds the larger noise that spends exactly what is left (``filter_capped``),
  its last upload; every device's realised sum of (Delta / sigma)^2 stays
  within its budget, and the ledger's epsilon is exactly the budget's."""
  fd, pop, model = problem
  rounds, z_h, target = 8, 2.0, 5.0
  acfg = al.AllocatorConfig(kind, 40.0, rounds, arb_beta=0.5)
  alg = A.lapa(model, fd, allocator=acfg, delta=DELTA, batch_size=8,
               filter_budget=target, calibration_sensitivity="provable")
  s, ms = run_jitted_rounds(alg, pop, rounds, seed=3)
  budget = np.asarray(alg.config["rho_budget"])
  # the budget from its definition: the Gaussian mechanism of epsilon 5, less 1/z_h^2
  assert _gaussian_eps([(budget[0] + z_h ** -2) ** -0.5]) == pytest.approx(target,
                                                                          rel=1e-6)
  sens = alg.config["sensitivity"]
  sig = np.array([np.asarray(m.extras["sigma_devices"], np.float64) for m in ms])
  up = np.array([np.asarray(m.extras["device_uploaded"]) for m in ms], bool)
  capped = np.array([np.asarray(m.extras["filter_capped"]) for m in ms], bool)
  spent = np.cumsum(np.where(up, (sens / np.where(up, sig, 1.0)) ** 2, 0.0), axis=0)
  assert np.all(spent[-1] <= budget)
  assert capped.any() and up.any()
  # a capped upload spends what was left: the device's budget, to the filter's margin
  first = capped & up
  np.testing.assert_allclose(spent[first], np.broadcast_to(budget, spent.shape)[first],
                             rtol=2e-4)
  # the capped upload is the device's last
  assert not np.any(up[1:] & (np.cumsum(capped, axis=0)[:-1] > 0))
  z = np.array([np.asarray(m.client_noise_multipliers) for m in ms])
  ledger = alg.privacy.make_ledger(DELTA)
  ledger.record_many(z)
  assert np.all(ledger.within_budget())
  assert ledger.worst_epsilon() == pytest.approx(target, rel=1e-6)
  np.testing.assert_allclose(s.opt_state.rho_spent, np.where(
      capped.any(0), budget * (1 - 1e-4), spent[-1]), rtol=1e-5)


def test_cap_budget_bounds_every_allocation_within_the_papers_cap(problem):
  """``filter_budget="cap"``: eps_T^2 (Delta / (c Delta_s))^2 bounds any allocation with
  sum_t eps_i[t] <= eps_T (sum eps^2 <= (sum eps)^2), so it never binds."""
  fd, pop, model = problem
  rounds = 5
  alg = A.lapa(model, fd, allocator=al.AllocatorConfig("lapa", 6.0, rounds), delta=DELTA,
               batch_size=8, filter_budget="cap")
  np.testing.assert_allclose(alg.config["rho_budget"],
                             _uniform_budget(fd, 6.0, rounds, batch=8) * rounds, rtol=1e-9)
  _, ms = run_jitted_rounds(alg, pop, rounds)
  assert not any(np.any(m.extras["filter_capped"]) for m in ms)
  ledger = alg.privacy.make_ledger(DELTA)
  ledger.record_many(np.array([np.asarray(m.client_noise_multipliers) for m in ms]))
  assert np.all(ledger.within_budget())


def test_filtered_device_ledger():
  """budgets: each device's epsilon is its budget's (or its realised rho's, if larger
  within the float tolerance), inf once past it; the state round-trips."""
  led = dl.DeviceLedger(3, DELTA, budgets=[1.0, 0.5, 4.0])
  worst = led.record_many(np.array([[2.0, 2.0, 1.0], [np.inf, 2.0, 1.0]]))
  np.testing.assert_allclose(worst, _gaussian_eps([0.5]) * np.ones(2), rtol=1e-6)
  np.testing.assert_allclose(led.realised_epsilons(),
                             [_gaussian_eps([2.0]), _gaussian_eps([2.0, 2.0]),
                              _gaussian_eps([1.0, 1.0])], rtol=1e-6)
  np.testing.assert_allclose(led.epsilons(), [_gaussian_eps([1.0]),
                                              _gaussian_eps([2 ** 0.5]),
                                              _gaussian_eps([0.5])], rtol=1e-6)
  assert led.worst_client() == 2 and np.all(led.within_budget())
  assert dl.DeviceLedger(1, DELTA, budgets=np.inf).epsilons()[0] == np.inf
  back = dl.DeviceLedger.from_dict(json.loads(json.dumps(led.to_dict())))
  np.testing.assert_array_equal(back.budgets, led.budgets)
  np.testing.assert_array_equal(back.epsilons(), led.epsilons())
  led = dl.DeviceLedger(2, DELTA, budgets=0.5)
  led.record_many(np.array([[2.0, 1.0]]))          # device 1: rho 1 > 0.5
  assert led.epsilons()[0] == pytest.approx(_gaussian_eps([2 ** 0.5]), rel=1e-6)
  assert led.epsilons()[1] == np.inf and led.worst_epsilon() == np.inf
  assert led.worst_ledger().epsilon() == np.inf
  assert not led.within_budget()[1]
  with pytest.raises(FedJaxDpError, match="budgets"):
    dl.DeviceLedger(2, DELTA, budgets=[1.0, -1.0])
  rho = dl.rho_for_epsilon(2.0, DELTA)
  assert _gaussian_eps([rho ** -0.5]) == pytest.approx(2.0, rel=1e-8)
  assert dl.gaussian_epsilon(rho * 1.001, DELTA) > 2.0
