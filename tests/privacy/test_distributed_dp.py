"""Distributed DP bounds (fedjax_dp.privacy.distributed_dp) against exact Renyi
divergences computed here from the noise's probability mass functions, hand
computations, and dp_accounting's own accountant.

Exact divergences. For noise with pmf ``p`` on the integers and an integer shift
``Delta``, ``D_alpha(p(. - Delta) || p) = log(sum_x p(x - Delta)^alpha p(x)^(1 -
alpha)) / (alpha - 1)``, evaluated in log space on the grid ``[-W, W]`` (the terms left
out are below ``exp(-400)`` of the total in every case here). The pmf of a sum of ``n``
discrete Gaussians is the ``n``-fold convolution of the normalised discrete Gaussian
pmf (log space); the symmetric Skellam pmf with variance ``mu`` is ``exp(-mu) I_|k|(mu)``
with the Bessel function's power series summed in log space, checked against
``scipy.stats.skellam``. In ``d`` dimensions the noise is a product, so the divergence
of a shift ``v`` is the sum of the one-dimensional divergences of its coordinates.
"""

import functools
import math

import dp_accounting
import numpy as np
import pytest
from scipy import special, stats

from fedjax_dp.privacy import distributed_dp as ddp
from fedjax_dp.validation import FedJaxDpError

W = 300
GRID = np.arange(-W, W + 1)
ALPHAS = np.array([1.5, 2.0, 5.0, 10.0, 32.0])


def _lse(x, axis=None):
  """log(sum(exp(x))) (along ``axis``), stable."""
  x = np.asarray(x, dtype=np.float64)
  top = np.max(x, axis=axis, keepdims=True)
  out = np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True)) + top
  return float(out.item()) if axis is None else np.squeeze(out, axis=axis)


def _normalise(logw):
  return logw - _lse(logw)


@functools.lru_cache(maxsize=None)
def _dgauss_sum_logpmf(sigma, n):
  """log pmf on GRID of the sum of n i.i.d. N_Z(0, sigma^2)."""
  one = _normalise(-GRID.astype(np.float64) ** 2 / (2.0 * sigma ** 2))
  out = one
  for _ in range(n - 1):
    conv = np.full(GRID.size, -np.inf)
    for i, x in enumerate(GRID):  # one's value x plus the partial sum's value y
      lo, hi = max(-W, x - W), min(W, x + W)  # the result's range
      seg = slice(lo + W, hi + W + 1)
      conv[seg] = np.logaddexp(conv[seg], one[i] + out[lo - x + W:hi - x + W + 1])
    out = _normalise(conv)
  return out


@functools.lru_cache(maxsize=None)
def _skellam_logpmf(mu):
  """log pmf on GRID of Sk(mu/2, mu/2): exp(-mu) I_|k|(mu), I by its power series."""
  lam = mu / 2.0
  k = np.abs(GRID).astype(np.float64)[:, None]
  m = np.arange(0, 1500, dtype=np.float64)[None, :]
  log_terms = (2.0 * m + k) * math.log(lam) - special.gammaln(m + 1) - \
      special.gammaln(m + k + 1)
  return -mu + _lse(log_terms, axis=1)


def _exact_rdp(logp, shift, alphas=ALPHAS):
  """D_alpha(p(. - shift) || p) for each alpha; logp on GRID, shift an int >= 0."""
  if shift == 0:
    return np.zeros(len(alphas))
  shifted, base = logp[:-shift], logp[shift:]  # p(x - shift), p(x) for x in [-W+s, W]
  return np.array([_lse(a * shifted + (1.0 - a) * base) / (a - 1.0)
                   for a in alphas])


def _exact_product(logp, v, alphas):
  """The divergence of the shift vector v: the sum over its coordinates."""
  return sum(_exact_rdp(logp, abs(int(x)), alphas) for x in v)


