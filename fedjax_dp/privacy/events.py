"""DP events: what one round released, as a `dp_accounting.DpEvent`.

Every simulated round reports, on the host, what it released: the noise standard
deviation ``sigma``, the L2 sensitivity ``Delta`` of the released quantity *under the
round's own neighbouring relation* (`fedjax_dp.privacy.sensitivity`), the noise
multiplier ``z = sigma / Delta``, the sampling rate ``q``, the number of noisy releases
composed in the round (``dp_steps``: 1 for user-level DP-FedAvg, the number of local
DP-SGD steps for record-level DP) and the sampler. This module turns those numbers into
`dp_accounting.DpEvent`s; `fedjax_dp.privacy.accountants` turns events into (epsilon,
delta), `fedjax_dp.privacy.calibration` inverts it and `fedjax_dp.privacy.ledger`
composes a run's rounds.

* `SAMPLERS`, `PRIVACY_UNITS`, `default_relation`, `neighboring_relation`: the samplers
  and the neighbouring relations each sampler's events are valid under.
* `make_dp_event`: one round -> one `DpEvent`.
* `dp_accounting_relation`: the `dp_accounting.NeighboringRelation` an event is composed
  under, so that ``z`` means the same in every accountant (below).
* `Truncation` / `truncation_delta`: a padded Poisson draw (a cohort or a batch of static
  size) that overflows its cap is truncated; the probability of that, a union bound over
  the rounds' draws, is added to delta as ``(1 + e^epsilon) p``.

The one convention. ``z`` is always ``sigma / Delta`` with ``Delta`` the largest L2
distance between the outputs on two neighbouring datasets of the sampler's relation:
add/remove (or zero-out) for Poisson sampling, replace-one for fixed-size sampling
without replacement. No function here rescales it: the code that defines a release
computes its own ``Delta`` (e.g. ``2C`` for a sum clipped to C under replace-one) and
reports ``z``. dp_accounting reads a `GaussianDpEvent` as a shift of ``1/z`` standard
deviations in its RDP accountant under every relation, and in its PLD accountant under
add/remove, but as a shift of ``2/z`` in its PLD accountant under ``REPLACE_ONE``; to
keep one meaning, events without sampling-without-replacement are composed under
``ADD_OR_REMOVE_ONE`` (pure shift semantics), and `SampledWithoutReplacementDpEvent`
(RDP: Wang, Balle, Kasiviswanathan 2019, Thm. 27) under ``REPLACE_ONE``, where its
inner ``z`` is relative to the replace-one sensitivity, as here; its PLD is
`fedjax_dp.privacy.accountants.sampled_without_replacement_gaussian_pld` (Dong, Roth,
Su 2022, Thm. 4.2), which dp_accounting does not have. A fixed-size cohort that is the
whole population is no sampling at all: a plain `GaussianDpEvent`.

What the server observes. The guarantee is against the server (the adversary of the
threat model), and a release's DpEvent depends on what it sees (`OBSERVATIONS`):

* ``"aggregate"``: only the noisy aggregate of the cohort (central noise, or a record's
  DP-SGD steps seen only through its client's upload): which units the sampler drew is
  hidden, so amplification by sampling holds (`PoissonSampledDpEvent`,
  `SampledWithoutReplacementDpEvent`).
* ``"attributable"``: each upload with its sender (every client noises its own upload
  and the server sees who sent what, e.g. to weight it): whether a unit took part is
  visible, so sampling gives no amplification. A round is then a
  `VisibleParticipationDpEvent`: with probability ``q`` the unit's upload is a Gaussian
  release, otherwise the round reveals nothing about it (its privacy loss is 0). This is
  exact: the observed participation splits the output distributions into the same
  mixture components under both neighbouring datasets, so the hockey-stick divergence
  of T rounds is ``sum_k Binom(k; T, q) delta_G(eps; sqrt(k) / z)`` (our derivation,
  the mixture of Balle, Barthe, Gaboardi, NeurIPS 2018, Sec. 3, with the mixture
  component observed). Under add/remove a visible participation of a unit absent from
  the neighbour is distinguishable with certainty, so user-level attributable releases
  need zero-out (Poisson) or replace-one (fixed size) (`check_observation`).
* ``"secure_sum"``: the secure (modular) sum of the cohort's uploads, each noised on
  its device (distributed DP with secure aggregation,
  `fedjax_dp.federated.secure_aggregation`), and who took part in the protocol: a
  secure-aggregation server knows its participants, so participation is visible and a
  round is the same `VisibleParticipationDpEvent` as ``"attributable"``; the inner
  release is the sum's (its noise is every survivor's), reported as a Gaussian-
  equivalent noise multiplier ``1 / sqrt(2 rho)`` of the sum's zCDP bound and accounted
  under RDP only (`fedjax_dp.privacy.ledger.PrivacyLedger.supports`).
* ``"public"``: values computed from public data only (a public seed's schedule, the
  configuration): `NoOpDpEvent`.

`make_dp_event` is the one function that turns (sampler, relation, observation,
noise multiplier = noise std / sensitivity) into a round's event; every ledger, the
calibration and the auditor's claims build events through it.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple, Optional, Tuple

import attr
import dp_accounting
import numpy as np
from scipy import stats

from fedjax_dp.privacy.sensitivity import RELATION_TEXT, RELATIONS, check_relation
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int,
                                  check_non_negative, check_probability)

__all__ = [
    "SAMPLERS", "PRIVACY_UNITS", "RELATIONS", "OBSERVATIONS", "NeighborRel", "Truncation",
    "VisibleParticipationDpEvent", "VISIBLE_PARTICIPATION", "default_relation", "neighboring_relation",
    "check_observation", "observation_text", "make_dp_event", "has_visible_participation", "dp_accounting_relation",
    "SCHEDULED_SAMPLERS", "ALLOCATION_SAMPLERS", "Schedule",
    "truncation_delta",
]

NeighborRel = dp_accounting.NeighboringRelation

#: Client / record samplers understood by `make_dp_event` (the last three: structured
#: participation, `fedjax_dp.federated.participation`; their events depend on the round).
SAMPLERS = ("poisson", "fixed_size", "cyclic_poisson", "balls_in_bins", "random_allocation")
#: Samplers whose round event depends on the round index (`make_dp_event`'s schedule).
SCHEDULED_SAMPLERS = ("cyclic_poisson", "balls_in_bins", "random_allocation")
#: Samplers whose aggregate-observation accounting has no DpEvent: the Monte Carlo
#: accountant of `fedjax_dp.privacy.allocation`.
ALLOCATION_SAMPLERS = ("balls_in_bins", "random_allocation")
#: What one neighbouring step changes: all data of one user, or one record.
PRIVACY_UNITS = ("user", "record")
#: The relations each sampler's events are valid under (the first is the default).
_SAMPLER_RELATIONS = {"poisson": ("add_remove", "zero_out"), "fixed_size": ("replace_one",),
                      "cyclic_poisson": ("add_remove", "zero_out"),
                      "balls_in_bins": ("add_remove", "zero_out"),
                      "random_allocation": ("add_remove", "zero_out")}

#: What the server (the adversary of the guarantee) observes of a release (module
#: docstring): the aggregate only, each upload with its sender, or public values only.
OBSERVATIONS = ("aggregate", "attributable", "secure_sum", "public")
_OBSERVATION_TEXT = {
    "aggregate": "only noisy aggregates (the cohort's noisy sum, or a client's upload "
                 "after noisy DP-SGD steps): which units were sampled stays hidden, so "
                 "amplification by sampling applies",
    "attributable": "each upload with its sender (participation is visible: no "
                    "amplification by sampling; a round costs nothing to a unit that "
                    "did not take part)",
    "secure_sum": "only the secure (modular) sum of the cohort's noised uploads and who "
                  "took part in the secure aggregation (participation is visible: no "
                  "amplification by sampling; a round costs nothing to a unit that did "
                  "not take part)",
    "public": "only values computed from public data (no privacy cost)",
}

#: The observations under which a unit's participation is visible to the server (no
#: amplification by sampling: `VisibleParticipationDpEvent`).
VISIBLE_PARTICIPATION = ("attributable", "secure_sum")

# Relative tolerance when matching a (float32) sampling rate to cohort/population.
_COHORT_RATE_RTOL = 1e-6


@attr.s(frozen=True, slots=True, auto_attribs=True)
class VisibleParticipationDpEvent(dp_accounting.DpEvent):
  """A release in which the protected unit takes part with probability
  ``sampling_probability``, independently of the data, and its participation is
  *observed*: with probability ``sampling_probability`` the event ``event`` is applied
  to the unit's data and its output is seen together with the fact that the unit took
  part; otherwise the output carries nothing of the unit (privacy loss 0).

  Unlike `dp_accounting.PoissonSampledDpEvent` (participation hidden inside an
  aggregate, which amplifies), the observer knows which mixture component it is in, so
  the privacy loss distribution is exactly the mixture ``(1 - q) * 0 + q * PLD(event)``
  and the Renyi divergence of order alpha is ``log(1 - q + q exp((alpha - 1)
  R_alpha(event))) / (alpha - 1)`` (both directions; our derivation: the divergence of
  a mixture whose component is observed is the mixture of the components'
  divergences). This is the event of an upload the server can attribute to its sender
  (`OBSERVATIONS`). Accounted by `fedjax_dp.privacy.accountants`' RDP and PLD
  accountants (dp_accounting's own do not know it).
  """
  sampling_probability: float
  event: dp_accounting.DpEvent


def check_observation(observation: Any, sampler: str = "poisson",
                      relation: Optional[str] = None,
                      privacy_unit: Optional[str] = None) -> str:
  """``observation`` (one of `OBSERVATIONS`) after checking that it fits the sampler,
  relation and privacy unit of the release.

  A user-level ``"attributable"`` release under add/remove is refused: a unit present
  in one dataset only would be seen uploading in one world and never in the other
  (privacy loss infinite), so such releases are accounted under zero-out (Poisson) or
  replace-one (fixed size). At record level the upload belongs to the record's client,
  which exists in both worlds, so every relation is fine.

  Raises:
    FedJaxDpError: an unknown observation, or attributable uploads under add/remove at
      user level.
  """
  observation = check_choice("observation", observation, OBSERVATIONS)
  relation = _check_pairing(sampler, relation)
  unit = None if privacy_unit is None else _check_privacy_unit(privacy_unit)
  if observation in VISIBLE_PARTICIPATION and relation == "add_remove" and unit != "record":
    raise FedJaxDpError(
        f"observation={observation!r} (participation visible to the server) cannot be "
        "accounted under neighboring_relation='add_remove' at user level: a user present "
        "in one dataset only is seen uploading in one world and never in the other. "
        "Use 'zero_out' (Poisson) or 'replace_one' (fixed size).", option="observation")
  return observation


def observation_text(observation: str) -> str:
  """What the server observes, in words (for summaries and the README's table)."""
  return _OBSERVATION_TEXT[check_choice("observation", observation, OBSERVATIONS)]


def _check_privacy_unit(privacy_unit: Any) -> str:
  """``"user"`` / ``"record"``; the ``"-level"`` spellings are accepted too."""
  if isinstance(privacy_unit, str) and privacy_unit.endswith("-level"):
    privacy_unit = privacy_unit[:-len("-level")]
  return check_choice("privacy_unit", privacy_unit, PRIVACY_UNITS)


def _unit_words(privacy_unit: Optional[str]) -> str:
  if privacy_unit is None:
    return "one privacy unit (a user's entire data, or one record)"
  unit = _check_privacy_unit(privacy_unit)
  return "one user's entire data" if unit == "user" else "one record"


def default_relation(sampler: str) -> str:
  """The neighbouring relation a sampler's events are accounted under by default:
  ``"add_remove"`` for Poisson sampling, ``"replace_one"`` for fixed-size cohorts."""
  return _SAMPLER_RELATIONS[check_choice("sampler", sampler, SAMPLERS)][0]


def _check_pairing(sampler: str, relation: Optional[str]) -> str:
  """``relation`` (default: the sampler's) after checking that the sampler's DpEvent is
  valid under it."""
  check_choice("sampler", sampler, SAMPLERS)
  if relation is None:
    return default_relation(sampler)
  relation = check_relation(relation)
  if relation not in _SAMPLER_RELATIONS[sampler]:
    raise FedJaxDpError(
        f"neighboring_relation={relation!r} does not fit sampler={sampler!r}: "
        f"{sampler} sampling is accounted under "
        f"{' or '.join(_SAMPLER_RELATIONS[sampler])} (Poisson sampling amplifies under "
        "add/remove and zero-out, sampling without replacement under replace-one).")
  return relation


def neighboring_relation(sampler: str, privacy_unit: Optional[str] = None,
                         relation: Optional[str] = None) -> Tuple[str, str]:
  """The neighbouring relation under which a sampler's events are accounted.

  Args:
    sampler: one of `SAMPLERS`. ``"poisson"`` (each unit independently with
      probability q) is accounted under add/remove-one (or zero-out, for releases in
      which every unit adds its own noise); ``"fixed_size"`` (a cohort of exactly m of
      n units, without replacement) under replace-one, the relation for which
      dp-accounting's `SampledWithoutReplacementDpEvent` bound holds (Wang, Balle,
      Kasiviswanathan 2019, arXiv:1808.00087).
    privacy_unit: optional, ``"user"`` or ``"record"`` (or ``"user-level"``,
      ``"record-level"``); only changes the text.
    relation: one of `RELATIONS` valid for ``sampler``; default `default_relation`.

  Returns:
    ``(relation, text)``: the relation's name (one of `RELATIONS`) and a one-line
    statement of it for summaries.

  Raises:
    FedJaxDpError: unknown ``sampler``, ``privacy_unit`` or ``relation``, or a relation
      the sampler's events are not valid under.
  """
  relation = _check_pairing(sampler, relation)
  text = RELATION_TEXT[relation].format(unit=_unit_words(privacy_unit))
  if relation == "replace_one":
    text += " (noise multipliers are relative to the replace-one sensitivity)"
  return relation, text


def _host_float(name: str, value: Any) -> Any:
  """Numpy scalars and 0-d arrays (numpy, jax) -> exact Python numbers; rest unchanged."""
  if isinstance(value, np.generic) and not isinstance(value, np.bool_):
    return value.item()
  if not isinstance(value, (numbers.Number, str, bytes)) and hasattr(value, "__array__"):
    arr = np.asarray(value)
    if arr.ndim != 0:
      raise FedJaxDpError(f"{name} must be a scalar, got an array of shape {arr.shape}.")
    return arr.astype(np.float64).item() if arr.dtype.kind == "f" else arr.item()
  return value


def _check_noise_multiplier(value: Any, name: str = "noise_multiplier") -> float:
  return check_non_negative(name, _host_float(name, value))


def _check_sampling_rate(value: Any, name: str = "sampling_rate") -> float:
  return check_probability(name, _host_float(name, value))


def _check_count(value: Any, name: str) -> int:
  return check_int(name, _host_float(name, value), minimum=1)


def _resolve_cohort_size(sampling_rate: Optional[float], population_size: Any,
                         cohort_size: Any) -> Tuple[int, int]:
  """``(population_size, cohort_size)`` for the fixed-size sampler, validated."""
  if population_size is None:
    raise FedJaxDpError(
        "sampler='fixed_size' needs population_size (the number of users/records the "
        "cohort is drawn from), got None.")
  n = check_int("population_size", population_size, minimum=1)
  if cohort_size is None:
    if sampling_rate is None:
      raise FedJaxDpError(
          "sampler='fixed_size' needs cohort_size or sampling_rate (= cohort_size / "
          "population_size); got neither.")
    m = int(round(sampling_rate * n))
    if m < 1 or abs(m / n - sampling_rate) > _COHORT_RATE_RTOL * sampling_rate:
      raise FedJaxDpError(
          f"sampling_rate={sampling_rate!r} does not correspond to an integer cohort of "
          f"population_size={n} (nearest cohort_size {max(m, 1)} gives "
          f"{max(m, 1) / n!r}); pass cohort_size explicitly.")
    return n, m
  m = check_int("cohort_size", cohort_size, minimum=1, maximum=n)
  if sampling_rate is not None and abs(m / n - sampling_rate) > _COHORT_RATE_RTOL * m / n:
    raise FedJaxDpError(
        f"sampling_rate={sampling_rate!r} is inconsistent with cohort_size / "
        f"population_size = {m}/{n} = {m / n!r} (allowed relative mismatch "
        f"{_COHORT_RATE_RTOL:g}).")
  return n, m


class Schedule(NamedTuple):
  """Where a round of a structured-participation sampler (`SCHEDULED_SAMPLERS`) lies.

  Attributes:
    round_index: the 0-based round (int >= 0).
    min_separation: b, the number of groups of ``"cyclic_poisson"`` (round r serves
      group ``r mod b``).
    epoch_length: t, rounds per epoch of ``"balls_in_bins"`` / ``"random_allocation"``.
    participations: k, rounds per epoch a unit takes part in (1 for balls-in-bins).
    group: the protected unit's group (``"cyclic_poisson"``); 0, the default, is the
      group with the most eligible rounds (rounds 0, b, 2b, ...).
  """
  round_index: int
  min_separation: Optional[int] = None
  epoch_length: Optional[int] = None
  participations: int = 1
  group: int = 0


def _check_schedule(sampler: str, schedule: Any) -> Schedule:
  """``schedule`` validated for ``sampler`` (one of `SCHEDULED_SAMPLERS`)."""
  if not isinstance(schedule, Schedule):
    raise FedJaxDpError(
        f"sampler={sampler!r} needs schedule=Schedule(round_index, ...): its round event "
        f"depends on the round, got {schedule!r}.", option="schedule")
  r = check_int("round_index", schedule.round_index, minimum=0)
  if sampler == "cyclic_poisson":
    b = check_int("min_separation", schedule.min_separation, minimum=1)
    return Schedule(r, b, None, 1, check_int("group", schedule.group, minimum=0,
                                             maximum=b - 1))
  t = check_int("epoch_length", schedule.epoch_length, minimum=1)
  k = check_int("participations", schedule.participations, minimum=1, maximum=t)
  if sampler == "balls_in_bins" and k != 1:
    raise FedJaxDpError(f"balls_in_bins has one participation per epoch, got {k}; use "
                        "random_allocation.", option="participations")
  return Schedule(r, None, t, k, 0)


def _scheduled_event(z: float, q: float, steps: int, sampler: str, observation: str,
                     schedule: Schedule) -> dp_accounting.DpEvent:
  """Round ``schedule.round_index``'s event for the unit of ``schedule.group``.

  * ``cyclic_poisson`` (q: the marginal rate the round reports, q_group = q b): in the
    group's rounds (``r = group mod b``) a Poisson-sampled Gaussian at q_group
    (aggregate; `VisibleParticipationDpEvent` attributable), else `NoOpDpEvent` (the
    unit cannot take part). Group 0 has ``ceil(T / b)`` eligible rounds among T, the
    most of any group, so with constant noise it is the worst case; a ledger with
    varying noise takes the largest epsilon over the groups.
  * ``balls_in_bins`` / ``random_allocation``, attributable: the unit's k uploads of an
    epoch are k visible Gaussian releases (no amplification), charged in the epoch's
    first round (``SelfComposedDpEvent(Gaussian(z), k steps)``), NoOp in its other
    rounds: after R rounds exactly ``k ceil(R / t)`` releases, the epochs touched.
    Aggregate observation has no DpEvent (`fedjax_dp.privacy.allocation`).
  """
  if sampler == "cyclic_poisson":
    b = schedule.min_separation
    assert b is not None
    if (schedule.round_index - schedule.group) % b:
      return dp_accounting.NoOpDpEvent()
    if z == 0.0:
      return dp_accounting.NonPrivateDpEvent()
    if q * b > 1.0 + _COHORT_RATE_RTOL:
      raise FedJaxDpError(f"sampling_rate={q!r} with min_separation={b}: the group rate "
                          f"q*b = {q * b:g} exceeds 1.", option="sampling_rate")
    return _build_event(z, min(1.0, q * b), steps, "poisson", None, None, observation)
  if observation == "aggregate":
    raise FedJaxDpError(
        f"sampler={sampler!r} with observation='aggregate' has no closed-form DpEvent: "
        "it is accounted by the Monte Carlo accountant of fedjax_dp.privacy.allocation "
        "(fedjax_dp.privacy.participation_ledger.ParticipationLedger).",
        option="sampler")
  if schedule.round_index % int(schedule.epoch_length or 1):
    return dp_accounting.NoOpDpEvent()
  if z == 0.0:
    return dp_accounting.NonPrivateDpEvent()
  return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z),
                                           schedule.participations * steps)


