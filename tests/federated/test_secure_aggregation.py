"""The engine's distributed-DP stage: the secure sum decodes the clipped sum, overflow and
dropouts are measured and accounted, the in-round zCDP matches the host formulas, and
the uint32 sum does not depend on chunking."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
from fedjax_dp.algorithms.dp_fedavg.distributed import DistributedDp
from fedjax_dp.federated import secure_aggregation as sa_lib
from fedjax_dp.federated.population import PopulationData
from fedjax_dp.federated.round import RoundConfig, make_round
from fedjax_dp.models import create_model
from fedjax_dp.privacy import distributed_dp
from fedjax_dp.validation import FedJaxDpError


@pytest.fixture(scope="module")
def setting(synthetic_fd):
  model = create_model("mlp", synthetic_fd.feature_shape, synthetic_fd.num_classes,
                       hidden=(8,))
  data = PopulationData(jnp.asarray(synthetic_fd.x), jnp.asarray(synthetic_fd.y),
                        jnp.asarray(synthetic_fd.counts))
  return model, synthetic_fd, data


def _one_round(alg, data, seed=3):
  state = alg.init(jax.random.key(0))
  new, metrics = jax.jit(alg.round_fn)(state, data, alg.hparams, jax.random.key(seed))
  delta = jax.flatten_util.ravel_pytree(jax.tree_util.tree_map(
      lambda a, b: a - b, new.params, state.params))[0]
  return np.asarray(delta, np.float64), metrics


KW = dict(clip_norm=0.5, sampling_rate=0.5, batch_size=4, client_learning_rate=0.3)


def test_secure_sum_decodes_the_clipped_sum(setting):
  """With 24 bits and almost no noise, the decoded secure sum is the central round's
  noiseless sum up to the rounding (same training keys, same cohort)."""
  model, fd, data = setting
  central, _ = _one_round(dp_fedavg(model, fd, noise_multiplier=0.0, **KW), data)
  dist = dp_fedavg(model, fd, noise_multiplier=1e-4, noise_placement="distributed",
                   distributed=DistributedDp(mechanism="skellam", bits=24), **KW)
  got, m = _one_round(dist, data)
  assert float(m.extras["secagg_overflow_rate"]) == 0.0
  err = np.linalg.norm(got - central)
  assert err < 2e-3 * np.linalg.norm(central), (err, np.linalg.norm(central))
  assert 0 < float(m.noise_multiplier) < 1e-3


def test_too_few_bits_overflow_and_are_measured(setting):
  """A granularity far finer than the plan's (the sum cannot fit 8 bits) wraps most
  coordinates: the round reports it and the decoded sum is garbage; the plan's
  granularity reports no overflow."""
  model, fd, data = setting
  alg = dp_fedavg(model, fd, noise_multiplier=1.0, noise_placement="distributed",
                  distributed=DistributedDp(bits=8), **KW)
  _, ok = _one_round(alg, data)
  assert float(ok.extras["secagg_overflow_rate"]) == 0.0
  cfg = alg.round_fn.__wrapped__.config
  fine = dataclasses.replace(cfg.secure_aggregation,
                             granularity=cfg.secure_aggregation.granularity / 50.0)
  from fedjax_dp.federated import server
  from fedjax_dp.federated.client import make_client_update
  import optax
  client = make_client_update(model, optax.sgd(0.3), batch_size=4,
                              max_examples=fd.max_examples, local_epochs=1)
  rnd = make_round(client, alg.round_fn.__wrapped__.sampler,
                   server.server_optimizer("fedavg", 1.0),
                   dataclasses.replace(cfg, secure_aggregation=fine))
  state = alg.init(jax.random.key(0))
  _, bad = jax.jit(rnd)(state, data, alg.hparams, jax.random.key(3))
  assert float(bad.extras["secagg_overflow_rate"]) > 0.3


def test_dropouts_reduce_the_noise_and_raise_the_round_epsilon(setting):
  model, fd, data = setting
  z = 1.0
  full = dp_fedavg(model, fd, noise_multiplier=z, noise_placement="distributed",
                   distributed=DistributedDp(bits=16), **KW)
  drop = dp_fedavg(model, fd, noise_multiplier=z, noise_placement="distributed",
                   distributed=DistributedDp(bits=16, dropout_rate=0.5), **KW)
  _, mf = _one_round(full, data)
  _, md = _one_round(drop, data)
  nf, nd = float(mf.extras["secagg_survivors"]), float(md.extras["secagg_survivors"])
  assert nf == float(mf.num_clients) and 0 < nd < float(md.num_clients)
  for m, n in ((mf, nf), (md, nd)):
    sigma = float(m.extras["secagg_local_stddev"])
    assert float(m.extras["secagg_noise_variance"]) == pytest.approx(n * sigma ** 2,
                                                                    rel=1e-5)
  # The dropout run plans for half the clients: each adds more noise, but the round
  # accounts only the noise of those that survived; with fewer survivors than planned
  # its z_eq falls below the plan's.
  sa = drop.round_fn.__wrapped__.config.secure_aggregation
  if nd < sa.planned_survivors:
    assert float(md.noise_multiplier) < drop.privacy.equivalent(z)
  # The reported z is the host formula's at the survivors (independent code path).
  for alg, m, n in ((full, mf, nf), (drop, md, nd)):
    s = alg.round_fn.__wrapped__.config.secure_aggregation
    rho = distributed_dp.ddgauss_rho(s.l2_bound, s.l1_bound,
                                     float(m.extras["secagg_local_stddev"]), int(n), s.dim)
    assert float(m.extras["secagg_rho"]) == pytest.approx(rho, rel=1e-4)
    assert float(m.noise_multiplier) == pytest.approx((2 * rho) ** -0.5, rel=1e-4)


@pytest.mark.parametrize("mechanism", ["ddgauss", "skellam"])
@pytest.mark.parametrize("sigma,n", [(0.6, 5), (3.0, 40), (200.0, 100)])
def test_in_round_rho_matches_the_host_formulas(mechanism, sigma, n):
  sa = sa_lib.SecureAggregation(mechanism=mechanism, bits=16, dim=1024, granularity=0.01,
                                l2_bound=37.0, l1_bound=600.0, planned_survivors=n,
                                max_survivors=128)
  got = float(sa_lib.round_rho(sa, jnp.float32(sigma), jnp.float32(n)))
  if mechanism == "ddgauss":
    want = distributed_dp.ddgauss_rho(37.0, 600.0, sigma, n, 1024)
  else:
    want = distributed_dp.skellam_rho(37.0, 600.0, n * sigma ** 2)
  assert got == pytest.approx(want, rel=2e-5)
  assert float(sa_lib.round_rho(sa, jnp.float32(sigma), jnp.float32(0))) == np.inf


def test_secure_sum_is_exact_whatever_the_chunking(setting):
  model, fd, data = setting
  kw = dict(KW, noise_multiplier=1.0, noise_placement="distributed",
            distributed=DistributedDp(mechanism="skellam", bits=12, dropout_rate=0.2))
  a, ma = _one_round(dp_fedavg(model, fd, chunk_size=2, **kw), data)
  b, mb = _one_round(dp_fedavg(model, fd, chunk_size=7, **kw), data)
  np.testing.assert_array_equal(a, b)
  assert float(ma.extras["secagg_survivors"]) == float(mb.extras["secagg_survivors"])


def test_round_config_refuses_what_a_secure_sum_cannot_do():
  sa = sa_lib.SecureAggregation(mechanism="ddgauss", bits=16, dim=16, granularity=0.01,
                                l2_bound=10.0, l1_bound=40.0, planned_survivors=4,
                                max_survivors=8)
  with pytest.raises(FedJaxDpError, match="secure_aggregation"):
    RoundConfig(noise="distributed", population_weight=4.0)
  with pytest.raises(FedJaxDpError, match="weighting='uniform'"):
    RoundConfig(noise="distributed", weighting="data_size", data_size_cap=10.0,
                population_weight=4.0, secure_aggregation=sa)
  with pytest.raises(FedJaxDpError, match="power of two"):
    dataclasses.replace(sa, dim=12)
  with pytest.raises(FedJaxDpError, match="bits"):
    dataclasses.replace(sa, bits=1)
  with pytest.raises(FedJaxDpError, match="dropout_rate"):
    dataclasses.replace(sa, dropout_rate=1.0)