def test_the_exact_pmfs_are_normalised_and_skellam_matches_scipy():
  for sigma, n in ((0.6, 2), (1.0, 5), (3.0, 5)):
    logp = _dgauss_sum_logpmf(sigma, n)
    assert abs(_lse(logp)) < 1e-12
    mean_sq = float(np.sum(np.exp(logp) * GRID ** 2))
    assert mean_sq == pytest.approx(n * sigma ** 2, rel=0.05 if sigma < 1 else 1e-6)
  for mu in (2.0, 10.0, 100.0):
    logp = _skellam_logpmf(mu)
    assert abs(_lse(logp)) < 1e-12
    ref = stats.skellam.pmf(GRID, mu / 2.0, mu / 2.0)
    ok = ref > 1e-200
    np.testing.assert_allclose(np.exp(logp[ok]), ref[ok], rtol=1e-7)
    assert float(np.sum(np.exp(logp) * GRID ** 2)) == pytest.approx(mu, rel=1e-10)


# ------------------------------------------------- bounds >= exact divergences (d = 1)


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("sigma", [0.6, 1.0, 3.0])
def test_ddgauss_bound_holds_and_is_near_tight_in_one_dimension(n, sigma):
  """Against the exact divergence of the sum of n discrete Gaussians, shifts 1, 2, 3
  (D1 = D2 = shift, d = 1). Looseness seen: at most x2.1 (sigma = 0.6, n = 5, shift 1,
  alpha = 1.5; tau = 0.46 there), at most 1.003 for sigma >= 1; at sigma = 3 (tau ~
  1e-75) the bound is within 5% of the Gaussian alpha D^2 / (2 n sigma^2)."""
  logp = _dgauss_sum_logpmf(sigma, n)
  for shift in (1, 2, 3):
    exact = _exact_rdp(logp, shift)
    bound = ddp.ddgauss_rdp(ALPHAS, shift, shift, sigma, n, 1)
    rho = ddp.ddgauss_rho(shift, shift, sigma, n, 1)
    assert bound.dtype == np.float64 and bound.shape == ALPHAS.shape
    assert np.all(bound >= exact * (1 - 1e-9)), (shift, bound, exact)
    assert np.all(rho * ALPHAS >= bound * (1 - 1e-12))
    assert np.all(bound <= exact * (2.5 if sigma < 1 else 1.01)), (shift, bound / exact)
    if sigma == 3.0:
      gauss = ALPHAS * shift ** 2 / (2 * n * sigma ** 2)
      assert np.all(np.abs(bound / gauss - 1) < 0.05)
      assert rho == pytest.approx(shift ** 2 / (2 * n * sigma ** 2), rel=0.05)


@pytest.mark.parametrize("mu, looseness", [(2.0, 10.0), (10.0, 3.5), (100.0, 1.2)])
def test_skellam_bound_holds_in_one_dimension(mu, looseness):
  """Against the exact divergence of the Skellam of variance mu, shifts 1, 2, 3. The
  exact Skellam divergence grows slower than the Gaussian's at large orders (log-ratio
  ~ shift * log|x|), so the bound (~ Gaussian) is loose there: x9.3 at mu = 2, alpha =
  32, shift 3; x3.2 at mu = 10; x1.17 at mu = 100. At mu = 100 the bound is within 5%
  of alpha D^2 / (2 mu)."""
  logp = _skellam_logpmf(mu)
  for shift in (1, 2, 3):
    exact = _exact_rdp(logp, shift)
    bound = ddp.skellam_rdp(ALPHAS, shift, shift, mu)
    rho = ddp.skellam_rho(shift, shift, mu)
    assert np.all(bound >= exact * (1 - 1e-9)), (shift, bound, exact)
    assert np.all(rho * ALPHAS >= exact * (1 - 1e-9))
    assert np.all(bound <= exact * looseness), (shift, bound / exact)
    if mu == 100.0:
      assert np.all(np.abs(bound / (ALPHAS * shift ** 2 / (2 * mu)) - 1) < 0.05)


# ----------------------------------------------- several dimensions: the L1 term matters