def _build_event(z: float, q: float, steps: int, sampler: str,
                 population_size: Optional[int], cohort_size: Optional[int],
                 observation: str = "aggregate", schedule: Optional[Schedule] = None
                 ) -> dp_accounting.DpEvent:
  """`make_dp_event` on already validated arguments."""
  if observation == "public":
    return dp_accounting.NoOpDpEvent()
  if sampler in SCHEDULED_SAMPLERS:
    return _scheduled_event(z, q, steps, sampler, observation,
                            _check_schedule(sampler, schedule))
  if z == 0.0:
    return dp_accounting.NonPrivateDpEvent()
  gaussian = dp_accounting.GaussianDpEvent(z)
  if observation in VISIBLE_PARTICIPATION:
    # Participation is visible: no amplification; the round's releases happen only in
    # the rounds the unit takes part in (probability q, m / n for fixed size).
    inner = gaussian if steps == 1 else dp_accounting.SelfComposedDpEvent(gaussian, steps)
    if sampler == "fixed_size":
      q = int(cohort_size or 0) / int(population_size or 1)
    return inner if q == 1.0 else VisibleParticipationDpEvent(q, inner)
  if sampler == "fixed_size" and int(cohort_size or 0) < int(population_size or 0):
    assert population_size is not None and cohort_size is not None  # both > 0 here
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        population_size, cohort_size, gaussian)
  elif sampler == "fixed_size" or q == 1.0:  # everyone takes part: no amplification
    event = gaussian
  else:
    event = dp_accounting.PoissonSampledDpEvent(q, gaussian)
  if steps > 1:
    event = dp_accounting.SelfComposedDpEvent(event, steps)
  return event


