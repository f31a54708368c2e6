"""Tests of `fedjax_dp.federated.sampling` and `fedjax_dp.federated.keys`."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp.federated import keys as keylib
from fedjax_dp.federated import sampling
from fedjax_dp.federated.sampling import (FixedSizeSampler, PoissonSampler,
                                          distinct_draws, fixed_size_sample, num_draws,
                                          poisson_k_max, poisson_sample)
from fedjax_dp.validation import FedJaxDpError

NUM_SE = 6.0


@pytest.mark.parametrize("n,q", [(10, 0.5), (100, 0.1), (1000, 0.01), (3400, 0.003),
                                 (50, 0.9), (100000, 0.001), (7, 1e-12)])
def test_poisson_k_max_overflow_below_target(n, q):
  """The tail is taken over N + 1 clients (a neighbouring population may hold one more:
  the truncation probability enters delta), and k_max may be N + 1 (no overflow)."""
  k = poisson_k_max(n, q)
  assert 1 <= k <= n + 1
  assert stats.binom.sf(k, n + 1, q) < 1e-12
  if 1 < k < n + 1:  # and it is the smallest such k
    assert stats.binom.sf(k - 1, n + 1, q) >= 1e-12


def test_poisson_k_max_edge_cases():
  assert poisson_k_max(37, 1.0) == 38
  assert poisson_k_max(1, 0.5) == 2  # N + 1: nothing can overflow
  k_loose = poisson_k_max(1000, 0.05, overflow_prob=1e-3)
  assert stats.binom.sf(k_loose, 1001, 0.05) < 1e-3
  assert k_loose < poisson_k_max(1000, 0.05)
  for args, name in (((0, 0.1), "population_size"), ((10, 0.0), "sampling_rate"),
                     ((10, 1.5), "sampling_rate"), ((10, float("nan")), "sampling_rate"),
                     ((10, 0.1, 0.0), "overflow_prob")):
    with pytest.raises(FedJaxDpError, match=name):
      poisson_k_max(*args)


@pytest.fixture(scope="module")
def batched_poisson():
  n = 60

  @jax.jit
  def run(q, seed):
    ks = jax.random.split(jax.random.key(seed), 2000)
    return jax.vmap(lambda k: poisson_sample(k, n, q, 30))(ks)

  return n, run


def test_poisson_sample_distribution(batched_poisson):
  n, run = batched_poisson
  q = 0.2
  cohorts = run(jnp.float32(q), 0)
  idx, mask = np.asarray(cohorts.indices), np.asarray(cohorts.mask)
  num = np.asarray(cohorts.num_sampled)
  trials = len(num)
  # Cohort size ~ Binomial(N, q).
  sd = np.sqrt(n * q * (1 - q))
  assert abs(num.mean() - n * q) <= NUM_SE * sd / np.sqrt(trials)
  assert abs(num.std() - sd) <= NUM_SE * sd / np.sqrt(2 * trials)
  np.testing.assert_array_equal(mask.sum(1), num)  # k_max large enough here
  assert np.all(np.asarray(cohorts.num_truncated) == 0)
  # Every client is included with probability q.
  freq = np.zeros(n)
  for i in range(trials):
    real = idx[i][mask[i]]
    assert len(np.unique(real)) == len(real)            # unique
    assert np.all((real >= 0) & (real < n))              # in range
    assert np.all(np.diff(real) > 0)                     # increasing
    assert np.all(mask[i][:num[i]]) and not np.any(mask[i][num[i]:])  # real slots first
    freq[real] += 1
  freq /= trials
  assert np.all(np.abs(freq - q) <= NUM_SE * np.sqrt(q * (1 - q) / trials))


def test_poisson_sampling_rate_is_traced(batched_poisson):
  n, run = batched_poisson
  before = run._cache_size()
  lo = np.asarray(run(jnp.float32(0.05), 1).num_sampled).mean()
  hi = np.asarray(run(jnp.float32(0.4), 1).num_sampled).mean()
  assert run._cache_size() == before  # a new q does not recompile
  assert abs(lo - 0.05 * n) < 1.0 and abs(hi - 0.4 * n) < 1.0


def test_poisson_sample_q_one_takes_everyone():
  c = poisson_sample(jax.random.key(0), 9, 1.0, 9)
  np.testing.assert_array_equal(np.asarray(c.indices), np.arange(9))
  assert bool(jnp.all(c.mask)) and int(c.num_sampled) == 9


def test_poisson_truncation_is_reported():
  n, k_max = 50, 3
  sampler = PoissonSampler.create(n, 0.5, k_max=k_max)
  c = sampler.sample(jax.random.key(0))
  num = int(c.num_sampled)
  assert num > k_max
  assert int(c.num_truncated) == num - k_max
  assert int(jnp.sum(c.mask)) == k_max
  assert len(np.unique(np.asarray(c.indices))) == k_max


def test_poisson_sampler_create():
  s = PoissonSampler.create(200, 0.05)
  assert s.k_max == poisson_k_max(200, 0.05)
  assert s.expected_cohort_size == pytest.approx(10.0)
  assert PoissonSampler.create(200, 0.05, k_max=201).k_max == 201  # N + 1: no overflow
  with pytest.raises(FedJaxDpError, match="k_max"):
    PoissonSampler.create(200, 0.05, k_max=202)
  with pytest.raises(FedJaxDpError, match="sampling_rate"):
    PoissonSampler.create(200, 0.0)


def test_fixed_size_sampler():
  n, m = 40, 7
  s = FixedSizeSampler.create(n, m)
  assert s.k_max == m and s.sampling_rate == pytest.approx(m / n)
  sample = jax.jit(jax.vmap(s.sample))
  cohorts = sample(jax.random.split(jax.random.key(0), 1000))
  idx = np.asarray(cohorts.indices)
  assert np.all(np.asarray(cohorts.mask))
  assert np.all(np.asarray(cohorts.num_sampled) == m)
  assert np.all(np.asarray(cohorts.num_truncated) == 0)
  for row in idx:
    assert len(np.unique(row)) == m
  assert idx.min() >= 0 and idx.max() < n
  freq = np.bincount(idx.ravel(), minlength=n) / 1000
  p = m / n
  assert np.all(np.abs(freq - p) <= NUM_SE * np.sqrt(p * (1 - p) / 1000))
  with pytest.raises(FedJaxDpError, match="cohort_size"):
    FixedSizeSampler.create(5, 6)


# --- fixed-size sampling: the O(K) method for large populations (distinct draws) ---------

P_MIN = 1e-4  # a correct sampler fails a chi-square test at this level 1 time in 10^4


def _keys(n, seed=0):
  return jax.random.split(jax.random.key(seed), n)


def _check_uniform_ordered(idx, n, k):
  """Every row holds k distinct ids in [0, n); every ordered k-tuple of distinct ids, and
  every k-subset, is equally likely (chi-square goodness of fit)."""
  idx = np.asarray(idx)
  assert idx.shape[1] == k and idx.min() >= 0 and idx.max() < n
  assert all(len(set(row)) == k for row in idx.tolist())  # never a duplicate
  tuples = list(itertools.permutations(range(n), k))
  code = {t: i for i, t in enumerate(tuples)}
  counts = np.bincount([code[tuple(r)] for r in idx.tolist()], minlength=len(tuples))
  assert stats.chisquare(counts).pvalue > P_MIN, counts
  subsets = list(itertools.combinations(range(n), k))
  scode = {t: i for i, t in enumerate(subsets)}
  scounts = np.bincount([scode[tuple(sorted(r))] for r in idx.tolist()],
                        minlength=len(subsets))
  if len(subsets) > 1:  # K = N: one subset, every order
    assert stats.chisquare(scounts).pvalue > P_MIN, scounts


@pytest.mark.parametrize("n,k", [(6, 3), (5, 5), (7, 1)])
def test_distinct_draws_every_ordered_sample_equally_likely(n, k):
  """The new method forced on a small population: N!/(N-K)! ordered samples (120 for
  N = 6, K = 3), each about 500 times in 60,000 draws."""
  sample = jax.jit(jax.vmap(lambda key: fixed_size_sample(
      key, n, k, method="distinct_draws").indices))
  _check_uniform_ordered(sample(_keys(60_000)), n, k)


def test_the_check_catches_a_wrong_order():
  """The test above fails for a sampler with the right subsets in a biased order (the
  distinct values sorted instead of in order of first appearance)."""
  idx = np.sort(np.asarray(jax.vmap(lambda key: fixed_size_sample(
      key, 6, 3, method="distinct_draws").indices)(_keys(60_000))), axis=1)
  with pytest.raises(AssertionError):
    _check_uniform_ordered(idx, 6, 3)


@pytest.mark.parametrize("n,k,success", [(6, 3, 120 / 216), (4, 3, 24 / 64)])
def test_distinct_draws_retry_is_exact(n, k, success):
  """The fallback forced: with only M = K draws an attempt fails (fewer than K distinct)
  with probability 1 - N!/((N-K)! N^K); it is redrawn until it succeeds. The attempts are
  geometric with that success probability, and the samples, including those that needed
  a retry, are uniform over ordered K-samples."""
  run = jax.jit(jax.vmap(lambda key: distinct_draws(key, n, k, draws=k)))
  idx, attempts = run(_keys(60_000, seed=1))
  idx, attempts = np.asarray(idx), np.asarray(attempts)
  assert attempts.min() == 1 and attempts.max() > 3
  mean, sd = 1 / success, np.sqrt(1 - success) / success
  assert abs(attempts.mean() - mean) <= 6 * sd / np.sqrt(len(attempts))
  _check_uniform_ordered(idx, n, k)
  _check_uniform_ordered(idx[attempts > 1], n, k)  # the retried ones too


def test_num_draws():
  assert num_draws(10**6, 1) == 1  # a single draw is always distinct
  m = num_draws(10**6, 1000)
  assert 1000 < m < 1100  # about K + K^2 / (2 N) + a few standard deviations
  assert num_draws(10**6, 1000, failure_prob=1e-3) < m
  assert num_draws(6, 3) == 12  # no M <= N reaches 1e-9: 2 N
  with pytest.raises(FedJaxDpError, match="cohort_size"):
    num_draws(10, 11)
  with pytest.raises(FedJaxDpError, match="failure_prob"):
    num_draws(10, 2, failure_prob=0.0)


@pytest.mark.parametrize("n,k", [(2048, 30), (4096, 200)])
def test_num_draws_keeps_retries_below_the_target(n, k):
  """With failure_prob = 5%, at most 5% of the attempts fail (the Poisson approximation
  of the repeated draws is conservative: measured rates are far lower)."""
  target, trials = 0.05, 20_000
  m = num_draws(n, k, failure_prob=target)
  assert m > k
  _, attempts = jax.jit(jax.vmap(lambda key: distinct_draws(key, n, k, draws=m)))(
      _keys(trials, seed=2))
  rate = float(np.mean(np.asarray(attempts) > 1))
  assert rate <= target + 4 * np.sqrt(target * (1 - target) / trials)


def _largest_intermediate(jaxpr):
  """The most elements of any value a (closed) jaxpr computes, sub-jaxprs included."""
  best = 0
  for eqn in jaxpr.eqns:
    for v in eqn.outvars:
      best = max(best, int(np.prod(getattr(v.aval, "shape", ()))))
    for p in eqn.params.values():
      for sub in (p if isinstance(p, (tuple, list)) else [p]):
        inner = getattr(sub, "jaxpr", None)
        if inner is not None:
          best = max(best, _largest_intermediate(getattr(inner, "jaxpr", inner)))
  return best


def test_large_population_cost_does_not_grow_with_n():
  """N = 10^6, K = 10^3: the default picks the new method, whose program never holds an
  array of N elements (the permutation's does), and returns K distinct ids in range."""
  n, k = 10**6, 1000
  key = jax.random.key(3)
  sizes = {m: _largest_intermediate(jax.make_jaxpr(
      lambda kk, m=m: fixed_size_sample(kk, n, k, method=m).indices)(key).jaxpr)
           for m in ("auto", "distinct_draws", "permutation")}
  assert sizes["permutation"] >= n
  assert sizes["auto"] == sizes["distinct_draws"] <= 4 * num_draws(n, k) < n // 100
  c = jax.jit(FixedSizeSampler.create(n, k).sample)(key)
  idx = np.asarray(c.indices)
  assert idx.shape == (k,) and len(np.unique(idx)) == k
  assert idx.min() >= 0 and idx.max() < n and bool(jnp.all(c.mask))
  np.testing.assert_array_equal(
      idx, np.asarray(fixed_size_sample(key, n, k, method="distinct_draws").indices))
  # Inside a scan over rounds and under vmap over seeds, as the round uses it.
  def rounds(seed):
    def one(carry, r):
      return carry, fixed_size_sample(jax.random.fold_in(seed, r), n, k).indices
    return jax.lax.scan(one, 0, jnp.arange(3))[1]
  many = np.asarray(jax.jit(jax.vmap(rounds))(_keys(2)))
  assert many.shape == (2, 3, k)
  assert all(len(np.unique(row)) == k for row in many.reshape(-1, k))
  # Every client is as likely: ids spread evenly over the range (10 bins of 10^5).
  counts = np.bincount(many.ravel() // (n // 10), minlength=10)
  assert stats.chisquare(counts).pvalue > P_MIN


def test_small_populations_keep_the_permutation():
  """Below DISTINCT_DRAWS_MIN_POPULATION (and whenever 4 M > N) the cohort is exactly
  ``jax.random.choice(..., replace=False)``'s, as in every run recorded before."""
  key = jax.random.key(4)
  for n, k in ((30, 10), (100, 10), (sampling.DISTINCT_DRAWS_MIN_POPULATION - 1, 50),
               (10**5, 40_000)):
    expected = jax.random.choice(key, n, (k,), replace=False)
    np.testing.assert_array_equal(np.asarray(fixed_size_sample(key, n, k).indices),
                                  np.asarray(expected))
  n = sampling.DISTINCT_DRAWS_MIN_POPULATION
  np.testing.assert_array_equal(
      np.asarray(fixed_size_sample(key, n, 10).indices),
      np.asarray(fixed_size_sample(key, n, 10, method="distinct_draws").indices))
  with pytest.raises(FedJaxDpError, match="method"):
    fixed_size_sample(key, 10, 2, method="floyd")


def test_client_keys_depend_on_population_id_not_slot():
  k = jax.random.key(0)
  a = keylib.client_keys(k, jnp.array([3, 5, 0], jnp.int32))
  b = keylib.client_keys(k, jnp.array([5, 0, 3], jnp.int32))
  data = lambda kk: np.asarray(jax.random.key_data(kk))
  np.testing.assert_array_equal(data(a[0]), data(b[2]))
  np.testing.assert_array_equal(data(a[1]), data(b[0]))
  assert not np.array_equal(data(a[0]), data(a[1]))
  r0, r1 = keylib.round_key(k, 0), keylib.round_key(k, 1)
  assert not np.array_equal(data(r0), data(r1))
  assert not np.array_equal(data(keylib.stream(r0, keylib.SAMPLING)),
                            data(keylib.stream(r0, keylib.NOISE)))
