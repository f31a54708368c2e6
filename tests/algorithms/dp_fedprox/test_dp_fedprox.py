"""DP-FedProx (`fedjax_dp.algorithms.dp_fedprox`): mu = 0 is DP-FedAvg exactly, the
proximal step against a hand computation, mu as a swept hyper-parameter, the privacy
event, and the argument checks."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
from fedjax_dp.algorithms.dp_fedprox import dp_fedprox, prox_correction
from fedjax_dp.federated import PopulationData, constant_schedule, run_rounds
from fedjax_dp.federated.client import ClientHParams, make_client_update
from fedjax_dp.models import create_model
from fedjax_dp.validation import FedJaxDpError

KW = dict(clip_norm=1.0, noise_multiplier=0.3, clients_per_round=8, local_steps=3,
          batch_size=5, client_learning_rate=0.3)


@pytest.fixture(scope="module")
def env(synthetic_fd):
  fd = synthetic_fd
  model = create_model("linear", fd.feature_shape, fd.num_classes)
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  return fd, model, data


def _run(alg, data, rounds=4):
  return run_rounds(alg.round_fn, alg.init(jax.random.key(0)), data,
                    constant_schedule(alg.hparams, rounds), jax.random.key(1),
                    rounds=rounds, block_size=rounds)


def test_mu_zero_is_dp_fedavg_and_mu_changes_the_iterates(env):
  fd, model, data = env
  s_avg, r_avg = _run(dp_fedavg(model, fd, **KW), data)
  s_0, r_0 = _run(dp_fedprox(model, fd, prox_mu=0.0, **KW), data)
  s_1, r_1 = _run(dp_fedprox(model, fd, prox_mu=2.0, **KW), data)
  for a, b in zip(jax.tree_util.tree_leaves(s_avg.params), jax.tree_util.tree_leaves(s_0.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert [r["train_loss"] for r in r_avg] == [r["train_loss"] for r in r_0]
  # The proximal term pulls local models toward w_t: smaller updates.
  assert r_1[-1]["mean_update_norm"] < r_0[-1]["mean_update_norm"]


def test_two_local_steps_by_hand(env):
  """w1 = w0 - lr g(w0); w2 = w1 - lr (g(w1) + mu (w1 - w0)), full batch."""
  fd, model, _ = env
  mu, lr = 0.7, 0.4
  k = int(fd.counts[0])
  x, y = jnp.asarray(fd.x[0]), jnp.asarray(fd.y[0])
  train = make_client_update(model, optax.sgd(1.0), batch_size=int(fd.max_examples),
                             max_examples=int(fd.max_examples), local_steps=2,
                             grad_correction=prox_correction)
  w0 = model.init(jax.random.key(3))
  delta, _ = train(w0, x, y, jnp.int32(k), jax.random.key(0),
                   ClientHParams(learning_rate=lr), jnp.float32(mu))
  loss = lambda w: jnp.mean(model.per_example_loss(model.apply(w, x[:k]), y[:k]))
  sub = lambda a, b: jax.tree_util.tree_map(jnp.subtract, a, b)
  w1 = jax.tree_util.tree_map(lambda w, g: w - lr * g, w0, jax.grad(loss)(w0))
  w2 = jax.tree_util.tree_map(lambda w, g, a: w - lr * (g + mu * (w - a)), w1,
                              jax.grad(loss)(w1), w0)
  for a, b in zip(jax.tree_util.tree_leaves(delta), jax.tree_util.tree_leaves(sub(w2, w0))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
  assert float(jnp.abs(jax.flatten_util.ravel_pytree(sub(w1, w0))[0]).max()) > 1e-3


def test_mu_is_a_hyper_parameter_not_a_recompile(env):
  fd, model, data = env
  alg = dp_fedprox(model, fd, prox_mu=0.1, **KW)
  fn = jax.jit(alg.round_fn)
  state = alg.init(jax.random.key(0))
  a = fn(state, data, alg.hparams, jax.random.key(2))[1].mean_update_norm
  hp = alg.hparams._replace(algorithm={"prox_mu": np.float32(5.0)})
  b = fn(state, data, hp, jax.random.key(2))[1].mean_update_norm
  assert fn._cache_size() == 1 and float(b) < float(a)


def test_privacy_is_dp_fedavgs_and_bad_mu_is_refused(env):
  fd, model, _ = env
  prox, avg = dp_fedprox(model, fd, prox_mu=0.5, **KW), dp_fedavg(model, fd, **KW)
  assert prox.privacy.round_event(0.3) == avg.privacy.round_event(0.3)
  assert prox.name == "dp_fedprox" and prox.config["prox_mu"] == 0.5
  with pytest.raises(FedJaxDpError, match="prox_mu"):
    dp_fedprox(model, fd, prox_mu=-1.0)
  with pytest.raises(FedJaxDpError, match="fedsgd"):
    dp_fedprox(model, fd, fedsgd=True, clients_per_round=8)