def make_dp_event(noise_multiplier: float, sampling_rate: Optional[float] = None,
                  steps: int = 1, sampler: str = "poisson",
                  population_size: Optional[int] = None,
                  cohort_size: Optional[int] = None,
                  observation: str = "aggregate",
                  schedule: Optional[Schedule] = None) -> dp_accounting.DpEvent:
  """The `DpEvent` of one round: ``steps`` Gaussian releases of a sampled unit, as the
  server observes them. The one function every ledger, calibration and audit claim
  builds round events with.

  ``noise_multiplier`` is ``sigma / Delta`` with ``Delta`` the sensitivity under the
  sampler's relation (module docstring); it is used as given.

  ``observation="aggregate"`` (the server sees only the noisy aggregate; sampling hidden):

  * ``sampler="poisson"``: `PoissonSampledDpEvent(q, GaussianDpEvent(z))` (add/remove
    or zero-out; Mironov, Talwar, Zhang 2019 for RDP); with ``q == 1`` the plain
    `GaussianDpEvent(z)` (no amplification).
  * ``sampler="fixed_size"``, ``cohort_size < population_size``:
    `SampledWithoutReplacementDpEvent(population_size, cohort_size, GaussianDpEvent(z))`
    (replace-one; RDP: Wang, Balle, Kasiviswanathan 2019, Thm. 27; PLD: the dominating
    pair of `fedjax_dp.privacy.accountants`, Zhu, Dong, Wang, AISTATS 2022).
  * ``sampler="fixed_size"``, ``cohort_size == population_size``: every unit takes part,
    so the plain `GaussianDpEvent(z)`.
  * ``steps > 1``: `SelfComposedDpEvent(event, steps)` (e.g. local DP-SGD steps, each
    with its own draw).

  ``observation="attributable"`` (each upload seen with its sender; participation
  visible): `VisibleParticipationDpEvent(q, GaussianDpEvent(z))` (``q = m / n`` for fixed
  size; the plain Gaussian when ``q == 1``), with ``SelfComposedDpEvent(Gaussian, steps)``
  inside for ``steps > 1`` (the unit's round is all or nothing). Exact, no amplification
  (`VisibleParticipationDpEvent`). ``observation="secure_sum"`` gives the same events
  (participation visible to the secure-aggregation server).

  ``observation="public"``: `NoOpDpEvent` (nothing private is released).

  Structured participation (`SCHEDULED_SAMPLERS`, ``schedule`` required; the event of
  the worst-case unit in round ``schedule.round_index``, `_scheduled_event`):
  ``"cyclic_poisson"``: in rounds ``r mod b == 0`` the Poisson event at the group rate
  ``q b`` (q: the marginal rate the round reports; Choquette-Choo et al., NeurIPS 2023,
  the amplification of cyclic Poisson sampling), `NoOpDpEvent` otherwise;
  ``"balls_in_bins"`` / ``"random_allocation"``: attributable only (k Gaussian releases
  per epoch, charged in its first round); aggregate observation is refused (no DpEvent:
  the Monte Carlo accountant, `fedjax_dp.privacy.allocation`).

  ``noise_multiplier == 0``: `NonPrivateDpEvent` (epsilon = inf), except for public
  releases.

  Args:
    noise_multiplier: z >= 0, noise standard deviation / L2 sensitivity under the
      sampler's relation (unitless).
    sampling_rate: q in (0, 1], the probability that a unit takes part. Defaults
      to 1 for ``"poisson"``; for ``"fixed_size"`` it defaults to
      ``cohort_size / population_size`` and, if given, must match it (relative
      tolerance 1e-6, which absorbs float32 rounding).
    steps: number of noisy releases composed in the round (int >= 1).
    sampler: one of `SAMPLERS`.
    population_size: n, units the cohort is drawn from (``"fixed_size"`` only).
    cohort_size: m <= n, units per round (``"fixed_size"``; derived from q if None).
    observation: one of `OBSERVATIONS` (what the server observes; module docstring).
    schedule: a `Schedule` for `SCHEDULED_SAMPLERS` (ignored by the others).

  Returns:
    A `dp_accounting.DpEvent`.

  Raises:
    FedJaxDpError: any argument out of range, NaN or inf, an unknown sampler or
      observation, or missing / inconsistent population and cohort sizes.
  """
  check_choice("sampler", sampler, SAMPLERS)
  check_choice("observation", observation, OBSERVATIONS)
  z = _check_noise_multiplier(noise_multiplier)
  q = None if sampling_rate is None else _check_sampling_rate(sampling_rate)
  steps = _check_count(steps, "steps")
  if sampler == "fixed_size":
    population_size, cohort_size = _resolve_cohort_size(q, population_size, cohort_size)
    q = cohort_size / population_size
  elif q is None:
    q = 1.0
  return _build_event(z, q, steps, sampler, population_size, cohort_size, observation,
                      schedule)


