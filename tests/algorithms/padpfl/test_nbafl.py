"""Tests for `fedjax_dp.algorithms.padpfl.nbafl` (PADPFL / NbAFL noise calibration, paper 000)."""

from __future__ import annotations

import math

import dp_accounting
from dp_accounting import rdp as dp_rdp
import numpy as np
import pytest

from fedjax_dp.algorithms.padpfl import nbafl
from fedjax_dp.validation import FedJaxDpError

DELTA = 0.01
T = 30


def per_part(values, sizes):
  return np.repeat(np.asarray(values, dtype=np.float64), sizes)


P_012 = per_part([0.0, 1 / 60, 1 / 30], [20, 20, 20])       # S1 / S4
P_EQUAL = np.full(60, 1 / 60)
P_021 = per_part([0.0, 2 / 75, 1 / 75], [20, 35, 5])        # S2
P_135 = per_part([1 / 180, 1 / 60, 1 / 36], [20, 20, 20])   # S3

# Note 000, section 3.10 (per unit B; T = 30, delta = 0.01):
# (p, m_min, epsilon, R, sigma_C, sigma_AC, sigma_A, sigma_S).
TABLE_3_10 = [
    (P_012, 150, 5, 1, 0.008287, 0.001381, 0.008287, 0.008171),
    (P_012, 150, 5, 3, 0.024860, 0.004143, 0.008287, 0.007176),
    (P_012, 150, 20, 1, 0.002072, 0.000345, 0.002072, 0.002043),
    (P_EQUAL, 150, 5, 1, 0.008287, 0.001070, 0.004143, 0.004003),
    (P_EQUAL, 150, 20, 1, 0.002072, 0.000267, 0.001036, 0.001001),
    (P_021, 150, 5, 1, 0.008287, 0.001330, 0.006629, 0.006494),
    (P_021, 150, 20, 1, 0.002072, 0.000333, 0.001657, 0.001624),
    (P_135, 50, 5, 1, 0.024860, 0.003654, 0.020717, 0.020392),
    (P_135, 50, 20, 1, 0.006215, 0.000914, 0.005179, 0.005098),
    (P_EQUAL, 50, 5, 1, 0.024860, 0.003209, 0.012430, 0.012009),
    (P_EQUAL, 50, 20, 1, 0.006215, 0.000802, 0.003108, 0.003002),
]


def test_gaussian_constant():
  assert nbafl.gaussian_constant(0.01) == pytest.approx(3.107511, abs=5e-7)
  assert nbafl.gaussian_constant(1e-5) == pytest.approx(math.sqrt(2 * math.log(1.25e5)))


@pytest.mark.parametrize("row", TABLE_3_10, ids=[f"row{k}" for k in range(len(TABLE_3_10))])
def test_note_table_3_10(row):
  p, m, eps, r, s_c, s_ac, s_a, s_s = row
  for clip in (1.0, 2.5):   # linear in B
    lv = nbafl.noise_levels(p, clip, T, r, m, eps, DELTA)
    # Every printed digit (6 decimals): at least 4 significant figures for all but
    # the smallest entries, which the table prints with 3.
    got = np.array([lv.sigma_c, lv.sigma_ac, lv.sigma_a, lv.sigma_s]) / clip
    np.testing.assert_allclose(got, [s_c, s_ac, s_a, s_s], rtol=0, atol=5.01e-7)
    assert isinstance(lv.sigma_s, float)
  # The single-quantity functions agree with noise_levels.
  assert nbafl.client_noise_stddev(2.0, r, m, eps, DELTA) == pytest.approx(2 * s_c, abs=2e-6)
  assert nbafl.total_noise_stddev(1.0, T, p.max(), m, eps, DELTA) == pytest.approx(s_a,
                                                                                   abs=5.01e-7)
  assert nbafl.server_noise_stddev(p, 1.0, T, r, m, eps, DELTA) == pytest.approx(s_s,
                                                                                 abs=5.01e-7)
  assert nbafl.aggregated_client_noise_stddev(s_c, p) == pytest.approx(s_ac, abs=1e-6)


# Note 000, section 3.10: threshold T > R * (value) and the largest R with sigma_S > 0.
@pytest.mark.parametrize("p,largest_r,threshold_per_r", [
    (P_012, 5, 5.0), (P_EQUAL, 3, 7.746), (P_021, 4, 6.021), (P_135, 5, 5.292)])
