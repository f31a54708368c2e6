"""Noise schedules and the amplitude-varying calibration (paper 004, eqs. 6, 8, 9)."""

import math

import dp_accounting
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedjax_dp.algorithms.amplitude_varying import schedules
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.validation import FedJaxDpError

D600 = schedules.sensitivity(5.0, 600)  # Delta_s = 2C/|D_k| = 1/60
KW = dict(epsilon=10.0, delta=1e-3, sampling_rate=0.1, sensitivity=D600)


def test_sensitivity():
  assert D600 == pytest.approx(1 / 60)
  with pytest.raises(FedJaxDpError, match="local_dataset_size"):
    schedules.sensitivity(5.0, 0)


@pytest.mark.parametrize("vartheta,m,expected", [(1.05, 30, 16.1411), (0.9, 30, 203.3084),
                                                 (1.0, 30, 30.0), (1.1, 30, 10.37)])
def test_geometric_sum_reference_values(vartheta, m, expected):
  assert schedules.geometric_sum(vartheta, m) == pytest.approx(expected, rel=5e-4)


@settings(max_examples=50, deadline=None)
@given(v=st.floats(0.5, 2.0).filter(lambda v: abs(v - 1) > 1e-3), m=st.integers(1, 60))
def test_geometric_sum_equals_the_closed_form_of_eq8(v, m):
  closed = (v - v ** (1 - m)) / (v - 1)
  assert schedules.geometric_sum(v, m) == pytest.approx(closed, rel=1e-9)
  assert schedules.geometric_sum(v, m) == pytest.approx(sum(v ** -j for j in range(m)))


def test_continuity_at_vartheta_one():
  assert schedules.geometric_sum(1 + 1e-9, 30) == pytest.approx(30.0, rel=1e-6)


# The note's section 7.1: first / last standard deviation for |D_k| = 600 (within 0.5%).
REFERENCE = [(1.0, 30, 0.01073, 0.01073), (1.05, 17, 0.00674, 0.00996),
             (0.9, 30, 0.02793, 0.00606), (1.1, 30, 0.00631, 0.02513),
             (0.95, 10, 0.00699, 0.00555), (1.0, 1, 0.00196, 0.00196),
             (1.05, 50, 0.00858, 0.02834)]


@pytest.mark.parametrize("vartheta,m,first,last", REFERENCE)
def test_reference_sigmas(vartheta, m, first, last):
  s = schedules.geometric_schedule(vartheta=vartheta, rounds=m, **KW)
  assert s.shape == (m,)
  assert s[0] == pytest.approx(first, rel=5e-3)
  assert s[-1] == pytest.approx(last, rel=5e-3)


