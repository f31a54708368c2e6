"""The privacy ledger: a run's rounds composed, with (epsilon, delta) on demand.

* `PrivacyLedger`: the run-length composition of all rounds so far (noise may
  change every round), with fast RDP epsilon after every round, PLD epsilon, the
  probability that a padded batch or cohort was truncated (added to delta,
  `fedjax_dp.privacy.events.truncation_delta`), and JSON round-tripping for checkpoints.
* `PrivacySummary` (`fedjax_dp.privacy.summary`, re-exported): what a run's privacy
  statement says.

The rounds a ledger is fed are checked and run-length encoded by
`fedjax_dp.privacy.rounds`.

Every recorded noise multiplier follows the one convention stated in
`fedjax_dp.privacy.events` (``z = sigma / Delta`` with ``Delta`` the sensitivity under the
sampler's relation; events composed under `dp_accounting_relation`): the ledger builds
each round's event as `fedjax_dp.privacy.events.make_dp_event` does and never rescales.

Accounting is never re-implemented here (`fedjax_dp.privacy.accountants`). The ledger
only caches per-event RDP vectors and adds them, which is exactly what `RdpAccountant`
does for a composition (RDP composes additively, Mironov 2017, arXiv:1702.07476,
Prop. 1); its summary of dp-accounting's RDP non-convergence warnings goes to the
logger ``"fedjax_dp.privacy.accountants"`` at DEBUG level, as the accountants' do, and
`PrivacyLedger.accounting_warnings` says in plain words when the orders dp-accounting
excluded could change the epsilon (`fedjax_dp.privacy.accountants.excluded_orders_note`).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast, overload

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np

# `_log`: the ledger logs its non-convergence summary on the accountants' logger.
from fedjax_dp.privacy.accountants import (ACCOUNTANTS, PldHistory,
                                           UnsupportedAccountingError,
                                           DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL,
                                           _check_orders, _check_pld_interval, _log,
                                           _make_accountant, _nonconvergence_message,
                                           _rdp_of,
                                           excluded_orders_note)
from fedjax_dp.privacy.events import (SAMPLERS, NeighborRel, Truncation, _build_event,
                                      _check_count, _check_noise_multiplier,
                                      _check_privacy_unit, _check_sampling_rate,
                                      _resolve_cohort_size, check_observation,
                                      dp_accounting_relation, neighboring_relation,
                                      truncation_delta)
from fedjax_dp.privacy.ledger_protocol import PrivacyReport, check_report
from fedjax_dp.privacy.rounds import (Run, check_rounds, check_truncation, run_lengths,
                                      split_self_composed)
from fedjax_dp.privacy.summary import PrivacySummary
from fedjax_dp.validation import FedJaxDpError, check_choice, check_delta, check_int

__all__ = ["PrivacySummary", "PrivacyLedger"]

_LEDGER_FORMAT = "fedjax_dp.PrivacyLedger"
_LEDGER_VERSION = 3  # 3: the observation model (2: every ledger was "aggregate")


# ---------------------------------------------------------------------------
# The ledger.
# ---------------------------------------------------------------------------

class PrivacyLedger:
  """Run-length composition of per-round DP events, with epsilon on demand.

  Every recorded noise multiplier is ``noise_stddev / sensitivity`` under the ledger's
  relation (module docstring): the ledger builds each round's event with
  `make_dp_event` and never rescales. Build it from what the rounds ran with, so that
  sampler, relation, observation, cohort sizes and the truncation model cannot
  disagree with them -- the one recommended way:

  * a round built with `fedjax_dp.federated.make_round`:
    ``fedjax_dp.federated.make_ledger(sampler, config, delta)``;
  * a ready-made algorithm: ``alg.privacy.make_ledger(delta)`` (the same statement,
    made by the algorithm).

  Calling this constructor directly is the low-level path for events stated by hand
  (its defaults describe a Poisson, add/remove, aggregate-only mechanism without
  truncation).

  Implements `fedjax_dp.privacy.ledger_protocol.Ledger` (``record(report)``, `epsilon`,
  `unit_epsilons` (None), `supports`, `to_dict` / `from_dict`). Rounds are appended
  with `record` / `record_many`; identical consecutive
  rounds are grouped into one ``(DpEvent, count)`` run, so a 1000-round run with
  constant noise is a single `SelfComposedDpEvent`. Values coming from the
  device (float32) are converted exactly to float64 and grouped only when
  exactly equal; the ledger accounts for the exact values it is given.

  RDP: the RDP vector of each unique event is computed once (by a fresh
  `dp_accounting.rdp.RdpAccountant`, cached process-wide), runs are added as
  ``count * dp_steps * rdp`` in order -- the same arithmetic `RdpAccountant`
  performs for `dp_event()` -- and converted with
  `rdp_privacy_accountant.compute_epsilon`. Per-round histories cost one
  conversion per round (~0.2 ms) and are cached.

  PLD: `dp_accounting.pld.PLDAccountant` composes `dp_event()` (all runs but
  the last are composed once and kept; results are cached per delta). Above an RDP
  epsilon of 100 the grid is coarsened to ``epsilon * 1e-6`` nats (pessimistic, so still
  an upper bound), which bounds memory for tiny noise multipliers. Building
  one Poisson-subsampled-Gaussian PLD (add and remove directions) costs ~0.5 s
  at the default discretisation 1e-4 and ~0.07 s at 1e-3, so cost grows with
  the number of *distinct* runs: 100 rounds at constant (q=0.1, z=1) take
  ~0.6-0.8 s, a schedule with a different sigma in each of 100 rounds ~9 s at
  1e-3. Use a coarser ``pld_value_discretization_interval`` (1e-3 changes
  epsilon by ~1e-5 relative) for long heterogeneous schedules, and RDP for
  per-round reporting.

  RDP cost is also per distinct event: ~20-100 ms each with the default orders
  (dp-accounting's fractional-order series), e.g. ~9 s for 100 distinct sigmas
  at q=0.1, and ~0.2 s for 1000 identical rounds including the history.

  Example (driver)::

    ledger = fedjax_dp.federated.make_ledger(sampler, config, delta=1e-5)
    eps_per_round = ledger.record(PrivacyReport(z_block, q_block, steps_block))
    eps = ledger.epsilon(accountant="pld")
    pld_per_round = ledger.epsilon_history(accountant="pld")
  """

  def __init__(self, delta: float, orders: Optional[Sequence[float]] = None,
               sampler: str = "poisson", population_size: Optional[int] = None,
               cohort_size: Optional[int] = None, privacy_unit: str = "user",
               relation: Optional[str] = None, truncation: Optional[Truncation] = None,
               pld_value_discretization_interval: float =
               DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL, observation: str = "aggregate"):
    """Creates an empty ledger.

    Args:
      delta: default target delta in (0, 1) for `epsilon` and friends.
      orders: RDP orders (> 1, finite); default `DEFAULT_RDP_ORDERS`.
      sampler: one of `SAMPLERS`; with ``relation`` it fixes the neighbouring relation
        of every recorded noise multiplier.
      population_size: n; required for ``"fixed_size"`` (informational otherwise).
      cohort_size: m; optional for ``"fixed_size"`` (then every recorded
        sampling rate must equal m / n; otherwise m is derived per round).
      privacy_unit: ``"user"`` or ``"record"`` (``"user-level"`` etc. accepted;
        only used in summaries).
      relation: the neighbouring relation the recorded noise multipliers are relative
        to (one of `RELATIONS` valid for the sampler; default `default_relation`).
      truncation: a `Truncation` if the mechanism's Poisson draws are padded to a cap
        (its probability, summed over rounds, is added to delta), else None.
      pld_value_discretization_interval: PLD loss grid step in nats (> 0).
      observation: what the server observes of each round's release
        (`fedjax_dp.privacy.events.OBSERVATIONS`): ``"aggregate"`` (recorded sampling
        rates amplify), ``"attributable"`` (each upload seen with its sender: the
        recorded rate is the unit's visible participation probability, no
        amplification) or ``"public"``. Must fit the sampler and relation
        (`fedjax_dp.privacy.events.check_observation`).

    Raises:
      FedJaxDpError: invalid arguments.
    """
    self._delta = check_delta(delta)
    self._orders = _check_orders(orders)
    self._sampler = check_choice("sampler", sampler, SAMPLERS)
    self._privacy_unit = _check_privacy_unit(privacy_unit)
    self._pld_interval = _check_pld_interval(pld_value_discretization_interval)
    if population_size is not None:
      population_size = check_int("population_size", population_size, minimum=1)
    if sampler == "fixed_size" and population_size is None:
      raise FedJaxDpError(
          "sampler='fixed_size' needs population_size (the number of users/records the "
          "cohort is drawn from), got None.")
    if cohort_size is not None:
      cohort_size = check_int("cohort_size", cohort_size, minimum=1,
                              maximum=population_size)
    self._population_size = population_size
    self._cohort_size = cohort_size
    self._relation, self._relation_text = neighboring_relation(sampler, privacy_unit,
                                                               relation)
    self._observation = check_observation(observation, sampler, self._relation,
                                          privacy_unit)
    self._truncation = check_truncation(truncation)
    self._runs: List[Run] = []
    self._num_rounds = 0
    self._version = 0
    # RDP caches.
    self._nonconvergence_reported = False
    self._history: Dict[float, List[float]] = {}
    self._rdp_rows: List[np.ndarray] = []  # cumulative RDP after each round
    # PLD caches: accountant holding runs[:n_prefix], and results per (delta, version).
    self._pld_prefix: Optional[dp_accounting.PrivacyAccountant] = None
    self._pld_prefix_runs = 0
    self._pld_prefix_interval: Optional[float] = None
    self._pld_results: Dict[Tuple[float, int], float] = {}
    self._pld_history_state: Dict[Tuple[float, float], PldHistory] = {}

  # -- properties ------------------------------------------------------------

  @property
  def delta(self) -> float:
    """The default target delta."""
    return self._delta

  @property
  def orders(self) -> Tuple[float, ...]:
    """The RDP orders."""
    return self._orders

  @property
  def sampler(self) -> str:
    """The sampler."""
    return self._sampler

  @property
  def neighboring_relation(self) -> str:
    """The relation (one of `RELATIONS`) every recorded noise multiplier is relative to."""
    return self._relation

  @property
  def observation(self) -> str:
    """What the server observes of each round (`fedjax_dp.privacy.events.OBSERVATIONS`)."""
    return self._observation

  @property
  def truncation(self) -> Optional[Truncation]:
    """The `Truncation` model of the mechanism's padded draws, or None."""
    return self._truncation

  @property
  def num_rounds(self) -> int:
    """Rounds recorded so far."""
    return self._num_rounds

  @property
  def events(self) -> List[Tuple[dp_accounting.DpEvent, int]]:
    """The runs ``[(round_event, count), ...]`` in recording order (a copy)."""
    return [(r.event, r.count) for r in self._runs]

  def dp_event(self) -> dp_accounting.ComposedDpEvent:
    """All rounds as ``ComposedDpEvent([SelfComposedDpEvent(event, count), ...])``."""
    return dp_accounting.ComposedDpEvent(
        [dp_accounting.SelfComposedDpEvent(r.event, r.count) for r in self._runs])

  def supports(self, accountant: str) -> bool:
    """Whether ``epsilon(accountant=...)`` is available: always, for both accountants
    (sampling without replacement has a PLD too,
    `fedjax_dp.privacy.accountants.PldAccountant`).

    Raises:
      FedJaxDpError: an unknown accountant.
    """
    check_choice("accountant", accountant, ACCOUNTANTS)
    # A secure sum's round is reported as the Gaussian-equivalent noise multiplier of
    # its zCDP bound (discrete Gaussian / Skellam sums): an RDP statement, which does
    # not imply the Gaussian's privacy loss distribution.
    return not (accountant == "pld" and self._observation == "secure_sum")

  def unit_epsilons(self, accountant: str = "rdp") -> None:
    """None: the ledger is one protected unit's composition (`Ledger`).

    Raises:
      FedJaxDpError: an unknown accountant.
    """
    check_choice("accountant", accountant, ACCOUNTANTS)
    return None

  # -- recording -------------------------------------------------------------

  def _round_event(self, z: float, q: float, steps: int) -> dp_accounting.DpEvent:
    population, cohort = self._population_size, None
    if self._sampler == "fixed_size":
      population, cohort = _resolve_cohort_size(q, population, self._cohort_size)
    return _build_event(z, q, steps, self._sampler, population, cohort, self._observation)

  def _append(self, z: float, q: float, steps: int, count: int) -> None:
    event = self._round_event(z, q, steps)
    if (self._runs and self._runs[-1].event == event
        and self._runs[-1].sampling_rate == q):
      self._runs[-1].count += count
    else:
      self._runs.append(Run(event, z, q, steps, count))
    self._num_rounds += count
    self._version += 1

  @overload
  def record(self, report: PrivacyReport, /) -> np.ndarray: ...

  @overload
  def record(self, noise_multiplier: float, sampling_rate: float, dp_steps: int = 1,
             count: int = 1) -> None: ...

  def record(self, noise_multiplier: Any, sampling_rate: Any = None, dp_steps: Any = 1,
             count: Any = 1) -> Optional[np.ndarray]:
    """``record(report)``, the `Ledger` hook: composes a `PrivacyReport` of one release
    per round (`record_many` of its fields) and returns float64 ``[R]``, the RDP epsilon
    at the ledger's delta after each of its rounds. ``record(z, q, dp_steps=1,
    count=1)``: records ``count`` identical rounds, returns None.

    Args:
      noise_multiplier: a `PrivacyReport`, or z >= 0 (noise std / L2 sensitivity under
        the ledger's relation); numpy / jax scalars are converted to float64 exactly.
      sampling_rate: q in (0, 1] (not with a report).
      dp_steps: noisy releases composed in the round (int >= 1).
      count: number of identical rounds (int >= 1).

    Raises:
      FedJaxDpError: a report with several releases per round or per-client noise
        multipliers (naming the ledger to use, `check_report`), any argument out of
        range, NaN or inf (nothing is recorded).
    """
    if sampling_rate is None:
      report = check_report(noise_multiplier, "PrivacyLedger")
      return self.record_many(report.noise_multiplier, report.sampling_rate,
                              report.dp_steps)
    z = _check_noise_multiplier(noise_multiplier)
    q = _check_sampling_rate(sampling_rate)
    steps = _check_count(dp_steps, "dp_steps")
    count = _check_count(count, "count")
    self._append(z, q, steps, count)
    return None

  def record_many(self, noise_multipliers: Any, sampling_rates: Any,
                  dp_steps: Any = 1) -> np.ndarray:
    """Records one round per entry (e.g. a block of jitted rounds) and returns eps.

    Args:
      noise_multipliers: 1-D array-like [L] of z >= 0 (float32 from the device is
        converted exactly to float64), relative to the ledger's relation.
      sampling_rates: 1-D [L] of q in (0, 1], or a scalar for all rounds.
      dp_steps: 1-D [L] of ints >= 1 (integer-valued floats accepted), or a scalar.

    Returns:
      float64 array [L]: RDP epsilon at the ledger's delta after each recorded
      round (same values as ``epsilon_history()[-L:]``).

    Raises:
      FedJaxDpError: wrong shapes, or any entry out of range, NaN or inf; the
        message names the array and index. Nothing is recorded on error.
    """
    z, q, steps = check_rounds(noise_multipliers, sampling_rates, dp_steps)
    start = self._num_rounds
    segments = run_lengths(z, q, steps)
    for zi, qi, si, _ in segments:  # validate every segment (e.g. fixed-size cohorts)
      self._round_event(zi, qi, si)  # before mutating
    for seg in segments:
      self._append(*seg)
    return self.epsilon_history(start=start)

  # -- truncation ------------------------------------------------------------

  def truncation_probability(self) -> float:
    """Union bound on the probability that any padded Poisson draw of the recorded
    rounds was truncated (0 without a `Truncation`)."""
    if self._truncation is None:
      return 0.0
    return min(1.0, sum(r.count * self._truncation.probability(r.sampling_rate, r.dp_steps)
                        for r in self._runs))

  def delta_total(self, delta: Optional[float] = None, accountant: str = "rdp") -> float:
    """The delta of the guarantee: ``delta + truncation_delta(epsilon, p)``."""
    delta = self._delta if delta is None else check_delta(delta)
    p = self.truncation_probability()
    if p == 0.0:
      return delta
    return delta + truncation_delta(self.epsilon(delta, accountant), p)

  # -- RDP -------------------------------------------------------------------

  def _run_rdp(self, run: Run) -> Tuple[np.ndarray, int]:
    """(RDP vector of the run's base event, releases per round)."""
    base, steps = split_self_composed(run.event)
    vec, seen = _rdp_of(base, self._orders, dp_accounting_relation(base))
    if seen and not self._nonconvergence_reported:
      # Whether it matters is `accounting_warnings`' question; the details go to DEBUG.
      _log.debug("%s", _nonconvergence_message(seen))
      self._nonconvergence_reported = True
    return vec, steps

  def accounting_warnings(self, delta: Optional[float] = None) -> List[str]:
    """Plain sentences on what could change this ledger's RDP epsilon at ``delta``
    (default the ledger's): one when RDP orders dp-accounting had to exclude (its series
    did not converge) could give a smaller epsilon
    (`fedjax_dp.privacy.accountants.excluded_orders_note`); [] otherwise.

    Raises:
      FedJaxDpError: invalid ``delta``.
    """
    delta = self._delta if delta is None else check_delta(delta)
    if not self._runs:
      return []
    note = excluded_orders_note(self._orders, self.rdp(), delta)
    return [note] if note else []

  def rdp(self) -> np.ndarray:
    """Total RDP at `orders` of all recorded rounds (float64 [len(orders)])."""
    total = np.zeros(len(self._orders), dtype=np.float64)
    for run in self._runs:
      vec, steps = self._run_rdp(run)
      total += (run.count * steps) * vec
    return total

  def _rdp_epsilon(self, delta: float) -> float:
    if not self._runs:
      return 0.0
    eps, _ = rdp_privacy_accountant.compute_epsilon(self._orders, cast(Any, self.rdp()), delta)
    return float(eps)

  def epsilon_history(self, delta: Optional[float] = None, start: int = 0,
                      accountant: str = "rdp") -> np.ndarray:
    """Epsilon after each recorded round ``start, ..., num_rounds - 1`` (0-based
    positions: entry ``t`` is the epsilon after the ``t + 1``-th round).

    Entry ``t`` accounts for rounds ``0..t`` composed. Computed incrementally and
    cached per delta (and PLD grid).

    * ``"rdp"``: the last entry equals ``epsilon(delta)`` exactly; one RDP-to-epsilon
      conversion per round (~0.2 ms).
    * ``"pld"``: dp_accounting's PLD accountant (`fedjax_dp.privacy.accountants
      .PldAccountant`, the grid of `epsilon`): each distinct run's one-round PLD is
      built once, and the epsilon after round ``k`` of a run is that of the earlier
      runs' composed PLD composed with the run's PLD self-composed ``k`` times, i.e.
      what composing the rounds so far from scratch gives (the last entry equals
      ``epsilon(delta, "pld")`` up to the grid's rounding). Cost: one PLD build per
      distinct run (~0.5 s at the default grid 1e-4, ~0.07 s at 1e-3) plus, per
      round, one FFT self-composition, one composition and one epsilon query
      (milliseconds to tens of ms, growing with the loss support): a 100-round history
      at the default grid takes seconds; use a coarser
      ``pld_value_discretization_interval`` for long runs.

    Args:
      delta: target delta in (0, 1); default the ledger's.
      start: first round to return (0 <= start <= num_rounds).
      accountant: ``"rdp"`` or ``"pld"``.

    Returns:
      float64 array [num_rounds - start], non-decreasing (``inf`` from a round with
      z == 0 on).

    Raises:
      FedJaxDpError: invalid ``delta``, ``start`` or ``accountant``;
        `UnsupportedAccountingError` for PLD of events dp_accounting has no PLD for.
    """
    delta = self._delta if delta is None else check_delta(delta)
    start = check_int("start", start, minimum=0, maximum=self._num_rounds)
    check_choice("accountant", accountant, ACCOUNTANTS)
    if accountant == "pld":
      return np.asarray(self._pld_history(delta)[start:self._num_rounds], dtype=np.float64)
    hist = self._history.setdefault(delta, [])
    if len(hist) < self._num_rounds:
      total = np.zeros(len(self._orders), dtype=np.float64)
      first = 0  # index of the run's first round
      for run in self._runs:
        vec, steps = self._run_rdp(run)
        end = first + run.count
        for k in range(max(len(hist) - first, 0) + 1, run.count + 1):
          eps, _ = rdp_privacy_accountant.compute_epsilon(
              self._orders, cast(Any, total + (k * steps) * vec), delta)
          hist.append(float(eps))
        total += (run.count * steps) * vec
        first = end
    return np.asarray(hist[start:self._num_rounds], dtype=np.float64)

  def rdp_history(self, start: int = 0) -> np.ndarray:
    """Cumulative RDP at `orders` after each recorded round ``start, ..., num_rounds - 1``.

    Row ``t`` is the RDP of rounds ``0..t`` composed (RDP composes additively, Mironov
    2017, arXiv:1702.07476, Prop. 1), with the same arithmetic as `epsilon_history`, so
    the last row equals `rdp()` exactly. Computed incrementally and cached (one row of
    ``len(orders)`` floats per round). Several ledgers whose rounds are composed
    together (`fedjax_dp.privacy.multi_release.MultiReleaseLedger`) add their rows.

    Args:
      start: first round to return (0 <= start <= num_rounds).

    Returns:
      float64 array ``[num_rounds - start, len(orders)]`` (a new array), non-decreasing
      down each column.

    Raises:
      FedJaxDpError: invalid ``start``.
    """
    start = check_int("start", start, minimum=0, maximum=self._num_rounds)
    rows = self._rdp_rows
    if len(rows) < self._num_rounds:
      total = np.zeros(len(self._orders), dtype=np.float64)
      first = 0  # index of the run's first round
      for run in self._runs:
        vec, steps = self._run_rdp(run)
        for k in range(max(len(rows) - first, 0) + 1, run.count + 1):
          row = total + (k * steps) * vec
          row.setflags(write=False)
          rows.append(row)
        total += (run.count * steps) * vec
        first += run.count
    if start == self._num_rounds:
      return np.zeros((0, len(self._orders)), dtype=np.float64)
    return np.stack(rows[start:self._num_rounds])

  # -- PLD -------------------------------------------------------------------

  def _pld_interval_for(self, delta: float) -> float:
    """The PLD discretisation: the ledger's, coarsened to ``epsilon_rdp * 1e-6`` nats for
    very large epsilons (a Gaussian with z ~ 0.01 has privacy losses in the thousands;
    a 1e-4 grid over them needs terabytes). dp_accounting discretises pessimistically,
    so the coarser grid still gives an upper bound."""
    eps_rdp = self._rdp_epsilon(delta)
    if not math.isfinite(eps_rdp):
      return self._pld_interval
    return max(self._pld_interval, eps_rdp * 1e-6)

  def _pld_epsilon(self, delta: float) -> float:
    key = (delta, self._version)
    if key in self._pld_results:
      return self._pld_results[key]
    interval = self._pld_interval_for(delta)
    if self._pld_prefix is None or interval != self._pld_prefix_interval:
      # Shift semantics throughout (`fedjax_dp.privacy.accountants.PldAccountant`).
      self._pld_prefix = _make_accountant("pld", NeighborRel.ADD_OR_REMOVE_ONE, None,
                                          interval)
      self._pld_prefix_runs, self._pld_prefix_interval = 0, interval
    runs = self._runs
    while self._pld_prefix_runs < len(runs) - 1:
      run = runs[self._pld_prefix_runs]
      self._pld_prefix.compose(dp_accounting.SelfComposedDpEvent(run.event, run.count))
      self._pld_prefix_runs += 1
    acc = copy.deepcopy(self._pld_prefix)
    if runs:
      acc.compose(dp_accounting.SelfComposedDpEvent(runs[-1].event, runs[-1].count))
    eps = float(acc.get_epsilon(delta))
    self._pld_results[key] = eps
    return eps

  def _pld_history(self, delta: float) -> List[float]:
    """PLD epsilon after each recorded round (cached per (delta, grid); see
    `epsilon_history` and `fedjax_dp.privacy.accountants.PldHistory`)."""
    interval = self._pld_interval_for(delta)
    hist = self._pld_history_state.setdefault((delta, interval), PldHistory(interval))
    return hist.extend(self._runs, self._num_rounds, delta)

  # -- queries ---------------------------------------------------------------

  def epsilon(self, delta: Optional[float] = None, accountant: str = "rdp") -> float:
    """Epsilon spent by all recorded rounds.

    Args:
      delta: target delta in (0, 1); default the ledger's.
      accountant: ``"rdp"`` (`RdpAccountant` values, fast) or ``"pld"``
        (`PLDAccountant`, tighter, slower: see the class docstring).

    Returns:
      epsilon (float): 0.0 for an empty ledger, ``inf`` if any round had z == 0.

    Raises:
      FedJaxDpError: invalid ``delta`` / ``accountant``.
      UnsupportedAccountingError: ``"pld"`` for a secure sum's rounds (`supports`).
    """
    delta = self._delta if delta is None else check_delta(delta)
    check_choice("accountant", accountant, ACCOUNTANTS)
    if accountant == "rdp":
      return self._rdp_epsilon(delta)
    if not self.supports(accountant):
      raise UnsupportedAccountingError(
          "the rounds of a secure sum are zCDP bounds (observation 'secure_sum'): they "
          "have no PLD; use accountant='rdp'.", option="accountant")
    return self._pld_epsilon(delta)

  def summary(self, accountant: str = "rdp", delta: Optional[float] = None
              ) -> PrivacySummary:
    """A `PrivacySummary` of all recorded rounds (see `epsilon` for the arguments)."""
    eps = self.epsilon(delta, accountant)
    delta = self._delta if delta is None else float(delta)
    return PrivacySummary(
        privacy_unit=f"{self._privacy_unit}-level",
        neighboring_relation=self._relation_text, sampler=self._sampler,
        accountant=accountant, epsilon=eps, delta=delta,
        num_rounds=self._num_rounds,
        num_releases=sum(r.count * r.dp_steps for r in self._runs),
        truncation_probability=self.truncation_probability(),
        delta_total=self.delta_total(delta, accountant), observation=self._observation)

  # -- serialisation ---------------------------------------------------------

  def to_dict(self) -> Dict[str, Any]:
    """JSON-serialisable state; `from_dict` restores an identical ledger.

    Floats are stored as Python floats (JSON round-trips them exactly), so a
    restored ledger recomputes bit-identical epsilons.
    """
    return {
        "format": _LEDGER_FORMAT,
        "version": _LEDGER_VERSION,
        "delta": self._delta,
        "orders": list(self._orders),
        "sampler": self._sampler,
        "relation": self._relation,
        "population_size": self._population_size,
        "cohort_size": self._cohort_size,
        "privacy_unit": self._privacy_unit,
        "truncation": None if self._truncation is None else self._truncation._asdict(),
        "observation": self._observation,
        "pld_value_discretization_interval": self._pld_interval,
        "runs": [{"noise_multiplier": r.noise_multiplier,
                  "sampling_rate": r.sampling_rate,
                  "dp_steps": r.dp_steps, "count": r.count} for r in self._runs],
    }

  @classmethod
  def from_dict(cls, state: Dict[str, Any]) -> "PrivacyLedger":
    """Inverse of `to_dict`.

    Raises:
      FedJaxDpError: not a ledger dict, an unknown version (version 1 ledgers held
        fixed-size noise multipliers relative to the add/remove sensitivity and are
        refused), or invalid values.
    """
    if not isinstance(state, dict) or state.get("format") != _LEDGER_FORMAT:
      got = (f"format={state.get('format')!r}" if isinstance(state, dict)
             else f"a {type(state).__name__}")
      raise FedJaxDpError(
          f"state must be a dict from PrivacyLedger.to_dict() with "
          f"format={_LEDGER_FORMAT!r}, got {got}.")
    if state.get("version") not in (2, _LEDGER_VERSION):
      raise FedJaxDpError(f"state version must be 2 or {_LEDGER_VERSION}, got "
                          f"{state.get('version')!r} (version 1 ledgers stored noise "
                          "multipliers under another convention; recompute from "
                          "metrics.jsonl).")
    ledger = cls(delta=state["delta"], orders=state["orders"], sampler=state["sampler"],
                 population_size=state["population_size"],
                 cohort_size=state["cohort_size"], privacy_unit=state["privacy_unit"],
                 relation=state["relation"], truncation=state["truncation"],
                 pld_value_discretization_interval=state[
                     "pld_value_discretization_interval"],
                 # Version 2 ledgers predate the observation model: every one was an
                 # aggregate's (rounds without amplification recorded rate 1).
                 observation=state.get("observation", "aggregate"))
    for i, run in enumerate(state["runs"]):
      try:
        ledger.record(run["noise_multiplier"], run["sampling_rate"], run["dp_steps"],
                      run["count"])
      except (KeyError, TypeError) as err:
        raise FedJaxDpError(f"state['runs'][{i}] is malformed: {err!r}.") from err
    return ledger

  def __repr__(self) -> str:
    return (f"PrivacyLedger(sampler={self._sampler!r}, relation={self._relation!r}, "
            f"observation={self._observation!r}, "
            f"delta={self._delta!r}, rounds={self._num_rounds}, runs={len(self._runs)})")
