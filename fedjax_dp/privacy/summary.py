"""`PrivacySummary`: what a ledger's privacy statement says (the unit, the relation,
epsilon and delta, the rounds and releases composed), as every ledger's ``summary``
returns it (`fedjax_dp.privacy.ledger.PrivacyLedger.summary`,
`fedjax_dp.privacy.multi_release.MultiReleaseLedger.summary`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

from fedjax_dp.privacy.events import observation_text

__all__ = ["PrivacySummary"]


@dataclasses.dataclass(frozen=True)
class PrivacySummary:
  """A run's privacy statement.

  Attributes:
    privacy_unit: ``"user-level"`` or ``"record-level"``.
    neighboring_relation: text from
      `fedjax_dp.privacy.events.neighboring_relation`.
    sampler: one of `fedjax_dp.privacy.events.SAMPLERS`.
    accountant: ``"rdp"`` or ``"pld"``.
    epsilon: epsilon spent (``inf`` if a round was non-private).
    delta: the accountant's delta in (0, 1).
    num_rounds: rounds composed.
    num_releases: noisy releases composed (sum over rounds of ``dp_steps``).
    truncation_probability: union bound on the probability that any padded Poisson
      draw of the run was truncated (0 without truncation).
    delta_total: ``delta + (1 + e^epsilon) truncation_probability``: the delta of the
      guarantee (`fedjax_dp.privacy.events.truncation_delta`).
    observation: what the server observes (`fedjax_dp.privacy.events.OBSERVATIONS`).
  """
  privacy_unit: str
  neighboring_relation: str
  sampler: str
  accountant: str
  epsilon: float
  delta: float
  num_rounds: int
  num_releases: int
  truncation_probability: float = 0.0
  delta_total: Optional[float] = None
  observation: str = "aggregate"

  def to_dict(self) -> Dict[str, Any]:
    """Plain dict (``epsilon`` may be ``inf``; JSON writers must allow it)."""
    return dataclasses.asdict(self)

  def __str__(self) -> str:
    sampling = "Poisson sampling" if self.sampler == "poisson" else "fixed-size sampling"
    delta = self.delta if self.delta_total is None else self.delta_total
    return (f"({self.epsilon:.4g}, {delta:.4g})-DP at {self.privacy_unit} "
            f"({self.neighboring_relation}); {sampling}, the server observes "
            f"{observation_text(self.observation)}; {self.num_rounds} rounds, "
            f"{self.num_releases} noisy releases, {self.accountant.upper()} accountant")