def test_remark3_vartheta_one_is_the_persistent_gaussian():
  s = schedules.geometric_schedule(vartheta=1.0, rounds=30, **KW)
  persistent = D600 / 10 * math.sqrt(2 * 0.1 * 30 * math.log(1e3))  # Remark 3
  np.testing.assert_allclose(s, schedules.constant_noise_schedule(persistent, 30), rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(v=st.floats(0.8, 1.25), m=st.integers(1, 50), eps=st.floats(0.5, 50.0))
def test_budget_invariant(v, m, eps):
  """sum_m 1/Theta(m) = B = eps^2/(2 q Ds^2 ln(1/delta)), so the paper's epsilon of
  the schedule is the target (note, section 2.8)."""
  kw = dict(KW, epsilon=eps)
  s = schedules.geometric_schedule(vartheta=v, rounds=m, **kw)
  budget = schedules.noise_budget(**kw)
  assert np.sum(1.0 / s ** 2) == pytest.approx(budget, rel=1e-9)
  assert schedules.paper_epsilon(s, 0.1, D600, 1e-3) == pytest.approx(eps, rel=1e-9)
  ratios = s[1:] ** 2 / s[:-1] ** 2  # eq. (6): a geometric series of variances
  np.testing.assert_allclose(ratios, v, rtol=1e-9)


def test_paper_epsilon_exact_adds_what_the_paper_drops():
  s = schedules.geometric_schedule(vartheta=1.0, rounds=30, **KW)
  # note, caveat 1: epsilon + epsilon^2 / (4 ln(1/delta)) = 13.62 for a target of 10
  assert schedules.paper_epsilon_exact(s, 0.1, D600, 1e-3) == pytest.approx(13.62, abs=0.01)


@pytest.mark.parametrize("vartheta,exact,paper", [(0.9, 0.467, 0.298), (0.95, 0.587, None),
                                                  (1.0, 0.700, 0.8), (1.05, 0.794, 1.37),
                                                  (1.1, 0.865, 2.00)])
def test_refinement_ratios_of_the_note(vartheta, exact, paper):
  """M = 30 -> M' = 24 after m = 10 rounds (note, section 2.9)."""
  sigma = schedules.initial_amplitude(vartheta=vartheta, rounds=30, **KW)
  used = np.sqrt(schedules.geometric_variances(sigma, vartheta, 30))[:10]
  e = schedules.refined_amplitude(vartheta=vartheta, rounds_done=10, new_rounds=24,
                                  mode="exact_budget", spent_stddevs=used, **KW)
  assert (e / sigma) ** 2 == pytest.approx(exact, abs=1e-3)
  if paper is not None:
    p = schedules.refined_amplitude(vartheta=vartheta, rounds_done=10, new_rounds=24, **KW)
    assert (p / sigma) ** 2 == pytest.approx(paper, abs=5e-3)


@settings(max_examples=40, deadline=None)
@given(v=st.floats(0.85, 1.15), m=st.integers(1, 20), cut=st.floats(0.5, 0.95))
def test_exact_budget_refinement_never_exceeds_the_budget(v, m, cut):
  total = 30
  sigma = schedules.initial_amplitude(vartheta=v, rounds=total, **KW)
  used = np.sqrt(schedules.geometric_variances(sigma, v, total))[:m]
  new_rounds = max(m + 1, math.ceil(cut * total))
  s2 = schedules.refined_amplitude(vartheta=v, rounds_done=m, new_rounds=new_rounds,
                                   mode="exact_budget", spent_stddevs=used, **KW)
  later = s2 * np.sqrt(v ** np.arange(m, new_rounds))
  all_used = np.concatenate([used, later])
  assert np.sum(1 / all_used ** 2) <= schedules.noise_budget(**KW) * (1 + 1e-9)
  assert schedules.paper_epsilon(all_used, 0.1, D600, 1e-3) <= 10.0 * (1 + 1e-9)
  if new_rounds < total:  # fewer rounds left -> less noise per round
    assert s2 < sigma * (1 + 1e-9)


def test_paper_mode_for_vartheta_below_one_under_counts():
  """Eq. (9) as printed for vartheta < 1 spends more than the budget (note 2.9)."""
  v, total, m, new = 0.9, 30, 10, 24
  sigma = schedules.initial_amplitude(vartheta=v, rounds=total, **KW)
  used = np.sqrt(schedules.geometric_variances(sigma, v, total))[:m]
  s2 = schedules.refined_amplitude(vartheta=v, rounds_done=m, new_rounds=new, **KW)
  all_used = np.concatenate([used, s2 * np.sqrt(v ** np.arange(m, new))])
  assert schedules.paper_epsilon(all_used, 0.1, D600, 1e-3) > 10.0


def test_laplace_calibrations():
  b = schedules.laplace_scale(10.0, D600, 30)
  assert b == pytest.approx(30 * D600 / 10)
  assert math.sqrt(2) * b == pytest.approx(0.0707, abs=1e-4)  # note, section 9 item 12
  g = schedules.initial_amplitude(vartheta=1.0, rounds=30, **KW)
  assert math.sqrt(2) * schedules.laplace_scale(10.0, D600, 30, "variance_matched", g) == \
      pytest.approx(g)
  with pytest.raises(FedJaxDpError, match="gaussian_sigma"):
    schedules.laplace_scale(10.0, D600, 30, "variance_matched")


def test_ledger_epsilon_of_a_geometric_schedule_equals_direct_dp_accounting():
  """The heterogeneous per-round sequence through our ledger equals composing the same
  DpEvents directly with dp_accounting."""
  s = schedules.geometric_schedule(vartheta=1.05, rounds=6, **dict(KW, epsilon=2.0))
  z = s / D600
  assert len(set(np.round(z, 9))) == 6  # six different events
  ledger = PrivacyLedger(delta=1e-3, sampler="fixed_size", population_size=100,
                         cohort_size=10, privacy_unit="record")
  ledger.record_many(z, np.full(6, 0.1), np.ones(6, int))
  rdp = dp_accounting.rdp.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
  for zm in z:
    rdp.compose(dp_accounting.SampledWithoutReplacementDpEvent(
        100, 10, dp_accounting.GaussianDpEvent(float(zm))))
  assert ledger.epsilon(accountant="rdp") == pytest.approx(rdp.get_epsilon(1e-3), rel=1e-3)
  pois = dp_accounting.pld.PLDAccountant()
  for zm in z:
    pois.compose(dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(
        float(zm))))
  ledger_p = PrivacyLedger(delta=1e-3, sampler="poisson")
  ledger_p.record_many(z, np.full(6, 0.1), np.ones(6, int))
  assert ledger_p.epsilon(accountant="pld") == pytest.approx(pois.get_epsilon(1e-3),
                                                             rel=1e-2)


