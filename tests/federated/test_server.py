"""Tests of `fedjax_dp.federated.server`."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_dp.federated import server
from fedjax_dp.validation import FedJaxDpError


def _params():
  return {"w": jnp.array([[0.1, -0.2], [0.3, 0.4]]), "b": jnp.array([1.5, -2.5])}


def _delta():
  return {"w": jnp.array([[0.01, 0.02], [-0.03, 0.5]]), "b": jnp.array([-0.25, 0.125])}


def test_fedavg_sgd_one_adds_delta_exactly():
  opt = server.server_optimizer("fedavg", 1.0)
  state = server.init_server_state(_params(), opt)
  assert int(state.round) == 0
  new = jax.jit(server.server_update, static_argnums=2)(state, _delta(), opt)
  for k in ("w", "b"):
    np.testing.assert_array_equal(np.asarray(new.params[k]),
                                  np.asarray(_params()[k] + _delta()[k]))
  assert int(new.round) == 1
  assert new.round.dtype == jnp.int32


def test_server_learning_rate_scales_delta():
  opt = server.server_optimizer("fedavg", 0.5)
  new = server.server_update(server.init_server_state(_params(), opt), _delta(), opt)
  np.testing.assert_allclose(np.asarray(new.params["w"]),
                             np.asarray(_params()["w"] + 0.5 * _delta()["w"]), rtol=1e-6)


def test_fedavgm_momentum_accumulates():
  opt = server.server_optimizer("fedavgm", 1.0, momentum=0.9)
  s0 = server.init_server_state(_params(), opt)
  s1 = server.server_update(s0, _delta(), opt)
  s2 = server.server_update(s1, _delta(), opt)
  step1 = np.asarray(s1.params["b"] - s0.params["b"])
  step2 = np.asarray(s2.params["b"] - s1.params["b"])
  np.testing.assert_allclose(step1, np.asarray(_delta()["b"]), rtol=1e-6)
  np.testing.assert_allclose(step2, 1.9 * np.asarray(_delta()["b"]), rtol=1e-6)


@pytest.mark.parametrize("name", ["fedadam", "fedyogi"])
def test_adaptive_server_changes_state(name):
  lr = 0.01
  opt = server.server_optimizer(name, lr, tau=1e-6)
  s0 = server.init_server_state(_params(), opt)
  s1 = server.server_update(s0, _delta(), opt)
  leaves0 = jax.tree_util.tree_leaves(s0.opt_state)
  leaves1 = jax.tree_util.tree_leaves(s1.opt_state)
  assert any(not np.array_equal(np.asarray(a), np.asarray(b))
             for a, b in zip(leaves0, leaves1))
  # The first adaptive step moves every coordinate in the direction of the delta, by
  # at most ~lr (exactly ~lr for Adam, whose first step is lr * sign).
  step = np.asarray(s1.params["w"] - s0.params["w"])
  sign = np.sign(np.asarray(_delta()["w"]))
  np.testing.assert_array_equal(np.sign(step), sign)
  assert np.all(np.abs(step) <= lr * (1 + 1e-3))
  if name == "fedadam":
    np.testing.assert_allclose(step, lr * sign, rtol=1e-3)
  assert int(s1.round) == 1


def test_server_optimizer_errors():
  with pytest.raises(FedJaxDpError, match="server_optimizer"):
    server.server_optimizer("fedprox")
  with pytest.raises(FedJaxDpError, match="server_learning_rate"):
    server.server_optimizer("fedavg", 0.0)
  with pytest.raises(FedJaxDpError, match="server_learning_rate"):
    server.server_optimizer("fedadam", float("nan"))
  assert isinstance(server.server_optimizer("fedadam"), optax.GradientTransformation)
