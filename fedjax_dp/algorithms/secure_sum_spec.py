"""The privacy statement of a distributed-DP round: a secure sum with visible participation.

Each round releases the secure (modular) sum of the surviving clients' noised integer
uploads (`fedjax_dp.federated.secure_aggregation`); the server also knows who took part
(observation ``"secure_sum"``: no amplification by sampling, `fedjax_dp.privacy.events`).
The sum's privacy is a zCDP bound rho from the discrete Gaussian or Skellam analysis;
each round reports it as the Gaussian-equivalent noise multiplier ``1 / sqrt(2 rho)``,
which the ledger composes under RDP as ``VisibleParticipationDpEvent(q,
GaussianDpEvent(1 / sqrt(2 rho)))`` -- exactly the RDP ``log(1 - q + q exp((alpha - 1)
alpha rho)) / (alpha - 1)`` of the bound. PLD accounting is refused: a zCDP bound does
not give the Gaussian's privacy loss distribution.

The algorithm's noise-multiplier hyper-parameter z (the std of the planned survivors'
summed noise in units of the clip norm) maps to the event's noise multiplier through
``equivalent`` (rounding inflates the sensitivity, the discrete noise adds tau terms),
which calibration to a target epsilon inverts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Dict

import dp_accounting
import numpy as np

from fedjax_dp.algorithms.privacy_spec import PrivacySpec
from fedjax_dp.privacy import accountants, events
from fedjax_dp.privacy.ledger_protocol import PrivacyReport
from fedjax_dp.validation import FedJaxDpError

__all__ = ["SecureSumSpec"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SecureSumSpec(PrivacySpec):
  """One secure-sum release per round (observation ``"secure_sum"``), RDP only.

  Attributes (besides `PrivacySpec`'s; ``observation`` must be ``"secure_sum"``):
    equivalent: ``equivalent(z) -> z_eq``, the event's Gaussian-equivalent noise
      multiplier ``1 / sqrt(2 rho)`` of a round whose planned survivors all upload, at
      the algorithm's noise multiplier z (a host float; 0 for no noise).
    mechanism: what the sum's noise is, in words (summaries).
    facts: the public constants that fix each round's zCDP besides its survivors and
      their noise std (``secagg_mechanism``, ``secagg_dim``, ``secagg_l2_bound``,
      ``secagg_l1_bound``, ``secagg_sensitivity_factor``, ...), written into every
      record of metrics.jsonl so that epsilon can be recomputed from the file alone.

  Raises:
    FedJaxDpError: as `PrivacyStatement`; another observation; ``equivalent`` not
      callable.
  """
  equivalent: Callable[[float], float]
  mechanism: str = ""
  facts: Dict[str, Any] = dataclasses.field(default_factory=dict)

  _foreign_hint: ClassVar[str] = ""

  def __post_init__(self):
    super().__post_init__()
    if self.observation != "secure_sum":
      raise FedJaxDpError(f"SecureSumSpec states a secure sum: observation must be "
                          f"'secure_sum', got {self.observation!r}.", option="observation")
    if not callable(self.equivalent):
      raise FedJaxDpError("SecureSumSpec.equivalent must be callable z -> z_eq.",
                          option="equivalent")

  def planned_report(self, noise_multiplier: Any, rounds: int) -> PrivacyReport:
    """Each round ``equivalent(z)`` at ``sampling_rate`` (the planned survivors)."""
    z_eq = float(self.equivalent(float(noise_multiplier)))
    return PrivacyReport(np.full(rounds, z_eq), self.sampling_rate, self.steps)

  def round_event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
    """`fedjax_dp.privacy.events.make_dp_event` of ``equivalent(z)`` under visible
    participation (``"secure_sum"``)."""
    return events.make_dp_event(
        float(self.equivalent(float(noise_multiplier))), self.sampling_rate, self.steps,
        self.sampler, self.population_size, self.cohort_size, self.observation)

  def supports(self, accountant: str) -> bool:
    """RDP only: the rounds' events are zCDP bounds (module docstring).

    Raises:
      FedJaxDpError: an unknown accountant.
    """
    accountants.check_accountant_supports(accountant, self.sampler, self.population_size,
                                          self.cohort_size)
    return accountant == "rdp"

  def accounting_fields(self, delta: float) -> Dict[str, Any]:
    """`PrivacySpec.accounting_fields` and the secure sum's `facts`."""
    return {**super().accounting_fields(delta), **self.facts}

  def _summary_extras(self, ledger: Any, out: Dict[str, Any]) -> None:
    """``secure_sum_mechanism``: the sum's noise in words."""
    out["secure_sum_mechanism"] = self.mechanism