@pytest.mark.parametrize("call,needle", [
    (lambda: schedules.geometric_sum(0.0, 3), "vartheta"),
    (lambda: schedules.geometric_sum(1.1, 0), "rounds"),
    (lambda: schedules.initial_amplitude(-1, 1e-3, 0.1, 0.1, 1.0, 3), "epsilon"),
    (lambda: schedules.initial_amplitude(1, 1.0, 0.1, 0.1, 1.0, 3), "delta"),
    (lambda: schedules.initial_amplitude(1, 1e-3, 0.0, 0.1, 1.0, 3), "sampling_rate"),
    (lambda: schedules.initial_amplitude(1, 1e-3, 0.1, 0.0, 1.0, 3), "sensitivity"),
    (lambda: schedules.refined_amplitude(1, 1e-3, 0.1, 0.1, 1.0, 5, 5), "new_rounds"),
    (lambda: schedules.refined_amplitude(1, 1e-3, 0.1, 0.1, 1.0, 2, 5, "exact_budget"),
     "spent_stddevs"),
    (lambda: schedules.refined_amplitude(1, 1e-3, 0.1, 0.1, 1.0, 2, 5, "other"), "mode"),
    (lambda: schedules.privacy_load([0.1, -1.0], 0.1, 0.1), "stddevs"),
])
def test_bad_arguments(call, needle):
  with pytest.raises(FedJaxDpError, match=needle):
    call()


def test_laplace_baseline_calibrates_with_the_l1_sensitivity(synthetic_fd):
  """Issue 30: pure_dp_split used the L2 sensitivity Delta_s for the Laplace mechanism,
  whose privacy is set by the L1 distance; a P-dimensional model moved by at most
  Delta_s in L2 moves by at most sqrt(P) Delta_s in L1."""
  import jax
  from fedjax_dp.algorithms.amplitude_varying import amplitude_varying
  from fedjax_dp.models import create_model
  fd = synthetic_fd
  model = create_model("linear", fd.feature_shape, fd.num_classes)
  alg = amplitude_varying(model, fd, epsilon=10.0, rounds=4, clients_per_round=3,
                          mechanism="laplace")
  dim = sum(int(np.size(l)) for l in jax.tree_util.tree_leaves(model.init(jax.random.key(0))))
  d_s = alg.config["calibration_sensitivity"]
  b = 4 * math.sqrt(dim) * d_s / 10.0
  np.testing.assert_allclose(alg.config["stddevs"], math.sqrt(2) * b, rtol=1e-9)
  assert alg.privacy is None  # not accounted (Gaussian ledger): no guarantee claimed
