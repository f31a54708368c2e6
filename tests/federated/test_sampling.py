"""Tests of `fedjax_dp.federated.sampling` and `fedjax_dp.federated.keys`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp.federated import keys as keylib
from fedjax_dp.federated.sampling import (FixedSizeSampler, PoissonSampler, poisson_k_max,
                                          poisson_sample)
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