def test_threshold_branch(p, largest_r, threshold_per_r):
  assert nbafl.max_exposures_with_server_noise(p, T) == largest_r
  assert nbafl.server_noise_threshold(p, 1) == pytest.approx(threshold_per_r, rel=2e-4)
  assert nbafl.server_noise_threshold(p, 3) == pytest.approx(3 * threshold_per_r, rel=2e-4)
  kw = dict(clip_bound=1.0, rounds=T, min_dataset_size=150, epsilon=5.0, delta=DELTA)
  assert nbafl.server_noise_stddev(p, exposures=largest_r, **kw) > 1e-5
  for r in (largest_r + 1, largest_r + 2, T):
    assert nbafl.server_noise_stddev(p, exposures=r, **kw) == 0.0


def test_threshold_exact_equality_is_the_otherwise_branch():
  # 0-1-2 at T = 30: the threshold is 5 R, so R = 6 gives T == threshold exactly.
  assert nbafl.server_noise_threshold(P_012, 6) == pytest.approx(30.0, rel=1e-12)
  lv = nbafl.noise_levels(P_012, 1.0, 30, 6, 150, 5.0, DELTA)
  assert lv.sigma_s == 0.0
  # There sigma_AC equals sigma_A: the client noise alone already reaches it.
  assert lv.sigma_ac == pytest.approx(lv.sigma_a, rel=1e-12)
  # The same equality computed from p entries carrying rounding error.
  noisy = P_012 * (1 + 1e-15 * np.sin(np.arange(60)))
  assert nbafl.server_noise_stddev(noisy / noisy.sum(), 1.0, 30, 6, 150, 5.0, DELTA) == 0.0


def test_eq14_variance_identity_and_nbafl_reduction():
  for p in (P_012, P_EQUAL, P_021, P_135):
    lv = nbafl.noise_levels(p, 3.0, T, 2, 77, 7.0, 1e-3)
    assert lv.sigma_s > 0
    assert lv.sigma_ac ** 2 + lv.sigma_s ** 2 == pytest.approx(lv.sigma_a ** 2, rel=1e-12)
  # Equal p: sigma_S = 2 c B sqrt(T^2 - R^2 N) / (m N epsilon), NbAFL's downlink noise.
  n, b, r, m, eps = 60, 2.0, 3, 150, 5.0
  c = nbafl.gaussian_constant(DELTA)
  want = 2 * c * b * math.sqrt(T ** 2 - r ** 2 * n) / (m * n * eps)
  assert nbafl.server_noise_stddev(P_EQUAL, b, T, r, m, eps, DELTA) == pytest.approx(want,
                                                                                     rel=1e-12)


def test_per_round_levels_follow_the_schedule():
  cycle = [P_EQUAL, P_012, P_135, P_012[::-1]]
  sched = np.stack([cycle[t % 4] for t in range(T)])
  lv = nbafl.noise_levels_per_round(sched, 1.0, 1, 150, 5.0, DELTA)
  assert all(np.shape(v) == (T,) for v in lv)
  for t, p in enumerate(sched):
    fixed = nbafl.noise_levels(p, 1.0, T, 1, 150, 5.0, DELTA)
    np.testing.assert_allclose([v[t] for v in lv], list(fixed), rtol=1e-12)
  assert np.all(lv.sigma_c == lv.sigma_c[0])
  # The swap 0-1-2 -> 2-1-0 leaves max p and sum p^2, hence all noise, unchanged.
  assert lv.sigma_s[1] == pytest.approx(lv.sigma_s[3], rel=1e-12)
  assert 0 < lv.sigma_s[0] < lv.sigma_s[1]   # equal p: smaller sensitivity, less noise
  # Scalars of noise_levels_per_round for a constant schedule are those of noise_levels.
  const = nbafl.noise_levels_per_round(np.tile(P_021, (T, 1)), 1.0, 1, 150, 20.0, DELTA)
  np.testing.assert_allclose(np.array(const), np.tile(np.array(TABLE_3_10[6][4:])[:, None], T),
                             atol=5.01e-7)


