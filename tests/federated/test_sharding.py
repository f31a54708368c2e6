"""The cohort sharded over 4 CPU devices gives the single-device round.

JAX fixes its device count at start-up, so the check runs in a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (this file is its script).
"""

import json
import os
import subprocess
import sys

import pytest

from fedjax_dp.federated.sharding import client_mesh, mesh_size
from fedjax_dp.validation import FedJaxDpError


def _check():
  """Runs in the 4-device subprocess; prints a JSON report."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import optax

  from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
  from fedjax_dp.data.sources.synthetic import make_synthetic
  from fedjax_dp.federated import server
  from fedjax_dp.federated.client import make_client_update
  from fedjax_dp.federated.driver import constant_schedule, run_rounds
  from fedjax_dp.federated.population import PopulationData
  from fedjax_dp.federated.round import RoundConfig, RoundHParams, make_round
  from fedjax_dp.federated.sampling import PoissonSampler
  from fedjax_dp.models import create_model

  report = {"devices": jax.device_count()}
  fd = make_synthetic(num_clients=29, examples_per_client=(4, 10), feature_shape=(8,),
                      num_classes=3, seed=0)
  model = create_model("mlp", fd.feature_shape, fd.num_classes, hidden=(16,))
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))

  def diff(a, b):
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))

  # DP-FedAvg (central noise), 3 rounds through the driver, on 1, 2 and 4 devices.
  kw = dict(clip_norm=0.05, noise_multiplier=0.8, sampling_rate=0.4, batch_size=4,
            chunk_size=3)
  runs = {}
  for n in (1, 2, 4):
    mesh = None if n == 1 else client_mesh(jax.devices()[:n])
    alg = dp_fedavg(model, fd, mesh=mesh, **kw)
    state, recs = run_rounds(alg.round_fn, alg.init(jax.random.key(0)), data,
                             constant_schedule(alg.hparams, 3), jax.random.key(1), rounds=3,
                             block_size=3)
    runs[n] = (state, recs)
  for n in (2, 4):
    report[f"central_param_diff_{n}"] = diff(runs[1][0].params, runs[n][0].params)
    report[f"central_metric_diff_{n}"] = max(
        abs(a[k] - b[k]) for a, b in zip(runs[1][1], runs[n][1])
        for k in ("train_loss", "clip_fraction", "mean_update_norm", "max_update_norm",
                  "num_clients", "nonfinite_updates"))
  report["num_clients"] = [r["num_clients"] for r in runs[4][1]]

  # Local noise with per-client multipliers and custom weights.
  n_cl = fd.num_clients
  weights = jnp.asarray(np.linspace(0.2, 1.0, n_cl), jnp.float32)
  z = jnp.asarray(np.linspace(0.5, 2.0, n_cl), jnp.float32)
  opt = optax.sgd(1.0)
  client = make_client_update(model, optax.sgd(0.1), batch_size=4,
                              max_examples=fd.max_examples, local_epochs=1)
  cfg = RoundConfig(noise="local", weighting="custom",
                    population_weight=float(np.sum(weights)), chunk_size=2)
  outs = []
  for mesh in (None, client_mesh()):
    round_fn = jax.jit(make_round(client, PoissonSampler.create(n_cl, 0.5), opt, cfg,
                                  mesh=mesh))
    state = server.init_server_state(model.init(jax.random.key(0)), opt)
    outs.append(round_fn(state, data._replace(weights=weights), RoundHParams(0.1, z, 0.5),
                         jax.random.key(3)))
  report["local_param_diff_4"] = diff(outs[0][0].params, outs[1][0].params)
  report["local_loss_diff_4"] = abs(float(outs[0][1].train_loss - outs[1][1].train_loss))

  # Distributed DP: the uint32 secure sum is exact, so 1 and 4 devices agree exactly on
  # the decoded aggregate (the same per-client keys and integers, any summation order).
  from fedjax_dp.algorithms.dp_fedavg.distributed import DistributedDp
  secure = []
  for mesh in (None, client_mesh()):
    alg = dp_fedavg(model, fd, mesh=mesh, noise_placement="distributed",
                    distributed=DistributedDp(bits=14, dropout_rate=0.2), **kw)
    secure.append(jax.jit(alg.round_fn)(alg.init(jax.random.key(0)), data, alg.hparams,
                                        jax.random.key(5)))
  report["secure_param_diff_4"] = diff(secure[0][0].params, secure[1][0].params)
  report["secure_survivors"] = [float(s[1].extras["secagg_survivors"]) for s in secure]

  # One model-sized cross-device reduction per round (plus one scalar max).
  alg = dp_fedavg(model, fd, mesh=client_mesh(), **kw)
  text = jax.jit(alg.round_fn).lower(alg.init(jax.random.key(0)), data, alg.hparams,
                                     jax.random.key(1)).as_text()
  report["all_reduce_ops"] = text.count("all_reduce")
  print(json.dumps(report))


@pytest.mark.slow
def test_sharded_rounds_equal_single_device():
  from cache_env import with_compilation_cache  # (not at the top: this file is also the script)
  env = with_compilation_cache(dict(
      os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu"))
  out = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  rep = json.loads(out.stdout.strip().splitlines()[-1])
  assert rep["devices"] == 4
  for n in (2, 4):
    assert rep[f"central_param_diff_{n}"] < 1e-5, rep
    assert rep[f"central_metric_diff_{n}"] < 1e-4, rep
  assert all(k > 0 for k in rep["num_clients"])
  assert rep["local_param_diff_4"] < 1e-5, rep
  assert rep["local_loss_diff_4"] < 1e-5, rep
  assert rep["all_reduce_ops"] == 2, rep
  assert rep["secure_param_diff_4"] < 1e-6, rep
  assert rep["secure_survivors"][0] == rep["secure_survivors"][1] > 0, rep


def test_mesh_helpers():
  import jax
  mesh = client_mesh()
  assert mesh_size(mesh) == jax.device_count() and mesh_size(None) == 1
  with pytest.raises(FedJaxDpError, match="clients"):
    mesh_size(jax.sharding.Mesh(jax.devices(), ("data",)))
  with pytest.raises(FedJaxDpError, match="devices"):
    client_mesh([])


if __name__ == "__main__":
  _check()


def test_split_host_cpu_adds_the_flag_once():
  from fedjax_dp.federated.sharding import split_host_cpu
  env = split_host_cpu(3, {"XLA_FLAGS": "--xla_foo=1"})
  assert env["XLA_FLAGS"] == "--xla_foo=1 --xla_force_host_platform_device_count=3"
  assert split_host_cpu(5, dict(env))["XLA_FLAGS"] == env["XLA_FLAGS"]  # user's choice kept
  assert "XLA_FLAGS" not in split_host_cpu(1, {})  # one device: nothing to split
