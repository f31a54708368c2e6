"""Tests of `fedjax_dp.federated.participation`: balls-in-bins / random allocation and
cyclic Poisson samplers, and the FedAvg family's sampler options."""

import itertools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp.algorithms import fedavg_family as family
from fedjax_dp.federated import participation as part
from fedjax_dp.federated.participation import AllocationSampler, CyclicSampler
from fedjax_dp.federated.sampling import poisson_k_max
from fedjax_dp.privacy import events
from fedjax_dp.validation import FedJaxDpError

ROOT = jax.random.PRNGKey(7)


def _epoch_counts(samp, epoch, root=ROOT):
  """int [N]: how many rounds of ``epoch`` each client took part in."""
  counts = np.zeros(samp.population_size, int)
  for r in range(epoch * samp.epoch_length, (epoch + 1) * samp.epoch_length):
    c = samp.sample(None, None, round_index=r, root_key=root)
    ids = np.asarray(c.indices)[np.asarray(c.mask)]
    assert len(set(ids.tolist())) == len(ids) == int(c.num_sampled)
    counts[ids] += 1
  return counts


@pytest.mark.parametrize("t,k", [(5, 1), (6, 2), (4, 3), (3, 3)])
def test_every_client_exactly_k_times_per_epoch(t, k):
  samp = AllocationSampler.create(40, t, k)
  for epoch in range(3):
    assert np.all(_epoch_counts(samp, epoch) == k)


def test_epoch_assignment_depends_on_epoch_only_and_changes_between_epochs():
  samp = AllocationSampler.create(50, 5, 1)
  a = samp.sample(None, None, round_index=7, root_key=ROOT)
  b = samp.sample(jax.random.PRNGKey(99), 0.3, round_index=7, root_key=ROOT)  # round key unused
  np.testing.assert_array_equal(a.indices, b.indices)
  cohorts = [np.asarray(samp.sample(None, None, round_index=r, root_key=ROOT).indices)
             for r in (0, 5)]  # first round of epochs 0 and 1
  assert not np.array_equal(cohorts[0], cohorts[1])
  c = samp.sample(None, None, round_index=7, root_key=jax.random.PRNGKey(8))
  assert not np.array_equal(a.indices, c.indices)  # the run's root key matters


def test_epoch_key_convention():
  """epoch_key = fold_in(fold_in(root, 2^32 - 1), epoch): a stream no round key
  (fold_in(root, r), r < 2^32 - 1) is, one key per epoch."""
  base = jax.random.fold_in(ROOT, jnp.uint32(2**32 - 1))
  for e in range(3):
    np.testing.assert_array_equal(part.epoch_key(ROOT, e), jax.random.fold_in(base, e))
    assert not np.array_equal(part.epoch_key(ROOT, e), jax.random.fold_in(ROOT, e))
  assert not np.array_equal(part.epoch_key(ROOT, 0), part.epoch_key(ROOT, 1))


def test_random_allocation_subsets_uniform():
  """Over many epochs a client's k-subset of t rounds is uniform over the C(t, k)
  subsets (chi-square at the 1e-4 level)."""
  t, k, n = 4, 2, 3000
  samp = AllocationSampler.create(n, t, k)
  member = np.stack([np.asarray(samp.membership(part.epoch_key(ROOT, 0), p))
                     for p in range(t)], axis=1)  # [n, t]
  subsets = list(itertools.combinations(range(t), k))
  index = {s: i for i, s in enumerate(subsets)}
  obs = np.bincount([index[tuple(np.flatnonzero(row))] for row in member],
                    minlength=len(subsets))
  assert stats.chisquare(obs).pvalue > 1e-4


def test_round_membership_is_binomial_and_k_max_matches_poisson():
  """In one round every client is in the cohort independently with probability k/t, so
  the cohort size is Binomial(N, k/t) (mean and variance over epochs), and k_max and the
  truncation tail are the Poisson ones at rate k/t."""
  n, t, k = 200, 5, 2
  samp = AllocationSampler.create(n, t, k)
  assert samp.k_max == poisson_k_max(n, k / t)
  sizes = np.array([int(samp.sample(None, None, round_index=e * t, root_key=ROOT).num_sampled)
                    for e in range(300)])
  p = k / t
  assert abs(sizes.mean() - n * p) < 4 * np.sqrt(n * p * (1 - p) / 300)
  assert 0.7 < sizes.var() / (n * p * (1 - p)) < 1.4  # independent: Binomial variance
  trunc = family.cohort_truncation(samp)
  assert trunc.probability(p) == pytest.approx(stats.binom.sf(samp.k_max, n + 1, p))


