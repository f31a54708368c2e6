"""The `fedjax-dp run` plug-in of DP-SCAFFOLD: DP-FedAvg's options, plain SGD clients."""

from __future__ import annotations

from fedjax_dp.algorithms.dp_fedavg.plugin import DpFedAvg, user_level_check
from fedjax_dp.algorithms.dp_scaffold.algorithm import dp_scaffold
from fedjax_dp.algorithms.interface import SmokeConfig
from fedjax_dp.validation import FedJaxDpError

__all__ = ["DpScaffold"]


class DpScaffold(DpFedAvg):
  """User-level DP-SCAFFOLD: `dp_scaffold` (control variates, joint clipping of the
  model and control-variate deltas, central Gaussian noise)."""
  name = "dp_scaffold"
  description = ("user-level DP-SCAFFOLD: SCAFFOLD's control variates (Karimireddy et al. "
                 "2020), the model and control deltas clipped jointly, central noise")
  function = staticmethod(dp_scaffold)
  builder = staticmethod(dp_scaffold)
  canaries_refused = ("its upload is the pair (model delta, control-variate delta) and a "
                      "canary client's control variate is not simulated")

  def validate(self, options, run) -> None:
    super().validate(options, run)
    if options.client_optimizer != "sgd":
      raise FedJaxDpError(f"client_optimizer must be 'sgd' for DP-SCAFFOLD (option II's "
                          f"control variate assumes plain SGD steps), got "
                          f"{options.client_optimizer!r}.", option="client_optimizer")

  def audit_targets(self):
    from fedjax_dp.algorithms.dp_scaffold import audit
    return audit.targets()

  def test_config(self, model, federated_data) -> SmokeConfig:
    return SmokeConfig(dict(clip_norm=1.0, noise_multiplier=0.1, clients_per_round=8,
                            batch_size=5, client_learning_rate=0.3),
                       check=user_level_check(0.1))
