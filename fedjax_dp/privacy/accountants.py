"""Accountants: the (epsilon, delta) of `fedjax_dp.privacy.events`' DpEvents, from
Google's `dp_accounting`.

* `ACCOUNTANTS`, `DEFAULT_RDP_ORDERS`, `DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL`: the
  accountants (RDP and PLD) and their defaults.
* `PldAccountant`: dp-accounting's PLD accountant plus the events it lacks: sampling
  without replacement (`sampled_without_replacement_gaussian_pld`) and
  `fedjax_dp.privacy.events.VisibleParticipationDpEvent` (uploads attributed to their
  senders); `visible_participation_rdp` is the latter's RDP.
* `check_accountant_supports` / `UnsupportedAccountingError`: names checked (both
  accountants support every event this library builds).
* `event_epsilon`: epsilon of any event; `compute_epsilon`: epsilon of a constant
  schedule (its inverse is `fedjax_dp.privacy.calibration`).
* `deduplicate_rdp_convergence_warnings`, `excluded_orders_note`: log hygiene and the
  one warning that matters (below).

Events follow the one convention of `fedjax_dp.privacy.events` ("this module's
convention" below) and are composed under `dp_accounting_relation`, which keeps one
meaning of the noise multiplier in every accountant.

Accounting is not re-implemented here where dp_accounting has it. RDP values come from
`dp_accounting.rdp.RdpAccountant` and the conversion to (epsilon, delta) from
`dp_accounting.rdp.rdp_privacy_accountant.compute_epsilon`; PLD values come
from `dp_accounting.pld.PLDAccountant`. Two events dp_accounting lacks are ours, built
from its public PLD pieces and each tested against an independent computation: visible
participation (a mixture of a PLD with the identity; its RDP in closed form) and the
PLD of sampling without replacement. `fedjax_dp.privacy.ledger` only caches per-event
RDP vectors (computed here) and adds them.

Log hygiene. dp-accounting 0.6.0 computes the RDP of a Poisson-subsampled
Gaussian at fractional orders with a series that, for moderate q and z (e.g.
q = 0.1, z = 1.0), does not converge within 1000 terms at orders 1.1 ... 1.5;
for each such order and *every* `compose` call it logs (absl logging, logger
``"absl"``) "_compute_log_a_frac failed to converge ... Excluding this order"
and uses RDP = +inf there. Those orders are simply dropped from the minimum over
orders, so epsilon is still a valid upper bound. This module computes each
unique event's RDP once and swallows exactly that message while doing so (no other
message is touched); the swallowed messages are summarised at DEBUG level on the
logger ``"fedjax_dp.privacy.accountants"``. Whether the dropped orders matter is
decided where the epsilon is known (`excluded_orders_note`): only when one of them
could have given a smaller epsilon is one plain warning given (`event_epsilon` logs
it; a run puts it in summary.json's ``accounting_warnings`` and prints it once after
the run). dp-accounting 0.6.0 raises no Python warnings here (``warnings`` module):
the message is an absl log record.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

from absl import logging as absl_logging
import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np

from fedjax_dp.privacy.events import (SAMPLERS, NeighborRel, VisibleParticipationDpEvent,
                                      _check_count, _constant_schedule_event,
                                      dp_accounting_relation, has_visible_participation)
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_delta, check_int,
                                  check_positive)

__all__ = [
    "ACCOUNTANTS", "DEFAULT_RDP_ORDERS", "DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL",
    "UnsupportedAccountingError", "deduplicate_rdp_convergence_warnings",
    "excluded_orders_note", "check_accountant_supports", "event_epsilon",
    "compute_epsilon", "PldAccountant", "PldHistory", "visible_participation_rdp",
    "sampled_without_replacement_gaussian_pld",
]

_log = logging.getLogger(__name__)

#: Accountants: Renyi DP (fast, slightly loose) and privacy loss distributions
#: (tighter, slower).
ACCOUNTANTS = ("rdp", "pld")
#: dp-accounting's default RDP orders (1.1 ... 10.9 in steps of 0.1, 11 ... 63,
#: 128, 256, 512, 1024).
DEFAULT_RDP_ORDERS: Tuple[float, ...] = tuple(
    float(a) for a in rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
#: dp-accounting's default PLD discretisation of the privacy loss (nats).
DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL = 1e-4


class UnsupportedAccountingError(FedJaxDpError):
  """The requested accountant cannot account for the requested events: PLD for a
  secure sum's rounds, whose events are zCDP bounds
  (`fedjax_dp.privacy.ledger.PrivacyLedger.supports`)."""


# ---------------------------------------------------------------------------
# The dp-accounting convergence warning.
# ---------------------------------------------------------------------------

_NONCONVERGENCE_PREFIX = "_compute_log_a_frac failed to converge"


class _NonConvergenceCollector(logging.Filter):
  """Drops dp-accounting's fractional-order convergence warning, remembering it."""

  def __init__(self):
    super().__init__()
    self.seen: List[Tuple[float, float, float]] = []  # (q, sigma, alpha)

  def filter(self, record: logging.LogRecord) -> bool:
    msg = record.msg
    if isinstance(msg, str) and msg.startswith(_NONCONVERGENCE_PREFIX):
      args = record.args if isinstance(record.args, tuple) else ()
      if len(args) >= 4:
        vals = [float(str(a)) for a in args[1:4]]  # logged numbers (floats, %-formatted)
        self.seen.append((vals[0], vals[1], vals[2]))
      else:
        self.seen.append((math.nan, math.nan, math.nan))
      return False
    return True


