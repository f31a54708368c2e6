"""What an algorithm's rounds release, under which neighbouring relation: its privacy
statement, one explicit variant per kind of mechanism.

`PrivacyStatement` holds what every statement has (the privacy unit, the neighbouring
relation, the sampler, what the server observes, the fixed-size population and cohort
sizes, and the human-readable fields of summary.json). Each variant adds only its own
fields and owns its behaviour (`make_ledger`, `round_event`, `events_of_run`,
`calibration_events`, `planned_report`, the summary fields):

* `PrivacySpec`: one release per round (``sampling_rate``, ``steps``, ``truncation``,
  ``event_scale``), accounted by a `fedjax_dp.privacy.ledger.PrivacyLedger`;
* `PerClientPrivacySpec`: the same release with a noise multiplier per client
  (``num_clients``), accounted by a `fedjax_dp.privacy.per_client.PerClientLedger` or the
  algorithm's own per-device ledger (``ledger_factory``);
* `CorrelatedNoiseSpec`: the same release with noise correlated across rounds
  (``run_event``: the whole run is one event), accounted by a
  `fedjax_dp.privacy.correlated_ledger.CorrelatedNoiseLedger`;
* `fedjax_dp.algorithms.multi_release_spec.MultiReleaseSpec`: several releases per round
  (``releases``, each a `Release` with its own rate, steps, event scale and truncation),
  accounted by a `fedjax_dp.privacy.multi_release.MultiReleaseLedger`. An algorithm
  whose records each influence only some of the releases subclasses it (RDP-PFL's
  `fedjax_dp.algorithms.rdp_pfl.privacy.GroupedPrivacySpec`).

All are re-exported by `fedjax_dp.algorithms.base`.

A variant given a field of another variant refuses it with a `FedJaxDpError` naming the
field and the variants that have it. The read-only properties ``per_client``,
``releases`` and ``release_names`` say which kind a statement is, for the run loop.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, ClassVar, Dict, List, Optional, Tuple

import dp_accounting
import numpy as np

from fedjax_dp.privacy import accountants, events
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.privacy.ledger_protocol import Ledger, PrivacyReport
from fedjax_dp.validation import FedJaxDpError, check_choice, check_int

__all__ = ["PrivacyStatement", "PrivacySpec", "PerClientPrivacySpec", "CorrelatedNoiseSpec"]


def _variants(cls: type) -> List[type]:
  """``cls`` and all its subclasses (every privacy statement variant defined so far)."""
  out, todo = [], [cls]
  while todo:
    c = todo.pop()
    out.append(c)
    todo.extend(c.__subclasses__())
  return out


@dataclasses.dataclass(frozen=True)
class PrivacyStatement(abc.ABC):
  """What every privacy statement has: the release's protected unit, neighbouring
  relation, sampler and observation, and what summary.json states about it. Abstract:
  build one of its variants (module docstring).

  Every round reports ``noise_multiplier = noise_stddev / sensitivity`` with the
  sensitivity under ``relation`` (`fedjax_dp.federated.round.RoundMetrics`); the ledger
  made by `make_ledger` composes exactly those numbers (the runner and the ledger never
  rescale a noise multiplier).

  Attributes:
    unit: ``"user-level"`` (a client's whole data) or ``"record-level"`` (one example).
    relation: the neighbouring relation, one of
      `fedjax_dp.privacy.sensitivity.RELATIONS` (``"add_remove"``, ``"zero_out"``,
      ``"replace_one"``); must fit ``sampler``.
    sampler: ``"poisson"`` or ``"fixed_size"`` (selects the DpEvent).
    population_size, cohort_size: n and m of a fixed-size sampler (None for Poisson);
      keyword-only, as are all the fields below and every variant's.
    observation: what the server (the adversary of the guarantee) observes of every
      release (`fedjax_dp.privacy.events.OBSERVATIONS`): ``"aggregate"`` (only the noisy
      aggregate: a sampling rate is hidden sampling, which amplifies),
      ``"attributable"`` (each upload with its sender: the rate is the unit's visible
      participation probability, no amplification) or ``"public"``. The ledger
      (`make_ledger`), calibration (`round_event`) and the canary audit
      (`fedjax_dp.auditing`) all read it; `fedjax_dp.privacy.events.make_dp_event`
      turns it into the DpEvent.
    note: caveats stated in summaries (e.g. what amplification is not claimed).
    clip_norm: the bound the code enforces on what is released (parameter units), or
      None; ``clipped`` says what it bounds (each client's update, each example's
      gradient, a client's parameters, ...). Reported in summary.json as used.

  Raises:
    FedJaxDpError: on construction: a field of another variant (naming it and the
      variants that have it), an unknown unit, a relation that does not fit the sampler
      or an observation that does not fit the relation.
  """
  unit: str
  relation: str
  sampler: str
  _: dataclasses.KW_ONLY
  population_size: Optional[int] = None
  cohort_size: Optional[int] = None
  observation: str = "aggregate"
  note: str = ""
  clip_norm: Optional[float] = None
  clipped: str = ""

  #: Said after the fields of other variants a construction refuses.
  _foreign_hint: ClassVar[str] = ""

  def __new__(cls, *args: Any, **kwargs: Any):
    """Refuses keyword arguments that are not fields of ``cls`` (before the dataclass
    ``__init__`` would raise a TypeError), naming them and the variants that have them.

    Raises:
      FedJaxDpError: such an argument (option: the first one).
    """
    del args
    own = {f.name for f in dataclasses.fields(cls)}
    foreign = [k for k in kwargs if k not in own]
    if foreign:
      raise FedJaxDpError(cls._foreign_message(foreign, kwargs), option=foreign[0])
    return super().__new__(cls)

  @classmethod
  def _foreign_message(cls, names: List[str], kwargs: Dict[str, Any]) -> str:
    why = []
    for k in names:
      owners = [c.__name__ for c in _variants(PrivacyStatement)
                if dataclasses.is_dataclass(c) and
                k in {f.name for f in dataclasses.fields(c)}]
      if owners:
        why.append(f"{k} is a field of {', '.join(sorted(set(owners)))}")
      elif isinstance(getattr(cls, k, None), property):
        why.append(f"{k} is read-only: it follows from the variant")
      else:
        why.append(f"{k} is a field of no privacy statement")
    got = ", ".join(f"{k}={kwargs[k]!r}" for k in names)
    return f"{cls.__name__} takes no {got} ({'; '.join(why)}).{cls._foreign_hint}"

  def __post_init__(self):
    check_choice("unit", self.unit, ("user-level", "record-level"))
    events.check_observation(self.observation, self.sampler, self.relation, self.unit)
    events.neighboring_relation(self.sampler, None, self.relation)  # the pairing

  # -- what the run loop reads -------------------------------------------------

  @property
  def per_client(self) -> bool:
    """Whether noise multipliers differ by client (`PerClientPrivacySpec`)."""
    return False

  @property
  def release_names(self) -> Optional[Tuple[str, ...]]:
    """The releases' names (`MultiReleaseSpec`), or None for one release per round."""
    return None

  @property
  def neighboring(self) -> str:
    """The relation in words (for summaries)."""
    return events.neighboring_relation(self.sampler, self.unit, self.relation)[1]

  @property
  def observed(self) -> str:
    """What the server observes, in words (for summaries)."""
    return events.observation_text(self.observation)

  def ledger_kwargs(self) -> Dict[str, Any]:
    """The `PrivacyLedger` arguments (besides delta and a truncation) of this
    mechanism."""
    return dict(sampler=self.sampler, relation=self.relation,
                population_size=self.population_size, cohort_size=self.cohort_size,
                privacy_unit=self.unit, observation=self.observation)

  # -- each variant's accounting ------------------------------------------------

  @abc.abstractmethod
  def make_ledger(self, delta: float) -> Ledger:
    """An empty ledger (a `fedjax_dp.privacy.ledger_protocol.Ledger`) for this
    mechanism's rounds at ``delta``."""

  @abc.abstractmethod
  def planned_report(self, noise_multiplier: Any, rounds: int) -> PrivacyReport:
    """What ``rounds`` rounds at noise-multiplier hyper-parameter ``noise_multiplier``
    would report (for the budget guard, `fedjax_dp.runs.privacy.budget_rounds`).

    Raises:
      FedJaxDpError: as `fedjax_dp.privacy.ledger_protocol.PrivacyReport`.
    """

  @abc.abstractmethod
  def round_event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
    """The planned `DpEvent` of one round whose noise-multiplier hyper-parameter is
    ``noise_multiplier`` (for calibration and the budget guard; the ledger composes the
    rounds' reported values, which a test checks against this)."""

  def events_of_run(self, noise_multiplier: float, rounds: int) -> dp_accounting.DpEvent:
    """The `DpEvent` of ``rounds`` rounds at noise-multiplier hyper-parameter
    ``noise_multiplier``: ``rounds`` self-composed `round_event` events (rounds are
    independent events, composed; `CorrelatedNoiseSpec` states its run itself)."""
    return dp_accounting.SelfComposedDpEvent(self.round_event(noise_multiplier), rounds)

  def calibration_events(self, noise_multiplier: float, rounds: int
                         ) -> Tuple[dp_accounting.DpEvent, ...]:
    """The events of ``rounds`` rounds whose largest epsilon is the run's: one event,
    `events_of_run`, unless a record can influence only some of the releases (a
    subclass returns one event per group of releases, e.g. RDP-PFL's stages).
    Calibration to a target epsilon takes the largest z over them
    (`fedjax_dp.runs.privacy.calibrate_noise_multiplier`).

    Raises:
      FedJaxDpError: a statement that cannot be calibrated to one z
        (`PerClientPrivacySpec`).
    """
    return (self.events_of_run(noise_multiplier, rounds),)

  def supports(self, accountant: str) -> bool:
    """Whether ``accountant`` can account for this mechanism's events (both can, for
    every sampler and observation).

    Raises:
      FedJaxDpError: an unknown accountant.
    """
    accountants.check_accountant_supports(accountant, self.sampler, self.population_size,
                                          self.cohort_size)
    return True

  # -- what summaries and metrics state ------------------------------------------

  def accounting_fields(self, delta: float) -> Dict[str, Any]:
    """What fixes the DpEvent besides each round's (z, q, dp_steps), written into every
    record of metrics.jsonl (`fedjax_dp.runs.privacy.accounting_fields`): ``delta``,
    ``sampler``, ``neighboring_relation``, ``observation``, ``privacy_unit``,
    ``population_size``, ``cohort_size``; variants add their truncation or releases."""
    return {"delta": delta, "sampler": self.sampler, "neighboring_relation": self.relation,
            "observation": self.observation, "privacy_unit": self.unit,
            "population_size": self.population_size, "cohort_size": self.cohort_size}

  def guarantee_ledger(self, ledger: Any, accountant: str = "rdp") -> Any:
    """The ledger whose epsilon, ``truncation_probability``, ``delta_total``, ``orders``
    and ``rdp()`` state the run's guarantee: ``ledger`` itself (a per-client statement:
    the worst client's, `PerClientPrivacySpec.guarantee_ledger`)."""
    del accountant
    return ledger

  def summary_fields(self, ledger: Any, accountant: str, delta: float) -> Dict[str, Any]:
    """The guarantee's fields of summary.json for the run's ``ledger`` (made by
    `make_ledger`): ``relation``, ``observation``, ``observed_by_server``,
    ``truncation_probability``, ``delta_total`` (``delta + (1 + e^eps) p``,
    `fedjax_dp.privacy.events.truncation_delta`) and ``guarantee`` (in words), from
    `guarantee_ledger` under ``accountant`` (RDP where this statement does not support
    it); variants add their own (`_summary_extras`)."""
    acc = accountant if self.supports(accountant) else "rdp"
    single = self.guarantee_ledger(ledger, acc)
    eps = single.epsilon(accountant=acc)
    p = single.truncation_probability()
    delta_total = single.delta_total(accountant=acc)
    out = {"relation": self.relation, "observation": self.observation,
           "observed_by_server": self.observed, "truncation_probability": p,
           "delta_total": delta_total,
           "guarantee": (f"({eps:.4g}, {delta_total:.4g})-DP, {self.unit}, "
                         f"{self.neighboring}; the server observes {self.observed}; "
                         f"{acc.upper()} accountant"
                         + (f"; delta includes {delta_total - delta:.3g} for the "
                            f"probability {p:.3g} that a padded Poisson draw was "
                            "truncated" if p > 0 else ""))}
    self._summary_extras(ledger, out)
    return out

  def _summary_extras(self, ledger: Any, out: Dict[str, Any]) -> None:
    """Adds this variant's fields to `summary_fields`' ``out`` (in place); none here."""
    del ledger, out


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrivacySpec(PrivacyStatement):
  """One release per round (the default statement): each round releases
  ``make_dp_event(z * event_scale, sampling_rate, steps)`` as the server observes it
  (`fedjax_dp.privacy.events.make_dp_event`, which cites each bound's source),
  accounted by a `fedjax_dp.privacy.ledger.PrivacyLedger`.

  Attributes (besides `PrivacyStatement`'s):
    sampling_rate: q of the event (the record rate for local DP-SGD).
    steps: noisy releases per round (local DP-SGD steps; 1 at user level).
    truncation: a `fedjax_dp.privacy.events.Truncation` when the event's Poisson
      draws are padded to a static cap (its probability is added to delta), or None.
    event_scale: the algorithm's noise-multiplier hyper-parameter times this is the
      event's noise multiplier (``clip_norm / sensitivity``: 1/2 for a fixed-size
      cohort's sum of clipped updates, 1 otherwise); what `round_event` and
      calibration use.

  Raises:
    FedJaxDpError: as `PrivacyStatement`.
  """
  sampling_rate: float = 1.0
  steps: int = 1
  truncation: Optional[events.Truncation] = None
  event_scale: float = 1.0

  _foreign_hint: ClassVar[str] = (
      " Several releases per round: MultiReleaseSpec(releases=...); noise multipliers "
      "per client: PerClientPrivacySpec(num_clients=...); noise correlated across "
      "rounds: CorrelatedNoiseSpec(run_event=...).")

  @property
  def releases(self) -> None:
    """None: one release per round (`MultiReleaseSpec` has several)."""
    return None

  def ledger_kwargs(self) -> Dict[str, Any]:
    """The `PrivacyLedger` arguments (besides delta) of this mechanism, its
    ``truncation`` included."""
    return dict(super().ledger_kwargs(), truncation=self.truncation)

  def make_ledger(self, delta: float) -> Ledger:
    """An empty `fedjax_dp.privacy.ledger.PrivacyLedger` with this release's sampler,
    relation, sizes, observation and truncation."""
    return PrivacyLedger(delta, **self.ledger_kwargs())

  def planned_report(self, noise_multiplier: Any, rounds: int) -> PrivacyReport:
    """Each round ``z * event_scale`` at ``sampling_rate`` and ``steps``: a float ``z``
    gives ``noise_multiplier`` ``[rounds]``; a per-client ``[N]`` ``z`` gives
    ``client_noise_multipliers`` ``[rounds, N]`` (their minimum as the round's).

    Raises:
      FedJaxDpError: as `fedjax_dp.privacy.ledger_protocol.PrivacyReport`.
    """
    z_event = np.asarray(noise_multiplier, np.float64) * self.event_scale
    zs = np.broadcast_to(z_event, (rounds,) + z_event.shape)
    if zs.ndim == 1:
      return PrivacyReport(zs, self.sampling_rate, self.steps)
    return PrivacyReport(zs.min(axis=1), self.sampling_rate, self.steps,
                         client_noise_multipliers=zs)

  def round_event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
    """`fedjax_dp.privacy.events.make_dp_event` of ``(noise_multiplier * event_scale,
    sampling_rate, steps)`` under the spec's sampler, sizes and ``observation``:
    amplified events for an aggregate, visible participation for attributable uploads
    (see there for each bound's source)."""
    return events.make_dp_event(
        noise_multiplier * self.event_scale, self.sampling_rate, self.steps, self.sampler,
        self.population_size, self.cohort_size, self.observation)

  def accounting_fields(self, delta: float) -> Dict[str, Any]:
    """`PrivacyStatement.accounting_fields` and, with a truncation model,
    ``truncation_population_size``, ``truncation_cap`` and
    ``truncation_draws_per_step``."""
    out = super().accounting_fields(delta)
    if self.truncation is not None:
      out.update(truncation_population_size=self.truncation.population_size,
                 truncation_cap=self.truncation.cap,
                 truncation_draws_per_step=self.truncation.draws_per_step)
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class PerClientPrivacySpec(PrivacySpec):
  """One release per round whose noise multiplier differs by client: every client is
  accounted in every round that could include it, with its own noise multiplier, and
  the run's epsilon is the worst client's.

  Attributes (besides `PrivacySpec`'s):
    num_clients: N >= 1, the clients accounted.
    ledger_factory: ``ledger_factory(delta)`` makes the per-client ledger instead of a
      `fedjax_dp.privacy.per_client.PerClientLedger`, for an algorithm whose per-client
      releases a generic ledger cannot express (e.g. DP-MOCHA's devices, each releasing
      only in the rounds it takes part in: `fedjax_dp.privacy.device_ledger.DeviceLedger`).
      It must implement `fedjax_dp.privacy.ledger_protocol.Ledger` (reports with
      ``client_noise_multipliers``) and PerClientLedger's summary extras
      (``worst_client``, ``worst_ledger``). None: PerClientLedger.

  Raises:
    FedJaxDpError: as `PrivacyStatement`; ``num_clients`` not an int >= 1.
  """
  num_clients: int
  ledger_factory: Optional[Callable[[float], Ledger]] = None

  _foreign_hint: ClassVar[str] = (
      " Per-client accounting of several releases per round or of noise correlated "
      "across rounds is not supported.")

  def __post_init__(self):
    super().__post_init__()
    object.__setattr__(self, "num_clients",
                       check_int("num_clients", self.num_clients, minimum=1))

  @property
  def per_client(self) -> bool:
    """True: noise multipliers differ by client."""
    return True

  def make_ledger(self, delta: float) -> Ledger:
    """``ledger_factory(delta)``, or an empty `PerClientLedger` over ``num_clients``
    with `PrivacySpec.ledger_kwargs`."""
    if self.ledger_factory is not None:
      return self.ledger_factory(delta)
    from fedjax_dp.privacy.per_client import PerClientLedger
    return PerClientLedger(self.num_clients, delta, **self.ledger_kwargs())

  def calibration_events(self, noise_multiplier: float, rounds: int
                         ) -> Tuple[dp_accounting.DpEvent, ...]:
    """Refused: each client has its own noise multiplier, so there is no one z to
    calibrate.

    Raises:
      FedJaxDpError: always (option ``target_epsilon``).
    """
    raise FedJaxDpError("target_epsilon calibration is not available with "
                        "client_noise_multipliers (each client has its own); give the "
                        "noise multipliers, and target_epsilon only as a budget guard.",
                        option="target_epsilon")

  def guarantee_ledger(self, ledger: Any, accountant: str = "rdp") -> Any:
    """The worst client's ledger (``ledger.worst_ledger(accountant=accountant)``)."""
    return ledger.worst_ledger(accountant=accountant)

  def _summary_extras(self, ledger: Any, out: Dict[str, Any]) -> None:
    """``worst_client`` and ``per_client_epsilon_rdp`` (every client's RDP epsilon,
    float list ``[N]``, or None when they are all equal)."""
    eps_clients = ledger.unit_epsilons("rdp")
    out["worst_client"] = ledger.worst_client()
    out["per_client_epsilon_rdp"] = (eps_clients.tolist()
                                     if np.unique(eps_clients).size > 1 else None)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorrelatedNoiseSpec(PrivacySpec):
  """One release per round whose noise is correlated across rounds (DP-FTRL's tree
  aggregation, Kairouz et al., ICML 2021, arXiv 2103.00039; banded matrix
  factorisation, Choquette-Choo et al., NeurIPS 2023, arXiv 2306.08153): the rounds are
  not independent events, so the whole run is one event, ``run_event(z, rounds)``,
  accounted by a `fedjax_dp.privacy.correlated_ledger.CorrelatedNoiseLedger`.

  Attributes (besides `PrivacySpec`'s, which describe one round's release for
  `round_event` and `planned_report`):
    run_event: ``run_event(z, rounds) -> DpEvent``, the event of ``rounds`` rounds at
      noise-multiplier hyper-parameter ``z`` (calibration to a target epsilon inverts
      it).
    description: what the mechanism is (kept in the ledger's ``to_dict``).

  Raises:
    FedJaxDpError: as `PrivacyStatement`; ``run_event`` not callable.
  """
  run_event: Callable[[float, int], dp_accounting.DpEvent]
  description: str = ""

  _foreign_hint: ClassVar[str] = (
      " Correlated noise with several releases per round or per-client noise "
      "multipliers is not supported.")

  def __post_init__(self):
    super().__post_init__()
    if not callable(self.run_event):
      raise FedJaxDpError(f"run_event must be callable (z, rounds) -> DpEvent, got "
                          f"{type(self.run_event).__name__}.", option="run_event")

  def make_ledger(self, delta: float) -> Ledger:
    """An empty `CorrelatedNoiseLedger` of ``run_event``."""
    from fedjax_dp.privacy.correlated_ledger import CorrelatedNoiseLedger
    return CorrelatedNoiseLedger(delta, self.run_event, self.description)

  def events_of_run(self, noise_multiplier: float, rounds: int) -> dp_accounting.DpEvent:
    """``run_event(noise_multiplier, rounds)``."""
    return self.run_event(noise_multiplier, rounds)
