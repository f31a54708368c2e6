"""One-run empirical privacy estimation through DP-FedAvg's real round
(fedjax_dp.auditing.one_run, fedjax_dp.algorithms.canaries): the issue's acceptance
checks on a tiny synthetic task (20 clients, an MLP of 17k parameters, 200 canaries,
10 rounds at q = 0.5, delta 1e-3).

(i) without noise the estimate is large; (ii) halving the noise multiplier raises it
(same seeds); (iii) at the default noise multiplier (2.0) it lies below the
accountant's epsilon; (iv) the one-run lower bound is at most the accountant's epsilon;
(v) canaries do not change what real clients compute.
"""

import dataclasses
import math

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import data as data_lib
from fedjax_dp import models
from fedjax_dp.algorithms.dp_fedavg.algorithm import dp_fedavg
from fedjax_dp.auditing import one_run
from fedjax_dp.auditing.one_run import CanaryPlan
from fedjax_dp.federated import PopulationData, driver, stages
from fedjax_dp.federated.client import ClientMetrics
from fedjax_dp.validation import FedJaxDpError

DELTA = 1e-3
ROUNDS = 10


@pytest.fixture(scope="module")
def task():
  fd = data_lib.make_synthetic(num_clients=20, examples_per_client=20, feature_shape=(64,),
                               num_classes=3, seed=0, num_test=50)
  model = models.create_model("mlp", fd.feature_shape, fd.num_classes, hidden=(256,))
  pop = PopulationData(*map(jnp.asarray, (fd.x, fd.y, fd.counts)))
  return fd, model, pop


def _run(alg, pop, rounds, seed=0, z=None):
  hp = alg.hparams if z is None else alg.hparams._replace(noise_multiplier=z)
  state0 = alg.init(jax.random.key(seed))
  ledger = alg.privacy.make_ledger(DELTA)
  state, records = driver.run_rounds(alg.round_fn, state0, pop,
                                     driver.constant_schedule(hp, rounds),
                                     jax.random.key(seed + 1), rounds=rounds, ledger=ledger)
  return state0, state, records, ledger


@pytest.fixture(scope="module")
def estimates(task):
  """z -> (estimate, lower bound, accountant epsilon, report): one compiled round,
  the same seeds, noise multipliers 0, 1 (half the default) and 2 (the default)."""
  fd, model, pop = task
  plan = CanaryPlan(200, fd.num_clients, seed=7)
  alg = dp_fedavg(model, fd, clip_norm=1.0, noise_multiplier=2.0, sampling_rate=0.5,
                  batch_size=10, client_learning_rate=0.01, canaries=plan)
  out = {}
  for z in (0.0, 1.0, 2.0):
    state0, state, _, ledger = _run(alg, pop, ROUNDS, z=z)
    eps = ledger.epsilon()
    rep = plan.report(state0.params, state.params, DELTA, eps)
    out[z] = (rep["empirical_epsilon"]["epsilon"], rep["one_run_lower_bound"]["epsilon"],
              eps, rep)
  return out


def test_noise_free_estimate_is_large(estimates):
  est, bound, acct, rep = estimates[0.0]
  assert math.isinf(acct)
  assert est > 5.0, rep["canary_audit"]
  assert bound > 0.5  # separable scores: even the conservative bound sees them


def test_halving_the_noise_raises_the_estimate(estimates):
  assert estimates[1.0][0] > estimates[2.0][0] * 1.5, (estimates[1.0][0], estimates[2.0][0])


def test_estimate_lies_below_the_accountant_at_the_default(estimates):
  est, _, acct, rep = estimates[2.0]
  assert 0.0 <= est < acct, (est, acct)
  audit = rep["canary_audit"]
  # Held-out cosines are ~N(0, 1/d) (Andrew et al., Sec. 3): d = 17k parameters.
  d = 64 * 256 + 256 + 256 * 3 + 3
  assert abs(audit["held_out_cosine_std"] * math.sqrt(d) - 1.0) < 0.2
  assert abs(audit["held_out_cosine_mean"]) < 4 / math.sqrt(d * 100)