@contextlib.contextmanager
def _collect_nonconvergence() -> Iterator[_NonConvergenceCollector]:
  """Swallows (and collects) only the ``_compute_log_a_frac`` warning."""
  collector = _NonConvergenceCollector()
  logger = absl_logging.get_absl_logger()
  logger.addFilter(collector)
  try:
    yield collector
  finally:
    logger.removeFilter(collector)


def _nonconvergence_message(seen: Sequence[Tuple[float, float, float]]) -> str:
  orders = sorted({a for _, _, a in seen})
  pairs = sorted({(q, s) for q, s, _ in seen})
  example = ", ".join(f"(q={q:g}, z={s:g})" for q, s in pairs[:3])
  more = f" and {len(pairs) - 3} more" if len(pairs) > 3 else ""
  return (
      f"dp_accounting's RDP series for the Poisson-subsampled Gaussian did not converge "
      f"at order(s) {', '.join(f'{a:g}' for a in orders)} for {len(pairs)} event(s) "
      f"{example}{more}; dp_accounting sets RDP = +inf there, so those orders are "
      "excluded and epsilon is taken from the remaining orders (still a valid upper "
      "bound). The per-order dp_accounting warnings were suppressed; this is "
      "reported once.")


@contextlib.contextmanager
def deduplicate_rdp_convergence_warnings(
    logger: Optional[logging.Logger] = None) -> Iterator[None]:
  """Replaces dp-accounting's per-order convergence warnings by one DEBUG summary.

  Inside the block, records of the absl logger whose message starts with
  ``"_compute_log_a_frac failed to converge"`` (dp-accounting 0.6.0,
  ``rdp_privacy_accountant._compute_log_a_frac``) are dropped; every other
  record passes untouched. On exit, if any were dropped, one summary naming the
  affected orders and (q, z) pairs is logged, by default at DEBUG level: the dropped
  orders only loosen epsilon, and whether they change it is decided where the epsilon
  is known (`excluded_orders_note`).

  Args:
    logger: where the summary goes instead, through its ``warning`` method (the
      caller chooses the level, e.g. a paper's own accounting logs it at DEBUG); default: ``"fedjax_dp.privacy.accountants"`` at DEBUG.

  Yields:
    None.
  """
  with _collect_nonconvergence() as collector:
    yield
  if collector.seen:
    if logger is None:
      _log.debug("%s", _nonconvergence_message(collector.seen))
    else:
      logger.warning("%s", _nonconvergence_message(collector.seen))


