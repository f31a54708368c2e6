"""DP-SCAFFOLD (`fedjax_dp.algorithms.dp_scaffold`): SCAFFOLD's iterates against an
independent loop over clients, per-client state kept by the engine, joint clipping, the
privacy event, the sharded round and the argument checks."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
from fedjax_dp.algorithms.dp_scaffold import dp_scaffold
from fedjax_dp.federated import PopulationData, constant_schedule, run_rounds
from fedjax_dp.models import create_model
from fedjax_dp.validation import FedJaxDpError

LR, STEPS, ROUNDS = 0.2, 3, 3


@pytest.fixture(scope="module")
def env(synthetic_fd):
  fd = synthetic_fd
  model = create_model("linear", fd.feature_shape, fd.num_classes)
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  return fd, model, data


def _reference(model, fd, params, rounds):
  """SCAFFOLD (Karimireddy et al. 2020, Alg. 1, option II) written as a plain loop:
  every client every round, full-batch gradient steps, eta_g = 1, no clipping or noise.
  """
  flat0, unravel = jax.flatten_util.ravel_pytree(params)
  x = np.asarray(flat0, np.float64)
  n = fd.num_clients
  c = np.zeros_like(x)
  c_i = np.zeros((n, x.size))

  def grad(w, i):
    k = int(fd.counts[i])
    xs, ys = jnp.asarray(fd.x[i, :k]), jnp.asarray(fd.y[i, :k])
    loss = lambda v: jnp.mean(model.per_example_loss(model.apply(unravel(v), xs), ys))
    return np.asarray(jax.grad(loss)(jnp.asarray(w, jnp.float32)), np.float64)

  for _ in range(rounds):
    dys, dcs = [], []
    for i in range(n):
      y = x.copy()
      for _ in range(STEPS):
        y = y - LR * (grad(y, i) - c_i[i] + c)
      c_new = c_i[i] - c + (x - y) / (STEPS * LR)
      dys.append(y - x)
      dcs.append(c_new - c_i[i])
      c_i[i] = c_new
    x = x + np.mean(dys, axis=0)
    c = c + np.sum(dcs, axis=0) / n
  return x, c, c_i


def test_matches_an_independent_scaffold_loop(env):
  fd, model, data = env
  alg = dp_scaffold(model, fd, clip_norm=1e6, noise_multiplier=0.0, sampling_rate=1.0,
                    local_steps=STEPS, batch_size=int(fd.max_examples),
                    client_learning_rate=LR)
  state0 = alg.init(jax.random.key(0))
  state, _ = run_rounds(alg.round_fn, state0, data, constant_schedule(alg.hparams, ROUNDS),
                        jax.random.key(1), rounds=ROUNDS, block_size=ROUNDS)
  x, c, c_i = _reference(model, fd, state0.params, ROUNDS)
  flat = lambda t: np.asarray(jax.flatten_util.ravel_pytree(t)[0])
  np.testing.assert_allclose(flat(state.params), x, atol=2e-5)
  np.testing.assert_allclose(flat(state.opt_state["control"]), c, atol=2e-5)
  ours = np.stack([flat(jax.tree_util.tree_map(lambda a: a[i], state.clients))
                   for i in range(fd.num_clients)])
  np.testing.assert_allclose(ours, c_i, atol=2e-5)
  # Control variates moved: the comparison is not between zeros.
  assert np.linalg.norm(c) > 1e-3 and np.linalg.norm(c_i) > 1e-2


def test_only_the_cohort_updates_its_state(env):
  fd, model, data = env
  alg = dp_scaffold(model, fd, clip_norm=1.0, noise_multiplier=0.5, clients_per_round=6,
                    local_steps=2, batch_size=5, client_learning_rate=0.1)
  state = alg.init(jax.random.key(0))
  new, metrics = jax.jit(alg.round_fn)(state, data, alg.hparams, jax.random.key(4))
  moved = np.asarray(jax.tree_util.tree_reduce(
      jnp.logical_or, jax.tree_util.tree_map(
          lambda a, b: jnp.any(a != b, axis=tuple(range(1, a.ndim))), state.clients,
          new.clients)))
  assert 0 < moved.sum() == int(metrics.num_clients) < fd.num_clients


def test_joint_clipping_and_privacy_event_are_dp_fedavgs(env):
  fd, model, data = env
  kw = dict(clip_norm=0.05, noise_multiplier=0.7, clients_per_round=8, local_steps=2,
            batch_size=5, client_learning_rate=0.3)
  sc, fa = dp_scaffold(model, fd, **kw), dp_fedavg(model, fd, **kw)
  assert sc.privacy.round_event(0.7) == fa.privacy.round_event(0.7)
  _, recs = run_rounds(sc.round_fn, sc.init(jax.random.key(0)), data,
                       constant_schedule(sc.hparams, 3), jax.random.key(1), rounds=3)
  # The joint norm of (model delta, control delta) exceeds the small clip norm: every
  # client clipped its own upload to C (the engine's clip then leaves it unchanged).
  assert all(r["max_update_norm"] <= 0.05 * (1 + 1e-5) for r in recs)
  assert all(r["mean_update_norm"] == pytest.approx(0.05, rel=1e-4) for r in recs)
  assert all(r["noise_multiplier"] == pytest.approx(0.7) for r in recs)
  assert all(r["sensitivity"] == pytest.approx(0.05) for r in recs)


def test_refuses_what_option_ii_cannot_do(env):
  fd, model, _ = env
  with pytest.raises(FedJaxDpError, match="client_optimizer"):
    dp_scaffold(model, fd, client_optimizer="adam")
  with pytest.raises(FedJaxDpError, match="weighting"):
    dp_scaffold(model, fd, weighting="data_size", data_size_cap=10.0)


@pytest.mark.slow
def test_resumed_run_restores_the_client_control_variates(tmp_path):
  """A 2-round run extended to 4 with --resume ends where the straight 4-round run ends,
  which needs the checkpoint's c_i of every client (`ServerState.clients`) and the
  server's c: with them reset, rounds 3-4 would differ."""
  from fedjax_dp.algorithms import registry
  from fedjax_dp.runs import RunConfig, run
  opts = dict(registry.get("dp_scaffold").tiny_run_options(), algorithm="dp_scaffold")
  straight = run(RunConfig.from_dict(dict(opts, rounds=4, out=str(tmp_path / "a")))
                 .validate(), progress=False)
  run(RunConfig.from_dict(dict(opts, rounds=2, out=str(tmp_path / "b"))).validate(),
      progress=False)
  resumed = run(RunConfig(resume=str(tmp_path / "b"), resume_rounds=4), progress=False)
  assert [r["round"] for r in resumed.records][-1] == 4  # 1-based
  for a, b in zip(jax.tree_util.tree_leaves(straight.state),
                  jax.tree_util.tree_leaves(resumed.state)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert np.abs(np.asarray(jax.tree_util.tree_leaves(straight.state.clients)[0])).max() > 0


def _sharded():
  """Runs with 2 CPU devices: the same rounds with and without the mesh."""
  from fedjax_dp.data.sources.synthetic import make_synthetic
  from fedjax_dp.federated.sharding import client_mesh
  fd = make_synthetic(num_clients=21, examples_per_client=(4, 10), feature_shape=(8,),
                      num_classes=3, seed=0)
  model = create_model("mlp", fd.feature_shape, fd.num_classes, hidden=(16,))
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  out = []
  for mesh in (None, client_mesh()):
    alg = dp_scaffold(model, fd, clip_norm=0.5, noise_multiplier=0.3, sampling_rate=0.4,
                      batch_size=4, chunk_size=3, mesh=mesh)
    state, recs = run_rounds(alg.round_fn, alg.init(jax.random.key(0)), data,
                             constant_schedule(alg.hparams, 3), jax.random.key(1),
                             rounds=3, block_size=3)
    out.append((state, recs))
  diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
             for a, b in zip(jax.tree_util.tree_leaves(out[0][0]),
                             jax.tree_util.tree_leaves(out[1][0])))
  print(json.dumps({"devices": jax.device_count(), "state_diff": diff,
                    "clients": [r["num_clients"] for r in out[1][1]]}))


@pytest.mark.slow
def test_sharded_round_equals_single_device():
  from cache_env import with_compilation_cache  # (not at the top: this file is also the script)
  env = with_compilation_cache(dict(
      os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"))
  out = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  rep = json.loads(out.stdout.strip().splitlines()[-1])
  assert rep["devices"] == 2 and all(k > 0 for k in rep["clients"])
  assert rep["state_diff"] < 1e-5, rep


if __name__ == "__main__":
  _sharded()
