"""Tests of `fedjax_dp.privacy.noise` and of the noise a DP-FedAvg round adds.

Statistical checks use fixed keys (deterministic) and a tolerance of several standard
errors: for n i.i.d. N(0, s^2) draws the sample standard deviation has standard error
about s / sqrt(2 n) and the sample mean s / sqrt(n).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_dp.federated import server
from fedjax_dp.federated.client import ClientMetrics
from fedjax_dp.federated.round import PopulationData, RoundConfig, RoundHParams, make_round
from fedjax_dp.federated.sampling import PoissonSampler
from fedjax_dp.privacy import noise

NUM_SE = 6.0


def _check_gaussian(samples, stddev):
  samples = np.asarray(samples, np.float64).ravel()
  n = samples.size
  assert abs(samples.mean()) <= NUM_SE * stddev / np.sqrt(n)
  assert abs(samples.std() - stddev) <= NUM_SE * stddev / np.sqrt(2 * n)


@pytest.mark.parametrize("stddev", [0.01, 0.7, 25.0])
def test_add_gaussian_noise_std(stddev):
  tree = {"a": jnp.zeros((300, 200)), "b": [jnp.zeros((40000,))]}
  out = noise.add_gaussian_noise(jax.random.key(0), tree, stddev)
  _check_gaussian(out["a"], stddev)
  _check_gaussian(out["b"][0], stddev)
  all_noise = np.concatenate([np.ravel(out["a"]), np.ravel(out["b"][0])])
  _check_gaussian(all_noise, stddev)


def test_noise_is_added_to_tree_and_leaves_are_independent():
  base = jnp.linspace(-5.0, 5.0, 50000)
  tree = {"x": base, "y": jnp.zeros((50000,))}
  out = noise.add_gaussian_noise(jax.random.key(3), tree, 2.0)
  _check_gaussian(np.asarray(out["x"]) - np.asarray(base), 2.0)
  # Two same-shape leaves get independent streams (not the same draw).
  nx = np.asarray(out["x"]) - np.asarray(base)
  corr = np.corrcoef(nx, np.asarray(out["y"]))[0, 1]
  assert abs(corr) < NUM_SE / np.sqrt(50000)


def test_noise_preserves_structure_and_dtype():
  tree = {"h": jnp.zeros((10,), jnp.float16), "f": (jnp.zeros((2, 3), jnp.float32),)}
  out = noise.gaussian_like(jax.random.key(0), tree, 1.0)
  assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(tree)
  assert out["h"].dtype == jnp.float16 and out["f"][0].shape == (2, 3)


def test_zero_stddev_gives_exact_input():
  tree = {"a": jnp.arange(10.0), "b": jnp.ones((3, 3)) * 0.25}
  out = noise.add_gaussian_noise(jax.random.key(1), tree, 0.0)
  for x, y in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(out)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  g = noise.gaussian_like(jax.random.key(1), tree, jnp.float32(0.0))
  for leaf in jax.tree_util.tree_leaves(g):
    np.testing.assert_array_equal(np.asarray(leaf), 0.0)


def test_same_key_same_noise_different_key_different_noise():
  tree = {"a": jnp.zeros((1000,))}
  a = noise.add_gaussian_noise(jax.random.key(5), tree, 1.0)["a"]
  b = noise.add_gaussian_noise(jax.random.key(5), tree, 1.0)["a"]
  c = noise.add_gaussian_noise(jax.random.key(6), tree, 1.0)["a"]
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert np.mean(np.asarray(a) == np.asarray(c)) < 0.01
  # Jitted and eager draws agree.
  d = jax.jit(noise.add_gaussian_noise)(jax.random.key(5), tree, 1.0)["a"]
  np.testing.assert_allclose(np.asarray(a), np.asarray(d), rtol=1e-6)


def test_local_noise_per_client_stddevs():
  sigmas = np.array([0.0, 0.5, 1.0, 3.0], np.float32)
  k = len(sigmas)
  base = jnp.asarray(np.random.default_rng(0).normal(size=(k, 30000)), jnp.float32)
  updates = {"w": base}
  keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(k))
  out = noise.add_local_noise(keys, updates, sigmas)
  diff = np.asarray(out["w"], np.float64) - np.asarray(base, np.float64)
  np.testing.assert_array_equal(diff[0], 0.0)  # sigma 0: exact
  for i in range(1, k):
    _check_gaussian(diff[i], float(sigmas[i]))


def test_local_noise_scalar_stddev_independent_clients():
  k = 3
  updates = {"w": jnp.zeros((k, 20000))}
  keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(7), i))(jnp.arange(k))
  out = np.asarray(noise.add_local_noise(keys, updates, 0.3)["w"])
  for i in range(k):
    _check_gaussian(out[i], 0.3)
  assert abs(np.corrcoef(out[0], out[1])[0, 1]) < NUM_SE / np.sqrt(20000)
  # Same key per client -> same noise for that client, whatever its slot.
  swapped = np.asarray(noise.add_local_noise(keys[::-1], updates, 0.3)["w"])
  np.testing.assert_array_equal(swapped[0], out[2])


# --- End to end: the noise of a DP-FedAvg round --------------------------------------

def _zero_client(params, x, y, count, key, hp):
  del x, y, key, hp
  zero = jnp.zeros((), jnp.float32)
  izero = jnp.zeros((), jnp.int32)
  return (jax.tree_util.tree_map(jnp.zeros_like, params),
          ClientMetrics(zero, count.astype(jnp.int32), izero + 1, zero, zero, izero, izero))


def _population(num_clients):
  return PopulationData(jnp.zeros((num_clients, 2, 1)), jnp.zeros((num_clients, 2), jnp.int32),
                        jnp.full((num_clients,), 2, jnp.int32))


@pytest.mark.parametrize("noise_mode", ["central", "local"])
def test_round_noise_std_with_zero_updates(noise_mode):
  """All client updates are zero, so the aggregate is pure noise: with central noise
  its std is z * C / (q N); with local noise sqrt(K) * z * C / (q N)."""
  n_clients, q, z, c = 50, 0.2, 1.3, 0.7
  sampler = PoissonSampler.create(n_clients, q)
  config = RoundConfig(clip_updates=True, noise=noise_mode, weighting="uniform",
                       denominator="expected", population_weight=float(n_clients))
  opt = optax.sgd(1.0)
  round_fn = jax.jit(make_round(_zero_client, sampler, opt, config))
  params = {"w": jnp.zeros((40000,)), "b": jnp.zeros((100, 10))}
  state = server.init_server_state(params, opt)
  hp = RoundHParams(jnp.float32(c), jnp.float32(z), jnp.float32(q))
  new_state, metrics = round_fn(state, _population(n_clients), hp, jax.random.key(0))
  delta = np.concatenate([np.ravel(new_state.params["w"]), np.ravel(new_state.params["b"])])
  k = int(metrics.num_clients)
  # The cohort size differs from q N here, so a denominator K instead of q N would fail.
  assert k > 0 and k != q * n_clients
  expected = z * c / (q * n_clients)
  if noise_mode == "local":
    expected *= np.sqrt(k)
  _check_gaussian(delta, expected)
  np.testing.assert_allclose(float(metrics.noise_stddev), z * c, rtol=1e-6)
  np.testing.assert_allclose(float(metrics.noise_multiplier), z, rtol=1e-6)
  np.testing.assert_allclose(float(metrics.sensitivity), c, rtol=1e-6)
  # The round reports the cohort's real sampling rate in both modes; whether it amplifies
  # is the observation model's business (local noise: the server sees each sender, the
  # ledger composes VisibleParticipationDpEvent). Issue 30 (F6): reporting 1 here made
  # the ledger compute the cohort-overflow probability at rate 1.
  np.testing.assert_allclose(float(metrics.sampling_rate), q, rtol=1e-6)
  assert int(metrics.dp_steps) == 1
  # Noise is fresh each round (round counter advances) and reproducible per seed.
  state2, _ = round_fn(new_state, _population(n_clients), hp, jax.random.key(0))
  delta2 = np.ravel(state2.params["w"]) - np.ravel(new_state.params["w"])
  assert np.mean(delta2 == delta[:40000]) < 0.01
  again, _ = round_fn(state, _population(n_clients), hp, jax.random.key(0))
  np.testing.assert_array_equal(np.asarray(again.params["w"]), np.asarray(new_state.params["w"]))


def test_round_noise_zero_multiplier_gives_exact_zero_delta():
  n_clients = 10
  sampler = PoissonSampler.create(n_clients, 0.5)
  opt = optax.sgd(1.0)
  round_fn = make_round(_zero_client, sampler, opt,
                        RoundConfig(population_weight=float(n_clients)))
  state = server.init_server_state({"w": jnp.ones((100,))}, opt)
  new_state, metrics = jax.jit(round_fn)(
      state, _population(n_clients), RoundHParams(1.0, 0.0, 0.5), jax.random.key(0))
  np.testing.assert_array_equal(np.asarray(new_state.params["w"]), 1.0)
  assert float(metrics.noise_stddev) == 0.0