def test_aggregate_noise_has_sd_sigma_a_monte_carlo():
  rng = np.random.default_rng(1234)
  k = 100_000
  for r, expect in ((1, "sigma_a"), (8, "sigma_ac")):
    lv = nbafl.noise_levels(P_012, 1.0, T, r, 150, 5.0, DELTA)
    n_i = rng.normal(0.0, lv.sigma_c, size=(k, 60))
    n_s = rng.normal(0.0, lv.sigma_s, size=k)
    total = n_i @ P_012 + n_s
    target = getattr(lv, expect)
    # Standard error of the sample SD: sd / sqrt(2k) = 0.22 %.
    assert np.std(total) == pytest.approx(target, rel=0.008)
    if r == 8:   # beyond the threshold the noise exceeds the calibration's sigma_A
      assert lv.sigma_s == 0.0 and target == pytest.approx(8 / 6 * lv.sigma_a, rel=1e-12)


def test_nominal_privacy_echoes_the_target():
  claim = nbafl.nominal_privacy(5.0, DELTA)
  assert (claim.epsilon, claim.delta) == (5.0, DELTA)
  assert claim.mechanism == nbafl.MECHANISM_LABEL
  assert "classical Gaussian" in claim.mechanism and "linear R/T" in claim.mechanism
  assert not claim.within_proven_range
  assert nbafl.nominal_privacy(0.5, DELTA).within_proven_range


def zcdp_epsilon(z, k, delta=DELTA):
  rho = k / (2 * z ** 2)
  return rho + 2 * math.sqrt(rho * math.log(1 / delta))


# Note 000, section 3.9: (epsilon, R, z_up, eps over R, eps over all T, z_down, eps down).
TABLE_3_9 = [
    (5, 1, 0.622, 6.18, 65.6, 18.65, 0.93),
    (5, 5, 3.108, 2.44, 6.90, 18.65, 0.93),
    (20, 1, 0.155, 40.2, 728, 4.66, 4.26),
    (20, 5, 0.777, 12.9, 46.3, 4.66, 4.26),
]


@pytest.mark.parametrize("row", TABLE_3_9)
def test_accountant_epsilon_against_note_table_3_9(row):
  eps, r, z_up, e_up, e_all, z_down, e_down = row
  out = nbafl.accountant_epsilon(P_012, 1.0, T, r, 150, eps, DELTA)
  assert out["z_uplink"] == pytest.approx(z_up, rel=3e-3)
  assert out["z_uplink"] == pytest.approx(r * nbafl.gaussian_constant(DELTA) / eps, rel=1e-12)
  np.testing.assert_allclose(out["z_downlink"], z_down, rtol=2e-3)
  assert out["z_downlink"].shape == (T,)
  pairs = [(out["uplink_epsilon"], zcdp_epsilon(out["z_uplink"], r), e_up),
           (out["uplink_all_uploads_epsilon"], zcdp_epsilon(out["z_uplink"], T), e_all),
           (out["downlink_epsilon"], zcdp_epsilon(out["z_downlink"][0], T), e_down)]
  for rdp_eps, zcdp_eps, table in pairs:
    assert zcdp_eps == pytest.approx(table, rel=0.01)      # the note's closed form
    assert rdp_eps <= zcdp_eps + 1e-9                       # RDP conversion is tighter
    assert rdp_eps >= 0.5 * zcdp_eps                        # ... but of the same order
  assert out["nominal_epsilon"] == eps and out["accountant"] == "rdp"


def test_gaussian_epsilon_matches_direct_dp_accounting():
  orders = [1.5, 2.0, 4.0, 8.0, 16.0, 32.0]
  acc = dp_rdp.RdpAccountant(orders)
  acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0), 7))
  assert nbafl.gaussian_epsilon(2.0, DELTA, releases=7, orders=orders) == pytest.approx(
      acc.get_epsilon(DELTA), rel=1e-12)
  # An array composes one release per entry.
  assert nbafl.gaussian_epsilon(np.full(7, 2.0), DELTA) == pytest.approx(
      nbafl.gaussian_epsilon(2.0, DELTA, releases=7), rel=1e-12)
  mixed = nbafl.gaussian_epsilon([2.0, 4.0, 2.0], DELTA)
  assert nbafl.gaussian_epsilon(2.0, DELTA, 2) < mixed < nbafl.gaussian_epsilon(2.0, DELTA, 3)
  # PLD is tighter than RDP (and uses the same shift of one sensitivity).
  pld = nbafl.gaussian_epsilon(18.645, DELTA, releases=30, accountant="pld")
  rdp = nbafl.gaussian_epsilon(18.645, DELTA, releases=30)
  assert 0.6 * rdp < pld <= rdp