ALPHAS_D = np.array([1.1, 1.25, 1.5, 2.0, 5.0, 32.0])


@pytest.mark.parametrize("v, l1_term_wins", [
    ((1, 1, 0, 0), True), ((2, 1, 1, 0), False), ((1, 1, 1, 1), False)])
def test_ddgauss_bound_holds_in_four_dimensions_and_the_l1_term_helps(v, l1_term_wins):
  """d = 4, sigma = 0.6, n = 2 (tau = 0.29): the exact divergence of the shift v (a sum
  over coordinates) against the bound with D2 = ||v||_2, D1 = ||v||_1. For (1, 1, 0, 0)
  at alpha = 1.1 the L1 form (Prop. 14's second term) is the smallest: the bound is
  below the one with the Cauchy-Schwarz D1 = sqrt(d) D2 (where the second term equals
  the third). For (2, 1, 1, 0) the first term wins; (1, 1, 1, 1) has D1 = sqrt(d) D2."""
  sigma, n, d = 0.6, 2, 4
  v = np.array(v)
  l2, l1 = float(np.linalg.norm(v)), float(np.abs(v).sum())
  exact = _exact_product(_dgauss_sum_logpmf(sigma, n), v, ALPHAS_D)
  bound = ddp.ddgauss_rdp(ALPHAS_D, l2, l1, sigma, n, d)
  assert np.all(bound >= exact * (1 - 1e-9)), (bound, exact)
  assert np.all(ddp.ddgauss_rho(l2, l1, sigma, n, d) * ALPHAS_D >= exact)
  loose = ddp.ddgauss_rdp(ALPHAS_D, l2, math.sqrt(d) * l2, sigma, n, d)
  assert np.all(bound <= loose)
  assert (bound[0] < loose[0] * 0.95) == l1_term_wins, (bound, loose)


@pytest.mark.parametrize("v", [(1, 1, 0, 0), (2, 1, 1, 0), (3, 0, 0, 0)])
@pytest.mark.parametrize("mu", [2.0, 10.0])
def test_skellam_bound_holds_in_four_dimensions(v, mu):
  v = np.array(v)
  l2, l1 = float(np.linalg.norm(v)), float(np.abs(v).sum())
  exact = _exact_product(_skellam_logpmf(mu), v, ALPHAS_D)
  assert np.all(ddp.skellam_rdp(ALPHAS_D, l2, l1, mu) >= exact * (1 - 1e-9))
  assert np.all(ddp.skellam_rho(l2, l1, mu) * ALPHAS_D >= exact * (1 - 1e-9))


# ------------------------------------------------------------ rho is the curve's sup


DENSE = np.exp(np.linspace(0.0, math.log(1e6), 200_001))  # alpha in [1, 1e6]


@pytest.mark.parametrize("l2, l1, mu", [
    (3.0, 9.0, 10.0),     # 6 D1 >= D2^2: sup at alpha = 1
    (10.0, 10.0, 10.0),   # 6 D1 < D2^2: the two branches cross at alpha* = 3.2
    (10.0, 10.0, 400.0),  # 6 D1 < D2^2, crossing below 1
    (2.0, 4.0, 1.0),
])
def test_skellam_rho_is_the_sup_of_rdp_over_alpha(l2, l1, mu):
  ratio = ddp.skellam_rdp(DENSE, l2, l1, mu) / DENSE
  rho = ddp.skellam_rho(l2, l1, mu)
  assert rho >= ratio.max() * (1 - 1e-12)
  assert rho == pytest.approx(ratio.max(), rel=1e-6)


def test_skellam_rho_in_the_crossing_case_by_hand():
  # D2 = D1 = 10, mu = 10: A = 5 + 0.5, C = (60 - 100)/400 = -0.1, B = 5, E = 1.5;
  # alpha* = (1.5 + 0.1) / 0.5 = 3.2, rho = 5.5 - 0.1 / 3.2 = 5.46875: above min(f, g)
  # at alpha = 1 (5.4), below the branches' pure bounds A + max(C, 0) = 5.5, B + E = 6.5.
  assert ddp.skellam_rho(10.0, 10.0, 10.0) == pytest.approx(5.46875, rel=1e-14)