def excluded_orders_note(orders: Sequence[float], rdp: Union[Sequence[float], np.ndarray],
                         delta: float) -> Optional[str]:
  """One plain sentence when RDP orders dp-accounting had to exclude could change the
  reported epsilon; None when they do not.

  dp-accounting sets the RDP of the Poisson-subsampled Gaussian to +inf at orders
  where its series does not converge (small fractional orders, e.g. 1.1 ... 1.8 for
  q = 0.5, z = 2), and epsilon is the minimum over the other orders of its conversion
  (Canonne, Kamath and Steinke 2020, arXiv:2004.00010, Prop. 12): a valid upper bound
  either way. "Changes the result" means here: the order attaining the epsilon is a
  neighbour, in the order grid, of an excluded order, i.e. the minimum sits at the edge
  of the orders that could be evaluated, so an excluded order might give a smaller
  epsilon. (No bound on the excluded values is assumed: dp-accounting's RDP values of
  the subsampled Gaussian are not monotone in the order across its fractional and
  integer formulas, e.g. q = 0.2, z = 8 gives a smaller RDP at order 2 than at 1.9.)
  With the optimum inside the evaluated range (the usual case; e.g. q = 0.5, z = 2:
  epsilon 1.66 after 3 rounds at order 6.1, 7.99 after 50 at order 2.9, the excluded
  orders ending at 1.8) nothing is reported; large epsilons (e.g. q = 0.5, z = 0.8, 200
  rounds: 118.8 at order 1.8) are.

  Args:
    orders: the RDP orders (> 1), float ``[K]``, increasing.
    rdp: the composed RDP at ``orders`` (``+inf`` where excluded), float ``[K]``.
    delta: the target delta in (0, 1).

  Returns:
    None, or the sentence (naming the epsilon, its order and the excluded orders).
  """
  order_arr = np.asarray(orders, np.float64)
  rdp_arr = np.asarray(rdp, np.float64)
  excluded = np.isposinf(rdp_arr)
  if not excluded.any():
    return None
  eps, best = rdp_privacy_accountant.compute_epsilon(order_arr.tolist(), rdp_arr.tolist(),
                                                     delta)
  if excluded.all() or not math.isfinite(eps):
    edge = True
  else:
    i = int(np.flatnonzero(order_arr == best)[0])
    edge = any(0 <= j < len(order_arr) and excluded[j] for j in (i - 1, i + 1))
  if not edge:
    return None
  where = ", ".join(f"{a:g}" for a in order_arr[excluded])
  return (f"the RDP epsilon {eps:.4g} may be loose: it is attained at order {best:g}, "
          f"next to order(s) {where} where dp_accounting could not compute the RDP (its "
          "series for the Poisson-subsampled Gaussian did not converge), so a smaller "
          "epsilon there cannot be ruled out. It is still a valid upper bound; the PLD "
          "accountant (accountant 'pld', where the run supports it) has no such gap.")


@functools.lru_cache(maxsize=4096)
def _rdp_of(event: dp_accounting.DpEvent, orders: Tuple[float, ...], relation: NeighborRel
            ) -> Tuple[np.ndarray, Tuple[Tuple[float, float, float], ...]]:
  """RDP vector of one event from a fresh `RdpAccountant`, plus swallowed warnings
  (cached: ``event`` must be hashable)."""
  return _rdp_uncached(event, orders, relation)


def _rdp_uncached(event: dp_accounting.DpEvent, orders: Tuple[float, ...],
                  relation: NeighborRel
                  ) -> Tuple[np.ndarray, Tuple[Tuple[float, float, float], ...]]:
  """`_rdp_of` without the cache (for events that hold lists, e.g. ComposedDpEvent)."""
  with _collect_nonconvergence() as collector:
    vec = _rdp_vector(event, orders, relation)
  vec.setflags(write=False)
  return vec, tuple(collector.seen)


