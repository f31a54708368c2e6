"""What every algorithm module returns: an `Algorithm` bundle ready for the driver."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

import dp_accounting
import jax

from fedjax_dp.federated.round import RoundHParams
from fedjax_dp.federated.server import ServerState
from fedjax_dp.privacy import accountants, disclosure, events
from fedjax_dp.privacy.ledger import PrivacyLedger, _check_truncation
from fedjax_dp.privacy.multi_release import MultiReleaseLedger, check_release_name
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int, check_positive,
                                  check_probability)


@dataclasses.dataclass(frozen=True)
class Release:
  """One kind of noisy release that each round of an algorithm makes, when a round
  makes several (`PrivacySpec.releases`), e.g. the inner (query-set) and outer
  (support-set) DP-SGD stages of federated MAML (RDP-PFL, paper 003, Sec. III-A,
  Eqs. 6-11: each of the tau0 local epochs of a round releases one Poisson-subsampled
  Gaussian of each).

  Every release of a spec shares its sampler, neighbouring relation and privacy unit
  (`PrivacySpec`); its event is `fedjax_dp.privacy.events.make_dp_event` of
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
    object.__setattr__(self, "truncation", _check_truncation(self.truncation))

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


@dataclasses.dataclass(frozen=True)
class PrivacySpec:
  """What an algorithm's rounds release and under which neighbouring relation, stated
  by the algorithm that defines the release (the runner and the ledger never rescale
  a noise multiplier).

  Every round reports ``noise_multiplier = noise_stddev / sensitivity`` with the
  sensitivity under ``relation`` (`fedjax_dp.federated.round.RoundMetrics`); the ledger
  made by `make_ledger` composes exactly those numbers.

  Several releases per round (``releases``, e.g. federated MAML's inner and outer DP-SGD
  stages) are first-class: each `Release` has its own sampling rate, steps, event scale
  and truncation, all share ``unit``, ``relation`` and ``sampler`` (the neighbouring
  relation every release's sensitivity is computed under, so that their composition is
  a guarantee for one protected unit), the round reports each release's numbers
  (`RoundMetrics.releases`) and `make_ledger` gives a
  `fedjax_dp.privacy.multi_release.MultiReleaseLedger` composing them all.

  Attributes:
    unit: ``"user-level"`` (a client's whole data) or ``"record-level"`` (one example).
    relation: the neighbouring relation, one of
      `fedjax_dp.privacy.sensitivity.RELATIONS` (``"add_remove"``, ``"zero_out"``,
      ``"replace_one"``); must fit ``sampler``.
    sampler: ``"poisson"`` or ``"fixed_size"`` (selects the DpEvent).
    sampling_rate: q of the event (the record rate for local DP-SGD); with
      ``releases``, unused (left at 1.0).
    steps: noisy releases per round (local DP-SGD steps; 1 at user level); with
      ``releases``, unused (left at 1).
    population_size, cohort_size: n and m of a fixed-size sampler (None for Poisson).
    truncation: a `fedjax_dp.privacy.events.Truncation` when the event's Poisson
      draws are padded to a static cap (its probability is added to delta), or None;
      with ``releases``, unused (None: each release has its own).
    event_scale: the algorithm's noise-multiplier hyper-parameter times this is the
      event's noise multiplier (``clip_norm / sensitivity``: 1/2 for a fixed-size
      cohort's sum of clipped updates, 1 otherwise); what `round_event` and
      calibration use. With ``releases``, unused (left at 1.0).
    per_client: True when noise multipliers differ by client (`make_ledger` then gives
      a `fedjax_dp.privacy.per_client.PerClientLedger` over ``num_clients``).
    num_clients: N (per-client accounting only).
    note: caveats stated in summaries (e.g. what amplification is not claimed).
    clip_norm: the bound the code enforces on what is released (parameter units), or
      None; ``clipped`` says what it bounds (each client's update, each example's
      gradient, a client's parameters, ...). Reported in summary.json as used.
    releases: None (one release per round, described by ``sampling_rate``, ``steps``,
      ``truncation``, ``event_scale``), or a non-empty tuple of `Release` with distinct
      names: every round makes each of them (they then replace those four fields,
      which must stay at their defaults). Not combinable with ``per_client``.
    observation: what the server (the adversary of the guarantee) observes of every
      release (`fedjax_dp.privacy.events.OBSERVATIONS`): ``"aggregate"`` (only the noisy
      aggregate: ``sampling_rate`` is hidden sampling, which amplifies),
      ``"attributable"`` (each upload with its sender: ``sampling_rate`` is the unit's
      visible participation probability, no amplification) or ``"public"``. The ledger
      (`make_ledger`), calibration (`round_event`) and the canary audit
      (`fedjax_dp.auditing`) all read it; `fedjax_dp.privacy.events.make_dp_event`
      turns it into the DpEvent.
    ledger_factory: with ``per_client``, ``ledger_factory(delta)`` makes the per-client
      ledger instead of a `fedjax_dp.privacy.per_client.PerClientLedger`, for an
      algorithm whose per-client releases a generic ledger cannot express (e.g.
      DP-MOCHA's devices, each releasing only in the rounds it takes part in:
      `fedjax_dp.privacy.device_ledger.DeviceLedger`). It must follow
      PerClientLedger's protocol (``record_many``, ``epsilons``, ``worst_client``,
      ``worst_epsilon``, ``worst_ledger``, ``to_dict`` and a ``from_dict``
      classmethod). None: PerClientLedger. Without ``per_client``, it makes the run's
      single ledger instead of a `PrivacyLedger`, for a mechanism whose rounds do not
      compose as independent events (correlated noise across rounds: DP-FTRL's tree,
      banded matrix factorisation); it must follow PrivacyLedger's protocol as the run
      uses it (``record_many(zs, qs, steps) -> epsilons``, ``epsilon``,
      ``truncation_probability``, ``delta_total``, ``accounting_warnings``, ``to_dict``)
      and then ``run_event`` must be given too.
    run_event: ``run_event(z, rounds) -> DpEvent``: the event of ``rounds`` rounds at
      noise-multiplier hyper-parameter ``z`` (calibration to a target epsilon inverts
      it), for a mechanism whose run is not ``rounds`` independent `round_event` events;
      None: ``SelfComposedDpEvent(round_event(z), rounds)``.

  Raises:
    FedJaxDpError: on construction: an unknown unit, a relation that does not fit the
      sampler, or ``releases`` that are not distinct `Release`s, combined with
      ``per_client`` or with the single-release fields set.
  """
  unit: str
  relation: str
  sampler: str
  sampling_rate: float = 1.0
  steps: int = 1
  population_size: Optional[int] = None
  cohort_size: Optional[int] = None
  truncation: Optional[events.Truncation] = None
  event_scale: float = 1.0
  per_client: bool = False
  num_clients: Optional[int] = None
  note: str = ""
  clip_norm: Optional[float] = None
  clipped: str = ""
  releases: Optional[Tuple[Release, ...]] = None
  ledger_factory: Optional[Callable[[float], Any]] = None
  run_event: Optional[Callable[[float, int], Any]] = None
  observation: str = "aggregate"

  def __post_init__(self):
    check_choice("unit", self.unit, ("user-level", "record-level"))
    events.check_observation(self.observation, self.sampler, self.relation, self.unit)
    if (self.ledger_factory is not None and not self.per_client
        and self.run_event is None):
      raise FedJaxDpError("a ledger_factory without per_client makes the run's ledger of "
                          "a mechanism whose rounds are not independent events: give "
                          "run_event too (calibration inverts it).", option="ledger_factory")
    events.neighboring_relation(self.sampler, None, self.relation)  # the pairing
    if self.releases is not None:
      self._check_releases()

  def _check_releases(self) -> None:
    releases = self.releases
    if isinstance(releases, Release) or not isinstance(releases, (list, tuple)):
      raise FedJaxDpError(f"releases must be a tuple of Release (or None), got "
                          f"{releases!r}.", option="releases")
    releases = tuple(releases)
    object.__setattr__(self, "releases", releases)
    if not releases:
      raise FedJaxDpError("releases must hold at least one Release (or be None), got ().",
                          option="releases")
    bad = [r for r in releases if not isinstance(r, Release)]
    if bad:
      raise FedJaxDpError(f"releases must hold Release objects, got {bad[0]!r}.",
                          option="releases")
    names = [r.name for r in releases]
    if len(set(names)) != len(names):
      raise FedJaxDpError(f"releases must have distinct names, got {names!r}.",
                          option="releases")
    if self.per_client:
      raise FedJaxDpError("releases cannot be combined with per_client=True (per-client "
                          "accounting of several releases per round is not supported).",
                          option="releases")
    single = {"sampling_rate": (self.sampling_rate, 1.0), "steps": (self.steps, 1),
              "truncation": (self.truncation, None), "event_scale": (self.event_scale, 1.0)}
    set_ = [f"{k}={v!r}" for k, (v, default) in single.items() if v != default]
    if set_:
      raise FedJaxDpError(
          f"with releases, PrivacySpec's own sampling_rate, steps, truncation and "
          f"event_scale are unused (each Release has its own) and must stay at their "
          f"defaults; got {', '.join(set_)}.", option="releases")

  @property
  def release_names(self) -> Optional[Tuple[str, ...]]:
    """The releases' names, or None for a single release per round."""
    return None if self.releases is None else tuple(r.name for r in self.releases)

  @property
  def neighboring(self) -> str:
    """The relation in words (for summaries)."""
    return events.neighboring_relation(self.sampler, self.unit, self.relation)[1]

  @property
  def observed(self) -> str:
    """What the server observes, in words (for summaries)."""
    return events.observation_text(self.observation)

  def ledger_kwargs(self) -> Dict[str, Any]:
    """The `PrivacyLedger` arguments (besides delta) of this mechanism."""
    return dict(sampler=self.sampler, relation=self.relation,
                population_size=self.population_size, cohort_size=self.cohort_size,
                privacy_unit=self.unit, truncation=self.truncation,
                observation=self.observation)

  def make_ledger(self, delta: float):
    """An empty ledger for this mechanism's rounds: a `PrivacyLedger`, a
    `PerClientLedger` (or ``ledger_factory``'s) when ``per_client``, or a
    `MultiReleaseLedger` (one ledger per release, each with its own truncation) with
    ``releases``."""
    if self.releases is not None:
      kwargs = self.ledger_kwargs()
      del kwargs["truncation"]
      return MultiReleaseLedger(self.release_names, delta,
                                truncations={r.name: r.truncation for r in self.releases},
                                **kwargs)
    if self.ledger_factory is not None:
      return self.ledger_factory(delta)
    if self.per_client:
      from fedjax_dp.privacy.per_client import PerClientLedger
      return PerClientLedger(self.num_clients, delta, **self.ledger_kwargs())
    return PrivacyLedger(delta, **self.ledger_kwargs())

  def round_event(self, noise_multiplier: float):
    """The planned `DpEvent` of one round whose noise-multiplier hyper-parameter is
    ``noise_multiplier`` (for calibration and the budget guard; the ledger composes the
    rounds' reported values, which a test checks against this). Built by
    `fedjax_dp.privacy.events.make_dp_event` from the spec's sampler, relation (through
    the reported z) and ``observation``: amplified events for an aggregate, visible
    participation for attributable uploads (see there for each bound's source).

    With ``releases``: ``ComposedDpEvent([release.dp_event(z, sampler, ...), ...])``,
    every release's ``make_dp_event(z * event_scale, sampling_rate, steps)`` under the
    spec's sampler (and sizes), composed."""
    if self.releases is not None:
      return dp_accounting.ComposedDpEvent(
          [r.dp_event(noise_multiplier, self.sampler, self.population_size,
                      self.cohort_size, self.observation) for r in self.releases])
    return events.make_dp_event(
        noise_multiplier * self.event_scale, self.sampling_rate, self.steps, self.sampler,
        self.population_size, self.cohort_size, self.observation)

  def events_of_run(self, noise_multiplier: float, rounds: int) -> dp_accounting.DpEvent:
    """The `DpEvent` of ``rounds`` rounds at noise-multiplier hyper-parameter
    ``noise_multiplier``: ``run_event``'s when given, else ``rounds`` self-composed
    `round_event` events."""
    if self.run_event is not None:
      return self.run_event(noise_multiplier, rounds)
    return dp_accounting.SelfComposedDpEvent(self.round_event(noise_multiplier), rounds)

  def calibration_events(self, noise_multiplier: float, rounds: int
                         ) -> Tuple[dp_accounting.DpEvent, ...]:
    """The events of ``rounds`` rounds whose largest epsilon is the run's: one event,
    `events_of_run`, unless a record can influence only some of the releases (a
    subclass returns one event per group of releases, e.g. RDP-PFL's stages).
    Calibration to a target epsilon takes the largest z over them
    (`fedjax_dp.runs.privacy.calibrate_noise_multiplier`)."""
    return (self.events_of_run(noise_multiplier, rounds),)

  def supports(self, accountant: str) -> bool:
    """Whether ``accountant`` can account for this mechanism's events (both can, for
    every sampler and observation, since issue 30).

    Raises:
      FedJaxDpError: an unknown accountant.
    """
    accountants.check_accountant_supports(accountant, self.sampler, self.population_size,
                                          self.cohort_size)
    return True


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A federated algorithm instantiated for one dataset and model.

  Attributes:
    name: algorithm name.
    round_fn: ``round_fn(state, data, hp, root_key) -> (state, RoundMetrics)``.
    init: ``init(key) -> ServerState``.
    hparams: default per-round `RoundHParams` (scalars; the driver broadcasts them).
    privacy: a `PrivacySpec`, or None for a non-private algorithm.
    k_max: static padded cohort size.
    config: the resolved configuration (for summaries).
    sampling_rate: the clients' sampling rate q (fixed-size cohorts: m / N).
  """
  name: str
  round_fn: Callable
  init: Callable[[jax.Array], ServerState]
  hparams: RoundHParams
  privacy: Optional[PrivacySpec]
  k_max: int
  config: Dict[str, Any]
  sampling_rate: float


def require_learning_rates(round_fn: Callable) -> Callable:
  """Wraps an algorithm's ``round_fn``: its optimisers were built with learning rate 1,
  so ``hp.client.learning_rate`` and ``hp.server_learning_rate`` must be given.

  Raises (at trace time):
    FedJaxDpError: a learning rate left as None (e.g. hyper-parameters built from
      scratch instead of from ``alg.hparams._replace(...)``).
  """

  def checked(state, data, hp, root_key):
    for name, value in (("hp.client.learning_rate", hp.client.learning_rate),
                        ("hp.server_learning_rate", hp.server_learning_rate)):
      if value is None:
        raise FedJaxDpError(
            f"{name} is None, but this algorithm reads its learning rates from the "
            "hyper-parameters (its optimisers have learning rate 1): start from "
            "alg.hparams and change fields with ._replace(...).")
    return round_fn(state, data, hp, root_key)

  return checked