@pytest.mark.parametrize("l2, l1, sigma, n, d", [
    (1.0, 2.0, 0.6, 2, 4), (5.0, 20.0, 0.5, 10, 64), (40.0, 300.0, 2.0, 100, 1024)])
def test_ddgauss_rho_is_the_sup_of_rdp_over_alpha_reached_at_one(l2, l1, sigma, n, d):
  ratio = ddp.ddgauss_rdp(DENSE, l2, l1, sigma, n, d) / DENSE
  rho = ddp.ddgauss_rho(l2, l1, sigma, n, d)
  assert rho >= ratio.max() * (1 - 1e-12)
  assert rho == pytest.approx(float(ddp.ddgauss_rdp([1.0], l2, l1, sigma, n, d)[0]),
                              rel=1e-14)


# ------------------------------------------------------------------ hand computations


def test_rounded_bounds_by_hand_and_monotone():
  # c = 3, d = 16, beta = e^-0.5 (sqrt(2 ln(1/beta)) = 1): 9 + 4 + (3 + 2) = 18.
  assert ddp.rounded_l2_bound(3.0, 16, math.exp(-0.5)) == pytest.approx(math.sqrt(18))
  assert ddp.rounded_l2_bound(3.0, 16, 0.0) == 7.0          # c + sqrt(d)
  # c = 0, d = 1, beta = e^-50: sqrt(0.25 + 10 * 0.5) = 2.29 > c + sqrt(d) = 1.
  assert ddp.rounded_l2_bound(0.0, 1, math.exp(-50.0)) == 1.0
  assert ddp.rounded_l1_bound(2.0, 16) == 4.0    # Delta2^2 < sqrt(d) Delta2
  assert ddp.rounded_l1_bound(10.0, 16) == 40.0  # sqrt(d) Delta2
  cs = [ddp.rounded_l2_bound(c, 1024, 0.1) for c in (0.0, 1.0, 10.0, 100.0, 1e4)]
  ds = [ddp.rounded_l2_bound(50.0, d, 0.1) for d in (1, 16, 256, 4096, 2 ** 20)]
  bs = [ddp.rounded_l2_bound(50.0, 1024, b) for b in (1e-9, 1e-3, 0.1, 0.5, 0.9)]
  assert all(np.diff(cs) > 0) and all(np.diff(ds) > 0) and all(np.diff(bs) < 0)


def test_ddgauss_tau_and_a_bound_by_hand():
  # sigma = 1, n = 3: 10 (e^{-pi^2} + e^{-4 pi^2 / 3}).
  assert ddp.ddgauss_tau(1.0, 3) == pytest.approx(
      10 * (math.exp(-9.869604401089358) + math.exp(-13.159472534785811)), rel=1e-12)
  assert ddp.ddgauss_tau(1.0, 1) == 0.0 and ddp.ddgauss_tau(1.0, 0) == 0.0
  # sigma = 1/2, n = 2: tau = 10 e^{-pi^2/4}; S^2 = 1/2, D2 = D1 = 1, d = 4. At alpha
  # = 2 the first term, 2 + 4 tau = 5.392, beats (2 + 2 sqrt(2) tau + 4 tau^2) = 7.27
  # and (sqrt(2) + 2 tau)^2 = 9.67.
  tau = 10 * math.exp(-math.pi ** 2 / 4)
  assert ddp.ddgauss_tau(0.5, 2) == pytest.approx(tau, rel=1e-14)
  assert ddp.ddgauss_rdp([2.0], 1.0, 1.0, 0.5, 2, 4)[0] == pytest.approx(2 + 4 * tau)