def visible_participation_rdp(sampling_probability: float, orders: Any,
                              inner_rdp: Any) -> np.ndarray:
  """RDP of `VisibleParticipationDpEvent(q, E)` from E's RDP ``R`` at ``orders``:
  ``log(1 - q + q exp((alpha - 1) R_alpha)) / (alpha - 1)`` (exact when R is; the
  divergence of a mixture whose component the observer sees is the mixture of the
  components' ``exp((alpha - 1) D_alpha)``, the same in both directions for a symmetric
  E; our derivation). Monotone in R, so an upper bound on R gives one on the result.

  Args:
    sampling_probability: q in [0, 1].
    orders: Renyi orders alpha > 1, float ``[K]``.
    inner_rdp: R, float ``[K]`` (``+inf`` allowed).

  Returns:
    float64 ``[K]``.
  """
  q = float(sampling_probability)
  a = np.asarray(orders, np.float64)
  r = np.asarray(inner_rdp, np.float64)
  if q == 0.0:
    return np.zeros_like(r)
  with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
    log_keep = -np.inf if q == 1.0 else math.log1p(-q)
    return np.logaddexp(log_keep, math.log(q) + (a - 1.0) * r) / (a - 1.0)


def _rdp_vector(event: dp_accounting.DpEvent, orders: Tuple[float, ...],
                relation: NeighborRel) -> np.ndarray:
  """RDP of ``event`` at ``orders``: dp_accounting's `RdpAccountant`, with our
  `VisibleParticipationDpEvent` (`visible_participation_rdp`) wherever it occurs."""
  if not has_visible_participation(event):
    accountant = dp_rdp.RdpAccountant(list(orders), relation)
    accountant.compose(event)
    return np.array(accountant.rdp, np.float64)
  if isinstance(event, VisibleParticipationDpEvent):
    inner = _rdp_vector(event.event, orders, relation)
    return visible_participation_rdp(event.sampling_probability, orders, inner)
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return event.count * _rdp_vector(event.event, orders, relation)
  assert isinstance(event, dp_accounting.ComposedDpEvent)
  return sum((_rdp_vector(e, orders, relation) for e in event.events),
             np.zeros(len(orders), np.float64))


def sampled_without_replacement_gaussian_pld(
    noise_multiplier: float, sampling_rate: float,
    value_discretization_interval: float = DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL
) -> dp_pld.privacy_loss_distribution.PrivacyLossDistribution:
  """A PLD that dominates one round of a Gaussian mechanism on a cohort of m of n units
  drawn without replacement, under replace-one (``sampling_rate = m / n``,
  ``noise_multiplier = sigma / Delta`` with Delta the replace-one sensitivity).

  Dong, Roth, Su ("Gaussian differential privacy", JRSS-B 2022, Thm. 4.2; their
  neighbours are replace-one and their subsampling is without replacement): if M is
  f-DP, M on a sample of m of n is C_p(f)-DP with ``p = m / n``,
  ``f_p = p f + (1 - p) Id`` and ``C_p(f) = conv(min(f_p, f_p^-1))``. For the Gaussian
  ``f = G_{1/z}``; f_p and f_p^-1 are the "remove" and "add" directions of the
  Poisson-subsampled Gaussian, and the privacy profile of the convex envelope of their
  minimum is the pointwise maximum of theirs, ``delta(eps) = max(delta_remove(eps),
  delta_add(eps))`` for every real eps (the conjugate of a convex envelope of a minimum
  is the maximum of the conjugates; DRS Prop. 2.12). That profile, on the loss grid,
  gives a pessimistic PLD by connect-the-dots (Doroshenko, Ghazi, Kamath, Kumar,
  Manurangsi, PETS 2022, Alg. 1: it dominates every pair with that profile), symmetric
  because C_p(f) is. Compositions of it are the f-DP compositions of C_p(f) (DRS
  Thm. 3.2), also in the sense of Zhu, Dong, Wang (AISTATS 2022, dominating pairs).

  Taking the maximum of the T-fold "remove" and T-fold "add" compositions instead (what
  a Poisson PLD does) is NOT valid here: it gives a smaller epsilon than C_p(f)^T (e.g.
  3.31 vs 3.70 for n = 100, m = 10, z = 1, 50 rounds, delta 1e-3), because the
  replace-one worst case switches direction along the trade-off curve.

  Args:
    noise_multiplier: z > 0 (shift 1/z).
    sampling_rate: p = m / n in (0, 1].
    value_discretization_interval: the loss grid step (nats).

  Returns:
    A symmetric `PrivacyLossDistribution`.
  """
  plm = dp_pld.privacy_loss_mechanism
  losses = [plm.GaussianPrivacyLoss(float(noise_multiplier), 1.0,
                                    sampling_prob=float(sampling_rate), adjacency_type=t)
            for t in (plm.AdjacencyType.REMOVE, plm.AdjacencyType.ADD)]
  bounds = [l.connect_dots_bounds() for l in losses]
  h = float(value_discretization_interval)
  lo = math.floor(min(float(b.epsilon_lower or 0.0) for b in bounds) / h)
  hi = math.ceil(max(float(b.epsilon_upper or 0.0) for b in bounds) / h)
  rounded = np.arange(lo, hi + 1)
  eps = rounded * h
  deltas = np.maximum(np.asarray(losses[0].get_delta_for_epsilon(eps.tolist()), np.float64),
                      np.asarray(losses[1].get_delta_for_epsilon(eps.tolist()), np.float64))
  pmf = dp_pld.pld_pmf.create_pmf_pessimistic_connect_dots(h, rounded, deltas)
  return dp_pld.privacy_loss_distribution.PrivacyLossDistribution(pmf)


