"""Tests of `fedjax_dp.federated.round.make_round`: masking, clipping, weighting, padding."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
from fedjax_dp.federated import aggregation, server
from fedjax_dp.federated.client import ClientMetrics
from fedjax_dp.federated.driver import constant_schedule, make_block_fn, run_rounds
from fedjax_dp.federated.round import PopulationData, RoundConfig, RoundHParams, make_round
from fedjax_dp.federated.sampling import FixedSizeSampler, PoissonSampler
from fedjax_dp.models import create_model
from fedjax_dp.validation import FedJaxDpError

N = 12


def _id_population():
  """Client i holds x[i, :, 0] = i; x[i, :, 1] = 1 flags a client returning NaN."""
  counts = jnp.asarray(2 + (np.arange(N) % 2), jnp.int32)  # all >= 2
  x = np.zeros((N, 3, 2), np.float32)
  x[:, :, 0] = np.arange(N)[:, None]
  return x, jnp.zeros((N, 3), jnp.int32), counts


def _id_client(params, x, y, count, key, hp):
  """Update (id + 1) * e_id, so the aggregate reveals who took part and with what weight.
  Padded cohort slots (count forced to 1) and flagged clients return NaN."""
  del y, key, hp
  cid = x[0, 0]
  bad = (count == 1) | (x[0, 1] > 0)
  u = jax.nn.one_hot(cid.astype(jnp.int32), N) * (cid + 1.0)
  u = jnp.where(bad, jnp.nan, u)
  f = jnp.float32
  return ({"w": u}, ClientMetrics(loss=cid, num_examples=count.astype(jnp.int32),
                                  num_steps=jnp.int32(1), update_norm=cid + 1.0,
                                  example_clip_fraction=f(0.5),
                                  batch_truncated=jnp.int32(1), nonfinite_grads=jnp.int32(0)))


@pytest.fixture(scope="module")
def id_round():
  opt = optax.sgd(1.0)
  sampler = PoissonSampler.create(N, 0.5, k_max=N)
  round_fn = jax.jit(make_round(_id_client, sampler, opt, RoundConfig(
      population_weight=float(N))))
  state = server.init_server_state({"w": jnp.zeros((N,))}, opt)
  return round_fn, state


def test_padded_slots_contribute_nothing(id_round):
  round_fn, state = id_round
  x, y, counts = _id_population()
  q, c = 0.5, 4.5
  new, m = round_fn(state, PopulationData(jnp.asarray(x), y, counts),
                    RoundHParams(c, 0.0, q), jax.random.key(0))
  delta = np.asarray(new.params["w"])
  assert np.all(np.isfinite(delta))  # the NaN updates of padded slots never leak
  cohort = np.flatnonzero(delta)
  k = len(cohort)
  assert 0 < k < N  # some padding slots were in use
  assert int(m.num_clients) == k and int(m.num_sampled) == k
  assert int(m.num_truncated) == 0 and int(m.nonfinite_updates) == 0
  # delta_k = clip((k + 1) e_k) / (q N)
  np.testing.assert_allclose(delta[cohort], np.minimum(cohort + 1.0, c) / (q * N), rtol=1e-6)
  # Metrics average over real participants only.
  np.testing.assert_allclose(float(m.train_loss), cohort.mean(), rtol=1e-6)
  np.testing.assert_allclose(float(m.clip_fraction), np.mean(cohort + 1.0 > c), rtol=1e-6)
  np.testing.assert_allclose(float(m.mean_update_norm), np.mean(cohort + 1.0), rtol=1e-6)
  np.testing.assert_allclose(float(m.max_update_norm), cohort.max() + 1.0, rtol=1e-6)
  np.testing.assert_allclose(float(m.example_clip_fraction), 0.5, rtol=1e-6)
  assert int(m.batch_truncated) == k
  np.testing.assert_allclose(float(m.aggregate_norm), np.linalg.norm(delta), rtol=1e-5)
  assert int(m.round) == 1 and int(new.round) == 1  # the first round is round 1


def test_nonfinite_client_update_zeroed_and_counted(id_round):
  round_fn, state = id_round
  x, y, counts = _id_population()
  x[3, :, 1] = 1.0  # client 3 returns NaN
  c = 100.0
  new, m = round_fn(state, PopulationData(jnp.asarray(x), y, counts),
                    RoundHParams(c, 0.0, 1.0), jax.random.key(0))
  delta = np.asarray(new.params["w"])
  assert int(m.num_clients) == N
  assert int(m.nonfinite_updates) == 1
  expected = (np.arange(N) + 1.0) / N
  expected[3] = 0.0
  np.testing.assert_allclose(delta, expected, rtol=1e-6)
  assert float(m.clip_fraction) == 0.0


@pytest.mark.parametrize("denominator", ["expected", "actual"])
def test_data_size_weights_in_round(denominator):
  x, y, counts = _id_population()
  cap = 2.5
  w_pop = aggregation.population_weight_total(np.asarray(counts), "data_size", cap)
  opt = optax.sgd(1.0)
  config = RoundConfig(weighting="data_size", denominator=denominator, data_size_cap=cap,
                       population_weight=w_pop)
  round_fn = jax.jit(make_round(_id_client, FixedSizeSampler.create(N, N), opt, config))
  state = server.init_server_state({"w": jnp.zeros((N,))}, opt)
  new, _ = round_fn(state, PopulationData(jnp.asarray(x), y, counts),
                    RoundHParams(1e9, 0.0, 1.0), jax.random.key(0))
  w = np.minimum(np.asarray(counts) / cap, 1.0)
  denom = 1.0 * w_pop if denominator == "expected" else w.sum()
  np.testing.assert_allclose(np.asarray(new.params["w"]), w * (np.arange(N) + 1.0) / denom,
                             rtol=1e-6)


@pytest.mark.parametrize("denominator", ["expected", "actual"])
def test_custom_weights_in_round(denominator):
  x, y, counts = _id_population()
  w = aggregation.custom_weights(np.linspace(0.0, 1.0, N), N)
  opt = optax.sgd(1.0)
  config = RoundConfig(weighting="custom", denominator=denominator,
                       population_weight=float(w.sum()))
  round_fn = jax.jit(make_round(_id_client, FixedSizeSampler.create(N, N), opt, config))
  state = server.init_server_state({"w": jnp.zeros((N,))}, opt)
  data = PopulationData(jnp.asarray(x), y, counts, jnp.asarray(w, jnp.float32))
  new, _ = round_fn(state, data, RoundHParams(1e9, 0.0, 1.0), jax.random.key(0))
  np.testing.assert_allclose(np.asarray(new.params["w"]),
                             w * (np.arange(N) + 1.0) / w.sum(), rtol=1e-5)
  with pytest.raises(ValueError, match="weights"):
    round_fn(state, PopulationData(jnp.asarray(x), y, counts),
             RoundHParams(1e9, 0.0, 1.0), jax.random.key(0))


def test_round_config_validation():
  for kw, name in ((dict(noise="laplace"), "noise"), (dict(weighting="median"), "weighting"),
                   (dict(denominator="mean"), "denominator"),
                   (dict(denominator="expected"), "population_weight"),
                   (dict(population_weight=0.0), "population_weight"),
                   (dict(population_weight=float("nan")), "population_weight")):
    with pytest.raises(FedJaxDpError, match=name):
      RoundConfig(**kw)
  assert RoundConfig(denominator="actual").population_weight is None


# --- Real model: padding and seeds ----------------------------------------------------

def _records_equal(a, b, atol=0.0):
  assert len(a) == len(b)
  for ra, rb in zip(a, b):
    for key in ra:
      if key == "wall_time_s":
        continue
      assert ra[key] == pytest.approx(rb[key], abs=atol, rel=0), key


@pytest.fixture(scope="module")
def real_setup(synthetic_fd):
  fd = synthetic_fd
  model = create_model("linear", fd.feature_shape, fd.num_classes)
  kw = dict(clip_norm=0.5, noise_multiplier=0.3, clients_per_round=6, batch_size=4,
            client_learning_rate=0.3)
  alg = dp_fedavg(model, fd, **kw)
  alg_big = dp_fedavg(model, fd, k_max=fd.num_clients, **kw)
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  return fd, alg, alg_big, data, make_block_fn(alg.round_fn)


def test_population_padding_rows_do_not_matter(real_setup):
  fd, alg, _, data, _ = real_setup
  round_fn = jax.jit(alg.round_fn)
  hp = jax.tree_util.tree_map(jnp.asarray, alg.hparams)
  state = alg.init(jax.random.key(0))
  x = np.array(fd.x)
  y = np.array(fd.y)
  pad = ~fd.example_mask
  assert pad.any()
  x[pad] = np.nan
  x[pad & (np.arange(fd.max_examples) % 2 == 0)] = 1e4
  y[pad] = 99
  garbage = PopulationData(jnp.asarray(x), jnp.asarray(y), data.counts)
  s_ref, m_ref = state, None
  s_g = state
  for _ in range(3):
    s_ref, m_ref = round_fn(s_ref, data, hp, jax.random.key(1))
    s_g, m_g = round_fn(s_g, garbage, hp, jax.random.key(1))
    for a, b in zip(jax.tree_util.tree_leaves((s_ref, m_ref)),
                    jax.tree_util.tree_leaves((s_g, m_g))):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert int(m_ref.nonfinite_updates) == 0


def test_results_do_not_depend_on_k_max(real_setup):
  fd, alg, alg_big, data, block_fn = real_setup
  assert alg.k_max < alg_big.k_max == fd.num_clients
  rounds = 4
  schedule = constant_schedule(alg.hparams, rounds)
  runs = []
  for a, bf in ((alg, block_fn), (alg_big, None)):
    runs.append(run_rounds(a.round_fn, a.init(jax.random.key(0)), data, schedule,
                           jax.random.key(7), rounds=rounds, block_size=rounds, block_fn=bf))
  (s1, r1), (s2, r2) = runs
  for p1, p2 in zip(jax.tree_util.tree_leaves(s1.params), jax.tree_util.tree_leaves(s2.params)):
    np.testing.assert_allclose(np.asarray(p1), np.asarray(p2), atol=1e-6, rtol=0)
  assert sum(r["num_clients"] for r in r1) > 0
  _records_equal(r1, r2, atol=1e-6)


def test_same_seed_identical_different_seed_different(real_setup):
  _, alg, _, data, block_fn = real_setup
  rounds = 4
  schedule = constant_schedule(alg.hparams, rounds)

  def run(seed):
    return run_rounds(alg.round_fn, alg.init(jax.random.key(0)), data, schedule,
                      jax.random.key(seed), rounds=rounds, block_size=rounds,
                      block_fn=block_fn)

  (sa, ra), (sb, rb), (sc, rc) = run(3), run(3), run(4)
  for a, b in zip(jax.tree_util.tree_leaves(sa), jax.tree_util.tree_leaves(sb)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  _records_equal(ra, rb)
  assert not np.array_equal(np.asarray(sa.params["Dense_0"]["kernel"]),
                            np.asarray(sc.params["Dense_0"]["kernel"]))


@pytest.mark.parametrize("radius_field", ["param_clip_norm", "final_param_clip_norm"])
def test_nonfinite_model_upload_stays_in_the_parameter_ball(radius_field):
  """Issue 30 (F10): in the model-upload papers (000, 004) the sensitivity 2R is the
  diameter of the ball ||w|| <= R that every trained model is projected onto. A client
  whose training produced NaN used to upload the received model w0 (its update zeroed),
  which lies outside the ball when the global model does; it now uploads P_R(w0), the
  projection of the public global model, inside the ball."""
  from fedjax_dp.federated.client import ClientHParams
  opt = optax.sgd(1.0)
  x, y, counts = _id_population()
  x[:, :, 1] = 1.0                       # every client's training returns NaN
  sampler = FixedSizeSampler.create(N, 3)
  config = RoundConfig(clip_updates=False, noise="local", weighting="uniform",
                       denominator="actual", observed_client=int(N - 1))
  round_fn = jax.jit(make_round(_id_client, sampler, opt, config))
  w0 = jnp.full((N,), 5.0)               # ||w0|| = 5 sqrt(12) > R = 1
  state = server.init_server_state({"w": w0}, opt)
  radius = 1.0
  hp = RoundHParams(jnp.inf, 0.0, 3 / N, ClientHParams(**{radius_field: radius}),
                    noise_stddev=0.0, sensitivity=2 * radius)
  for seed in range(8):
    new, m = round_fn(state, PopulationData(jnp.asarray(x), y, counts), hp,
                      jax.random.key(seed))
    assert int(m.nonfinite_updates) == 3
    # Every upload is P_R(w0): the new model (their average) too.
    np.testing.assert_allclose(np.asarray(new.params["w"]),
                               np.asarray(w0) * radius / np.linalg.norm(w0), rtol=1e-5)
    if float(m.extras["observed_participation"]):
      uploaded = np.asarray(w0) + np.asarray(m.extras["observed_upload"])
      assert np.linalg.norm(uploaded) == pytest.approx(radius, rel=1e-5)


def test_nonfinite_update_without_a_ball_is_zeroed(id_round):
  """Without a parameter ball (DP-FedAvg's clipped updates) the fallback stays zero."""
  from fedjax_dp.federated.round import nonfinite_fallback_update
  from fedjax_dp.federated.client import ClientHParams
  params = {"w": jnp.full((3,), 4.0)}
  zero = nonfinite_fallback_update(params, ClientHParams())
  np.testing.assert_array_equal(np.asarray(zero["w"]), 0.0)
  both = nonfinite_fallback_update(params, ClientHParams(param_clip_norm=2.0,
                                                         final_param_clip_norm=1.0))
  np.testing.assert_allclose(np.linalg.norm(np.asarray(params["w"] + both["w"])), 1.0,
                             rtol=1e-6)


def test_observed_client_needs_local_noise():
  with pytest.raises(FedJaxDpError, match="observed_client"):
    RoundConfig(population_weight=1.0, observed_client=0)