def test_ddgauss_tau_for_many_clients_bounds_the_exact_sum_tightly():
  n = (1 << 21) + 1000
  k = np.arange(1, n, dtype=np.float64)
  exact = 10 * float(np.sum(np.exp(-2 * math.pi ** 2 * 0.5 ** 2 * k / (k + 1))))
  tau = ddp.ddgauss_tau(0.5, n)
  assert exact <= tau <= exact * (1 + 1e-9)


def test_gaussian_equivalent_noise_multiplier():
  assert ddp.gaussian_equivalent_noise_multiplier(0.5) == 1.0
  assert ddp.gaussian_equivalent_noise_multiplier(2.0) == 0.5
  assert ddp.gaussian_equivalent_noise_multiplier(0.0) == math.inf
  assert ddp.gaussian_equivalent_noise_multiplier(math.inf) == 0.0


# ------------------------------------------------------------------------- planning


def _sum_std(clip, dim, n, z, gamma):
  """The planner's model of a coordinate of the unwrapped sum (integer units)."""
  return math.sqrt(n * n * clip * clip / (dim * gamma ** 2) + n / 4 +
                   z * z * clip * clip / gamma ** 2)


@pytest.mark.parametrize("mechanism", ddp.MECHANISMS)
def test_plan_meets_the_overflow_target_and_more_bits_mean_finer_grids(mechanism):
  c, d, n, z, p = 0.7, 2 ** 16, 200, 1.1, 1e-5
  gammas = []
  for bits in range(12, 21):
    pl = ddp.plan(mechanism, c, d, bits, n, z, overflow_prob=p)
    std = _sum_std(c, d, n, z, pl.gamma)
    predicted = d * 2 * stats.norm.sf(2 ** (bits - 1) / std)
    assert predicted == pytest.approx(p, rel=1e-6)
    assert pl.round_overflow_prob == pytest.approx(p, rel=1e-6)
    assert pl.coordinate_overflow_prob == pytest.approx(p / d, rel=1e-6)
    assert pl.k == pytest.approx(stats.norm.isf(p / (2 * d)), rel=1e-12)
    # a coarser grid is never needed, a finer one overflows more often
    finer = _sum_std(c, d, n, z, pl.gamma * 0.99)
    assert d * 2 * stats.norm.sf(2 ** (bits - 1) / finer) > p
    assert pl.local_sigma == pytest.approx(z * c / (pl.gamma * math.sqrt(n)), rel=1e-12)
    assert pl.l2_bound == pytest.approx(ddp.rounded_l2_bound(c / pl.gamma, d, pl.beta))
    assert pl.l1_bound == pytest.approx(pl.l2_bound * min(math.sqrt(d), pl.l2_bound))
    assert pl.z_eq == pytest.approx(1 / math.sqrt(2 * pl.rho))
    gammas.append(pl.gamma)
  assert all(np.diff(gammas) < 0)


def test_plan_refuses_too_few_bits_and_names_the_minimum():
  c, d, n, z = 1.0, 2 ** 16, 10 ** 6, 1.0
  k = stats.norm.isf(1e-6 / (2 * d))
  need = next(b for b in range(2, 40) if 2 ** (b - 1) > k * math.sqrt(n) / 2)
  assert need == 13
  with pytest.raises(FedJaxDpError, match=rf"bits must be in \[{need}, 32\]") as e:
    ddp.plan("skellam", c, d, need - 1, n, z)
  assert e.value.option == "bits"
  ddp.plan("skellam", c, d, need, n, z)
  # The discrete Gaussian also needs sigma >= 1/2: at 20 bits sigma would be ~0.004.
  with pytest.raises(FedJaxDpError, match=r"sigma would be .* < 1/2") as e:
    ddp.plan("ddgauss", c, d, 20, n, z)
  assert e.value.option == "bits"
  need_dg = int(str(e.value).split("bits must be in [")[1].split(",")[0])
  assert ddp.plan("ddgauss", c, d, need_dg, n, z).local_sigma >= 0.5
  with pytest.raises(FedJaxDpError):
    ddp.plan("ddgauss", c, d, need_dg - 1, n, z)
  with pytest.raises(FedJaxDpError, match="no bits <= 32 is enough") as e:
    ddp.plan("skellam", c, 2 ** 16, 32, 10 ** 18, z)
  assert e.value.option == "bits"