def has_visible_participation(event: dp_accounting.DpEvent) -> bool:
  """Whether ``event`` holds a `VisibleParticipationDpEvent` (which only
  `fedjax_dp.privacy.accountants`' accountants can compose)."""
  if isinstance(event, VisibleParticipationDpEvent):
    return True
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return has_visible_participation(event.event)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return any(has_visible_participation(e) for e in event.events)
  return False


def _has_sampling_without_replacement(event: dp_accounting.DpEvent) -> bool:
  if isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
    return True
  if isinstance(event, (dp_accounting.SelfComposedDpEvent, VisibleParticipationDpEvent)):
    return _has_sampling_without_replacement(event.event)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return any(_has_sampling_without_replacement(e) for e in event.events)
  return False


def dp_accounting_relation(event: dp_accounting.DpEvent) -> NeighborRel:
  """The `dp_accounting.NeighboringRelation` to compose ``event`` under so that every
  `GaussianDpEvent(z)` in it means a shift of ``1/z`` standard deviations (module
  docstring): ``REPLACE_ONE`` if it holds a `SampledWithoutReplacementDpEvent`
  (for RDP, which reads plain Gaussians the same under every relation; the PLD
  accountant, `fedjax_dp.privacy.accountants.PldAccountant`, always uses shift
  semantics), else
  ``ADD_OR_REMOVE_ONE`` (Poisson-sampled events: add/remove; zero-out composes the
  same, dp_accounting's ``REPLACE_SPECIAL``)."""
  return (NeighborRel.REPLACE_ONE if _has_sampling_without_replacement(event)
          else NeighborRel.ADD_OR_REMOVE_ONE)


