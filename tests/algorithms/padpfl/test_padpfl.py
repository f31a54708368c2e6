"""PADPFL (paper 000): the engine pieces it adds (final weight clipping, FedProx, client
plus server noise, impact factors as per-round data) and the algorithm end to end."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_dp.algorithms import padpfl as pad
from fedjax_dp.algorithms.padpfl import impact_factors as imp
from fedjax_dp.algorithms.padpfl import nbafl
from fedjax_dp.federated import PopulationData, make_device_evaluator, server
from fedjax_dp.federated.client import ClientHParams, ClientMetrics, make_client_update
from fedjax_dp.federated.round import RoundConfig, RoundHParams, make_round
from fedjax_dp.federated.sampling import FixedSizeSampler
from fedjax_dp.models import create_model
from fedjax_dp.privacy import clipping
from fedjax_dp.validation import FedJaxDpError

N = 6


@pytest.fixture(scope="module")
def env(make_fd):
  fd = make_fd(num_clients=N, min_examples=6, max_examples=12, seed=5)
  model = create_model("mlp", fd.feature_shape, fd.num_classes, hidden=(8,))
  pop = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  return fd, model, pop


# --- client update: weight clipping once at the end, FedProx ---------------------------

def test_final_weight_clip_bounds_the_uploaded_weights_and_spares_empty_clients(env):
  fd, model, _ = env
  params0 = model.init(jax.random.key(0))
  upd = jax.jit(make_client_update(model, optax.sgd(1.0), batch_size=100,
                                   max_examples=fd.max_examples, local_steps=3))
  b = 0.5 * float(clipping.global_norm(params0))
  hp = ClientHParams(learning_rate=0.5, final_param_clip_norm=b)
  x, y = jnp.asarray(fd.x[0]), jnp.asarray(fd.y[0])
  delta, _ = upd(params0, x, y, jnp.int32(fd.counts[0]), jax.random.key(1), hp)
  w = jax.tree_util.tree_map(jnp.add, params0, delta)
  assert float(clipping.global_norm(w)) == pytest.approx(b, rel=1e-5)
  # Unclipped, the trained weights are longer than B: the clip did something.
  d0, _ = upd(params0, x, y, jnp.int32(fd.counts[0]), jax.random.key(1),
              hp._replace(final_param_clip_norm=1e9))
  w0 = jax.tree_util.tree_map(jnp.add, params0, d0)
  assert float(clipping.global_norm(w0)) > 1.5 * b
  # A client without examples uploads the received model unchanged (zero update).
  de, _ = upd(params0, x, y, jnp.int32(0), jax.random.key(1), hp)
  assert all(float(jnp.max(jnp.abs(l))) == 0.0 for l in jax.tree_util.tree_leaves(de))


def test_prox_term_adds_mu_times_distance_to_the_received_model(env):
  fd, model, _ = env
  params0 = model.init(jax.random.key(0))
  n = int(fd.counts[1])
  x, y = jnp.asarray(fd.x[1]), jnp.asarray(fd.y[1])
  eta, mu = 0.3, 2.0
  upd = make_client_update(model, optax.sgd(1.0), batch_size=100,
                           max_examples=fd.max_examples, local_steps=3)
  delta, _ = jax.jit(upd)(params0, x, y, jnp.int32(n), jax.random.key(2),
                          ClientHParams(learning_rate=eta, prox_mu=mu))

  def h(w):  # eq. (30): l_i(w) + (mu/2)||w - w0||^2, full batch
    loss = jnp.mean(model.per_example_loss(model.apply(w, x[:n]), y[:n]))
    sq = sum(jnp.sum((a - b) ** 2) for a, b in zip(jax.tree_util.tree_leaves(w),
                                                   jax.tree_util.tree_leaves(params0)))
    return loss + 0.5 * mu * sq

  w = params0
  for _ in range(3):
    w = jax.tree_util.tree_map(lambda p, g: p - eta * g, w, jax.grad(h)(w))
  expect = jax.tree_util.tree_map(jnp.subtract, w, params0)
  for a, b in zip(jax.tree_util.tree_leaves(delta), jax.tree_util.tree_leaves(expect)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  # mu = 0 differs (the term is really there).
  d0, _ = jax.jit(upd)(params0, x, y, jnp.int32(n), jax.random.key(2),
                       ClientHParams(learning_rate=eta, prox_mu=0.0))
  assert not np.allclose(jax.tree_util.tree_leaves(d0)[0],
                         jax.tree_util.tree_leaves(delta)[0], atol=1e-6)


# --- the round: p as per-round data, client + server noise -----------------------------

def _const_client(params, x, y, count, key, hp):
  """Update (id + 1) on coordinate id (id stored in x[0, 0]); zeros elsewhere."""
  del y, key, hp
  cid = x[0, 0].astype(jnp.int32)
  u = jax.nn.one_hot(cid, params["w"].shape[0]) * (cid + 1.0)
  f = jnp.float32
  return {"w": u}, ClientMetrics(f(0), count.astype(jnp.int32), jnp.int32(1), f(0), f(0),
                                 jnp.int32(0), jnp.int32(0))


def _round(dim, noise, chunk_size=None):
  opt = optax.sgd(1.0)
  fn = jax.jit(make_round(_const_client, FixedSizeSampler.create(N, N), opt, RoundConfig(
      clip_updates=False, noise=noise, weighting="custom", denominator="expected",
      population_weight=1.0, chunk_size=chunk_size)))
  x = np.zeros((N, 2, 1), np.float32)
  x[:, :, 0] = np.arange(N)[:, None]
  pop = PopulationData(jnp.asarray(x), jnp.zeros((N, 2), jnp.int32),
                       jnp.full((N,), 2, jnp.int32))
  return fn, server.init_server_state({"w": jnp.zeros((dim,))}, opt), pop


def test_aggregate_is_the_impact_weighted_sum_and_zero_weights_have_no_effect():
  fn, state, pop = _round(N, "none")
  p = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.0], np.float32)
  hp = RoundHParams(1.0, 0.0, 1.0, client_weights=p)
  new, m = fn(state, pop, hp, jax.random.key(0))
  np.testing.assert_allclose(new.params["w"], p * (np.arange(N) + 1.0), rtol=1e-6)
  # Another p, same compiled program: p is data.
  p2 = np.full(N, 1.0 / N, np.float32)
  new2, _ = fn(state, pop, hp._replace(client_weights=p2), jax.random.key(0))
  np.testing.assert_allclose(new2.params["w"], (np.arange(N) + 1.0) / N, rtol=1e-6)
  assert fn._cache_size() == 1


def test_client_plus_server_noise_has_total_stddev_sigma_a():
  """sum_i p_i n_i + n_s with n_i ~ N(0, sigma_C^2), n_s ~ N(0, sigma_S^2) has SD
  sigma_A = sqrt(sigma_C^2 sum p^2 + sigma_S^2) (eqs. 12-14), through the real round."""
  dim = 40_000
  fn, state, pop = _round(dim, "local_and_central")
  p = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.0], np.float32)
  lv = nbafl.noise_levels(p, 1.0, 30, 1, 150, 5.0, 0.01)
  hp = RoundHParams(1.0, lv.sigma_c, 1.0, client_weights=p, server_noise_stddev=lv.sigma_s,
                    sensitivity=2.0)
  new, m = fn(state, pop, hp, jax.random.key(3))
  noise_part = np.asarray(new.params["w"])[N:]  # coordinates no client updates
  assert np.std(noise_part) == pytest.approx(lv.sigma_a, rel=0.02)
  assert float(m.noise_stddev) == pytest.approx(lv.sigma_c, rel=1e-6)
  assert float(m.server_noise_stddev) == pytest.approx(lv.sigma_s, rel=1e-6)
  # The round reports sigma_C over the sensitivity it was told the uploads have.
  assert float(m.noise_multiplier) == pytest.approx(lv.sigma_c / 2.0, rel=1e-6)
  assert float(m.sensitivity) == 2.0
  # Without the server top-up only sigma_AC remains (a test that fails if n_s is lost).
  new0, _ = fn(state, pop, hp._replace(server_noise_stddev=0.0), jax.random.key(3))
  assert np.std(np.asarray(new0.params["w"])[N:]) == pytest.approx(lv.sigma_ac, rel=0.02)


# --- the algorithm ----------------------------------------------------------------------

def _alg(env, **kw):
  fd, model, _ = env
  base = dict(impact_factors=imp.uniform(N), epsilon=5.0, delta=0.01, rounds=4,
              clip_bound=5.0, learning_rate=0.2, local_steps=3, prox_mu=0.01)
  return pad.padpfl(model, fd, **{**base, **kw})


def test_config_carries_the_papers_noise_values_per_round(env):
  fd, _, _ = env
  part = np.array([0, 0, 1, 1, 2, 2])
  sched = imp.switch_schedule(part, "0-1-2", "2-1-0", switch_after=2, rounds=4)
  alg = _alg(env, impact_factors=sched, exposures=2)
  lv = nbafl.noise_levels_per_round(sched, 5.0, 2, int(fd.counts.min()), 5.0, 0.01)
  for k in ("sigma_c", "sigma_ac", "sigma_a", "sigma_s"):
    np.testing.assert_allclose(alg.config[k], getattr(lv, k), rtol=1e-12)
  hp = pad.schedule_hparams(alg.config)
  np.testing.assert_allclose(hp.client_weights, sched, rtol=1e-6)
  np.testing.assert_allclose(hp.noise_stddev, lv.sigma_c, rtol=1e-6)
  # The paper's z_up = R c / epsilon (eq. 8 over its sensitivity 2B/m_min, eq. 7) is
  # conditional; the guarantee's sensitivity is 2B, what the weight clipping enforces.
  cfg = alg.config
  assert cfg["sensitivity_paper"] == pytest.approx(2 * 5.0 / int(fd.counts.min()))
  assert cfg["sensitivity"] == 10.0 and np.all(hp.sensitivity == 10.0)
  np.testing.assert_allclose(np.asarray(hp.noise_stddev) / cfg["sensitivity_paper"],
                             2 * nbafl.gaussian_constant(0.01) / 5.0, rtol=1e-6)
  np.testing.assert_allclose(hp.server_noise_stddev, lv.sigma_s, rtol=1e-6)
  assert hp.client.final_param_clip_norm[0] == 5.0
  # Non-private mode: no clipping compiled, no noise.
  npriv = pad.schedule_hparams(_alg(env, private=False).config)
  assert npriv.client.final_param_clip_norm is None
  assert np.all(npriv.server_noise_stddev == 0) and np.all(npriv.noise_stddev == 0)


def test_non_private_learns_and_private_metrics_report_the_noise(env):
  fd, model, pop = env
  ev = make_device_evaluator(model, fd.test_x, fd.test_y)
  alg = _alg(env, private=False, rounds=6)
  key = jax.random.key(0)
  loss0 = float(jax.jit(ev.fn)(alg.init(jax.random.fold_in(key, 1 << 20)).params,
                               ev.data)[0])
  _, recs = pad.train_phases(alg, [(1, pop)], key, device_evaluator=ev, eval_every=6,
                      block_size=6)
  assert recs[-1]["test_loss"] < loss0 - 0.05
  palg = _alg(env, rounds=3)
  _, precs = pad.train_phases(palg, [(1, pop)], key, block_size=3)
  np.testing.assert_allclose([r["noise_stddev"] for r in precs], palg.config["sigma_c"],
                             rtol=1e-5)
  np.testing.assert_allclose([r["server_noise_stddev"] for r in precs],
                             palg.config["sigma_s"], rtol=1e-5)


def test_phases_switch_data_and_cohort_padding_does_not_change_results(env):
  fd, model, pop = env
  # Phase 2's data differ: the run differs from the single-phase one after round 2 only.
  pop2 = pop._replace(x=pop.x[::-1])
  alg = _alg(env, rounds=3, private=False)
  key = jax.random.key(1)
  s1, r1 = pad.train_phases(alg, [(1, pop)], key, block_size=1)
  s2, r2 = pad.train_phases(alg, [(1, pop), (3, pop2)], key, block_size=1)
  assert r1[1]["train_loss"] == r2[1]["train_loss"]
  assert r1[2]["train_loss"] != r2[2]["train_loss"]
  # chunk_size 4 pads the 6-client cohort to 8 slots: same model.
  padded = _alg(env, rounds=3, private=False, chunk_size=4)
  s3, _ = pad.train_phases(padded, [(1, pop)], key, block_size=3)
  for a, b in zip(jax.tree_util.tree_leaves(s1.params), jax.tree_util.tree_leaves(s3.params)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_bad_arguments_are_named(env):
  with pytest.raises(FedJaxDpError, match="exposures"):
    _alg(env, exposures=5)
  with pytest.raises(FedJaxDpError, match="impact_factors"):
    _alg(env, impact_factors=np.full((3, N), 1.0 / N))
  with pytest.raises(FedJaxDpError, match="impact_factors"):
    _alg(env, impact_factors=np.full((4, N), 0.2))
  with pytest.raises(FedJaxDpError, match="clip_bound"):
    _alg(env, clip_bound=0.0)
  with pytest.raises(FedJaxDpError, match="prox_mu"):
    _alg(env, prox_mu=-1.0)
  with pytest.raises(FedJaxDpError, match="phases"):
    pad.train_phases(_alg(env), [(2, env[2])], jax.random.key(0))


def test_accountant_epsilons_beside_the_papers(env):
  alg = _alg(env, rounds=30, epsilon=20.0)
  e = pad.nominal_and_accountant_epsilons(alg.config)
  assert e["epsilon_paper"] == 20.0
  # All T uploads seen cost far more than R = 1 (the paper's assumption) ...
  assert (e["epsilon_rdp_uplink_all_uploads_conditional"]
          > 5 * e["epsilon_rdp_uplink_conditional"])
  # ... and the downlink (z = T c / epsilon) is below the nominal epsilon (note 3.9).
  assert e["epsilon_rdp_downlink_conditional"] < 20.0
  assert pad.nominal_and_accountant_epsilons(_alg(env, private=False).config)[
      "epsilon_rdp_downlink_conditional"] == float("inf")


def test_a_run_continued_from_its_state_equals_the_whole_run(env):
  """What --resume does: rounds 3-4 from the state after round 2 (scenario-4-like switch
  of p at round 3) give the model of the uninterrupted run."""
  _, _, pop = env
  part = np.array([0, 0, 1, 1, 2, 2])
  alg = _alg(env, impact_factors=imp.switch_schedule(part, "0-1-2", "2-1-0", 2, 4))
  key = jax.random.key(4)
  whole, _ = pad.train_phases(alg, [(1, pop)], key, block_size=2)
  half, _ = pad.train_phases(alg, [(1, pop)], key, block_size=2, stop_round=2)
  rest, recs = pad.train_phases(alg, [(1, pop)], key, block_size=2, state=half, start_round=2)
  assert [r["round"] for r in recs] == [3, 4]  # 1-based
  for a, b in zip(jax.tree_util.tree_leaves(whole.params), jax.tree_util.tree_leaves(rest.params)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