@pytest.mark.parametrize("mechanism", ddp.MECHANISMS)
def test_dropouts_raise_rho(mechanism):
  pl = ddp.plan(mechanism, 1.0, 2 ** 14, 16, 100, 1.0)
  rhos = [pl.rho_for(m) for m in (1, 10, 50, 100, 200)]
  assert all(np.diff(rhos) < 0)
  assert pl.rho_for(100) == pl.rho and pl.z_eq_for(100) == pl.z_eq
  assert pl.rho_for(0) == math.inf and pl.z_eq_for(0) == 0.0
  # Half the survivors: about twice rho (the noise variance halves).
  assert pl.rho_for(50) == pytest.approx(2 * pl.rho, rel=0.01)


@pytest.mark.parametrize("mechanism", ddp.MECHANISMS)
def test_z_eq_is_z_on_a_fine_grid_and_worse_on_a_coarse_one(mechanism):
  """c = 0.5, d = 2^20, n = 1000, z = 1.2, beta = 1e-3. At 20 bits gamma ~ 1e-5 and
  the rounding inflation of Delta2 (d/4 against (c/gamma)^2) is negligible; at 12 bits
  c / gamma ~ 185 while sqrt(d)/2 = 512, and z_eq drops to about a third of z."""
  z = 1.2
  fine = ddp.plan(mechanism, 0.5, 2 ** 20, 20, 1000, z, beta=1e-3)
  coarse = ddp.plan(mechanism, 0.5, 2 ** 20, 12, 1000, z, beta=1e-3)
  assert fine.z_eq == pytest.approx(z, rel=1e-3) and fine.z_eq <= z
  assert coarse.z_eq < 0.5 * z


@pytest.mark.parametrize("mechanism", ddp.MECHANISMS)
def test_min_bits_is_the_first_width_where_rounding_is_a_small_fraction(mechanism):
  c, d, n, z = 1.0, 2 ** 18, 100, 1.0
  for frac in (0.01, 0.1, 1e-4):
    b = ddp.min_bits(mechanism, c, d, n, z, rounding_fraction=frac)
    noise_var = (z * c / ddp.plan(mechanism, c, d, b, n, z).gamma) ** 2
    assert n / 4 <= frac * noise_var
    try:
      below = ddp.plan(mechanism, c, d, b - 1, n, z)
    except FedJaxDpError:
      continue
    assert n / 4 > frac * (z * c / below.gamma) ** 2
  assert ddp.min_bits(mechanism, c, d, n, z, rounding_fraction=1e-4) > \
      ddp.min_bits(mechanism, c, d, n, z, rounding_fraction=0.01)
  with pytest.raises(FedJaxDpError) as e:
    ddp.min_bits(mechanism, c, d, n, z, rounding_fraction=1e-20)
  assert e.value.option == "rounding_fraction"
  with pytest.raises(FedJaxDpError) as e:
    ddp.min_bits(mechanism, c, d, 10 ** 18, z)
  assert e.value.option == "num_clients"


# ----------------------------------------------------------------------- accounting


def test_epsilon_with_every_client_taking_part_matches_dp_accountings_zcdp():
  rhos = [0.01, 0.05, 0.2, 0.003] * 5
  acc = dp_accounting.rdp.RdpAccountant()
  for r in rhos:
    acc.compose(dp_accounting.ZCDpEvent(r))
  for delta in (1e-5, 1e-8):
    assert ddp.epsilon_visible_participation(rhos, 1.0, delta) == pytest.approx(
        acc.get_epsilon(delta), rel=1e-12)