class PldAccountant(dp_pld.PLDAccountant):
  """dp_accounting's `PLDAccountant` under add/remove shift semantics (a
  `GaussianDpEvent(z)` is a shift of 1/z standard deviations, the convention of
  `fedjax_dp.privacy.events`), which also composes

  * `VisibleParticipationDpEvent(q, E)`: the mixture ``q PLD(E) + (1 - q) identity``
    (`PrivacyLossDistribution.compute_mixture`; exact, see the event's docstring);
  * `SampledWithoutReplacementDpEvent(n, m, GaussianDpEvent(z))` under replace-one with
    ``z`` relative to the replace-one sensitivity:
    `sampled_without_replacement_gaussian_pld` (Dong, Roth, Su 2022, Thm. 4.2;
    connect-the-dots), which tests compare with the exact divergence of the worst
    one-dimensional canary and with the RDP bound of Wang, Balle, Kasiviswanathan
    (`tests/privacy/test_observation.py`).

  Everything else is dp_accounting's own. Uses the parent's ``_pld`` and
  ``_contains_non_dp_event`` attributes (dp-accounting 0.6).
  """

  def __init__(self, value_discretization_interval: float =
               DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL):
    super().__init__(NeighborRel.ADD_OR_REMOVE_ONE, value_discretization_interval)

  def _maybe_compose(self, event, count, do_compose):
    interval = self._value_discretization_interval
    if isinstance(event, VisibleParticipationDpEvent):
      inner = PldAccountant(interval)
      err = inner._maybe_compose(event.event, 1, do_compose)
      if err is not None or not do_compose or event.sampling_probability == 0:
        return err
      if inner._contains_non_dp_event:
        self._contains_non_dp_event = True
        return None
      mixed = inner._pld.compute_mixture(
          dp_pld.privacy_loss_distribution.identity(interval),
          float(event.sampling_probability))
      self._pld = self._pld.compose(mixed.self_compose(count) if count > 1 else mixed)
      return None
    if (isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent)
        and isinstance(event.event, dp_accounting.GaussianDpEvent)):
      if do_compose:
        z = event.event.noise_multiplier
        if z == 0:
          self._contains_non_dp_event = True
        else:
          pld = _wor_pld_cached(float(z), event.sample_size / event.source_dataset_size,
                                interval)
          self._pld = self._pld.compose(pld.self_compose(count) if count > 1 else pld)
      return None
    return super()._maybe_compose(event, count, do_compose)


@functools.lru_cache(maxsize=64)
def _wor_pld_cached(z: float, q: float, interval: float):
  return sampled_without_replacement_gaussian_pld(z, q, interval)


