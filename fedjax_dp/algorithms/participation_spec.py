"""The privacy statement of structured participation (cyclic Poisson, balls-in-bins,
random allocation): `ParticipationSpec`, accounted by a
`fedjax_dp.privacy.participation_ledger.ParticipationLedger`.

A `fedjax_dp.algorithms.privacy_spec.PrivacySpec` whose round event depends on the round
(`fedjax_dp.privacy.events.Schedule`), and whose aggregate allocation accounting is the
Monte Carlo accountant of `fedjax_dp.privacy.allocation` (no DpEvent): calibration to a
target epsilon then bisects the Monte Carlo epsilon with a fixed seed
(`fedjax_dp.privacy.allocation.calibrate_allocation`), and summary.json states the
accounting method, the draws and the confidence.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Dict, Optional

import dp_accounting

from fedjax_dp.algorithms.privacy_spec import PrivacySpec
from fedjax_dp.privacy import allocation, events
from fedjax_dp.privacy.ledger_protocol import Ledger
from fedjax_dp.privacy.participation_ledger import ParticipationLedger
from fedjax_dp.validation import FedJaxDpError, check_int

__all__ = ["ParticipationSpec", "for_sampler", "CALIBRATION_MARGIN",
           "CALIBRATION_SEED_OFFSET"]

#: ``--target-epsilon`` under the Monte Carlo accountant calibrates z on a draw of its own
#: (seed ``mc_seed + CALIBRATION_SEED_OFFSET``) to the target shrunk by this fraction, so
#: that the reporting draw's epsilon lands at or below the target (two draws of 200,000
#: differed by at most 1.2% in epsilon, 4 seeds at 4 settings).
CALIBRATION_MARGIN = 0.02
#: The calibration draw's seed offset from ``mc_seed`` (`allocation_epsilons` uses
#: streams ``2 seed`` and ``2 seed + 1``: offset 1 shares none of them).
CALIBRATION_SEED_OFFSET = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParticipationSpec(PrivacySpec):
  """One release per round under structured participation (module docstring).

  Attributes (besides `PrivacySpec`'s; ``sampling_rate`` is the marginal per-round rate:
  ``k / t``, or ``q_group / b``):
    min_separation: b (``cyclic_poisson``), else None.
    epoch_length: t (``balls_in_bins`` / ``random_allocation``), else None.
    participations: k (1 for balls-in-bins and cyclic Poisson).
    mc_samples, mc_beta, mc_seed: the Monte Carlo accountant's draws per direction,
      failure probability and seed (aggregate allocation only).

  Raises:
    FedJaxDpError: as `PrivacySpec`; a sampler that is not structured, or b / t missing.
  """
  min_separation: Optional[int] = None
  epoch_length: Optional[int] = None
  participations: int = 1
  mc_samples: int = allocation.DEFAULT_NUM_SAMPLES
  mc_beta: float = allocation.DEFAULT_BETA
  mc_seed: int = 0

  _foreign_hint: ClassVar[str] = ""

  def __post_init__(self):
    super().__post_init__()
    if self.sampler not in events.SCHEDULED_SAMPLERS:
      raise FedJaxDpError(f"ParticipationSpec needs one of {events.SCHEDULED_SAMPLERS}, "
                          f"got sampler={self.sampler!r}.", option="sampler")
    if self.sampler == "cyclic_poisson":
      check_int("min_separation", self.min_separation, minimum=1)
    else:
      check_int("epoch_length", self.epoch_length, minimum=1)
    self.make_ledger(0.5)  # checks the remaining combination

  @property
  def monte_carlo(self) -> bool:
    """Whether epsilon comes from the Monte Carlo accountant."""
    return self.sampler in events.ALLOCATION_SAMPLERS and self.observation == "aggregate"

  def make_ledger(self, delta: float) -> Ledger:
    """An empty `ParticipationLedger` with this statement's schedule and truncation."""
    return ParticipationLedger(
        delta, self.sampler, min_separation=self.min_separation,
        epoch_length=self.epoch_length, participations=self.participations,
        relation=self.relation, observation=self.observation,
        privacy_unit=self.unit, truncation=self.truncation,
        num_samples=self.mc_samples, beta=self.mc_beta, seed=self.mc_seed)

  def _schedule(self, round_index: int) -> events.Schedule:
    return events.Schedule(round_index, self.min_separation, self.epoch_length,
                           self.participations)

  def round_event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
    """The worst-case unit's event in round 0 (`fedjax_dp.privacy.events.make_dp_event`
    with ``Schedule(0, ...)``: the first eligible round, or the epoch's charge).

    Raises:
      FedJaxDpError: under the Monte Carlo accountant (no DpEvent).
    """
    return events.make_dp_event(noise_multiplier * self.event_scale, self.sampling_rate,
                                self.steps, self.sampler, observation=self.observation,
                                schedule=self._schedule(0))

  def events_of_run(self, noise_multiplier: float, rounds: int) -> dp_accounting.DpEvent:
    """The worst-case unit's events of ``rounds`` rounds, each from `make_dp_event` with
    its round's `Schedule` (NoOp rounds dropped).

    Raises:
      FedJaxDpError: under the Monte Carlo accountant (no DpEvent).
    """
    counts: Dict[dp_accounting.DpEvent, int] = {}  # identical events self-composed
    for r in range(check_int("rounds", rounds, minimum=1)):
      e = events.make_dp_event(noise_multiplier * self.event_scale, self.sampling_rate,
                               self.steps, self.sampler, observation=self.observation,
                               schedule=self._schedule(r))
      if not isinstance(e, dp_accounting.NoOpDpEvent):
        counts[e] = counts.get(e, 0) + 1
    return dp_accounting.ComposedDpEvent(
        [dp_accounting.SelfComposedDpEvent(e, c) for e, c in counts.items()])

  def calibrate_noise_multiplier(self, rounds: int, target_epsilon: float, delta: float,
                                 accountant: str) -> Optional[float]:
    """Under the Monte Carlo accountant: the z that meets ``target_epsilon * (1 -
    CALIBRATION_MARGIN)`` at ``delta`` over ``ceil(rounds / t)`` epochs
    (`allocation.calibrate_allocation`) on a draw of its own, seed ``mc_seed +
    CALIBRATION_SEED_OFFSET``, independent of the draw (seed ``mc_seed``) that then
    reports the run's guarantee: z is fixed before that draw, so the reported epsilon's
    confidence statement holds as stated (a z bisected on the reporting draw would be
    selected with it). The margin absorbs the two draws' difference, so that the
    reported epsilon lands at or below the target; divided by ``event_scale``. None
    otherwise (the run's calibration of `events_of_run` applies).

    Raises:
      FedJaxDpError: no z reaches the target.
    """
    del accountant
    if not self.monte_carlo:
      return None
    assert self.epoch_length is not None
    z = allocation.calibrate_allocation(
        target_epsilon * (1.0 - CALIBRATION_MARGIN), delta, self.epoch_length,
        self.participations, allocation.epochs_touched(rounds, self.epoch_length),
        self.mc_samples, self.mc_beta, self.mc_seed + CALIBRATION_SEED_OFFSET)
    return z / self.event_scale

  def accounting_fields(self, delta: float) -> Dict[str, Any]:
    """`PrivacySpec.accounting_fields` and the schedule: ``min_separation``,
    ``epoch_length``, ``participations_per_epoch``, ``accounting_method`` and, under the
    Monte Carlo accountant, ``mc_samples``, ``mc_beta``, ``mc_seed``."""
    out = super().accounting_fields(delta)
    out.update(min_separation=self.min_separation, epoch_length=self.epoch_length,
               participations_per_epoch=self.participations,
               accounting_method="monte_carlo" if self.monte_carlo else "dp_accounting")
    if self.monte_carlo:
      out.update(mc_samples=self.mc_samples, mc_beta=self.mc_beta, mc_seed=self.mc_seed)
    return out

  def summary_fields(self, ledger: Any, accountant: str, delta: float) -> Dict[str, Any]:
    """`PrivacySpec.summary_fields` with ``accounting_method`` (in words) and, under the
    Monte Carlo accountant, ``mc_samples`` and ``mc_confidence``; the guarantee says
    which accountant gave it."""
    out = super().summary_fields(ledger, accountant, delta)
    out["accounting_method"] = ledger.accounting_method
    if self.monte_carlo:
      out["mc_samples"] = self.mc_samples
      out["mc_confidence"] = 1.0 - self.mc_beta
      out["guarantee"] = out["guarantee"].replace(
          f"{accountant.upper()} accountant", ledger.accounting_method).replace(
          "RDP accountant", ledger.accounting_method)
    return out


def for_sampler(samp: Any, relation: str, **fields: Any) -> ParticipationSpec:
  """The user-level `ParticipationSpec` of a round drawn by ``samp`` (a
  `fedjax_dp.federated.participation.AllocationSampler` or a ``"cyclic_poisson"``
  `fedjax_dp.federated.participation.CyclicSampler`) under ``relation``, with the
  `PrivacySpec` ``fields`` of the round (rate, observation, truncation, ...).

  Raises:
    FedJaxDpError: as `ParticipationSpec`.
  """
  allocation_ = samp.kind != "cyclic_poisson"
  return ParticipationSpec(
      "user-level", relation, samp.kind,
      min_separation=None if allocation_ else samp.cycle_length,
      epoch_length=samp.epoch_length if allocation_ else None,
      participations=samp.participations if allocation_ else 1, **fields)
