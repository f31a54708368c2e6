"""Non-private FedAvg (McMahan et al., AISTATS 2017, Algorithm 1): the baseline.

  C^t <- m clients without replacement
  Delta_k <- ClientUpdate(k, theta^t)                   (E local epochs of minibatch SGD)
  Delta   <- sum_k n_k Delta_k / sum_k n_k              (data-size weighted mean)
  theta^{t+1} <- ServerOpt(theta^t, Delta)               (sgd(1.0) = FedAvg)

No clipping and no noise: its rounds report noise_multiplier 0, i.e. epsilon = inf.
"""

from __future__ import annotations

from typing import Optional

from fedjax_dp.algorithms import fedavg_family as family
from fedjax_dp.algorithms.base import Algorithm, require_learning_rates
from fedjax_dp.algorithms.interface import (TINY_SYNTHETIC_RUN, FederatedAlgorithm,
                                            SmokeConfig)
from fedjax_dp.algorithms.options import FederatedOptions
from fedjax_dp.federated import server, sharding
from fedjax_dp.federated.client import ClientHParams, make_client_update
from fedjax_dp.federated.round import RoundConfig, RoundHParams, make_round
from fedjax_dp.validation import check_choice

__all__ = ["fedavg", "FedAvg"]


def fedavg(model, data, *, clients_per_round: Optional[int] = None,
           sampling_rate: Optional[float] = None, sampler: str = "fixed_size",
           local_epochs: Optional[int] = 1, local_steps: Optional[int] = None,
           batch_size: int = 32, client_optimizer: str = "sgd",
           client_learning_rate: float = 0.1, server_optimizer: str = "fedavg",
           server_learning_rate: float = 1.0, weighting: str = "data_size",
           k_max: Optional[int] = None, chunk_size: Optional[int] = None,
           mesh=None) -> Algorithm:
  """Non-private FedAvg; arguments as in `fedjax_dp.algorithms.dp_fedavg.dp_fedavg`.

  ``weighting="data_size"`` weighs by raw n_k (the original FedAvg); ``"uniform"``
  averages clients equally. The denominator is the cohort's actual weight sum.
  """
  check_choice("weighting", weighting, ("uniform", "data_size"))
  samp = family.cohort_sampler(data, sampler, sampling_rate, clients_per_round, k_max)
  local_epochs, local_steps = family.local_work(local_epochs, local_steps)
  client = make_client_update(
      model, family.client_optimizer(client_optimizer, client_learning_rate),
      batch_size=batch_size, max_examples=data.max_examples, local_epochs=local_epochs,
      local_steps=local_steps)
  config = RoundConfig(clip_updates=False, noise="none", weighting=weighting,
                       denominator="actual", chunk_size=chunk_size)
  server_opt = family.server_optimizer(server_optimizer, server_learning_rate)
  return Algorithm(
      name="fedavg",
      round_fn=require_learning_rates(make_round(client, samp, server_opt, config, mesh=mesh)),
      init=lambda key: sharding.replicate(
          server.init_server_state(model.init(key), server_opt), mesh),
      hparams=RoundHParams(float("inf"), 0.0, samp.sampling_rate,
                           ClientHParams(learning_rate=client_learning_rate),
                           server_learning_rate), privacy=None,
      k_max=samp.k_max, sampling_rate=samp.sampling_rate,
      config=dict(sampling_rate=samp.sampling_rate, sampler=samp.kind, k_max=samp.k_max,
                  expected_cohort_size=samp.expected_cohort_size,
                  local_epochs=local_epochs, local_steps=local_steps,
                  batch_size=batch_size, client_optimizer=client_optimizer,
                  client_learning_rate=client_learning_rate,
                  server_optimizer=server_optimizer,
                  server_learning_rate=server_learning_rate, weighting=weighting))


class FedAvg(FederatedAlgorithm):
  """Non-private FedAvg (`fedavg`): the baseline."""
  name = "fedavg"
  description = "non-private FedAvg (McMahan et al. 2017): the baseline"
  Options = FederatedOptions
  function = staticmethod(fedavg)

  def validate(self, options, run) -> None:
    options.validate_federated()

  def tiny_run_options(self):
    return dict(TINY_SYNTHETIC_RUN)

  def test_config(self, model, federated_data) -> SmokeConfig:
    return SmokeConfig(dict(clients_per_round=8, batch_size=5, client_learning_rate=0.3),
                       check=_no_noise_check)

  def build(self, setup) -> Algorithm:
    return fedavg(setup.model, setup.data, **setup.options.federated_kwargs(setup))


def _no_noise_check(alg, records, data) -> None:
  """`SmokeConfig.check` of FedAvg: no `PrivacySpec`, no noise in any round."""
  assert alg.privacy is None, alg.privacy
  assert all(r["noise_multiplier"] == 0.0 and r["noise_stddev"] == 0.0 for r in records)