def test_padding_mask_and_truncation():
  samp = AllocationSampler.create(60, 3, 1, k_max=10)  # ~20 per round: truncated
  c = samp.sample(None, None, round_index=1, root_key=ROOT)
  assert c.indices.shape == (10,) and bool(c.mask.all())
  assert int(c.num_truncated) == int(c.num_sampled) - 10 > 0
  big = AllocationSampler.create(10, 5, 1, k_max=11)
  c = big.sample(None, None, round_index=0, root_key=ROOT)
  m = int(c.num_sampled)
  assert int(c.mask.sum()) == m and int(c.num_truncated) == 0
  assert np.all(np.asarray(c.indices)[m:] == 0)
  assert np.all(np.diff(np.asarray(c.indices)[:m]) > 0)


def test_jit_no_recompile_across_rounds():
  samp = AllocationSampler.create(30, 4, 2)
  traces = []

  @jax.jit
  def f(r, root):
    traces.append(1)
    return samp.sample(None, None, round_index=r, root_key=root)

  for r in range(9):
    eager = samp.sample(None, None, round_index=r, root_key=ROOT)
    np.testing.assert_array_equal(f(jnp.int32(r), ROOT).indices, eager.indices)
  assert len(traces) == 1


def test_sampler_refuses_missing_keys():
  samp = AllocationSampler.create(30, 4, 1)
  with pytest.raises(FedJaxDpError, match="root_key"):
    samp.sample(None, None, round_index=0)
  with pytest.raises(FedJaxDpError, match="participations_per_epoch"):
    AllocationSampler.create(30, 4, 5)
  with pytest.raises(FedJaxDpError, match="kind"):
    AllocationSampler.create(30, 4, 2, kind="balls_in_bins")


def test_cyclic_poisson_groups_and_rate():
  n, b, q = 300, 3, 0.2
  samp = CyclicSampler.create(n, b, part.cyclic_group_rate(q, b), kind="cyclic_poisson")
  assert samp.sampling_rate == pytest.approx(q) and samp.group_rate == pytest.approx(0.6)
  groups = part.assign_groups(n, b)
  joined = np.zeros(n)
  rounds = 60
  for r in range(rounds):
    c = samp.sample(jax.random.PRNGKey(r), None, round_index=r)
    ids = np.asarray(c.indices)[np.asarray(c.mask)]
    assert np.all(groups[ids] == r % b)  # only the eligible group
    joined[ids] += 1
  rate = joined / (rounds / b)  # each client is eligible in rounds/b rounds
  assert abs(rate.mean() - 0.6) < 0.03


@pytest.mark.parametrize("sampler,extra,kind,rate", [
    ("balls_in_bins", {}, "balls_in_bins", 1 / 7),
    ("random_allocation", dict(participations_per_epoch=2), "random_allocation", 2 / 14),
    ("cyclic_poisson", dict(min_separation=4), "cyclic_poisson", 0.14),
])
def test_cohort_sampler_mapping(sampler, extra, kind, rate):
  """q = 0.14: balls-in-bins t = round(1/q) = 7, random allocation t = round(2/q) = 14,
  cyclic Poisson q_group = q b = 0.56."""
  data = types.SimpleNamespace(num_clients=100)
  samp = family.cohort_sampler(data, sampler, 0.14, None, None,
                               allowed=family.ALL_SAMPLERS, **extra)
  assert samp.kind == kind and samp.sampling_rate == pytest.approx(rate)
  if sampler == "cyclic_poisson":
    assert samp.group_rate == pytest.approx(0.56)
  else:
    assert samp.epoch_length == (7 if sampler == "balls_in_bins" else 14)


def test_cohort_sampler_refusals():
  data = types.SimpleNamespace(num_clients=100)
  with pytest.raises(FedJaxDpError, match="not supported by this algorithm") as e:
    family.cohort_sampler(data, "balls_in_bins", 0.1, None, None)
  assert e.value.option == "sampler"
  with pytest.raises(FedJaxDpError) as e:
    family.cohort_sampler(data, "poisson", 0.1, None, None, participations_per_epoch=2,
                          allowed=family.ALL_SAMPLERS)
  assert e.value.option == "participations_per_epoch"
  with pytest.raises(FedJaxDpError) as e:
    family.cohort_sampler(data, "cyclic_poisson", 0.1, None, None,
                          allowed=family.ALL_SAMPLERS)
  assert e.value.option == "min_separation"
  with pytest.raises(FedJaxDpError) as e:
    family.cohort_sampler(data, "cyclic_poisson", 0.3, None, None, min_separation=4,
                          allowed=family.ALL_SAMPLERS)  # q b = 1.2 > 1
  assert e.value.option == "sampling_rate"
