"""Tests of `fedjax_dp.privacy.discrete_noise`: the discrete Gaussian and Skellam samplers
against their exact pmfs.

Goodness of fit is Pearson's chi-square test with a fixed key (deterministic), bins of
expected count >= 5 (the tails merged), and a pass threshold p > 1e-4; moments use a
tolerance of 6 standard errors computed from the exact pmf.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp.privacy import discrete_noise as dn
from fedjax_dp.validation import FedJaxDpError

N = 200_000
NUM_SE = 6.0
P_MIN = 1e-4

_dg = jax.jit(dn.discrete_gaussian, static_argnums=1)
_sk = jax.jit(dn.skellam, static_argnums=1)


def _draw_dg(sigma, n=N, seed=0):
  return np.asarray(_dg(jax.random.key(seed), (n,), jnp.float32(sigma)))


def _chi2_pvalue(samples, support, pmf, width=1):
  """p-value of Pearson's chi-square test of integer ``samples`` against ``pmf`` on the
  integer ``support`` (consecutive, covering all but a negligible mass), in bins of
  ``width`` integers, the tails merged until each bin expects >= 5."""
  samples = np.asarray(samples, np.int64)
  lo = support[0]
  edges = np.arange(lo, support[-1] + width + 1, width)
  expected = np.add.reduceat(pmf, np.arange(0, len(pmf), width)) * samples.size
  observed = np.histogram(samples, bins=np.append(edges[:len(expected)], np.inf))[0]
  observed[0] += np.sum(samples < lo)
  keep_e, keep_o, acc_e, acc_o = [], [], 0.0, 0
  for e, o in zip(expected, observed):   # merge forward until >= 5 expected
    acc_e, acc_o = acc_e + e, acc_o + o
    if acc_e >= 5:
      keep_e.append(acc_e)
      keep_o.append(acc_o)
      acc_e, acc_o = 0.0, 0
  keep_e[-1] += acc_e
  keep_o[-1] += acc_o
  e, o = np.array(keep_e), np.array(keep_o)
  stat = np.sum((o - e) ** 2 / e)
  return stats.chi2.sf(stat, len(e) - 1)


def _dg_support(sigma):
  r = int(math.ceil(12 * sigma + 10))
  x = np.arange(-r, r + 1)
  return x, dn.discrete_gaussian_pmf(x, sigma)


def _rounded_gaussian_pmf(x, sigma):
  """P(round(sigma Z) = x), Z ~ N(0, 1): the continuous Gaussian rounded."""
  return stats.norm.cdf((x + 0.5) / sigma) - stats.norm.cdf((x - 0.5) / sigma)


@pytest.mark.parametrize("sigma,width", [(0.6, 1), (2.0, 1), (12.0, 1), (7.9, 1),
                                         (8.0, 1), (700.0, 10), (3000.0, 50)])
def test_discrete_gaussian_fits_the_exact_pmf(sigma, width):
  """sigma < 8: the table; 8 <= sigma <= 1024: the rounded proposal; 3000: with the
  uniform fine part (s = 3). Wide bins for the large sigmas."""
  x, pmf = _dg_support(sigma)
  samples = _draw_dg(sigma)
  assert samples.dtype == np.int32
  assert _chi2_pvalue(samples, x, pmf, width) > P_MIN


@pytest.mark.parametrize("sigma", [0.6, 2.0, 12.0, 3000.0])
def test_discrete_gaussian_moments_match_the_exact_pmf(sigma):
  x, pmf = _dg_support(sigma)
  var = float(np.sum(pmf * x * x))
  m4 = float(np.sum(pmf * x ** 4))
  s = _draw_dg(sigma, seed=1).astype(np.float64)
  assert abs(s.mean()) <= NUM_SE * math.sqrt(var / N)
  assert abs(np.mean(s * s) - var) <= NUM_SE * math.sqrt((m4 - var * var) / N)
  # The discrete Gaussian's variance is below sigma^2 (CKS 2020), visibly at 0.6.
  if sigma < 1:
    assert var < 0.99 * sigma ** 2


def test_discrete_gaussian_is_not_a_rounded_continuous_gaussian():
  """At sigma = 0.6 the two pmfs differ by more than the chi-square test tolerates: the
  test fails against the wrong pmf, in both directions (it has power)."""
  sigma = 0.6
  x, pmf = _dg_support(sigma)
  wrong = _rounded_gaussian_pmf(x, sigma)
  assert abs(pmf[x == 0][0] - wrong[x == 0][0]) > 0.05   # 0.664 vs 0.595
  samples = _draw_dg(sigma)
  assert _chi2_pvalue(samples, x, pmf) > P_MIN
  assert _chi2_pvalue(samples, x, wrong) < 1e-12
  rounded = np.round(sigma * np.random.default_rng(0).standard_normal(N))
  assert _chi2_pvalue(rounded, x, wrong) > P_MIN
  assert _chi2_pvalue(rounded, x, pmf) < 1e-12


def test_discrete_gaussian_under_jit_and_vmap_with_traced_sigma():
  sigmas = jnp.array([0.0, 0.6, 12.0, 3000.0], jnp.float32)
  keys = jax.random.split(jax.random.key(7), 4)
  n = 50_000
  out = jax.jit(jax.vmap(lambda k, s: dn.discrete_gaussian(k, (n,), s)))(keys, sigmas)
  assert out.dtype == jnp.int32 and out.shape == (4, n)
  out = np.asarray(out, np.float64)
  assert np.all(out[0] == 0)
  for row, sigma in zip(out[1:], [0.6, 12.0, 3000.0]):
    x, pmf = _dg_support(sigma)
    var = float(np.sum(pmf * x * x))
    m4 = float(np.sum(pmf * x ** 4))
    assert abs(np.mean(row * row) - var) <= NUM_SE * math.sqrt((m4 - var * var) / n)
  # Each row is what the unbatched call draws with the same key.
  for i in (1, 2, 3):
    single = np.asarray(_dg(keys[i], (n,), sigmas[i]))
    assert np.mean(single == out[i]) > 0.999


def test_discrete_gaussian_zero_sigma_shapes_and_dtype():
  out = dn.discrete_gaussian(jax.random.key(0), (3, 5), 0.0)
  assert out.dtype == jnp.int32 and out.shape == (3, 5) and not np.any(np.asarray(out))
  assert dn.discrete_gaussian(jax.random.key(0), (0, 4), 1.0).shape == (0, 4)
  assert dn.discrete_gaussian(jax.random.key(0), 7, 1.0).shape == (7,)


def test_discrete_gaussian_large_sigma_stays_in_int32():
  s = _draw_dg(dn.MAX_SIGMA, n=20_000, seed=3).astype(np.float64)
  assert np.all(np.abs(s) <= 6.8 * dn.MAX_SIGMA + 1e4)
  assert abs(s.std() / dn.MAX_SIGMA - 1.0) < NUM_SE / math.sqrt(2 * s.size)


def test_invalid_parameters_raise_or_flag():
  key = jax.random.key(0)
  for bad in (-1.0, float("nan"), 2 * dn.MAX_SIGMA, np.ones(2)):
    with pytest.raises(FedJaxDpError) as e:
      dn.discrete_gaussian(key, (3,), bad)
    assert e.value.option == "sigma"
  with pytest.raises(FedJaxDpError) as e:
    dn.skellam(key, (3,), -2.0)
  assert e.value.option == "variance"
  with pytest.raises(FedJaxDpError) as e:
    dn.discrete_gaussian(key, (3, -1), 1.0)
  assert e.value.option == "shape"
  # Traced invalid values cannot raise: the output is INVALID everywhere.
  for s in (-1.0, float("nan")):
    assert np.all(np.asarray(_dg(key, (4,), jnp.float32(s))) == dn.INVALID)
    assert np.all(np.asarray(_sk(key, (4,), jnp.float32(s))) == dn.INVALID)


def test_discrete_gaussian_pmf():
  x = np.arange(-40, 41)
  for sigma in (0.3, 1.0, 5.0):
    p = dn.discrete_gaussian_pmf(x, sigma)
    assert p.dtype == np.float64 and abs(p.sum() - 1.0) < 1e-12
    assert np.allclose(p, p[::-1]) and np.argmax(p) == 40
  assert np.array_equal(dn.discrete_gaussian_pmf([-1, 0, 2], 0.0), [0.0, 1.0, 0.0])
  # The two normalisers agree where they meet (Poisson summation beyond 1e4).
  a = dn.discrete_gaussian_pmf([0, 5000], 1e4)
  b = dn.discrete_gaussian_pmf([0, 5000], 1e4 * (1 + 1e-12))
  assert np.allclose(a, b, rtol=1e-9)
  with pytest.raises(FedJaxDpError) as e:
    dn.discrete_gaussian_pmf([0.5], 1.0)
  assert e.value.option == "values"


@pytest.mark.parametrize("variance", [50.0, 1e6])
def test_skellam_variance_integer_and_symmetric(variance):
  s = np.asarray(_sk(jax.random.key(11), (N,), jnp.float32(variance)))
  assert s.dtype == np.int32
  s = s.astype(np.float64)
  assert abs(s.var() / variance - 1.0) < 0.02
  assert abs(s.mean()) <= NUM_SE * math.sqrt(variance / N)
  # Symmetry: x and -x have the same distribution (two-sample test of |x| by sign).
  pos, neg = s[s > 0], -s[s < 0]
  assert abs(pos.size - neg.size) <= NUM_SE * math.sqrt(pos.size + neg.size)
  assert stats.ks_2samp(pos, neg).pvalue > P_MIN


@pytest.mark.parametrize("variance,width", [(5.0, 1), (50.0, 1), (120.0, 1),
                                            (1e6, 20)])
def test_skellam_fits_scipys_pmf(variance, width):
  """variance 5 and 50: the Poisson table (lam < 50); 120 and 1e6: PTRS."""
  lam = variance / 2
  r = int(math.ceil(8 * math.sqrt(variance) + 10))
  x = np.arange(-r, r + 1)
  pmf = stats.skellam.pmf(x, lam, lam)
  s = np.asarray(_sk(jax.random.key(12), (N,), jnp.float32(variance)))
  assert _chi2_pvalue(s, x, pmf / pmf.sum(), width) > P_MIN


def test_skellam_zero_jit_vmap_and_huge_variance():
  out = dn.skellam(jax.random.key(0), (2, 3), 0.0)
  assert out.dtype == jnp.int32 and not np.any(np.asarray(out))
  variances = jnp.array([0.0, 8.0, 300.0, 1e8], jnp.float32)
  keys = jax.random.split(jax.random.key(1), 4)
  n = 50_000
  out = jax.jit(jax.vmap(lambda k, v: dn.skellam(k, (n,), v)))(keys, variances)
  assert out.dtype == jnp.int32
  out = np.asarray(out, np.float64)
  assert np.all(out[0] == 0)
  for row, v in zip(out[1:], [8.0, 300.0, 1e8]):
    assert abs(row.var() / v - 1.0) < NUM_SE * math.sqrt(2.0 / n) + 0.001
  # jax.random.poisson gives only multiples of 4 at lam = 5e7; these are all residues.
  assert set(np.unique(np.mod(out[3], 4))) == {0.0, 1.0, 2.0, 3.0}


def test_large_sigma_has_no_float32_lumps():
  """At sigma = 1e6 a float32 ``round(sigma * Z)`` sees sigma Z on a grid of 1/4 to 1/2,
  whose ties go to even integers: 3.4% more even draws. The fine part (s = 977) keeps
  every float small: even and odd draws balance (exact: 1/2 up to e^-2e13)."""
  n = 1_000_000
  tol = NUM_SE * 0.5 / math.sqrt(n)
  s = np.asarray(_dg(jax.random.key(5), (n,), jnp.float32(1e6)))
  assert abs(np.mean(s % 2 == 0) - 0.5) < tol
  z = jax.random.normal(jax.random.key(6), (n,))
  naive = np.asarray(jnp.round(jnp.float32(1e6) * z))
  assert np.mean(naive.astype(np.int64) % 2 == 0) - 0.5 > tol   # the check has power
