"""Privacy accounting for DP federated learning, built on Google's `dp_accounting`.

Every simulated round reports, on the host, the noise multiplier ``z_t`` (noise
standard deviation / L2 sensitivity), the sampling rate ``q_t``, the number of
noisy releases composed in the round (``dp_steps``: 1 for user-level DP-FedAvg,
the number of local DP-SGD steps for record-level DP) and the sampler. This
module turns those numbers into `dp_accounting.DpEvent`s and (epsilon, delta):

* `make_dp_event`: one round -> one `DpEvent`.
* `PrivacyLedger`: the run-length composition of all rounds so far (noise may
  change every round), with fast RDP epsilon after every round, PLD epsilon,
  and JSON round-tripping for checkpoints.
* `compute_epsilon` / `calibrate_noise_multiplier`: the same accounting for a
  constant schedule, and its inverse (via `dp_accounting.calibrate_dp_mechanism`).
* `PrivacySummary`: what a run's privacy statement says.

Accounting is never re-implemented here. RDP values come from
`dp_accounting.rdp.RdpAccountant` and the conversion to (epsilon, delta) from
`dp_accounting.rdp.rdp_privacy_accountant.compute_epsilon`; PLD values come
from `dp_accounting.pld.PLDAccountant`. The ledger only caches per-event RDP
vectors and adds them, which is exactly what `RdpAccountant` does for a
composition (RDP composes additively, Mironov 2017, arXiv:1702.07476, Prop. 1).

Log hygiene. dp-accounting 0.6.0 computes the RDP of a Poisson-subsampled
Gaussian at fractional orders with a series that, for moderate q and z (e.g.
q = 0.1, z = 1.0), does not converge within 1000 terms at orders 1.1 ... 1.5;
for each such order and *every* `compose` call it logs (absl logging, logger
``"absl"``) "_compute_log_a_frac failed to converge ... Excluding this order"
and uses RDP = +inf there. Those orders are simply dropped from the minimum over
orders, so epsilon is still a valid upper bound. This module computes each
unique event's RDP once, swallows exactly that message while doing so (no other
message is touched) and logs one summary per ledger / per call instead, on the
logger ``"fedjax_dp.privacy.accounting"``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
import math
import numbers
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from absl import logging as absl_logging
import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np

from fedjax_dp.validation import (FedJaxDpError, check_choice, check_delta, check_epsilon,
                                  check_int, check_non_negative, check_positive,
                                  check_probability)

__all__ = [
    "SAMPLERS", "ACCOUNTANTS", "PRIVACY_UNITS", "DEFAULT_RDP_ORDERS",
    "DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL", "NeighborRel",
    "UnsupportedAccountingError", "neighboring_relation", "make_dp_event",
    "deduplicate_rdp_convergence_warnings", "compute_epsilon",
    "calibrate_noise_multiplier", "PrivacySummary", "PrivacyLedger",
]

_log = logging.getLogger(__name__)

NeighborRel = dp_accounting.NeighboringRelation

#: Client / record samplers understood by `make_dp_event`.
SAMPLERS = ("poisson", "fixed_size")
#: Accountants: Renyi DP (fast, slightly loose) and privacy loss distributions
#: (tighter, slower).
ACCOUNTANTS = ("rdp", "pld")
#: What one neighbouring step changes: all data of one user, or one record.
PRIVACY_UNITS = ("user", "record")
#: dp-accounting's default RDP orders (1.1 ... 10.9 in steps of 0.1, 11 ... 63,
#: 128, 256, 512, 1024).
DEFAULT_RDP_ORDERS: Tuple[float, ...] = tuple(
    float(a) for a in rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
#: dp-accounting's default PLD discretisation of the privacy loss (nats).
DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL = 1e-4

# Relative tolerance when matching a (float32) sampling rate to cohort/population.
_COHORT_RATE_RTOL = 1e-6
_LEDGER_FORMAT = "fedjax_dp.PrivacyLedger"
_LEDGER_VERSION = 1


class UnsupportedAccountingError(FedJaxDpError):
  """The requested accountant cannot account for the requested events.

  Raised, e.g., for ``accountant="pld"`` with ``sampler="fixed_size"``:
  dp-accounting 0.6.0's `PLDAccountant` has no `SampledWithoutReplacementDpEvent`.
  """


# ---------------------------------------------------------------------------
# Events.
# ---------------------------------------------------------------------------

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


def neighboring_relation(sampler: str,
                         privacy_unit: Optional[str] = None) -> Tuple[NeighborRel, str]:
  """The neighbouring relation under which a sampler's events are accounted.

  Args:
    sampler: one of `SAMPLERS`. ``"poisson"`` (each unit independently with
      probability q) is accounted under add/remove-one; ``"fixed_size"`` (a
      cohort of exactly m of n units, without replacement) under replace-one,
      the relation for which dp-accounting's `SampledWithoutReplacementDpEvent`
      bound holds (Wang, Balle, Kasiviswanathan 2019, arXiv:1808.00087).
    privacy_unit: optional, ``"user"`` or ``"record"`` (or ``"user-level"``,
      ``"record-level"``); only changes the text.

  Returns:
    ``(relation, text)``: the `dp_accounting.NeighboringRelation` to construct
    accountants with, and a one-line statement of it for summaries.

  Raises:
    FedJaxDpError: unknown ``sampler`` or ``privacy_unit``.
  """
  check_choice("sampler", sampler, SAMPLERS)
  unit = _unit_words(privacy_unit)
  if sampler == "poisson":
    return (NeighborRel.ADD_OR_REMOVE_ONE,
            f"add/remove-one: neighbouring datasets differ by adding or removing {unit}")
  return (NeighborRel.REPLACE_ONE,
          f"replace-one: neighbouring datasets have the same size and differ in {unit} "
          "(the noise multiplier must be relative to the replace-one sensitivity)")


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


def _build_event(z: float, q: float, steps: int, sampler: str,
                 population_size: Optional[int], cohort_size: Optional[int]
                 ) -> dp_accounting.DpEvent:
  """`make_dp_event` on already validated arguments."""
  if z == 0.0:
    return dp_accounting.NonPrivateDpEvent()
  gaussian = dp_accounting.GaussianDpEvent(z)
  if sampler == "fixed_size":
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        population_size, cohort_size, gaussian)
  elif q == 1.0:
    event = gaussian
  else:
    event = dp_accounting.PoissonSampledDpEvent(q, gaussian)
  if steps > 1:
    event = dp_accounting.SelfComposedDpEvent(event, steps)
  return event


def make_dp_event(noise_multiplier: float, sampling_rate: Optional[float] = None,
                  steps: int = 1, sampler: str = "poisson",
                  population_size: Optional[int] = None,
                  cohort_size: Optional[int] = None) -> dp_accounting.DpEvent:
  """The `DpEvent` of one round: ``steps`` sampled Gaussian releases.

  * ``sampler="poisson"``: `PoissonSampledDpEvent(q, GaussianDpEvent(z))`,
    accounted under add/remove-one; with ``q == 1`` the plain
    `GaussianDpEvent(z)` (no sampling, no amplification).
  * ``sampler="fixed_size"``: `SampledWithoutReplacementDpEvent(population_size,
    cohort_size, GaussianDpEvent(z))`, accounted under replace-one. dp-accounting
    bounds it with the replace-one RDP ``alpha / (2 z^2)`` of the inner Gaussian
    (Wang, Balle, Kasiviswanathan 2019, arXiv:1808.00087, Thm. 27), so ``z``
    must be the noise std divided by the *replace-one* L2 sensitivity. For a sum
    of updates clipped to norm C that sensitivity is 2C: a round that reports
    ``std / C`` must pass half of it. This function does not rescale.
  * ``noise_multiplier == 0``: `NonPrivateDpEvent` (epsilon = inf).
  * ``steps > 1``: `SelfComposedDpEvent(event, steps)` (e.g. local DP-SGD steps).

  Args:
    noise_multiplier: z >= 0, noise standard deviation / L2 sensitivity (unitless).
    sampling_rate: q in (0, 1], the probability that a unit takes part. Defaults
      to 1 for ``"poisson"``; for ``"fixed_size"`` it defaults to
      ``cohort_size / population_size`` and, if given, must match it (relative
      tolerance 1e-6, which absorbs float32 rounding).
    steps: number of noisy releases composed in the round (int >= 1).
    sampler: one of `SAMPLERS`.
    population_size: n, units the cohort is drawn from (``"fixed_size"`` only).
    cohort_size: m <= n, units per round (``"fixed_size"``; derived from q if None).

  Returns:
    A `dp_accounting.DpEvent`.

  Raises:
    FedJaxDpError: any argument out of range, NaN or inf, an unknown sampler,
      or missing / inconsistent population and cohort sizes.
  """
  check_choice("sampler", sampler, SAMPLERS)
  z = _check_noise_multiplier(noise_multiplier)
  q = None if sampling_rate is None else _check_sampling_rate(sampling_rate)
  steps = _check_count(steps, "steps")
  if sampler == "fixed_size":
    population_size, cohort_size = _resolve_cohort_size(q, population_size, cohort_size)
    q = cohort_size / population_size
  elif q is None:
    q = 1.0
  return _build_event(z, q, steps, sampler, population_size, cohort_size)


def _split_self_composed(event: dp_accounting.DpEvent) -> Tuple[dp_accounting.DpEvent, int]:
  """``SelfComposed(base, k) -> (base, k)``; any other event -> ``(event, 1)``."""
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return event.event, event.count
  return event, 1


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
        self.seen.append((float(args[1]), float(args[2]), float(args[3])))
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
  """Replaces dp-accounting's per-order convergence warnings by one summary.

  Inside the block, records of the absl logger whose message starts with
  ``"_compute_log_a_frac failed to converge"`` (dp-accounting 0.6.0,
  ``rdp_privacy_accountant._compute_log_a_frac``) are dropped; every other
  record passes untouched. On exit, if any were dropped, one WARNING naming the
  affected orders and (q, z) pairs is logged on ``logger``.

  Args:
    logger: where the summary goes; defaults to ``"fedjax_dp.privacy.accounting"``.

  Yields:
    None.
  """
  with _collect_nonconvergence() as collector:
    yield
  if collector.seen:
    (logger or _log).warning("%s", _nonconvergence_message(collector.seen))


@functools.lru_cache(maxsize=4096)
def _rdp_of(event: dp_accounting.DpEvent, orders: Tuple[float, ...], relation: NeighborRel
            ) -> Tuple[np.ndarray, Tuple[Tuple[float, float, float], ...]]:
  """RDP vector of one event from a fresh `RdpAccountant`, plus swallowed warnings."""
  with _collect_nonconvergence() as collector:
    accountant = dp_rdp.RdpAccountant(list(orders), relation)
    accountant.compose(event)
  vec = accountant.rdp
  vec.setflags(write=False)
  return vec, tuple(collector.seen)


def _make_accountant(accountant: str, relation: NeighborRel,
                     orders: Optional[Sequence[float]],
                     pld_value_discretization_interval: float
                     ) -> dp_accounting.PrivacyAccountant:
  if accountant == "rdp":
    return dp_rdp.RdpAccountant(None if orders is None else list(orders), relation)
  return dp_pld.PLDAccountant(relation, pld_value_discretization_interval)


def check_accountant_supports(accountant: str, sampler: str) -> None:
  """Raises `UnsupportedAccountingError` if ``accountant`` cannot account for events of
  ``sampler`` (dp-accounting's PLD has no sampling-without-replacement event)."""
  _check_supported(accountant, sampler)


def _check_supported(accountant: str, sampler: str) -> None:
  if accountant == "pld" and sampler == "fixed_size":
    raise UnsupportedAccountingError(
        "accountant='pld' cannot account for sampler='fixed_size': dp-accounting's "
        "PLDAccountant does not support SampledWithoutReplacementDpEvent (replace-one "
        "sampling without replacement). Use accountant='rdp' or sampler='poisson'.")


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


# ---------------------------------------------------------------------------
# Constant schedules.
# ---------------------------------------------------------------------------

def _constant_schedule_event(noise_multiplier, sampling_rate, rounds, steps_per_round,
                             sampler, population_size, cohort_size):
  event = make_dp_event(noise_multiplier, sampling_rate, steps_per_round, sampler,
                        population_size, cohort_size)
  return dp_accounting.SelfComposedDpEvent(event, rounds)


def compute_epsilon(noise_multiplier: float, sampling_rate: Optional[float], rounds: int,
                    delta: float, steps_per_round: int = 1, sampler: str = "poisson",
                    accountant: str = "rdp", population_size: Optional[int] = None,
                    cohort_size: Optional[int] = None,
                    orders: Optional[Sequence[float]] = None,
                    pld_value_discretization_interval: float =
                    DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL) -> float:
  """Epsilon of ``rounds`` identical rounds (a constant noise schedule).

  Composes ``SelfComposedDpEvent(make_dp_event(...), rounds)`` in a fresh
  `dp_accounting` accountant (see `make_dp_event` for the event and
  `neighboring_relation` for the relation).

  Args:
    noise_multiplier: z >= 0 (noise std / L2 sensitivity).
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
    UnsupportedAccountingError: ``accountant="pld"`` with ``sampler="fixed_size"``.
  """
  delta = check_delta(delta)
  rounds = check_int("rounds", rounds, minimum=1)
  steps_per_round = _check_count(steps_per_round, "steps_per_round")
  check_choice("accountant", accountant, ACCOUNTANTS)
  orders = _check_orders(orders)
  interval = _check_pld_interval(pld_value_discretization_interval)
  event = _constant_schedule_event(noise_multiplier, sampling_rate, rounds, steps_per_round,
                                   sampler, population_size, cohort_size)
  _check_supported(accountant, sampler)
  relation, _ = neighboring_relation(sampler)
  with deduplicate_rdp_convergence_warnings():
    acc = _make_accountant(accountant, relation, orders, interval)
    return float(acc.compose(event).get_epsilon(delta))


def calibrate_noise_multiplier(target_epsilon: float, delta: float,
                               sampling_rate: Optional[float], rounds: int,
                               steps_per_round: int = 1, sampler: str = "poisson",
                               accountant: str = "rdp",
                               population_size: Optional[int] = None,
                               cohort_size: Optional[int] = None, tol: float = 1e-5,
                               orders: Optional[Sequence[float]] = None,
                               pld_value_discretization_interval: float =
                               DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL) -> float:
  """The smallest noise multiplier whose epsilon after ``rounds`` rounds <= target.

  Epsilon decreases in z. A bracket ``[lo, hi]`` with eps(lo) > target >= eps(hi)
  is found by doubling / halving from z = 1, then
  `dp_accounting.calibrate_dp_mechanism` (Brent's method) returns a z within
  ``tol`` of the exact threshold whose epsilon is guaranteed <= target.

  Args:
    target_epsilon: epsilon budget, finite and > 0.
    delta: delta in (0, 1).
    sampling_rate: q in (0, 1] (see `make_dp_event` for ``"fixed_size"``).
    rounds: number of rounds, int >= 1.
    steps_per_round: noisy releases per round (int >= 1).
    sampler: one of `SAMPLERS`.
    accountant: ``"rdp"`` or ``"pld"`` (each evaluation composes from scratch;
      with ``"pld"`` calibration takes seconds to tens of seconds).
    population_size: n (``"fixed_size"`` only).
    cohort_size: m (``"fixed_size"`` only).
    tol: absolute tolerance on z (> 0).
    orders: RDP orders (default `DEFAULT_RDP_ORDERS`).
    pld_value_discretization_interval: PLD loss grid step in nats (> 0).

  Returns:
    z (float) with ``compute_epsilon(z, ...) <= target_epsilon``.

  Raises:
    FedJaxDpError: invalid arguments, or a target so large that even z < 1e-3
      meets it (possible when q is below delta) or so small that z > 2**40 is needed.
    UnsupportedAccountingError: ``accountant="pld"`` with ``sampler="fixed_size"``.
  """
  target_epsilon = check_epsilon(target_epsilon, "target_epsilon")
  delta = check_delta(delta)
  rounds = check_int("rounds", rounds, minimum=1)
  steps_per_round = _check_count(steps_per_round, "steps_per_round")
  check_choice("accountant", accountant, ACCOUNTANTS)
  tol = check_positive("tol", tol)
  orders = _check_orders(orders)
  interval = _check_pld_interval(pld_value_discretization_interval)
  # Validates sampler / q / steps / sizes once, with the argument names.
  _constant_schedule_event(1.0, sampling_rate, rounds, steps_per_round, sampler,
                           population_size, cohort_size)
  _check_supported(accountant, sampler)
  relation, _ = neighboring_relation(sampler)

  def make_event(z: float) -> dp_accounting.DpEvent:
    return _constant_schedule_event(z, sampling_rate, rounds, steps_per_round, sampler,
                                    population_size, cohort_size)

  def make_accountant() -> dp_accounting.PrivacyAccountant:
    return _make_accountant(accountant, relation, orders, interval)

  def gap(z: float) -> float:
    return make_accountant().compose(make_event(z)).get_epsilon(delta) - target_epsilon

  with deduplicate_rdp_convergence_warnings():
    lo, hi = 1.0, 1.0
    if gap(1.0) > 0:
      while gap(hi) > 0:
        lo, hi = hi, 2.0 * hi
        if hi > 2.0 ** 40:
          raise FedJaxDpError(
              f"target_epsilon={target_epsilon!r} needs a noise multiplier above 2**40 "
              f"for rounds={rounds}, delta={delta!r}; it is unreachable in practice.")
    else:
      while gap(lo) <= 0:
        lo, hi = lo / 2.0, lo
        if lo < 1e-3:
          raise FedJaxDpError(
              f"target_epsilon={target_epsilon!r} is met even with noise multiplier "
              f"{hi!r} (rounds={rounds}, sampling_rate={sampling_rate!r}, "
              f"delta={delta!r}); calibration below 1e-3 is not supported.")
    z = dp_accounting.calibrate_dp_mechanism(
        make_accountant, make_event, target_epsilon, delta,
        bracket_interval=dp_accounting.ExplicitBracketInterval(lo, hi), tol=tol)
  return float(z)


# ---------------------------------------------------------------------------
# Summary.
# ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PrivacySummary:
  """A run's privacy statement.

  Attributes:
    privacy_unit: ``"user-level"`` or ``"record-level"``.
    neighboring_relation: text from `neighboring_relation`.
    sampler: one of `SAMPLERS`.
    accountant: ``"rdp"`` or ``"pld"``.
    epsilon: epsilon spent (``inf`` if a round was non-private).
    delta: delta in (0, 1).
    num_rounds: rounds composed.
    num_releases: noisy releases composed (sum over rounds of ``dp_steps``).
  """
  privacy_unit: str
  neighboring_relation: str
  sampler: str
  accountant: str
  epsilon: float
  delta: float
  num_rounds: int
  num_releases: int

  def to_dict(self) -> Dict[str, Any]:
    """Plain dict (``epsilon`` may be ``inf``; JSON writers must allow it)."""
    return dataclasses.asdict(self)

  def __str__(self) -> str:
    sampling = "Poisson sampling" if self.sampler == "poisson" else "fixed-size sampling"
    return (f"({self.epsilon:.4g}, {self.delta:g})-DP at {self.privacy_unit} "
            f"({self.neighboring_relation}); {sampling}, {self.num_rounds} rounds, "
            f"{self.num_releases} noisy releases, {self.accountant.upper()} accountant")


# ---------------------------------------------------------------------------
# The ledger.
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class _Run:
  event: dp_accounting.DpEvent
  noise_multiplier: float
  sampling_rate: float
  dp_steps: int
  count: int


def _as_vector(name: str, values: Any, length: Optional[int], dtype) -> np.ndarray:
  arr = np.asarray(values)
  if arr.ndim == 0 and length is not None:
    arr = np.full(length, arr)
  if arr.ndim != 1:
    raise FedJaxDpError(f"{name} must be a 1-D array (one entry per round), got shape "
                        f"{arr.shape}.")
  if length is not None and arr.shape[0] != length:
    raise FedJaxDpError(f"{name} must have {length} entries (one per round), got "
                        f"{arr.shape[0]}.")
  if arr.dtype.kind not in "biuf":
    raise FedJaxDpError(f"{name} must be numeric, got dtype {arr.dtype}.")
  return arr.astype(dtype)


class PrivacyLedger:
  """Run-length composition of per-round DP events, with epsilon on demand.

  Rounds are appended with `record` / `record_many`; identical consecutive
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
  the last are composed once and kept; results are cached per delta). Building
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

    ledger = PrivacyLedger(delta=1e-5)
    eps_per_round = ledger.record_many(z_block, q_block, steps_block)
    eps = ledger.epsilon(accountant="pld")
  """

  def __init__(self, delta: float, orders: Optional[Sequence[float]] = None,
               sampler: str = "poisson", population_size: Optional[int] = None,
               cohort_size: Optional[int] = None, privacy_unit: str = "user",
               pld_value_discretization_interval: float =
               DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL):
    """Creates an empty ledger.

    Args:
      delta: default target delta in (0, 1) for `epsilon` and friends.
      orders: RDP orders (> 1, finite); default `DEFAULT_RDP_ORDERS`.
      sampler: one of `SAMPLERS`; fixes the neighbouring relation of the ledger.
      population_size: n; required for ``"fixed_size"`` (informational otherwise).
      cohort_size: m; optional for ``"fixed_size"`` (then every recorded
        sampling rate must equal m / n; otherwise m is derived per round).
      privacy_unit: ``"user"`` or ``"record"`` (``"user-level"`` etc. accepted;
        only used in summaries).
      pld_value_discretization_interval: PLD loss grid step in nats (> 0).

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
    self._relation, self._relation_text = neighboring_relation(sampler, privacy_unit)
    self._runs: List[_Run] = []
    self._num_rounds = 0
    self._version = 0
    # RDP caches.
    self._rdp_vectors: Dict[dp_accounting.DpEvent, np.ndarray] = {}
    self._nonconvergence_reported = False
    self._history: Dict[float, List[float]] = {}
    # PLD caches: accountant holding runs[:n_prefix], and results per (delta, version).
    self._pld_prefix: Optional[dp_accounting.PrivacyAccountant] = None
    self._pld_prefix_runs = 0
    self._pld_results: Dict[Tuple[float, int], float] = {}

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
    """The sampler (fixes the neighbouring relation)."""
    return self._sampler

  @property
  def neighboring_relation(self) -> NeighborRel:
    """The `dp_accounting.NeighboringRelation` of all accountants used."""
    return self._relation

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
    """Whether ``epsilon(accountant=...)`` is available for this ledger's sampler."""
    check_choice("accountant", accountant, ACCOUNTANTS)
    return not (accountant == "pld" and self._sampler == "fixed_size")

  # -- recording -------------------------------------------------------------

  def _round_event(self, z: float, q: float, steps: int) -> dp_accounting.DpEvent:
    population, cohort = self._population_size, None
    if self._sampler == "fixed_size":
      population, cohort = _resolve_cohort_size(q, population, self._cohort_size)
    return _build_event(z, q, steps, self._sampler, population, cohort)

  def _append(self, z: float, q: float, steps: int, count: int) -> None:
    event = self._round_event(z, q, steps)
    if self._runs and self._runs[-1].event == event:
      self._runs[-1].count += count
    else:
      self._runs.append(_Run(event, z, q, steps, count))
    self._num_rounds += count
    self._version += 1

  def record(self, noise_multiplier: float, sampling_rate: float, dp_steps: int = 1,
             count: int = 1) -> None:
    """Records ``count`` identical rounds.

    Args:
      noise_multiplier: z >= 0 (noise std / L2 sensitivity); numpy / jax scalars
        are converted to float64 exactly.
      sampling_rate: q in (0, 1].
      dp_steps: noisy releases composed in the round (int >= 1).
      count: number of identical rounds (int >= 1).

    Raises:
      FedJaxDpError: any argument out of range, NaN or inf (nothing is recorded).
    """
    z = _check_noise_multiplier(noise_multiplier)
    q = _check_sampling_rate(sampling_rate)
    steps = _check_count(dp_steps, "dp_steps")
    count = _check_count(count, "count")
    self._append(z, q, steps, count)

  def record_many(self, noise_multipliers: Any, sampling_rates: Any,
                  dp_steps: Any = 1) -> np.ndarray:
    """Records one round per entry (e.g. a block of jitted rounds) and returns eps.

    Args:
      noise_multipliers: 1-D array-like [L] of z >= 0 (float32 from the device is
        converted exactly to float64).
      sampling_rates: 1-D [L] of q in (0, 1], or a scalar for all rounds.
      dp_steps: 1-D [L] of ints >= 1 (integer-valued floats accepted), or a scalar.

    Returns:
      float64 array [L]: RDP epsilon at the ledger's delta after each recorded
      round (same values as ``epsilon_history()[-L:]``).

    Raises:
      FedJaxDpError: wrong shapes, or any entry out of range, NaN or inf; the
        message names the array and index. Nothing is recorded on error.
    """
    z = _as_vector("noise_multipliers", noise_multipliers, None, np.float64)
    n = z.shape[0]
    q = _as_vector("sampling_rates", sampling_rates, n, np.float64)
    steps_f = _as_vector("dp_steps", dp_steps, n, np.float64)
    for name, arr, ok, allowed in (
        ("noise_multipliers", z, np.isfinite(z) & (z >= 0), "finite and >= 0"),
        ("sampling_rates", q, np.isfinite(q) & (q > 0) & (q <= 1), "in (0, 1]"),
        ("dp_steps", steps_f, np.isfinite(steps_f) & (steps_f >= 1)
         & (steps_f == np.round(steps_f)), "integers >= 1")):
      if not ok.all():
        i = int(np.argmin(ok))
        raise FedJaxDpError(f"{name}[{i}] must be {allowed}, got {arr[i]!r}.")
    steps = steps_f.astype(np.int64)
    start = self._num_rounds
    if n:
      change = np.flatnonzero((z[1:] != z[:-1]) | (q[1:] != q[:-1])
                              | (steps[1:] != steps[:-1])) + 1
      bounds = np.concatenate([[0], change, [n]])
      # Validate every segment (e.g. fixed-size cohorts) before mutating.
      segments = [(float(z[a]), float(q[a]), int(steps[a]), int(b - a))
                  for a, b in zip(bounds[:-1], bounds[1:])]
      for zi, qi, si, _ in segments:
        self._round_event(zi, qi, si)
      for seg in segments:
        self._append(*seg)
    return self.epsilon_history(start=start)

  # -- RDP -------------------------------------------------------------------

  def _run_rdp(self, run: _Run) -> Tuple[np.ndarray, int]:
    """(RDP vector of the run's base event, releases per round)."""
    base, steps = _split_self_composed(run.event)
    vec = self._rdp_vectors.get(base)
    if vec is None:
      vec, seen = _rdp_of(base, self._orders, self._relation)
      self._rdp_vectors[base] = vec
      if seen:
        if not self._nonconvergence_reported:
          _log.warning("%s", _nonconvergence_message(seen))
          self._nonconvergence_reported = True
        else:
          _log.debug("%s", _nonconvergence_message(seen))
    return vec, steps

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
    eps, _ = rdp_privacy_accountant.compute_epsilon(self._orders, self.rdp(), delta)
    return float(eps)

  def epsilon_history(self, delta: Optional[float] = None, start: int = 0) -> np.ndarray:
    """RDP epsilon after each recorded round ``start, ..., num_rounds - 1``.

    Entry ``t`` accounts for rounds ``0..t``. The last entry equals
    ``epsilon(delta)`` exactly. Computed incrementally and cached per delta.

    Args:
      delta: target delta in (0, 1); default the ledger's.
      start: first round to return (0 <= start <= num_rounds).

    Returns:
      float64 array [num_rounds - start], non-decreasing.

    Raises:
      FedJaxDpError: invalid ``delta`` or ``start``.
    """
    delta = self._delta if delta is None else check_delta(delta)
    start = check_int("start", start, minimum=0, maximum=self._num_rounds)
    hist = self._history.setdefault(delta, [])
    if len(hist) < self._num_rounds:
      total = np.zeros(len(self._orders), dtype=np.float64)
      first = 0  # index of the run's first round
      for run in self._runs:
        vec, steps = self._run_rdp(run)
        end = first + run.count
        for k in range(max(len(hist) - first, 0) + 1, run.count + 1):
          eps, _ = rdp_privacy_accountant.compute_epsilon(
              self._orders, total + (k * steps) * vec, delta)
          hist.append(float(eps))
        total += (run.count * steps) * vec
        first = end
    return np.asarray(hist[start:self._num_rounds], dtype=np.float64)

  # -- PLD -------------------------------------------------------------------

  def _pld_epsilon(self, delta: float) -> float:
    key = (delta, self._version)
    if key in self._pld_results:
      return self._pld_results[key]
    if self._pld_prefix is None:
      self._pld_prefix = _make_accountant("pld", self._relation, None, self._pld_interval)
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
      UnsupportedAccountingError: ``"pld"`` with the ``"fixed_size"`` sampler.
    """
    delta = self._delta if delta is None else check_delta(delta)
    check_choice("accountant", accountant, ACCOUNTANTS)
    _check_supported(accountant, self._sampler)
    if accountant == "rdp":
      return self._rdp_epsilon(delta)
    return self._pld_epsilon(delta)

  def summary(self, accountant: str = "rdp", delta: Optional[float] = None
              ) -> PrivacySummary:
    """A `PrivacySummary` of all recorded rounds (see `epsilon` for the arguments)."""
    eps = self.epsilon(delta, accountant)
    return PrivacySummary(
        privacy_unit=f"{self._privacy_unit}-level",
        neighboring_relation=self._relation_text, sampler=self._sampler,
        accountant=accountant, epsilon=eps,
        delta=self._delta if delta is None else float(delta),
        num_rounds=self._num_rounds,
        num_releases=sum(r.count * r.dp_steps for r in self._runs))

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
        "population_size": self._population_size,
        "cohort_size": self._cohort_size,
        "privacy_unit": self._privacy_unit,
        "pld_value_discretization_interval": self._pld_interval,
        "runs": [{"noise_multiplier": r.noise_multiplier,
                  "sampling_rate": r.sampling_rate,
                  "dp_steps": r.dp_steps, "count": r.count} for r in self._runs],
    }

  @classmethod
  def from_dict(cls, state: Dict[str, Any]) -> "PrivacyLedger":
    """Inverse of `to_dict`.

    Raises:
      FedJaxDpError: not a ledger dict, an unknown version, or invalid values.
    """
    if not isinstance(state, dict) or state.get("format") != _LEDGER_FORMAT:
      got = (f"format={state.get('format')!r}" if isinstance(state, dict)
             else f"a {type(state).__name__}")
      raise FedJaxDpError(
          f"state must be a dict from PrivacyLedger.to_dict() with "
          f"format={_LEDGER_FORMAT!r}, got {got}.")
    if state.get("version") != _LEDGER_VERSION:
      raise FedJaxDpError(f"state version must be {_LEDGER_VERSION}, got "
                          f"{state.get('version')!r}.")
    ledger = cls(delta=state["delta"], orders=state["orders"], sampler=state["sampler"],
                 population_size=state["population_size"],
                 cohort_size=state["cohort_size"], privacy_unit=state["privacy_unit"],
                 pld_value_discretization_interval=state[
                     "pld_value_discretization_interval"])
    for i, run in enumerate(state["runs"]):
      try:
        ledger.record(run["noise_multiplier"], run["sampling_rate"], run["dp_steps"],
                      run["count"])
      except (KeyError, TypeError) as err:
        raise FedJaxDpError(f"state['runs'][{i}] is malformed: {err!r}.") from err
    return ledger

  def __repr__(self) -> str:
    return (f"PrivacyLedger(sampler={self._sampler!r}, delta={self._delta!r}, "
            f"rounds={self._num_rounds}, runs={len(self._runs)})")
