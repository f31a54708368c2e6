"""DP-FedProx hosts canary clients (`fedjax_dp.algorithms.canaries`): its proximal
client stage is wrapped like FedAvg's; the canaries' scores move with the noise."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import data as data_lib
from fedjax_dp import models
from fedjax_dp.algorithms.dp_fedprox.algorithm import dp_fedprox
from fedjax_dp.auditing.one_run import CanaryPlan
from fedjax_dp.federated import PopulationData, driver


def test_dp_fedprox_hosts_canaries():
  fd = data_lib.make_synthetic(num_clients=10, examples_per_client=10, feature_shape=(32,),
                               num_classes=3, seed=0, num_test=20)
  model = models.create_model("mlp", fd.feature_shape, fd.num_classes, hidden=(64,))
  pop = PopulationData(*map(jnp.asarray, (fd.x, fd.y, fd.counts)))
  plan = CanaryPlan(40, fd.num_clients, seed=2)
  alg = dp_fedprox(model, fd, prox_mu=0.1, clip_norm=1.0, noise_multiplier=1.0,
                   sampling_rate=0.5, batch_size=5, client_learning_rate=0.01,
                   canaries=plan)
  assert alg.name == "dp_fedprox"
  assert alg.config["population_size"] == fd.num_clients + plan.inserted
  means = []
  for z in (0.0, 1.0):
    s0 = alg.init(jax.random.key(0))
    s, records = driver.run_rounds(alg.round_fn, s0, pop, driver.constant_schedule(
        alg.hparams._replace(noise_multiplier=z), 3), jax.random.key(1), rounds=3)
    rep = plan.report(s0.params, s.params, 1e-3)
    means.append(rep["canary_audit"]["inserted_cosine_mean"])
    assert all(r["nonfinite_updates"] == 0 for r in records)
  assert means[0] > means[1] > -1.0 and means[0] > 0.05, means
