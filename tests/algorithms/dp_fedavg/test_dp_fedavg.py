"""Tests of DP-FedAvg's builders (`fedjax_dp.algorithms.dp_fedavg`): DP-FedSGD's round,
its noise end to end, the builders' attributes and their argument checks (the shared
learning test of every algorithm is tests/algorithms/test_algorithms.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp.algorithms.dp_fedavg import (dp_fedavg, dp_fedavg_record_level, dp_fedsgd,
                                            fedavg)
from fedjax_dp.federated import PopulationData, constant_schedule, run_rounds
from fedjax_dp.federated.driver import make_block_fn
from fedjax_dp.federated.sampling import poisson_k_max
from fedjax_dp.models import create_model
from fedjax_dp.privacy import events
from fedjax_dp.validation import FedJaxDpError


@pytest.fixture(scope="module")
def env(synthetic_fd):
  fd = synthetic_fd
  model = create_model("linear", fd.feature_shape, fd.num_classes)
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  return fd, model, data, None


@pytest.fixture(scope="module")
def fedsgd_alg(env):
  fd, model, _, _ = env
  # k_max = N so that the same compiled round also runs with q = 1.
  return dp_fedsgd(model, fd, clip_norm=1.0, noise_multiplier=0.1, sampling_rate=0.5,
                   k_max=fd.num_clients, client_learning_rate=0.5)


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
