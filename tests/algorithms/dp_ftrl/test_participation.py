"""Tests of cyclic participation (fedjax_dp.algorithms.dp_ftrl.participation)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.dp_ftrl.participation import CyclicSampler, assign_groups
from fedjax_dp.validation import FedJaxDpError


def _cohorts(sampler, rounds, seed=0):
  """(ids [rounds, k_max], mask [rounds, k_max], num_sampled [rounds]) from one jitted
  function of a traced round index."""
  fn = jax.jit(lambda k, t: sampler.sample(k, round_index=t))
  out = [fn(jax.random.fold_in(jax.random.PRNGKey(seed), t), jnp.int32(t))
         for t in range(rounds)]
  return (np.stack([np.asarray(c.indices) for c in out]),
          np.stack([np.asarray(c.mask) for c in out]),
          np.array([int(c.num_sampled) for c in out]),
          np.array([int(c.num_truncated) for c in out]))


@pytest.mark.parametrize("group_rate", [1.0, 0.5])
def test_clients_take_part_only_in_their_groups_rounds(group_rate):
  s = CyclicSampler.create(40, 5, group_rate, seed=3)
  groups = assign_groups(40, 5, 3)
  ids, mask, num, trunc = _cohorts(s, 15)
  seen = 0
  for t in range(15):
    for i in ids[t][mask[t]]:
      assert groups[i] == t % 5
      assert s.group_of(int(i)) == t % 5
      seen += 1
  assert seen > 0
  assert (num == mask.sum(1)).all() and (trunc == 0).all()


def test_full_group_rate_is_every_client_once_per_cycle():
  s = CyclicSampler.create(37, 6, 1.0, seed=1)
  for cycle in range(2):
    ids, mask, _, _ = _cohorts(s, 6 * (cycle + 1))
    ids, mask = ids[6 * cycle:], mask[6 * cycle:]
    counts = np.bincount(ids[mask], minlength=37)
    assert (counts == 1).all()
  assert s.participations(13) == 3 and s.participations(12) == 2
  assert s.participations(0) == 0


def test_cohort_ids_increase_then_padding():
  s = CyclicSampler.create(50, 3, 0.6, seed=2)
  ids, mask, num, _ = _cohorts(s, 6)
  for t in range(6):
    real = ids[t][:num[t]]
    assert mask[t][:num[t]].all() and not mask[t][num[t]:].any()
    assert (np.diff(real) > 0).all()
    assert (ids[t][num[t]:] == 0).all()


def test_poisson_within_group_law():
  """Each member joins its group's round independently with probability group_rate:
  the joins per round are Binomial(|group|, p) (mean and variance)."""
  p, r = 0.3, 4
  s = CyclicSampler.create(200, r, p, seed=5)
  sizes = s.group_sizes
  rounds = 400
  keys = jax.random.split(jax.random.PRNGKey(9), rounds)
  t = jnp.arange(rounds, dtype=jnp.int32)
  cohorts = jax.jit(jax.vmap(lambda k, i: s.sample(k, round_index=i)))(keys, t)
  num = np.asarray(cohorts.num_sampled, np.float64)
  g = np.arange(rounds) % r
  n_trials = sizes[g].astype(np.float64)
  mean = num.sum() / n_trials.sum()
  sd = np.sqrt(p * (1 - p) / n_trials.sum())
  assert abs(mean - p) < 5 * sd
  resid = (num - n_trials * p) / np.sqrt(n_trials * p * (1 - p))
  assert 0.75 < np.var(resid) < 1.3  # unit variance under Binomial(|group|, p)
  assert s.sampling_rate == pytest.approx(p / r)
  assert s.expected_cohort_size == pytest.approx(200 * p / r)
  assert s.k_max == sizes.max()


def test_assignment_does_not_depend_on_other_clients():
  a = assign_groups(100, 7, seed=11)
  b = assign_groups(101, 7, seed=11)
  assert (a == b[:100]).all()
  s, s_plus = CyclicSampler.create(100, 7, seed=11), CyclicSampler.create(101, 7, seed=11)
  assert all(s.group_of(i) == s_plus.group_of(i) for i in range(100))
  assert not (assign_groups(100, 7, seed=12) == a).all()
  counts = np.bincount(assign_groups(7000, 7, seed=0), minlength=7)
  assert counts.min() > 850 and counts.max() < 1150  # uniform groups (mean 1000)


@pytest.mark.parametrize("kwargs,option", [
    (dict(population_size=4, cycle_length=5), "cycle_length"),
    (dict(population_size=4, cycle_length=0), "cycle_length"),
    (dict(population_size=0, cycle_length=1), "population_size"),
    (dict(population_size=10, cycle_length=2, group_rate=0.0), "group_rate"),
    (dict(population_size=10, cycle_length=2, group_rate=1.5), "group_rate"),
    (dict(population_size=10, cycle_length=2, seed=-1), "seed"),
])
def test_bad_arguments(kwargs, option):
  with pytest.raises(FedJaxDpError) as err:
    CyclicSampler.create(**kwargs)
  assert err.value.option == option


def test_round_index_is_required():
  s = CyclicSampler.create(10, 2)
  with pytest.raises(FedJaxDpError, match="round_index") as err:
    s.sample(jax.random.PRNGKey(0))
  assert err.value.option == "round_index"


def test_schedule_is_the_shared_one():
  """The schedule moved to fedjax_dp.federated.participation (shared with DP-FedAvg's
  cyclic_poisson sampler); this module re-exports it."""
  from fedjax_dp.federated import participation as shared
  assert CyclicSampler is shared.CyclicSampler and assign_groups is shared.assign_groups