def test_lower_bound_is_at_most_the_accountant(estimates):
  for z in (1.0, 2.0):
    _, bound, acct, rep = estimates[z]
    assert 0.0 <= bound <= acct
    assert rep["one_run_lower_bound_gdp"]["epsilon"] <= acct
    assert rep["one_run_lower_bound"]["confidence"] == 0.95


def test_canary_stage_replaces_only_canaries(task):
  fd, model, _ = task
  params = model.init(jax.random.key(0))
  plan = CanaryPlan(6, fd.num_clients, seed=3)

  def trained(p, x, y, count, key, hp):  # a stand-in for local training
    upd = jax.tree_util.tree_map(lambda l: jnp.full_like(l, 0.01) * count, p)
    zero = jnp.zeros(())
    return upd, ClientMetrics(*([count.astype(jnp.float32)] + [zero] * (len(
        ClientMetrics._fields) - 1)))

  stage = one_run.canary_stage(stages.stateless_client(trained), plan)
  hp = dataclasses.make_dataclass("HP", ["clip_norm", "client"])(0.7, None)
  x, y = jnp.asarray(fd.x[0]), jnp.asarray(fd.y[0])
  real, _, m_real = stage.update(params, x, y, jnp.int32(5), jax.random.key(1), hp,
                                 (jnp.int32(-1), ()))
  want, m_want = trained(params, x, y, jnp.int32(5), None, None)
  for a, b in zip(jax.tree_util.tree_leaves(real), jax.tree_util.tree_leaves(want)):
    np.testing.assert_array_equal(a, b)
  assert float(m_real.loss) == float(m_want.loss)
  for i in plan.inserted_indices.tolist():
    can, _, _ = stage.update(params, x, y, jnp.int32(5), jax.random.key(1), hp,
                             (jnp.int32(i), ()))
    flat = jax.flatten_util.ravel_pytree(can)[0]
    u = one_run.canary_direction(plan.seed, i, flat.size)
    np.testing.assert_allclose(flat, 0.7 * u, rtol=1e-6, atol=1e-8)
    assert float(jnp.linalg.norm(flat)) == pytest.approx(0.7, rel=1e-5)
  rows, inner = one_run.canary_client_states(stage, params, plan)
  assert rows.tolist() == [-1] * fd.num_clients + plan.inserted_indices.tolist()
  assert inner == ()


def test_inclusion_is_an_iid_fair_coin_per_canary():
  """Steinke et al.'s one-run bound needs each canary in or out independently with
  probability 1/2: over many canaries the split is near half, varies with the seed, and
  the pattern is not a fixed prefix."""
  plans = [CanaryPlan(2000, 10, seed=s) for s in range(5)]
  counts = [p.inserted for p in plans]
  assert all(abs(c - 1000) < 4 * math.sqrt(500) for c in counts)   # Binomial(2000, 1/2)
  assert len(set(counts)) > 1
  m = plans[0].inserted_mask
  assert m[:1000].mean() < 0.6 and m[1000:].mean() > 0.4             # not a prefix split
  # adjacent pairs agree about half the time (independence, not alternation)
  assert 0.45 < np.mean(m[1:] == m[:-1]) < 0.55
  assert plans[0].population_size == 10 + counts[0]