def test_accountant_epsilon_with_schedule_and_beyond_threshold():
  sched = np.stack([P_012] * 10 + [P_012[::-1]] * 20)
  fixed = nbafl.accountant_epsilon(P_012, 1.0, T, 1, 150, 5.0, DELTA)
  varying = nbafl.accountant_epsilon(sched, 1.0, T, 1, 150, 5.0, DELTA)
  assert varying["downlink_epsilon"] == pytest.approx(fixed["downlink_epsilon"], rel=1e-9)
  with pytest.raises(FedJaxDpError, match="rows"):
    nbafl.accountant_epsilon(sched[:5], 1.0, T, 1, 150, 5.0, DELTA)
  # Beyond the Eq. 13 threshold the noise actually added is sigma_AC > sigma_A: the
  # downlink noise multiplier grows above T c / epsilon.
  beyond = nbafl.accountant_epsilon(P_012, 1.0, T, 8, 150, 5.0, DELTA)
  c = nbafl.gaussian_constant(DELTA)
  lv = nbafl.noise_levels(P_012, 1.0, T, 8, 150, 5.0, DELTA)
  np.testing.assert_allclose(beyond["z_downlink"], lv.sigma_ac / (2 * P_012.max() / 150),
                             rtol=1e-12)
  assert beyond["z_downlink"][0] == pytest.approx(8 / 6 * T * c / 5.0, rel=1e-12)
  assert beyond["downlink_epsilon"] < fixed["downlink_epsilon"]


@pytest.mark.parametrize("call,match", [
    (lambda: nbafl.gaussian_constant(0.0), "delta"),
    (lambda: nbafl.gaussian_constant(1.0), "delta"),
    (lambda: nbafl.client_noise_stddev(1.0, 1, 150, 0.0, DELTA), "epsilon"),
    (lambda: nbafl.client_noise_stddev(1.0, 1, 150, -1.0, DELTA), "epsilon"),
    (lambda: nbafl.client_noise_stddev(0.0, 1, 150, 5.0, DELTA), "clip_bound"),
    (lambda: nbafl.client_noise_stddev(1.0, 0, 150, 5.0, DELTA), "exposures"),
    (lambda: nbafl.client_noise_stddev(1.0, 1.5, 150, 5.0, DELTA), "exposures"),
    (lambda: nbafl.client_noise_stddev(1.0, 1, 0, 5.0, DELTA), "min_dataset_size"),
    (lambda: nbafl.total_noise_stddev(1.0, 0, 0.5, 150, 5.0, DELTA), "rounds"),
    (lambda: nbafl.total_noise_stddev(1.0, 30, 1.5, 150, 5.0, DELTA), "max_impact"),
    (lambda: nbafl.total_noise_stddev(1.0, 30, 0.0, 150, 5.0, DELTA), "max_impact"),
    (lambda: nbafl.noise_levels(P_012, 1.0, 30, 31, 150, 5.0, DELTA), "exposures.*<= rounds"),
    (lambda: nbafl.noise_levels(P_012 * 2, 1.0, 30, 1, 150, 5.0, DELTA), "p must sum to 1"),
    (lambda: nbafl.noise_levels(-P_012, 1.0, 30, 1, 150, 5.0, DELTA), "non-negative"),
    (lambda: nbafl.noise_levels(P_012, 1.0, 30, 1, 150, 5.0, 1.5), "delta"),
    (lambda: nbafl.noise_levels_per_round(np.stack([P_012, P_012 * 0.5]), 1.0, 1, 150,
                                          5.0, DELTA), r"round 2"),
    (lambda: nbafl.noise_levels_per_round(P_012, 1.0, 1, 150, 5.0, DELTA), "2-D"),
    (lambda: nbafl.gaussian_epsilon(0.0, DELTA), "noise_multipliers"),
    (lambda: nbafl.gaussian_epsilon([1.0, 2.0], DELTA, releases=2), "releases"),
    (lambda: nbafl.gaussian_epsilon(1.0, DELTA, accountant="zcdp"), "accountant"),
    (lambda: nbafl.gaussian_epsilon(1.0, DELTA, orders=[0.5, 2.0]), "orders"),
    (lambda: nbafl.accountant_epsilon(P_012, 1.0, 30, 31, 150, 5.0, DELTA), "exposures"),
    (lambda: nbafl.aggregated_client_noise_stddev(-1.0, P_012), "sigma_c"),
])
def test_bad_inputs_name_the_argument(call, match):
  with pytest.raises(FedJaxDpError, match=match):
    call()
