"""Chunked cohorts: layout, automatic chunk size, and equality with the one-chunk round."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_dp.algorithms.dp_fedavg import dp_fedavg, fedavg
from fedjax_dp.federated import chunking, server
from fedjax_dp.federated.client import make_client_update
from fedjax_dp.federated.driver import constant_schedule, make_block_fn, run_rounds
from fedjax_dp.federated.population import PopulationData
from fedjax_dp.federated.round import RoundConfig, RoundHParams, make_round
from fedjax_dp.federated.sampling import PoissonSampler
from fedjax_dp.models import create_model
from fedjax_dp.validation import FedJaxDpError


@pytest.mark.parametrize("k,c,s", [(1, 1, 1), (10, 3, 1), (10, 64, 1), (37, 8, 4),
                                   (100, 7, 2), (5, 2, 8)])
def test_chunk_layout_covers_cohort_with_little_padding(k, c, s):
  lay = chunking.chunk_layout(k, c, s)
  assert lay.padded_size == lay.chunk_size * lay.chunks_per_shard * lay.num_shards
  assert lay.padded_size >= k and lay.chunk_size <= c and lay.num_shards == s
  per_shard = -(-k // s)
  # Fewer than one padded slot per chunk beyond the shard rounding.
  assert lay.chunk_size * lay.chunks_per_shard - per_shard < lay.chunks_per_shard
  assert lay.chunks_per_shard == -(-per_shard // c)


def test_chunk_layout_rejects_bad_sizes():
  with pytest.raises(FedJaxDpError, match="chunk_size"):
    chunking.chunk_layout(10, 0)
  with pytest.raises(FedJaxDpError, match="num_shards"):
    chunking.chunk_layout(10, 2, 0)
  with pytest.raises(FedJaxDpError, match="chunk_size"):
    RoundConfig(population_weight=1.0, chunk_size=0)


def test_auto_chunk_size_follows_memory(monkeypatch):
  monkeypatch.setattr(chunking, "available_memory_bytes", lambda device=None: 10**9)
  p, data_bytes = 4000, 10**7
  per = chunking.per_client_bytes(p, data_bytes)
  expect = int(0.25 * 10**9 // per)
  assert 1 <= expect < min(chunking.CPU_MAX_CHUNK, chunking.CPU_PARAMS_PER_CHUNK // p)
  assert chunking.auto_chunk_size(10_000, p, data_bytes) == expect
  assert chunking.auto_chunk_size(3, p, data_bytes) == 3  # never more than the clients
  assert chunking.auto_chunk_size(10_000, 10**9, data_bytes) == 1  # never below 1
  assert chunking.auto_chunk_size(10_000, 10, 10) == chunking.CPU_MAX_CHUNK  # CPU caps
  assert chunking.auto_chunk_size(1_000, 200_000, 10) == 2
  assert chunking.auto_chunk_size(1_000, 1_200_000, 10) == 1
  assert chunking.auto_chunk_size(10_000, 16384, 10) == chunking.CPU_PARAMS_PER_CHUNK // 16384
  # Huge cohorts: at most MAX_CHUNKS_PER_DEVICE loop iterations, memory permitting.
  many = 100 * chunking.MAX_CHUNKS_PER_DEVICE
  by_memory = int(0.25 * 10**9 // chunking.per_client_bytes(200_000, 10))  # 52
  assert chunking.auto_chunk_size(many, 200_000, 10) == min(by_memory, 100) == 52
  assert chunking.auto_chunk_size(many, 50_000, 10) == 100
  assert chunking.auto_chunk_size(many, 10**9, 10) == 1  # memory still wins
  with pytest.raises(FedJaxDpError, match="memory_fraction"):
    chunking.auto_chunk_size(10, p, data_bytes, memory_fraction=0.0)


def test_auto_chunk_size_caps_a_large_client_update_on_cpu(monkeypatch):
  """Chunks hold at most CPU_FLOPS_PER_CHUNK of client update (a CNN's update gets one
  client per chunk; the MLP's keeps the parameter rule's 2); no estimate, no cap."""
  monkeypatch.setattr(chunking, "available_memory_bytes", lambda device=None: 10**10)
  f = chunking.CPU_FLOPS_PER_CHUNK
  assert chunking.auto_chunk_size(20, 25_578, 10, client_flops=0.8 * f) == 1  # CNN
  assert chunking.auto_chunk_size(20, 25_578, 10) == 20                      # unknown
  assert chunking.auto_chunk_size(100, 199_210, 10, client_flops=0.3 * f) == 2  # MLP
  assert chunking.auto_chunk_size(64, 4_342, 10, client_flops=0.2 * f) == 5
  assert chunking.auto_chunk_size(64, 4_342, 10, client_flops=10 * f) == 1


def test_available_memory_is_positive():
  assert chunking.available_memory_bytes() > 0


@pytest.fixture(scope="module")
def env(make_fd):
  fd = make_fd(num_clients=23, max_examples=12)
  model = create_model("mlp", fd.feature_shape, fd.num_classes, hidden=(16,))
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  return fd, model, data


def _run(alg, data, rounds=3, seed=0):
  state, recs = run_rounds(alg.round_fn, alg.init(jax.random.key(1)), data,
                           constant_schedule(alg.hparams, rounds), jax.random.key(seed),
                           rounds=rounds, block_size=rounds)
  return state, recs


def _assert_same_run(a, b):
  (sa, ra), (sb, rb) = a, b
  for la, lb in zip(jax.tree_util.tree_leaves(sa.params), jax.tree_util.tree_leaves(sb.params)):
    np.testing.assert_allclose(np.asarray(la), np.asarray(lb), rtol=2e-5, atol=2e-6)
  for x, y in zip(ra, rb):
    for k in ("num_clients", "num_sampled", "nonfinite_updates"):
      assert x[k] == y[k], k
    for k in ("train_loss", "clip_fraction", "mean_update_norm", "max_update_norm",
              "aggregate_norm", "noise_stddev"):
      np.testing.assert_allclose(x[k], y[k], rtol=2e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("chunk", [1, 4, 7])
def test_chunked_dp_fedavg_equals_one_chunk(env, chunk):
  fd, model, data = env
  kw = dict(clip_norm=0.05, noise_multiplier=0.7, sampling_rate=0.4, batch_size=4)
  whole = dp_fedavg(model, fd, chunk_size=10**6, **kw)  # one chunk holds the cohort
  part = dp_fedavg(model, fd, chunk_size=chunk, **kw)
  a, b = _run(whole, data), _run(part, data)
  assert 0 < a[1][0]["clip_fraction"] <= 1  # clipping and noise are exercised
  _assert_same_run(a, b)


def test_chunked_fedavg_actual_denominator_equals_one_chunk(env):
  fd, model, data = env
  kw = dict(clients_per_round=9, batch_size=5, weighting="data_size")
  _assert_same_run(_run(fedavg(model, fd, chunk_size=50, **kw), data),
                   _run(fedavg(model, fd, chunk_size=2, **kw), data))


def test_chunked_local_noise_and_custom_weights_equal_one_chunk(env):
  fd, model, data = env
  n = fd.num_clients
  weights = jnp.asarray(np.linspace(0.2, 1.0, n), jnp.float32)
  z = jnp.asarray(np.linspace(0.5, 2.0, n), jnp.float32)  # per-client multipliers
  wdata = data._replace(weights=weights)
  opt = optax.sgd(1.0)
  client = make_client_update(model, optax.sgd(0.1), batch_size=4,
                              max_examples=fd.max_examples, local_epochs=1)
  sampler = PoissonSampler.create(n, 0.5)
  hp = RoundHParams(0.1, z, 0.5)
  outs = []
  for chunk in (None, 1, 5, 100):
    cfg = RoundConfig(noise="local", weighting="custom", population_weight=float(
        np.sum(weights)), chunk_size=chunk)
    round_fn = jax.jit(make_round(client, sampler, opt, cfg))
    state = server.init_server_state(model.init(jax.random.key(0)), opt)
    outs.append(round_fn(state, wdata, hp, jax.random.key(3)))
  for s, m in outs[1:]:
    for la, lb in zip(jax.tree_util.tree_leaves(outs[0][0].params),
                      jax.tree_util.tree_leaves(s.params)):
      np.testing.assert_allclose(np.asarray(la), np.asarray(lb), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(float(m.train_loss), float(outs[0][1].train_loss), rtol=1e-5)
    assert float(m.noise_multiplier) == float(outs[0][1].noise_multiplier)


def test_automatic_chunk_size_bounds_memory_not_results(env, monkeypatch):
  """With little free memory the automatic size drops to 1 client per chunk; the run is
  the same."""
  fd, model, data = env
  kw = dict(clip_norm=0.05, noise_multiplier=0.7, sampling_rate=0.4, batch_size=4)
  free = _run(dp_fedavg(model, fd, **kw), data)
  monkeypatch.setattr(chunking, "available_memory_bytes", lambda device=None: 1)
  tight = _run(dp_fedavg(model, fd, **kw), data)
  _assert_same_run(free, tight)


def test_the_engine_estimates_the_client_update_it_chunks(env, monkeypatch):
  """The engine passes XLA's FLOP count of one client's update to the automatic chunk
  size: a larger local batch, a larger estimate."""
  fd, model, data = env
  seen = []
  real = chunking.auto_chunk_size

  def spy(*args, **kwargs):
    if "client_flops" in kwargs:  # the call that follows the estimate
      seen.append(kwargs["client_flops"])
    return real(*args, **kwargs)
  monkeypatch.setattr(chunking, "auto_chunk_size", spy)
  for batch in (2, 8):
    alg = dp_fedavg(model, fd, clip_norm=0.05, noise_multiplier=0.7, sampling_rate=0.4,
                    batch_size=batch)
    jax.eval_shape(alg.round_fn, alg.init(jax.random.key(1)), data, alg.hparams,
                   jax.random.key(0))
  assert len(seen) == 2 and 0 < seen[0] < seen[1]


def test_chunked_round_compiles_once_for_new_values(env):
  fd, model, data = env
  alg = dp_fedavg(model, fd, clip_norm=0.1, noise_multiplier=1.0, sampling_rate=0.4,
                  batch_size=4, chunk_size=3)
  block = make_block_fn(alg.round_fn)
  init = alg.init(jax.random.key(0))
  sched = constant_schedule(alg.hparams, 2)
  block(init, data, sched, jax.random.key(0))
  n0 = block._cache_size()
  block(init, data, sched._replace(noise_multiplier=sched.noise_multiplier * 3,
                                   sampling_rate=sched.sampling_rate / 2),
        jax.random.key(5))
  assert block._cache_size() == n0 == 1
