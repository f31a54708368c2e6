"""A ledger for mechanisms whose rounds are not independent events: noise correlated
across rounds (DP-FTRL's tree aggregation, Kairouz et al., ICML 2021, arXiv 2103.00039;
banded matrix factorisation, Choquette-Choo et al., NeurIPS 2023, arXiv 2306.08153).

The mechanism states its whole run as one ``DpEvent``, ``run_event(z, rounds)`` (the
algorithm builds it from its own sensitivity under its participation schedule, e.g.
`fedjax_dp.algorithms.dp_ftrl.accounting.tree_run_event`); `CorrelatedNoiseLedger`
records how many rounds ran at which constant noise multiplier and accounts for them as
that one event. Composing such events (`event_rdp`, `event_epsilon`) is generic over
dp_accounting's events: ``SelfComposed`` multiplies, ``Composed`` adds (RDP composes
additively, Mironov 2017, arXiv:1702.07476, Prop. 1), and dp_accounting's
``SingleEpochTreeAggregationDpEvent`` is composed under ``REPLACE_SPECIAL`` for RDP and
through its exact Gaussian equivalent for PLD (`gaussian_equivalent`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, cast, overload

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np

from fedjax_dp.privacy.accountants import (ACCOUNTANTS,
                                           DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL,
                                           _check_orders, _check_pld_interval,
                                           _make_accountant, _rdp_of, _rdp_uncached,
                                           deduplicate_rdp_convergence_warnings,
                                           excluded_orders_note)
from fedjax_dp.privacy.rounds import as_vector
from fedjax_dp.privacy.ledger_protocol import PrivacyReport, check_report
from fedjax_dp.validation import FedJaxDpError, check_choice, check_delta, check_int

__all__ = ["CorrelatedNoiseLedger", "event_rdp", "event_epsilon", "gaussian_equivalent"]

NeighborRel = dp_accounting.NeighboringRelation

_LEDGER_FORMAT = "fedjax_dp.CorrelatedNoiseLedger"
_LEDGER_VERSION = 1


# ---------------------------------------------------------------------------
# Composing run events (any dp_accounting event; the tree as dp_accounting states it).
# ---------------------------------------------------------------------------

def _relation_of(event: dp_accounting.DpEvent) -> NeighborRel:
  # dp_accounting's RDP accepts the tree only under REPLACE_SPECIAL ("zero-out": the same
  # arithmetic as add/remove for Gaussians); everything else here is add/remove.
  if isinstance(event, dp_accounting.SingleEpochTreeAggregationDpEvent):
    return NeighborRel.REPLACE_SPECIAL
  return NeighborRel.ADD_OR_REMOVE_ONE


def event_rdp(event: dp_accounting.DpEvent, orders) -> np.ndarray:
  """RDP (float64 ``[len(orders)]``) of ``event``, composed structurally: ``SelfComposed``
  multiplies, ``Composed`` adds (Mironov 2017, Prop. 1), each base event's vector from a
  fresh `RdpAccountant` (cached process-wide), the tree under ``REPLACE_SPECIAL``."""
  orders = tuple(orders)
  if isinstance(event, dp_accounting.NoOpDpEvent):
    return np.zeros(len(orders))
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return event.count * event_rdp(event.event, orders)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return sum((event_rdp(e, orders) for e in event.events), np.zeros(len(orders)))
  relation = _relation_of(event)
  try:
    vec, _ = _rdp_of(event, orders, relation)
  except TypeError:  # unhashable (a list of step counts)
    vec, _ = _rdp_uncached(event, orders, relation)
  return np.asarray(vec, np.float64)


def gaussian_equivalent(event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
  """``event`` with every ``SingleEpochTreeAggregationDpEvent(z, steps)`` replaced by the
  Gaussian with the same privacy, ``GaussianDpEvent(z / sqrt(L))``,
  ``L = ceil(log2(max(steps) + 1))`` (dp_accounting's depth; one tree, or several with a
  record in at most one of them): what PLD needs (dp_accounting has no tree PLD).

  Raises:
    FedJaxDpError: a tree with no steps."""
  if isinstance(event, dp_accounting.SingleEpochTreeAggregationDpEvent):
    steps = event.step_counts
    steps = check_int("step_counts", max(steps) if isinstance(steps, (list, tuple))
                      else steps, minimum=1)
    depth = int(steps).bit_length()  # floor(log2 steps) + 1 = ceil(log2(steps + 1))
    return dp_accounting.GaussianDpEvent(event.noise_multiplier / math.sqrt(depth))
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return dp_accounting.SelfComposedDpEvent(gaussian_equivalent(event.event), event.count)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return dp_accounting.ComposedDpEvent([gaussian_equivalent(e) for e in event.events])
  return event


def event_epsilon(event: dp_accounting.DpEvent, delta: float, accountant: str = "rdp",
                  orders=None, pld_value_discretization_interval: float =
                  DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL) -> float:
  """Epsilon of a run event (e.g. `fedjax_dp.algorithms.dp_ftrl.accounting`'s, or
  dp_accounting's tree form) at ``delta``.

  RDP: `event_rdp` converted by dp_accounting's ``compute_epsilon``. PLD: a
  ``PLDAccountant`` (add/remove) composing `gaussian_equivalent` (exact for the tree);
  its grid coarsened to ``epsilon_rdp * 1e-6`` nats above epsilon 100 (pessimistic).

  Raises:
    FedJaxDpError: invalid delta or accountant.
  """
  delta = check_delta(delta)
  check_choice("accountant", accountant, ACCOUNTANTS)
  orders = _check_orders(orders)
  interval = _check_pld_interval(pld_value_discretization_interval)
  with deduplicate_rdp_convergence_warnings():
    rdp = event_rdp(event, orders)
  eps_rdp, _ = rdp_privacy_accountant.compute_epsilon(orders, cast(Any, rdp), delta)
  if accountant == "rdp" or isinstance(event, dp_accounting.NoOpDpEvent):
    return float(eps_rdp)
  if math.isfinite(eps_rdp):
    interval = max(interval, eps_rdp * 1e-6)
  acc = _make_accountant("pld", NeighborRel.ADD_OR_REMOVE_ONE, None, interval)
  with deduplicate_rdp_convergence_warnings():
    return float(acc.compose(gaussian_equivalent(event)).get_epsilon(delta))


# ---------------------------------------------------------------------------
# The ledger.
# ---------------------------------------------------------------------------

class CorrelatedNoiseLedger:
  """The run's ledger for a mechanism whose rounds are not independent events
  (`fedjax_dp.algorithms.base.CorrelatedNoiseSpec.make_ledger`, from its ``run_event``).

  It records how many rounds ran at which (constant) noise multiplier and accounts for
  them as one event, ``run_event(z, num_rounds)`` (e.g. `tree_run_event`,
  `banded_run_event` with the run's generator and sampler bound). The correlated
  analysis is for one z for the whole run and one release per round: `record_many`
  refuses noise multipliers or sampling rates that change, and ``dp_steps != 1``.
  Nothing is truncated (`CyclicSampler` cannot overflow), so ``delta_total == delta``.

  Implements `fedjax_dp.privacy.ledger_protocol.Ledger` (reports of one release per
  round; `from_dict` needs the mechanism's ``run_event`` too) and keeps
  `fedjax_dp.privacy.ledger.PrivacyLedger`'s extras the run reads: `num_rounds`,
  `dp_event`, `epsilon_history`, `truncation_probability`, `delta_total`,
  `accounting_warnings`.
  """

  def __init__(self, delta: float, run_event: Callable[[float, int], Any],
               description: str = "", orders=None,
               pld_value_discretization_interval: float =
               DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL):
    """Creates an empty ledger.

    Args:
      delta: default target delta in (0, 1).
      run_event: ``run_event(z, rounds) -> DpEvent`` of the whole run so far.
      description: what the mechanism is (kept in `to_dict`, shown in `repr`).
      orders: RDP orders (default `DEFAULT_RDP_ORDERS`).
      pld_value_discretization_interval: PLD grid step in nats (> 0).

    Raises:
      FedJaxDpError: invalid arguments.
    """
    if not callable(run_event):
      raise FedJaxDpError(f"run_event must be callable (z, rounds) -> DpEvent, got "
                          f"{type(run_event).__name__}.", option="run_event")
    self._delta = check_delta(delta)
    self._run_event = run_event
    self._description = str(description)
    self._orders = _check_orders(orders)
    self._pld_interval = _check_pld_interval(pld_value_discretization_interval)
    self._z: Optional[float] = None
    self._q: Optional[float] = None
    self._num_rounds = 0
    self._history: Dict[float, List[float]] = {}
    self._pld: Dict[tuple, float] = {}

  # -- properties ------------------------------------------------------------

  @property
  def delta(self) -> float:
    """The default target delta."""
    return self._delta

  @property
  def orders(self):
    """The RDP orders."""
    return self._orders

  @property
  def description(self) -> str:
    return self._description

  @property
  def num_rounds(self) -> int:
    """Rounds recorded so far."""
    return self._num_rounds

  @property
  def noise_multiplier(self) -> Optional[float]:
    """The run's z (None before the first round)."""
    return self._z

  def dp_event(self) -> dp_accounting.DpEvent:
    """``run_event(z, num_rounds)`` (``NoOpDpEvent`` before the first round)."""
    if self._num_rounds == 0 or self._z is None:
      return dp_accounting.NoOpDpEvent()
    return self._run_event(self._z, self._num_rounds)

  def supports(self, accountant: str) -> bool:
    """Both accountants are available (`event_epsilon`)."""
    check_choice("accountant", accountant, ACCOUNTANTS)
    return True

  def unit_epsilons(self, accountant: str = "rdp") -> None:
    """None: one protected unit's composition (`Ledger`)."""
    check_choice("accountant", accountant, ACCOUNTANTS)
    return None

  # -- recording -------------------------------------------------------------

  def record_many(self, noise_multipliers: Any, sampling_rates: Any,
                  dp_steps: Any = 1) -> np.ndarray:
    """Records one round per entry and returns the RDP epsilon after each.

    Args:
      noise_multipliers: 1-D [L] of the run's z (all equal, and equal to the rounds
        recorded before; float32 from the device is converted exactly).
      sampling_rates: 1-D [L] or scalar, all equal (the sampler's marginal rate; the
        event itself comes from ``run_event``).
      dp_steps: 1-D [L] or scalar, all 1.

    Returns:
      float64 [L]: RDP epsilon at the ledger's delta after each recorded round,
      non-decreasing, the last equal to ``epsilon()``.

    Raises:
      FedJaxDpError: shapes, values out of range, a z or rate that differs between
        rounds, ``dp_steps != 1``. Nothing is recorded on error.
    """
    z = as_vector("noise_multipliers", noise_multipliers, None, np.float64)
    n = z.shape[0]
    q = as_vector("sampling_rates", sampling_rates, n, np.float64)
    steps = as_vector("dp_steps", dp_steps, n, np.float64)
    if n == 0:
      return np.zeros(0, np.float64)
    if not (np.isfinite(z).all() and (z >= 0).all()):
      i = int(np.argmin(np.isfinite(z) & (z >= 0)))
      raise FedJaxDpError(f"noise_multipliers[{i}] must be finite and >= 0, got {z[i]!r}.",
                          option="noise_multiplier")
    if not (np.isfinite(q).all() and (q > 0).all() and (q <= 1).all()):
      i = int(np.argmin(np.isfinite(q) & (q > 0) & (q <= 1)))
      raise FedJaxDpError(f"sampling_rates[{i}] must be in (0, 1], got {q[i]!r}.",
                          option="sampling_rate")
    if not (steps == 1).all():
      i = int(np.argmin(steps == 1))
      raise FedJaxDpError(f"dp_steps[{i}] must be 1 (one release per round of the "
                          f"correlated mechanism), got {steps[i]!r}.", option="dp_steps")
    z0 = float(z[0]) if self._z is None else self._z
    q0 = float(q[0]) if self._q is None else self._q
    if (z != z0).any():
      i = int(np.argmax(z != z0))
      raise FedJaxDpError(
          f"noise_multipliers[{i}] = {z[i]!r} differs from the run's noise multiplier "
          f"{z0!r}: the correlated-noise analysis ({self._description or 'this ledger'}) "
          "is for one noise multiplier for the whole run.", option="noise_multiplier")
    if (q != q0).any():
      i = int(np.argmax(q != q0))
      raise FedJaxDpError(
          f"sampling_rates[{i}] = {q[i]!r} differs from the run's sampling rate {q0!r}: "
          "the participation schedule is fixed for the run.", option="sampling_rate")
    # Validate the event of the longest run before recording anything.
    self._run_event(z0, self._num_rounds + n)
    start = self._num_rounds
    self._z, self._q = z0, q0
    self._num_rounds += n
    return self.epsilon_history(start=start)

  @overload
  def record(self, report: PrivacyReport, /) -> np.ndarray: ...

  @overload
  def record(self, noise_multiplier: float, sampling_rate: float, dp_steps: int = 1,
             count: int = 1) -> None: ...

  def record(self, noise_multiplier: Any, sampling_rate: Any = None, dp_steps: Any = 1,
             count: Any = 1) -> Optional[np.ndarray]:
    """``record(report)``, the `Ledger` hook: `record_many` of a `PrivacyReport` of one
    release per round; returns float64 ``[R]``, the RDP epsilon after each round.
    ``record(z, q, dp_steps=1, count=1)``: records ``count`` identical rounds
    (`record_many`'s checks), returns None.

    Raises:
      FedJaxDpError: a report with several releases or per-client noise multipliers
        (`check_report`), or what `record_many` raises (nothing is recorded).
    """
    if sampling_rate is None:
      report = check_report(noise_multiplier, "CorrelatedNoiseLedger")
      return self.record_many(report.noise_multiplier, report.sampling_rate,
                              report.dp_steps)
    count = check_int("count", count, minimum=1)
    self.record_many(np.full(count, float(noise_multiplier)),
                     np.full(count, float(sampling_rate)), np.full(count, dp_steps))
    return None

  # -- queries ---------------------------------------------------------------

  def _rdp_after(self, rounds: int) -> np.ndarray:
    if rounds == 0 or self._z is None:
      return np.zeros(len(self._orders))
    with deduplicate_rdp_convergence_warnings():
      return event_rdp(self._run_event(self._z, rounds), self._orders)

  def rdp(self) -> np.ndarray:
    """RDP of the recorded run at `orders` (float64)."""
    return self._rdp_after(self._num_rounds)

  def epsilon_history(self, delta: Optional[float] = None, start: int = 0) -> np.ndarray:
    """RDP epsilon after each recorded round ``start .. num_rounds - 1`` (entry t: the
    event of rounds ``0..t``, ``run_event(z, t + 1)``); cached per delta.

    Raises:
      FedJaxDpError: invalid ``delta`` or ``start``.
    """
    delta = self._delta if delta is None else check_delta(delta)
    start = check_int("start", start, minimum=0, maximum=self._num_rounds)
    hist = self._history.setdefault(delta, [])
    for t in range(len(hist) + 1, self._num_rounds + 1):
      eps, _ = rdp_privacy_accountant.compute_epsilon(self._orders,
                                                      cast(Any, self._rdp_after(t)), delta)
      hist.append(float(eps))
    return np.asarray(hist[start:self._num_rounds], np.float64)

  def epsilon(self, delta: Optional[float] = None, accountant: str = "rdp") -> float:
    """Epsilon of the recorded run (0 before the first round; inf for z = 0).

    ``"pld"``: `event_epsilon` (the tree's event through its exact Gaussian equivalent).

    Raises:
      FedJaxDpError: invalid ``delta`` / ``accountant``.
    """
    delta = self._delta if delta is None else check_delta(delta)
    check_choice("accountant", accountant, ACCOUNTANTS)
    if self._num_rounds == 0:
      return 0.0
    if accountant == "rdp":
      return float(self.epsilon_history(delta, start=self._num_rounds - 1)[-1])
    key = (delta, self._num_rounds)
    if key not in self._pld:
      self._pld[key] = event_epsilon(self.dp_event(), delta, "pld", self._orders,
                                     self._pld_interval)
    return self._pld[key]

  def truncation_probability(self) -> float:
    """0: cyclic cohorts are never truncated."""
    return 0.0

  def delta_total(self, delta: Optional[float] = None, accountant: str = "rdp") -> float:
    """The delta of the guarantee: ``delta`` (nothing added)."""
    del accountant
    return self._delta if delta is None else check_delta(delta)

  def accounting_warnings(self, delta: Optional[float] = None) -> List[str]:
    """One plain sentence when RDP orders dp-accounting excluded could change the
    epsilon (`fedjax_dp.privacy.accountants.excluded_orders_note`), else []."""
    delta = self._delta if delta is None else check_delta(delta)
    if self._num_rounds == 0:
      return []
    note = excluded_orders_note(self._orders, self.rdp(), delta)
    return [note] if note else []

  # -- serialisation ---------------------------------------------------------

  def to_dict(self) -> Dict[str, Any]:
    """JSON-serialisable state (the event is rebuilt from ``run_event``)."""
    return {"format": _LEDGER_FORMAT, "version": _LEDGER_VERSION, "delta": self._delta,
            "description": self._description, "orders": list(self._orders),
            "pld_value_discretization_interval": self._pld_interval,
            "noise_multiplier": self._z, "sampling_rate": self._q,
            "num_rounds": self._num_rounds}

  @classmethod
  def from_dict(cls, state: Dict[str, Any],
                run_event: Optional[Callable[[float, int], Any]] = None
                ) -> "CorrelatedNoiseLedger":
    """Inverse of `to_dict`, with the mechanism's ``run_event`` (a callable is not
    serialised: the caller that made the ledger gives it again).

    Raises:
      FedJaxDpError: not such a dict, invalid values, or no ``run_event``.
    """
    if run_event is None:
      raise FedJaxDpError("CorrelatedNoiseLedger.from_dict needs the mechanism's "
                          "run_event(z, rounds) (its CorrelatedNoiseSpec's), which to_dict "
                          "cannot store.", option="run_event")
    if (not isinstance(state, dict) or state.get("format") != _LEDGER_FORMAT
        or state.get("version") != _LEDGER_VERSION):
      raise FedJaxDpError(f"state must be a dict from CorrelatedNoiseLedger.to_dict() "
                          f"(format {_LEDGER_FORMAT!r}, version {_LEDGER_VERSION}).",
                          option="state")
    ledger = cls(state["delta"], run_event, state.get("description", ""),
                 state["orders"], state["pld_value_discretization_interval"])
    if state["num_rounds"]:
      ledger.record(state["noise_multiplier"], state["sampling_rate"], 1,
                    state["num_rounds"])
    return ledger

  def __repr__(self) -> str:
    return (f"CorrelatedNoiseLedger({self._description!r}, delta={self._delta!r}, "
            f"rounds={self._num_rounds}, z={self._z!r})")
