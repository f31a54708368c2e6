"""What every algorithm module returns: an `Algorithm` bundle ready for the driver."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional

import jax

from fedjax_dp.federated.round import RoundHParams
from fedjax_dp.federated.server import ServerState
from fedjax_dp.privacy import accountants, events
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.validation import FedJaxDpError, check_choice


@dataclasses.dataclass(frozen=True)
class PrivacySpec:
  """What an algorithm's rounds release and under which neighbouring relation, stated
  by the algorithm that defines the release (the runner and the ledger never rescale
  a noise multiplier).

  Every round reports ``noise_multiplier = noise_stddev / sensitivity`` with the
  sensitivity under ``relation`` (`fedjax_dp.federated.round.RoundMetrics`); the ledger
  made by `make_ledger` composes exactly those numbers.

  Attributes:
    unit: ``"user-level"`` (a client's whole data) or ``"record-level"`` (one example).
    relation: the neighbouring relation, one of
      `fedjax_dp.privacy.sensitivity.RELATIONS` (``"add_remove"``, ``"zero_out"``,
      ``"replace_one"``); must fit ``sampler``.
    sampler: ``"poisson"`` or ``"fixed_size"`` (selects the DpEvent).
    sampling_rate: q of the event (the record rate for local DP-SGD).
    steps: noisy releases per round (local DP-SGD steps; 1 at user level).
    population_size, cohort_size: n and m of a fixed-size sampler (None for Poisson).
    truncation: a `fedjax_dp.privacy.events.Truncation` when the event's Poisson
      draws are padded to a static cap (its probability is added to delta), or None.
    event_scale: the algorithm's noise-multiplier hyper-parameter times this is the
      event's noise multiplier (``clip_norm / sensitivity``: 1/2 for a fixed-size
      cohort's sum of clipped updates, 1 otherwise); what `round_event` and
      calibration use.
    per_client: True when noise multipliers differ by client (`make_ledger` then gives
      a `fedjax_dp.privacy.per_client.PerClientLedger` over ``num_clients``).
    num_clients: N (per-client accounting only).
    note: caveats stated in summaries (e.g. what amplification is not claimed).
    clip_norm: the bound the code enforces on what is released (parameter units), or
      None; ``clipped`` says what it bounds (each client's update, each example's
      gradient, a client's parameters, ...). Reported in summary.json as used.
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

  def __post_init__(self):
    check_choice("unit", self.unit, ("user-level", "record-level"))
    events.neighboring_relation(self.sampler, None, self.relation)  # the pairing

  @property
  def neighboring(self) -> str:
    """The relation in words (for summaries)."""
    return events.neighboring_relation(self.sampler, self.unit, self.relation)[1]

  def ledger_kwargs(self) -> Dict[str, Any]:
    """The `PrivacyLedger` arguments (besides delta) of this mechanism."""
    return dict(sampler=self.sampler, relation=self.relation,
                population_size=self.population_size, cohort_size=self.cohort_size,
                privacy_unit=self.unit, truncation=self.truncation)

  def make_ledger(self, delta: float):
    """An empty ledger for this mechanism's rounds: a `PrivacyLedger`, or a
    `PerClientLedger` when ``per_client``."""
    if self.per_client:
      from fedjax_dp.privacy.per_client import PerClientLedger
      return PerClientLedger(self.num_clients, delta, **self.ledger_kwargs())
    return PrivacyLedger(delta, **self.ledger_kwargs())

  def round_event(self, noise_multiplier: float):
    """The planned `DpEvent` of one round whose noise-multiplier hyper-parameter is
    ``noise_multiplier`` (for calibration and the budget guard; the ledger composes the
    rounds' reported values, which a test checks against this)."""
    return events.make_dp_event(
        noise_multiplier * self.event_scale, self.sampling_rate, self.steps, self.sampler,
        self.population_size, self.cohort_size)

  def supports(self, accountant: str) -> bool:
    """Whether ``accountant`` can account for this mechanism's events."""
    try:
      accountants.check_accountant_supports(accountant, self.sampler, self.population_size,
                                            self.cohort_size)
    except accountants.UnsupportedAccountingError:
      return False
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
