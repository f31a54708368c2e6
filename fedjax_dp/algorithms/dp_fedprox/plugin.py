"""The `fedjax-dp run` plug-in of DP-FedProx: DP-FedAvg's options plus mu."""

from __future__ import annotations

import dataclasses

from fedjax_dp.algorithms.dp_fedavg.plugin import DpFedAvg, DpFedAvgOptions, user_level_check
from fedjax_dp.algorithms.dp_fedprox.algorithm import dp_fedprox
from fedjax_dp.algorithms.interface import SmokeConfig
from fedjax_dp.validation import check_non_negative

__all__ = ["DpFedProx", "DpFedProxOptions"]


@dataclasses.dataclass
class DpFedProxOptions(DpFedAvgOptions):
  """User-level DP-FedAvg whose clients minimise the FedProx objective."""
  prox_mu: float = 0.01
  """mu >= 0: the proximal term (mu/2)||w - w_t||^2 of the local objective (Li et al.
  2020, eq. 2; 0 is DP-FedAvg)"""


class DpFedProx(DpFedAvg):
  """User-level DP-FedProx: `dp_fedprox` (DP-FedAvg's privacy, FedProx's clients)."""
  name = "dp_fedprox"
  description = "user-level DP-FedProx: DP-FedAvg with FedProx's proximal local objective"
  Options = DpFedProxOptions
  function = staticmethod(dp_fedprox)
  builder = staticmethod(dp_fedprox)

  def validate(self, options, run) -> None:
    super().validate(options, run)
    check_non_negative("prox_mu", options.prox_mu)

  def builder_kwargs(self, options) -> dict:
    return {"prox_mu": options.prox_mu}

  def audit_targets(self):
    from fedjax_dp.algorithms.dp_fedprox import audit
    return audit.targets()

  def test_config(self, model, federated_data) -> SmokeConfig:
    return SmokeConfig(dict(prox_mu=0.01, clip_norm=1.0, noise_multiplier=0.1,
                            clients_per_round=8, batch_size=5, client_learning_rate=0.3),
                       check=user_level_check(0.1))