class PldHistory:
  """PLD epsilon after each round of a sequence of runs (``count`` identical rounds of
  one DpEvent each: `fedjax_dp.privacy.rounds.Run`), extended as rounds are appended
  (`fedjax_dp.privacy.ledger.PrivacyLedger.epsilon_history`).

  Each run's one-round PLD is built once (`PldAccountant` composing its event once);
  the epsilon after round ``k`` of a run is that of the earlier runs' composed PLD
  composed with the run's PLD self-composed ``k`` times: what composing the rounds so
  far from scratch gives. A round with a non-private event (z = 0) gives inf from there
  on. Uses `PldAccountant`'s ``_pld`` as that class does.
  """

  def __init__(self, interval: float):
    self.interval = interval
    self.eps: List[float] = []
    self._run, self._first = 0, 0   # the current run and its first round's position
    self._prefix: Any = None        # the PLD of the runs before the current one
    self._base: Any = None          # the current run's one-round PLD
    self._base_run, self._inf = -1, False

  def _one_round(self, event: dp_accounting.DpEvent) -> Any:
    acc = PldAccountant(self.interval)
    acc.compose(event)
    return None if acc._contains_non_dp_event else acc._pld

  def extend(self, runs: Sequence[Any], num_rounds: int, delta: float) -> List[float]:
    """The epsilons (at ``delta``) of the first ``num_rounds`` rounds of ``runs``,
    computing only those not computed yet (``delta`` must be the same every call)."""
    eps = self.eps
    while len(eps) < num_rounds:
      run = runs[self._run]
      if not self._inf and self._base_run != self._run:
        self._base, self._base_run = self._one_round(run.event), self._run
        self._inf = self._base is None
      for k in range(len(eps) - self._first + 1, run.count + 1):
        if self._inf:
          eps.append(math.inf)
          continue
        pld = self._base.self_compose(k) if k > 1 else self._base
        if self._prefix is not None:
          pld = self._prefix.compose(pld)
        eps.append(float(pld.get_epsilon_for_delta(delta)))
      if len(eps) < num_rounds:  # the run is complete: fold it into the prefix
        if not self._inf:
          whole = self._base.self_compose(run.count) if run.count > 1 else self._base
          self._prefix = whole if self._prefix is None else self._prefix.compose(whole)
        self._first += run.count
        self._run += 1
    return eps


class _VisibleRdpAccountant(dp_rdp.RdpAccountant):
  """dp_accounting's `RdpAccountant` that also composes our
  `VisibleParticipationDpEvent` (`visible_participation_rdp`), wherever it occurs in a
  composition: what calibration needs for visible-participation rounds."""

  def _maybe_compose(self, event, count, do_compose):
    if isinstance(event, VisibleParticipationDpEvent):
      if do_compose:
        orders = tuple(float(a) for a in self._orders)
        self._rdp += count * _rdp_vector(event, orders, self._neighboring_relation)
      return None
    return super()._maybe_compose(event, count, do_compose)


def _make_accountant(accountant: str, relation: NeighborRel,
                     orders: Optional[Sequence[float]],
                     pld_value_discretization_interval: float
                     ) -> dp_accounting.PrivacyAccountant:
  """A fresh accountant. PLD: `PldAccountant` (shift semantics whatever ``relation``:
  sampling without replacement is handled by its dominating pair)."""
  if accountant == "rdp":
    return _VisibleRdpAccountant(None if orders is None else list(orders), relation)
  return PldAccountant(pld_value_discretization_interval)


def check_accountant_supports(accountant: str, sampler: str,
                              population_size: Optional[int] = None,
                              cohort_size: Optional[int] = None) -> None:
  """Checks the accountant's and sampler's names. Both accountants support both
  samplers: the PLD of sampling without replacement is that of its
  dominating pair (`PldAccountant`). Kept for callers that check before building.

  Raises:
    FedJaxDpError: an unknown accountant or sampler.
  """
  check_choice("accountant", accountant, ACCOUNTANTS)
  check_choice("sampler", sampler, SAMPLERS)


def _raise_unsupported():
  raise UnsupportedAccountingError(
      "this accountant cannot account for the requested events.")


def _check_event_supported(accountant: str, event: dp_accounting.DpEvent) -> None:
  """Nothing this library builds is unsupported any more (kept as the hook)."""
  del accountant, event


def _check_orders(orders: Optional[Sequence[float]]) -> Tuple[float, ...]:
  if orders is None:
    return DEFAULT_RDP_ORDERS
  arr = np.asarray(orders, dtype=np.float64)
  if arr.ndim != 1 or arr.size == 0:
    raise FedJaxDpError(f"orders must be a non-empty 1-D sequence, got shape {arr.shape}.")
  bad = arr[~np.isfinite(arr) | (arr <= 1.0)]
  if bad.size:
    raise FedJaxDpError(
        f"orders must be finite Renyi orders > 1, got {bad.tolist()!r} among them.")
  return tuple(float(a) for a in arr)