def test_real_clients_compute_the_same(task):
  """q = 1, no noise: every client takes part; the round with canaries is the round
  without them plus the canaries' C u_i, over the larger public denominator."""
  fd, model, pop = task
  plan = CanaryPlan(20, fd.num_clients, seed=5)
  kw = dict(clip_norm=1.0, noise_multiplier=0.0, sampling_rate=1.0, batch_size=10,
            client_learning_rate=0.05)
  base = dp_fedavg(model, fd, **kw)
  with_c = dp_fedavg(model, fd, canaries=plan, **kw)
  s0, s_base, r_base, _ = _run(base, pop, 1)
  _, s_c, r_c, _ = _run(with_c, pop, 1)
  flat0 = jax.flatten_util.ravel_pytree(s0.params)[0]
  d_base = jax.flatten_util.ravel_pytree(s_base.params)[0] - flat0
  d_c = jax.flatten_util.ravel_pytree(s_c.params)[0] - flat0
  canary_sum = sum(one_run.canary_direction(plan.seed, i, flat0.size)
                   for i in plan.inserted_indices.tolist())
  real_sum = d_c * plan.population_size - canary_sum * 1.0
  np.testing.assert_allclose(real_sum, d_base * fd.num_clients, atol=2e-4)
  assert r_c[0]["num_clients"] == plan.population_size
  assert r_base[0]["num_clients"] == fd.num_clients
  # The sampler's population grew by K/2: the round's ledger is for N + K/2.
  assert with_c.config["population_size"] == plan.population_size


def test_fixed_size_cohorts_keep_their_size(task):
  fd, model, _ = task
  plan = CanaryPlan(40, fd.num_clients)
  alg = dp_fedavg(model, fd, clip_norm=1.0, noise_multiplier=1.0, clients_per_round=10,
                  sampler="fixed_size", canaries=plan)
  assert alg.k_max == 10
  assert alg.sampling_rate == pytest.approx(10 / (fd.num_clients + plan.inserted))
  assert alg.privacy.population_size == fd.num_clients + plan.inserted


@pytest.mark.parametrize("host", ["adaptive", "local_noise"])
def test_other_user_level_rounds_host_canaries(task, host):
  fd, model, pop = task
  plan = CanaryPlan(20, fd.num_clients, seed=1)
  kw = dict(noise_multiplier=1.0, sampling_rate=0.5, batch_size=10, canaries=plan)
  if host == "adaptive":
    from fedjax_dp.algorithms.dp_fedavg.algorithm import adaptive_clipping_for
    adaptive = adaptive_clipping_for(plan.view(fd), 1.0, sampling_rate=0.5)
    alg = dp_fedavg(model, fd, adaptive_clipping=adaptive, **kw)
  else:
    alg = dp_fedavg(model, fd, clip_norm=1.0, noise_placement="local", **kw)
  s0, s, records, ledger = _run(alg, pop, 2)
  rep = plan.report(s0.params, s.params, DELTA, ledger.epsilon())
  assert math.isfinite(rep["canary_audit"]["inserted_cosine_mean"])
  assert rep["empirical_epsilon"]["epsilon"] >= 0.0
  assert all(r["nonfinite_updates"] == 0 for r in records)


def test_contradictory_options_are_refused(task):
  fd, model, _ = task
  plan = CanaryPlan(20, fd.num_clients)
  assert CanaryPlan(21, fd.num_clients).num_canaries == 21   # any K >= 4
  refused = 0
  for seed in range(40):        # 4 canaries: all in or all out with probability 1/8
    try:
      assert 1 <= CanaryPlan(4, fd.num_clients, seed=seed).inserted <= 3
    except FedJaxDpError as e:
      assert e.option == "canaries" and "canary_seed" in str(e)
      refused += 1
  assert 1 <= refused <= 15
  with pytest.raises(FedJaxDpError) as e:
    CanaryPlan(2, fd.num_clients)
  assert e.value.option == "canaries"
  bad = [dict(weighting="data_size", data_size_cap=10.0),
         dict(observed_client=0, noise_placement="local"),
         dict(noise_placement="local", noise_multiplier=np.ones(fd.num_clients))]
  for extra in bad:
    with pytest.raises(FedJaxDpError) as e:
      dp_fedavg(model, fd, **{"clip_norm": 1.0, "sampling_rate": 0.5, "canaries": plan,
                              **extra})
    assert e.value.option == "canaries", extra
  with pytest.raises(FedJaxDpError, match="clients"):
    dp_fedavg(model, fd, clip_norm=1.0, sampling_rate=0.5,
              canaries=CanaryPlan(20, fd.num_clients + 1))