class Truncation(NamedTuple):
  """How a padded Poisson draw can be truncated, for the delta it costs.

  A Poisson sample (of clients into a cohort of static size ``cap``, or of a client's
  examples into a physical batch of size ``cap``) that draws more than ``cap`` units is
  truncated. The truncated mechanism differs from the accounted one only on that
  event, so it adds `probability` to delta (see `truncation_delta`). A neighbouring
  dataset may hold one unit more, so the tail is taken over ``population_size + 1``.

  Attributes:
    population_size: the largest number of units a draw is made from (clients N, or the
      largest client's examples).
    cap: the static padded size (``k_max``, or the DP-SGD batch cap).
    draws_per_step: independent draws per noisy release (1 for a cohort; the number of
      client slots that train for a DP-SGD batch draw).
  """
  population_size: int
  cap: int
  draws_per_step: int = 1

  def probability(self, sampling_rate: float, steps: int = 1) -> float:
    """Union bound on the probability that any of one round's draws is truncated:
    ``draws_per_step * steps * P(Binomial(population_size + 1, q) > cap)``."""
    tail = float(stats.binom.sf(self.cap, self.population_size + 1, sampling_rate))
    return min(1.0, self.draws_per_step * steps * tail)


def truncation_delta(epsilon: float, truncation_probability: float) -> float:
  """The delta that truncation adds: ``(1 + e^epsilon) p``.

  If a mechanism M is (epsilon, delta)-DP and M' equals M except on an event of
  probability at most p on every input (e.g. a Poisson draw overflowing its static
  cap), then for every set S, ``P[M'(D) in S] <= P[M(D) in S] + p <= e^eps (P[M'(D') in
  S] + p) + delta + p``, so M' is (epsilon, delta + (1 + e^epsilon) p)-DP.

  Returns:
    The added delta (``inf`` if epsilon is inf and p > 0; 0 if p == 0).
  """
  p = check_non_negative("truncation_probability", truncation_probability)
  if p == 0.0:
    return 0.0
  if epsilon > 700:
    return math.inf
  return (1.0 + math.exp(epsilon)) * p


# ---------------------------------------------------------------------------
# Constant schedules.
# ---------------------------------------------------------------------------

def _constant_schedule_event(noise_multiplier, sampling_rate, rounds, steps_per_round,
                             sampler, population_size, cohort_size):
  event = make_dp_event(noise_multiplier, sampling_rate, steps_per_round, sampler,
                        population_size, cohort_size)
  return dp_accounting.SelfComposedDpEvent(event, rounds)