def _check_pld_interval(value: Any) -> float:
  return check_positive("pld_value_discretization_interval", value)


def event_epsilon(event: dp_accounting.DpEvent, delta: float, accountant: str = "rdp",
                  orders: Optional[Sequence[float]] = None,
                  pld_value_discretization_interval: float =
                  DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL) -> float:
  """Epsilon of any `DpEvent` built with this module's convention (`make_dp_event`),
  composed in a fresh accountant under `dp_accounting_relation`.

  Raises:
    FedJaxDpError: invalid delta or accountant.
  """
  delta = check_delta(delta)
  check_choice("accountant", accountant, ACCOUNTANTS)
  _check_event_supported(accountant, event)
  orders = _check_orders(orders)
  interval = _check_pld_interval(pld_value_discretization_interval)
  relation = dp_accounting_relation(event)
  if accountant == "rdp":  # the RDP vector of RdpAccountant.compose, cached
    try:
      vec, _ = _rdp_of(event, orders, relation)
    except TypeError:  # an unhashable event (it holds a list)
      vec, _ = _rdp_uncached(event, orders, relation)
    note = excluded_orders_note(orders, vec, delta)
    if note:
      _log.warning("%s", note)
    eps, _ = rdp_privacy_accountant.compute_epsilon(list(orders), list(vec), delta)
    return float(eps)
  with deduplicate_rdp_convergence_warnings():
    acc = _make_accountant(accountant, relation, orders, interval)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


# ---------------------------------------------------------------------------
# Constant schedules.
# ---------------------------------------------------------------------------

def compute_epsilon(noise_multiplier: float, sampling_rate: Optional[float], rounds: int,
                    delta: float, steps_per_round: int = 1, sampler: str = "poisson",
                    accountant: str = "rdp", population_size: Optional[int] = None,
                    cohort_size: Optional[int] = None,
                    orders: Optional[Sequence[float]] = None,
                    pld_value_discretization_interval: float =
                    DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL) -> float:
  """Epsilon of ``rounds`` identical rounds (a constant noise schedule).

  Composes ``SelfComposedDpEvent(make_dp_event(...), rounds)`` in a fresh
  `dp_accounting` accountant (see `make_dp_event` for the event and what
  ``noise_multiplier`` means, and `dp_accounting_relation`).

  Args:
    noise_multiplier: z >= 0 (noise std / L2 sensitivity under the sampler's relation).
    sampling_rate: q in (0, 1] (see `make_dp_event` for ``"fixed_size"``).
    rounds: number of rounds, int >= 1.
    delta: target delta in (0, 1).
    steps_per_round: noisy releases per round (int >= 1).
    sampler: one of `SAMPLERS`.
    accountant: ``"rdp"`` (`RdpAccountant`; conversion to (epsilon, delta) by
      Canonne, Kamath, Steinke 2020, arXiv:2004.00010, Prop. 12) or ``"pld"``
      (`PLDAccountant`, Doroshenko et al. 2022, arXiv:2207.04380; tighter, and
      typically 5-50x slower).
    population_size: n (``"fixed_size"`` only).
    cohort_size: m (``"fixed_size"`` only).
    orders: RDP orders (default `DEFAULT_RDP_ORDERS`).
    pld_value_discretization_interval: PLD loss grid step in nats (> 0).

  Returns:
    epsilon (float, nats-based as in dp-accounting); ``inf`` when z == 0.

  Raises:
    FedJaxDpError: invalid arguments.
  """
  delta = check_delta(delta)
  rounds = check_int("rounds", rounds, minimum=1)
  steps_per_round = _check_count(steps_per_round, "steps_per_round")
  check_choice("accountant", accountant, ACCOUNTANTS)
  event = _constant_schedule_event(noise_multiplier, sampling_rate, rounds, steps_per_round,
                                   sampler, population_size, cohort_size)
  return event_epsilon(event, delta, accountant, orders, pld_value_discretization_interval)
