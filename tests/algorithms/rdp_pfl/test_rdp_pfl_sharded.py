"""RDP-PFL's own round runs its clients through the engine's client loop
(`fedjax_dp.federated.engine.sum_over_cohort`): on a 2-device mesh it gives the
single-device round (float summation order aside).

JAX fixes its device count at start-up, so the check runs in a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` (this file is its script)."""

import json
import os
import subprocess
import sys

import pytest


def _check():
  import jax
  import jax.numpy as jnp
  import numpy as np

  from fedjax_dp.algorithms.rdp_pfl.algorithm import rdp_pfl
  from fedjax_dp.data.sources.synthetic import make_synthetic
  from fedjax_dp.federated import PopulationData, constant_schedule, run_rounds
  from fedjax_dp.federated.sharding import client_mesh
  from fedjax_dp.models import create_model

  fd = make_synthetic(num_clients=9, examples_per_client=(6, 12), feature_shape=(8,),
                      num_classes=3, seed=0)
  model = create_model("linear", fd.feature_shape, fd.num_classes)
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  out = []
  for mesh in (None, client_mesh()):
    alg = rdp_pfl(model, fd, noise_multiplier=0.5, clip_norm=5.0, inner_learning_rate=0.05,
                  outer_learning_rate=0.3, query_sampling_rate=0.5,
                  support_sampling_rate=0.5, chunk_size=2, mesh=mesh)
    state, recs = run_rounds(alg.round_fn, alg.init(jax.random.key(0)), data,
                             constant_schedule(alg.hparams, 2), jax.random.key(1),
                             rounds=2, block_size=2)
    out.append((state, recs))
  diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
             for a, b in zip(jax.tree_util.tree_leaves(out[0][0].params),
                             jax.tree_util.tree_leaves(out[1][0].params)))
  keys = ("train_loss", "mean_update_norm", "max_update_norm", "example_clip_fraction")
  mdiff = max(abs(a[k] - b[k]) for a, b in zip(out[0][1], out[1][1]) for k in keys)
  moved = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
              for a, b in zip(jax.tree_util.tree_leaves(out[0][0].params),
                              jax.tree_util.tree_leaves(alg.init(jax.random.key(0)).params)))
  print(json.dumps({"devices": jax.device_count(), "param_diff": diff, "metric_diff": mdiff,
                    "moved": moved}))


@pytest.mark.slow
def test_sharded_round_equals_single_device():
  from cache_env import with_compilation_cache  # (not at the top: this file is also the script)
  env = with_compilation_cache(dict(
      os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"))
  out = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  rep = json.loads(out.stdout.strip().splitlines()[-1])
  assert rep["devices"] == 2 and rep["moved"] > 1e-3, rep
  assert rep["param_diff"] < 1e-5 and rep["metric_diff"] < 1e-4, rep


if __name__ == "__main__":
  _check()
