"""Several releases per round: `Release` (one kind of noisy release a round makes) and
`MultiReleaseSpec`, the `fedjax_dp.algorithms.privacy_spec.PrivacyStatement` variant of
an algorithm whose rounds make several (e.g. federated MAML's inner and outer DP-SGD
stages of RDP-PFL), accounted by a
`fedjax_dp.privacy.multi_release.MultiReleaseLedger`. RDP-PFL's
`fedjax_dp.algorithms.rdp_pfl.privacy.GroupedPrivacySpec` subclasses it."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Dict, List, Optional, Tuple

import dp_accounting
import numpy as np

from fedjax_dp.algorithms.privacy_spec import PrivacyStatement
from fedjax_dp.privacy import disclosure, events
from fedjax_dp.privacy.ledger_protocol import PrivacyReport
from fedjax_dp.privacy.multi_release import (RELEASE_TRUNCATION_FIELDS, MultiReleaseLedger,
                                             check_release_name, release_field)
from fedjax_dp.privacy.rounds import check_truncation
from fedjax_dp.validation import (FedJaxDpError, check_int, check_positive,
                                  check_probability)

__all__ = ["Release", "MultiReleaseSpec"]


@dataclasses.dataclass(frozen=True)
class Release:
  """One kind of noisy release that each round of an algorithm makes, when a round
  makes several (`MultiReleaseSpec.releases`), e.g. the inner (query-set) and outer
  (support-set) DP-SGD stages of federated MAML (RDP-PFL, IEEE TIFS 2023, Sec. III-A,
  Eqs. 6-11: each of the tau0 local epochs of a round releases one Poisson-subsampled
  Gaussian of each).

  Every release of a spec shares its sampler, neighbouring relation and privacy unit
  (`MultiReleaseSpec`); its event is `fedjax_dp.privacy.events.make_dp_event` of
  ``(z * event_scale, sampling_rate, steps)`` with ``z`` the algorithm's noise-multiplier
  hyper-parameter.

  Attributes:
    name: a lowercase identifier (``[a-z][a-z0-9_]*``), unique within the spec; the
      release's record fields are ``{name}_noise_multiplier`` etc.
      (`fedjax_dp.privacy.multi_release.release_field`).
    sampling_rate: q in (0, 1] of this release's Poisson draw (the record rate of a
      DP-SGD stage).
    steps: noisy releases of this kind per round (int >= 1; e.g. tau0 local epochs).
    event_scale: this release's noise multiplier is ``z * event_scale`` (> 0;
      ``clip_norm / sensitivity``, 1 when the noise std is ``z`` times the
      sensitivity).
    truncation: a `fedjax_dp.privacy.events.Truncation` when this release's Poisson
      draws are padded to a static cap (its probability is added to delta), or None.

  Raises:
    FedJaxDpError: on construction, for a value out of range; a name that is not a
      lowercase identifier or whose record fields would clash with a standard field.
  """
  name: str
  sampling_rate: float
  steps: int
  event_scale: float = 1.0
  truncation: Optional[events.Truncation] = None

  def __post_init__(self):
    check_release_name(self.name, "Release.name")
    disclosure.release_labels([self.name])  # refuses names whose fields clash
    object.__setattr__(self, "sampling_rate",
                       check_probability("Release.sampling_rate", self.sampling_rate))
    object.__setattr__(self, "steps", check_int("Release.steps", self.steps, minimum=1))
    object.__setattr__(self, "event_scale",
                       check_positive("Release.event_scale", self.event_scale))
    object.__setattr__(self, "truncation", check_truncation(self.truncation))

  def dp_event(self, noise_multiplier: float, sampler: str = "poisson",
               population_size: Optional[int] = None,
               cohort_size: Optional[int] = None,
               observation: str = "aggregate") -> dp_accounting.DpEvent:
    """The `DpEvent` of this release in one round whose noise-multiplier
    hyper-parameter is ``noise_multiplier`` (`make_dp_event` of
    ``(noise_multiplier * event_scale, sampling_rate, steps)`` as the server observes
    it, the spec's ``observation``)."""
    return events.make_dp_event(noise_multiplier * self.event_scale, self.sampling_rate,
                                self.steps, sampler, population_size, cohort_size,
                                observation)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiReleaseSpec(PrivacyStatement):
  """Several releases per round (e.g. federated MAML's inner and outer DP-SGD stages):
  each `Release` has its own sampling rate, steps, event scale and truncation; all
  share ``unit``, ``relation``, ``sampler`` and ``observation`` (the neighbouring
  relation every release's sensitivity is computed under, so that their composition is
  a guarantee for one protected unit). The round reports each release's numbers
  (`RoundMetrics.releases`) and `make_ledger` gives a
  `fedjax_dp.privacy.multi_release.MultiReleaseLedger` composing them all (RDP composes
  additively, Mironov 2017, arXiv:1702.07476, Prop. 1).

  Attributes (besides `PrivacyStatement`'s):
    releases: a non-empty tuple of `Release` with distinct names (a list is accepted);
      every round makes each of them.

  Raises:
    FedJaxDpError: as `PrivacyStatement`; ``releases`` that are not a non-empty tuple of
      `Release` with distinct names (option ``releases``).
  """
  releases: Tuple[Release, ...]

  _foreign_hint: ClassVar[str] = (
      " Each Release states its own sampling_rate, steps, event_scale and truncation; "
      "per-client accounting of several releases per round is not supported.")

  def __post_init__(self):
    super().__post_init__()
    releases = self.releases
    if isinstance(releases, Release) or not isinstance(releases, (list, tuple)):
      raise FedJaxDpError(f"releases must be a tuple of Release, got {releases!r}.",
                          option="releases")
    releases = tuple(releases)
    object.__setattr__(self, "releases", releases)
    if not releases:
      raise FedJaxDpError("releases must hold at least one Release, got ().",
                          option="releases")
    bad = [r for r in releases if not isinstance(r, Release)]
    if bad:
      raise FedJaxDpError(f"releases must hold Release objects, got {bad[0]!r}.",
                          option="releases")
    names = [r.name for r in releases]
    if len(set(names)) != len(names):
      raise FedJaxDpError(f"releases must have distinct names, got {names!r}.",
                          option="releases")

  @property
  def release_names(self) -> Tuple[str, ...]:
    """The releases' names, in order."""
    return tuple(r.name for r in self.releases)

  @property
  def groups(self) -> Tuple[Tuple[str, ...], ...]:
    """The groups of releases one record can influence, for the ledger: here one group
    of every release (`GroupedPrivacySpec` has others)."""
    return (self.release_names,)

  def make_ledger(self, delta: float) -> MultiReleaseLedger:
    """An empty `MultiReleaseLedger` of the releases (each with its own truncation),
    composed per group of `groups` (its epsilon: the largest group's)."""
    return MultiReleaseLedger(self.release_names, delta,
                              truncations={r.name: r.truncation for r in self.releases},
                              groups=self.groups, **self.ledger_kwargs())

  def planned_report(self, noise_multiplier: Any, rounds: int) -> PrivacyReport:
    """Each release's ``z * event_scale``, sampling rate and steps in every round (a
    float ``z``; `PrivacyReport.from_releases`).

    Raises:
      FedJaxDpError: as `fedjax_dp.privacy.ledger_protocol.PrivacyReport`.
    """
    z0 = float(np.asarray(noise_multiplier, np.float64))
    return PrivacyReport.from_releases(
        {r.name: {"noise_multiplier": np.full(rounds, z0 * r.event_scale),
                  "sampling_rate": r.sampling_rate, "dp_steps": r.steps}
         for r in self.releases}, rounds)

  def release_events(self, noise_multiplier: float, names: Tuple[str, ...]
                     ) -> List[dp_accounting.DpEvent]:
    """`Release.dp_event` of each release of ``names`` (in that order) under the spec's
    sampler, sizes and observation."""
    by_name = {r.name: r for r in self.releases}
    return [by_name[n].dp_event(noise_multiplier, self.sampler, self.population_size,
                                self.cohort_size, self.observation) for n in names]

  def round_event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
    """``ComposedDpEvent([release.dp_event(z, sampler, ...), ...])``: every release's
    ``make_dp_event(z * event_scale, sampling_rate, steps)`` under the spec's sampler
    (and sizes), composed."""
    return dp_accounting.ComposedDpEvent(
        self.release_events(noise_multiplier, self.release_names))

  def accounting_fields(self, delta: float) -> Dict[str, Any]:
    """`PrivacyStatement.accounting_fields`, ``releases`` (their names) and, for each
    release with a truncation model, ``{name}_truncation_population_size``,
    ``{name}_truncation_cap`` and ``{name}_truncation_draws_per_step`` (labelled by
    `fedjax_dp.privacy.disclosure.release_labels`)."""
    out = super().accounting_fields(delta)
    out["releases"] = list(self.release_names)
    for rel in self.releases:
      if rel.truncation is not None:
        for f in RELEASE_TRUNCATION_FIELDS:
          out[release_field(rel.name, "truncation_" + f)] = getattr(rel.truncation, f)
    return out

  def _summary_extras(self, ledger: Any, out: Dict[str, Any]) -> None:
    """The releases (or groups) composed, in words, after ``guarantee``, and
    ``release_epsilons_rdp`` (``{name: epsilon of that release alone}``, how the budget
    splits)."""
    groups = getattr(ledger, "groups", None)
    if groups is not None and len(groups) > 1:
      out["guarantee"] += ("; a record influences only one group of the releases ("
                           + "; ".join(", ".join(g) for g in groups)
                           + "), each composed over every round: epsilon is the largest "
                           "group's")
    else:
      out["guarantee"] += (f"; every round composes the releases "
                           f"{', '.join(self.release_names)}")
    out["release_epsilons_rdp"] = ledger.release_epsilons(accountant="rdp")
