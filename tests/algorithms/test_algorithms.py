"""Tests of `fedjax_dp.algorithms`: builders, argument checks, learning, DP wiring."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp.algorithms import (ALGORITHMS, dp_fedavg, dp_fedavg_record_level, dp_fedsgd,
                                  fedavg)
from fedjax_dp.federated import PopulationData, constant_schedule, run_rounds
from fedjax_dp.federated.driver import make_block_fn, make_evaluator
from fedjax_dp.federated.sampling import poisson_k_max
from fedjax_dp.models import create_model
from fedjax_dp.privacy import events
from fedjax_dp.validation import FedJaxDpError


@pytest.fixture(scope="module")
def env(synthetic_fd):
  fd = synthetic_fd
  model = create_model("linear", fd.feature_shape, fd.num_classes)
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  evaluator = make_evaluator(model)
  return fd, model, data, lambda p: evaluator(p, fd.test_x, fd.test_y)


@pytest.fixture(scope="module")
def fedsgd_alg(env):
  fd, model, _, _ = env
  # k_max = N so that the same compiled round also runs with q = 1.
  return dp_fedsgd(model, fd, clip_norm=1.0, noise_multiplier=0.1, sampling_rate=0.5,
                   k_max=fd.num_clients, client_learning_rate=0.5)


def _build(name, env, fedsgd_alg):
  fd, model, _, _ = env
  if name == "dp_fedavg":
    return dp_fedavg(model, fd, clip_norm=1.0, noise_multiplier=0.1, clients_per_round=8,
                     batch_size=5, client_learning_rate=0.3)
  if name == "dp_fedsgd":
    return fedsgd_alg
  if name == "dp_fedavg_record_level":
    return dp_fedavg_record_level(model, fd, record_clip_norm=1.0, record_noise_multiplier=0.3,
                                  clients_per_round=8, local_steps=4,
                                  record_sampling_rate=0.5, client_learning_rate=0.3)
  if name == "amplitude_varying":  # paper 004; a large epsilon keeps the noise small
    return ALGORITHMS[name](model, fd, epsilon=200.0, vartheta=1.0, rounds=12,
                            clients_per_round=8, local_steps=4, learning_rate=0.3,
                            clip_norm=10.0)
  if name == "padpfl":  # paper 000: every client, equal p, a large epsilon
    from fedjax_dp.algorithms.padpfl import impact_factors
    return ALGORITHMS[name](model, fd, impact_factors=impact_factors.uniform(fd.num_clients),
                            epsilon=200.0, rounds=12, clip_bound=10.0, local_steps=4,
                            learning_rate=0.3, batch_size=5)
  if name == "rdp_pfl":  # paper 003: small noise, every client's two DP steps per round
    return ALGORITHMS[name](model, fd, noise_multiplier=0.05, clip_norm=5.0,
                            inner_learning_rate=0.01, outer_learning_rate=0.3,
                            query_sampling_rate=0.5, support_sampling_rate=0.5,
                            local_epochs=2)
  if name == "lapa":  # paper 001: every device every round, uniform budgets, a large eps_T
    from fedjax_dp.algorithms.lapa.allocators import AllocatorConfig
    return ALGORITHMS[name](model, fd, allocator=AllocatorConfig("uniform", 2000.0, 12),
                            batch_size=5, learning_rate=0.3, clip_norm=1.0)
  if name == "dp_ftrl":  # DP-FTRL's tree, cyclic participation (half the clients a round)
    return ALGORITHMS[name](model, fd, mechanism="tree", clip_norm=1.0, noise_multiplier=0.1,
                            cycle_length=2, batch_size=5, client_learning_rate=0.3,
                            server_optimizer="fedavg", rounds=12)
  if name == "fedavg":
    return fedavg(model, fd, clients_per_round=8, batch_size=5, client_learning_rate=0.3)
  raise AssertionError(f"no test configuration for the registered algorithm {name!r}: "
                       "add one to _build")


# dp_mocha (paper 002) trains one model per device on a binary task and is evaluated per
# device: tests/algorithms/dp_mocha/test_dp_mocha_plugin.py checks that it learns.
@pytest.mark.parametrize("name", sorted(n for n in ALGORITHMS if n != "dp_mocha"))
def test_algorithm_learns(name, env, fedsgd_alg):
  fd, _, data, evaluate = env
  alg = _build(name, env, fedsgd_alg)
  assert alg.name == name
  rounds = 12
  state0 = alg.init(jax.random.key(0))
  acc0 = evaluate(state0.params)["accuracy"]
  state, recs = run_rounds(alg.round_fn, state0, data, constant_schedule(alg.hparams, rounds),
                           jax.random.key(1), rounds=rounds, block_size=rounds,
                           evaluate=evaluate)
  acc = recs[-1]["test_accuracy"]
  chance = max(1.0 / fd.num_classes, fd.majority_class_accuracy())
  assert acc > chance + 0.15, (acc, chance, acc0)
  assert acc > acc0
  assert recs[-1]["train_loss"] < recs[0]["train_loss"]
  assert all(r["num_truncated"] == 0 for r in recs)
  # What the ledger will compose is what the round actually did.
  if name == "dp_fedavg_record_level":
    assert alg.privacy.unit == "record-level"
    for r in recs:
      assert r["dp_steps"] == alg.config["local_dp_steps"] == 4
      assert r["noise_multiplier"] == pytest.approx(0.3)
      assert r["sampling_rate"] == pytest.approx(0.5)
      assert r["noise_stddev"] == pytest.approx(0.3)
      assert 0.0 <= r["example_clip_fraction"] <= 1.0
  elif name == "amplitude_varying":  # record level; z_m = sigma_m / Delta_s
    assert alg.privacy.unit == "record-level" and alg.privacy.sampler == "fixed_size"
    sigma = alg.config["stddevs"][0]
    for r in recs:
      assert r["dp_steps"] == 1 and r["sampling_rate"] == pytest.approx(8 / fd.num_clients)
      assert r["noise_stddev"] == pytest.approx(sigma, rel=1e-5)
      assert r["noise_multiplier"] == pytest.approx(sigma / alg.config["sensitivity"],
                                                    rel=1e-5)
  elif name == "padpfl":  # record level, no sampling; sigma_C on uploads, sigma_S top-up
    assert alg.privacy.unit == "record-level"
    for r, sc, ss in zip(recs, alg.config["sigma_c"], alg.config["sigma_s"]):
      assert r["num_clients"] == fd.num_clients and r["sampling_rate"] == 1.0
      assert r["noise_stddev"] == pytest.approx(sc, rel=1e-5)
      assert r["server_noise_stddev"] == pytest.approx(ss, rel=1e-5) and ss > 0
  elif name == "rdp_pfl":  # record level; two releases per local epoch (query, support)
    assert alg.privacy.unit == "record-level" and alg.privacy.release_names == (
        "query", "support")
    for r in recs:
      assert r["dp_steps"] == 4 and r["num_clients"] == fd.num_clients
      for name_ in ("query", "support"):
        assert r[f"{name_}_noise_multiplier"] == pytest.approx(0.05)
        assert r[f"{name_}_sampling_rate"] == pytest.approx(0.5)
        assert r[f"{name_}_dp_steps"] == 2
        assert r[f"{name_}_noise_stddev"] == pytest.approx(0.25)
  elif name == "lapa":  # record level, per device, no sampling; sigma = c Delta_s / eps_i[t]
    assert alg.privacy.unit == "record-level"
    for r in recs:
      assert r["dp_steps"] == 1 and r["sampling_rate"] == 1.0
      assert r["num_clients"] == fd.num_clients
      eps = np.asarray(r["epsilon_devices"])
      np.testing.assert_allclose(eps, 2000.0 / 12, rtol=1e-5)
      assert 0.0 < r["noise_stddev"] and r["noise_multiplier"] > 0
  elif name == "fedavg":
    assert alg.privacy is None
    assert all(r["noise_multiplier"] == 0.0 and r["noise_stddev"] == 0.0 for r in recs)
  else:
    assert alg.privacy.unit == "user-level"
    for r in recs:
      assert r["dp_steps"] == 1
      assert r["noise_multiplier"] == pytest.approx(0.1)
      assert r["sampling_rate"] == pytest.approx(alg.hparams.sampling_rate)


def test_dp_fedsgd_is_full_batch_gradient_descent(env, fedsgd_alg):
  """No noise, no clipping, q = 1: one DP-FedSGD round is w - lr * mean_k grad_k, each
  grad_k the full-batch mean gradient of client k over its real examples only."""
  fd, model, data, _ = env
  lr = 0.5
  state = fedsgd_alg.init(jax.random.key(0))
  hp = fedsgd_alg.hparams._replace(clip_norm=jnp.float32(1e6),
                                   noise_multiplier=jnp.float32(0.0),
                                   sampling_rate=jnp.float32(1.0))
  new, m = jax.jit(fedsgd_alg.round_fn)(state, data, hp, jax.random.key(0))
  assert int(m.num_clients) == fd.num_clients

  def client_grad(x, y, n):
    def loss(p):
      per = model.per_example_loss(model.apply(p, x), y)
      return jnp.sum(per * (jnp.arange(x.shape[0]) < n)) / n
    return jax.grad(loss)(state.params)

  grads = jax.jit(jax.vmap(client_grad))(data.x, data.y, data.counts)
  for p0, p1, g in zip(jax.tree_util.tree_leaves(state.params),
                       jax.tree_util.tree_leaves(new.params), jax.tree_util.tree_leaves(grads)):
    np.testing.assert_allclose(np.asarray(p1), np.asarray(p0 - lr * g.mean(0)), rtol=1e-5,
                               atol=1e-6)


def test_dp_fedsgd_noise_std_end_to_end(env, fedsgd_alg):
  """A clip norm so small that the clipped updates are negligible: each round's aggregate
  is pure noise of std z C / (q N); checked through ||delta||^2 over many rounds."""
  fd, _, data, _ = env
  z, c, q, rounds = 1e4, 1e-6, 0.5, 30
  sched = constant_schedule(
      fedsgd_alg.hparams._replace(clip_norm=c, noise_multiplier=z, sampling_rate=q), rounds)
  block_fn = make_block_fn(fedsgd_alg.round_fn)
  _, recs = run_rounds(fedsgd_alg.round_fn, fedsgd_alg.init(jax.random.key(0)), data, sched,
                       jax.random.key(2), rounds=rounds, block_size=rounds, block_fn=block_fn)
  d = sum(int(np.prod(l.shape)) for l in jax.tree_util.tree_leaves(
      fedsgd_alg.init(jax.random.key(0)).params))
  sq = np.array([r["aggregate_norm"] ** 2 for r in recs])
  sigma_hat = np.sqrt(sq.mean() / d)
  expected = z * c / (q * fd.num_clients)
  assert abs(sigma_hat / expected - 1) <= 6 * np.sqrt(1 / (2 * d * rounds))
  assert all(r["noise_stddev"] == pytest.approx(z * c) for r in recs)


def test_builder_attributes(env):
  fd, model, _, _ = env
  n = fd.num_clients
  alg = dp_fedavg(model, fd, clients_per_round=6)
  assert alg.k_max == poisson_k_max(n, 6 / n)
  assert stats.binom.sf(alg.k_max, n + 1, 6 / n) < 1e-12
  assert alg.hparams.sampling_rate == pytest.approx(6 / n)
  spec = alg.privacy
  assert (spec.sampler, spec.relation, spec.event_scale) == ("poisson", "add_remove", 1.0)
  assert spec.truncation == events.Truncation(n, alg.k_max, 1)
  assert "add/remove" in spec.neighboring
  fixed = dp_fedavg(model, fd, clients_per_round=6, sampler="fixed_size")
  assert fixed.k_max == 6 and "replace" in fixed.privacy.neighboring
  # Replace-one: the sensitivity of a sum clipped to C is 2C, so the event's z is half.
  assert (fixed.privacy.relation, fixed.privacy.event_scale) == ("replace_one", 0.5)
  assert (fixed.privacy.population_size, fixed.privacy.cohort_size) == (n, 6)
  assert fixed.privacy.truncation is None
  by_rate = dp_fedavg(model, fd, sampling_rate=0.26, sampler="fixed_size")
  assert by_rate.k_max == round(0.26 * n)
  assert by_rate.hparams.sampling_rate == pytest.approx(by_rate.k_max / n)
  sgd = dp_fedsgd(model, fd, clients_per_round=6)
  assert sgd.name == "dp_fedsgd" and sgd.config["local_steps"] == 1
  assert sgd.config["batch_size"] == fd.max_examples
  capped = dp_fedavg(model, fd, clients_per_round=6, weighting="data_size", data_size_cap=10)
  assert capped.config["data_size_cap"] == 10
  # local_steps alone replaces the default local_epochs=1.
  for builder in (dp_fedavg, fedavg):
    steps = builder(model, fd, clients_per_round=6, local_steps=3)
    assert steps.config["local_steps"] == 3 and steps.config["local_epochs"] is None
  rec = dp_fedavg_record_level(model, fd, clients_per_round=6, batch_size=4)
  assert rec.config["record_sampling_rate"] == pytest.approx(4 / np.mean(fd.counts))
  assert rec.config["local_dp_steps"] == int(np.ceil(1 / rec.config["record_sampling_rate"]))


@pytest.mark.parametrize("builder,kwargs,name", [
    (dp_fedavg, dict(clip_norm=0.0), "clip_norm"),
    (dp_fedavg, dict(clip_norm=-1.0), "clip_norm"),
    (dp_fedavg, dict(clip_norm=float("inf")), "clip_norm"),
    (dp_fedavg, dict(noise_multiplier=float("nan")), "noise_multiplier"),
    (dp_fedavg, dict(noise_multiplier=-0.5), "noise_multiplier"),
    (dp_fedavg, dict(clients_per_round=None, sampling_rate=0.0), "sampling_rate"),
    (dp_fedavg, dict(clients_per_round=None, sampling_rate=1.5), "sampling_rate"),
    (dp_fedavg, dict(clients_per_round=25), "clients_per_round"),
    (dp_fedavg, dict(clients_per_round=0), "clients_per_round"),
    (dp_fedavg, dict(sampling_rate=0.1), "sampling_rate"),
    (dp_fedavg, dict(clients_per_round=None), "sampling_rate"),
    (dp_fedavg, dict(weighting="data_size"), "data_size_cap"),
    (dp_fedavg, dict(weighting="data_size", data_size_cap=0.0), "data_size_cap"),
    (dp_fedavg, dict(weighting="median"), "weighting"),
    (dp_fedavg, dict(sampler="stratified"), "sampler"),
    (dp_fedavg, dict(k_max=100), "k_max"),
    (dp_fedavg, dict(batch_size=0), "batch_size"),
    (dp_fedavg, dict(client_optimizer="rmsprop"), "client_optimizer"),
    (dp_fedavg, dict(client_learning_rate=0.0), "client_learning_rate"),
    (dp_fedavg, dict(server_optimizer="fedprox"), "server_optimizer"),
    (dp_fedavg, dict(server_learning_rate=-1.0), "server_learning_rate"),
    (dp_fedavg, dict(local_epochs=0), "local_epochs"),
    (dp_fedavg, dict(local_epochs=None, local_steps=0), "local_steps"),
    (fedavg, dict(local_epochs=1.5), "local_epochs"),
    (dp_fedavg, dict(local_epochs=2, local_steps=3), "local_steps"),
    (dp_fedavg, dict(local_epochs=None), "local_epochs"),
    (fedavg, dict(local_epochs=3, local_steps=3), "local_steps"),
    (dp_fedavg_record_level, dict(local_epochs=2, local_steps=3), "local_steps"),
    (dp_fedsgd, dict(clip_norm=0.0), "clip_norm"),
    (dp_fedavg_record_level, dict(record_clip_norm=0.0), "record_clip_norm"),
    (dp_fedavg_record_level, dict(record_noise_multiplier=float("nan")),
     "record_noise_multiplier"),
    (dp_fedavg_record_level, dict(record_sampling_rate=1.2), "record_sampling_rate"),
    (dp_fedavg_record_level, dict(clients_per_round=30), "clients_per_round"),
    (dp_fedavg_record_level, dict(sampler="bogus"), "sampler"),
    (fedavg, dict(clients_per_round=25), "clients_per_round"),
    (fedavg, dict(sampler="bogus"), "sampler"),
    (fedavg, dict(weighting="bogus"), "weighting"),
])
def test_bad_arguments_raise_named_errors(env, builder, kwargs, name):
  fd, model, _, _ = env
  kwargs = {"clients_per_round": 6, **kwargs}
  if kwargs["clients_per_round"] is None:
    del kwargs["clients_per_round"]
  with pytest.raises(FedJaxDpError, match=name) as info:
    builder(model, fd, **kwargs)
  assert isinstance(info.value, ValueError)