def test_epsilon_with_visible_participation_below_full_participation():
  rhos = [0.02, 0.04] * 10
  orders = [1.5, 2.0, 4.0, 8.0, 16.0, 32.0]
  full = ddp.epsilon_visible_participation(rhos, 1.0, 1e-6, orders)
  eps = [ddp.epsilon_visible_participation(rhos, q, 1e-6, orders)
         for q in (0.01, 0.1, 0.5, 0.9)]
  assert all(np.diff(eps) > 0) and eps[-1] < full
  # The per-round RDP by its definition, without log-space arithmetic (no overflow at
  # these orders: (alpha - 1) alpha rho <= 40).
  a, q = np.array(orders), 0.1
  rdp = np.sum([np.log(1 - q + q * np.exp((a - 1) * a * r)) / (a - 1) for r in rhos],
               axis=0)
  ref, _ = dp_accounting.rdp.compute_epsilon(orders, list(rdp), 1e-6)
  assert eps[1] == pytest.approx(ref, rel=1e-10)
  assert ddp.epsilon_visible_participation([], 0.5, 1e-6) == 0.0
  assert ddp.epsilon_visible_participation([0.1, math.inf], 0.5, 1e-6) == math.inf


# ------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("call, option", [
    (lambda: ddp.plan("gauss", 1.0, 1024, 16, 10, 1.0), "mechanism"),
    (lambda: ddp.plan("ddgauss", 1.0, 1000, 16, 10, 1.0), "dim"),
    (lambda: ddp.plan("ddgauss", 1.0, 1024, 33, 10, 1.0), "bits"),
    (lambda: ddp.plan("ddgauss", 1.0, 1024, 1, 10, 1.0), "bits"),
    (lambda: ddp.plan("ddgauss", 0.0, 1024, 16, 10, 1.0), "clip"),
    (lambda: ddp.plan("ddgauss", 1.0, 1024, 16, 0, 1.0), "num_clients"),
    (lambda: ddp.plan("ddgauss", 1.0, 1024, 16, 10, 0.0), "noise_multiplier"),
    (lambda: ddp.plan("ddgauss", 1.0, 1024, 16, 10, 1.0, beta=1.0), "beta"),
    (lambda: ddp.plan("ddgauss", 1.0, 1024, 16, 10, 1.0, overflow_prob=0.0),
     "overflow_prob"),
    (lambda: ddp.plan("skellam", 1.0, 1024, 16, 10, 1.0).rho_for(-1), "survivors"),
    (lambda: ddp.rounded_l2_bound(-1.0, 4, 0.5), "scaled_clip"),
    (lambda: ddp.rounded_l2_bound(1.0, 0, 0.5), "dim"),
    (lambda: ddp.ddgauss_rho(1.0, 1.0, 0.49, 2, 1), "local_sigma"),
    (lambda: ddp.ddgauss_rho(2.0, 1.0, 1.0, 2, 4), "l1_bound"),
    (lambda: ddp.ddgauss_rho(1.0, 1.0, 1.0, 0, 1), "n"),
    (lambda: ddp.ddgauss_rdp([0.5, 2.0], 1.0, 1.0, 1.0, 2, 1), "orders"),
    (lambda: ddp.skellam_rdp([[2.0]], 1.0, 1.0, 1.0), "orders"),
    (lambda: ddp.skellam_rho(1.0, 1.0, 0.0), "variance"),
    (lambda: ddp.gaussian_equivalent_noise_multiplier(-1.0), "rho"),
    (lambda: ddp.epsilon_visible_participation([-0.1], 0.5, 1e-5), "rhos"),
    (lambda: ddp.epsilon_visible_participation([0.1], 0.0, 1e-5), "sampling_rate"),
    (lambda: ddp.epsilon_visible_participation([0.1], 0.5, 0.0), "delta"),
    (lambda: ddp.epsilon_visible_participation([0.1], 0.5, 1e-5, [1.0, 2.0]), "orders"),
])
def test_bad_input_names_the_argument(call, option):
  with pytest.raises(FedJaxDpError) as e:
    call()
  assert e.value.option == option, str(e.value)
