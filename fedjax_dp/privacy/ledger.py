"""Privacy accounting for DP federated learning, built on Google's `dp_accounting`.

Every simulated round reports, on the host, what it released: the noise standard
deviation ``sigma``, the L2 sensitivity ``Delta`` of the released quantity *under the
round's own neighbouring relation* (`fedjax_dp.privacy.sensitivity`), the noise
multiplier ``z = sigma / Delta``, the sampling rate ``q``, the number of noisy releases
composed in the round (``dp_steps``: 1 for user-level DP-FedAvg, the number of local
DP-SGD steps for record-level DP) and the sampler. This module turns those numbers into
`dp_accounting.DpEvent`s and (epsilon, delta):

* `make_dp_event`: one round -> one `DpEvent`.
* `PrivacyLedger`: the run-length composition of all rounds so far (noise may
  change every round), with fast RDP epsilon after every round, PLD epsilon, the
  probability that a padded batch or cohort was truncated (added to delta), and JSON
  round-tripping for checkpoints.
* `compute_epsilon` / `calibrate_noise_multiplier` / `calibrate`: the same accounting
  for a constant schedule, and its inverse (via `dp_accounting.calibrate_dp_mechanism`).
* `PrivacySummary`: what a run's privacy statement says.

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
(RDP only, Wang, Balle, Kasiviswanathan 2019, Thm. 27) under ``REPLACE_ONE``, where its
inner ``z`` is relative to the replace-one sensitivity, as here. A fixed-size cohort
that is the whole population is no sampling at all: a plain `GaussianDpEvent`, which
the PLD accountant supports.

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
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from absl import logging as absl_logging
import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
from scipy import stats

from fedjax_dp.privacy.sensitivity import RELATION_TEXT, RELATIONS, check_relation
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_delta, check_epsilon,
                                  check_int, check_non_negative, check_positive,
                                  check_probability)

__all__ = [
    "SAMPLERS", "ACCOUNTANTS", "PRIVACY_UNITS", "RELATIONS", "DEFAULT_RDP_ORDERS",
    "DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL", "NeighborRel", "Truncation",
    "UnsupportedAccountingError", "default_relation", "neighboring_relation",
    "make_dp_event", "dp_accounting_relation", "deduplicate_rdp_convergence_warnings",
    "compute_epsilon", "calibrate", "calibrate_noise_multiplier", "check_accountant_supports",
    "truncation_delta", "PrivacySummary", "PrivacyLedger",
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
#: The relations each sampler's events are valid under (the first is the default).
_SAMPLER_RELATIONS = {"poisson": ("add_remove", "zero_out"), "fixed_size": ("replace_one",)}
#: dp-accounting's default RDP orders (1.1 ... 10.9 in steps of 0.1, 11 ... 63,
#: 128, 256, 512, 1024).
DEFAULT_RDP_ORDERS: Tuple[float, ...] = tuple(
    float(a) for a in rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
#: dp-accounting's default PLD discretisation of the privacy loss (nats).
DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL = 1e-4

# Relative tolerance when matching a (float32) sampling rate to cohort/population.
_COHORT_RATE_RTOL = 1e-6
_LEDGER_FORMAT = "fedjax_dp.PrivacyLedger"
_LEDGER_VERSION = 2


class UnsupportedAccountingError(FedJaxDpError):
  """The requested accountant cannot account for the requested events.

  Raised for ``accountant="pld"`` with fixed-size cohorts smaller than the population:
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


def _build_event(z: float, q: float, steps: int, sampler: str,
                 population_size: Optional[int], cohort_size: Optional[int]
                 ) -> dp_accounting.DpEvent:
  """`make_dp_event` on already validated arguments."""
  if z == 0.0:
    return dp_accounting.NonPrivateDpEvent()
  gaussian = dp_accounting.GaussianDpEvent(z)
  if sampler == "fixed_size" and cohort_size < population_size:
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
                  cohort_size: Optional[int] = None) -> dp_accounting.DpEvent:
  """The `DpEvent` of one round: ``steps`` sampled Gaussian releases.

  ``noise_multiplier`` is ``sigma / Delta`` with ``Delta`` the sensitivity under the
  sampler's relation (module docstring); it is used as given.

  * ``sampler="poisson"``: `PoissonSampledDpEvent(q, GaussianDpEvent(z))` (add/remove
    or zero-out); with ``q == 1`` the plain `GaussianDpEvent(z)` (no amplification).
  * ``sampler="fixed_size"``, ``cohort_size < population_size``:
    `SampledWithoutReplacementDpEvent(population_size, cohort_size, GaussianDpEvent(z))`
    (replace-one; Wang, Balle, Kasiviswanathan 2019, Thm. 27); RDP only.
  * ``sampler="fixed_size"``, ``cohort_size == population_size``: every unit takes part,
    so the plain `GaussianDpEvent(z)` (tighter than the sampled event with m = n, and
    the PLD accountant supports it).
  * ``noise_multiplier == 0``: `NonPrivateDpEvent` (epsilon = inf).
  * ``steps > 1``: `SelfComposedDpEvent(event, steps)` (e.g. local DP-SGD steps).

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


def _has_sampling_without_replacement(event: dp_accounting.DpEvent) -> bool:
  if isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
    return True
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return _has_sampling_without_replacement(event.event)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return any(_has_sampling_without_replacement(e) for e in event.events)
  return False


def dp_accounting_relation(event: dp_accounting.DpEvent) -> NeighborRel:
  """The `dp_accounting.NeighboringRelation` to compose ``event`` under so that every
  `GaussianDpEvent(z)` in it means a shift of ``1/z`` standard deviations (module
  docstring): ``REPLACE_ONE`` if it holds a `SampledWithoutReplacementDpEvent`
  (RDP only; RDP reads plain Gaussians the same under every relation), else
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


def check_accountant_supports(accountant: str, sampler: str,
                              population_size: Optional[int] = None,
                              cohort_size: Optional[int] = None) -> None:
  """Raises `UnsupportedAccountingError` if ``accountant`` cannot account for the events
  of ``sampler``: dp-accounting's PLD has no sampling-without-replacement event, which
  fixed-size cohorts smaller than the population need (a cohort of the whole
  population, ``cohort_size == population_size``, is a plain Gaussian and is fine)."""
  check_choice("accountant", accountant, ACCOUNTANTS)
  check_choice("sampler", sampler, SAMPLERS)
  everyone = (population_size is not None and cohort_size is not None
              and int(cohort_size) == int(population_size))
  if accountant == "pld" and sampler == "fixed_size" and not everyone:
    _raise_unsupported()


def _raise_unsupported():
  raise UnsupportedAccountingError(
      "accountant='pld' cannot account for sampler='fixed_size' with a cohort smaller "
      "than the population: dp-accounting's PLDAccountant does not support "
      "SampledWithoutReplacementDpEvent (replace-one sampling without replacement). Use "
      "accountant='rdp' or sampler='poisson'.")


def _check_event_supported(accountant: str, event: dp_accounting.DpEvent) -> None:
  if accountant == "pld" and _has_sampling_without_replacement(event):
    _raise_unsupported()


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
    UnsupportedAccountingError: ``"pld"`` with sampling without replacement.
  """
  delta = check_delta(delta)
  check_choice("accountant", accountant, ACCOUNTANTS)
  _check_event_supported(accountant, event)
  with deduplicate_rdp_convergence_warnings():
    acc = _make_accountant(accountant, dp_accounting_relation(event), _check_orders(orders),
                           _check_pld_interval(pld_value_discretization_interval))
    return float(acc.compose(event).get_epsilon(delta))


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
    UnsupportedAccountingError: ``accountant="pld"`` with a fixed-size cohort smaller
      than the population.
  """
  delta = check_delta(delta)
  rounds = check_int("rounds", rounds, minimum=1)
  steps_per_round = _check_count(steps_per_round, "steps_per_round")
  check_choice("accountant", accountant, ACCOUNTANTS)
  event = _constant_schedule_event(noise_multiplier, sampling_rate, rounds, steps_per_round,
                                   sampler, population_size, cohort_size)
  return event_epsilon(event, delta, accountant, orders, pld_value_discretization_interval)


def calibrate(make_event: Callable[[float], dp_accounting.DpEvent], target_epsilon: float,
              delta: float, accountant: str = "rdp", tol: float = 1e-5,
              orders: Optional[Sequence[float]] = None,
              pld_value_discretization_interval: float =
              DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL, name: str = "noise_multiplier"
              ) -> float:
  """The smallest noise parameter ``x`` with ``epsilon(make_event(x)) <= target``.

  ``make_event(x)`` must build the whole run's `DpEvent` (every round) from the
  parameter being calibrated, with this module's convention, and its epsilon must
  decrease in ``x``: an algorithm passes the function that maps *its own*
  hyper-parameter (e.g. DP-FedAvg's noise multiplier, noise std / clip norm) to the
  events its rounds release, so that no layer re-interprets another's number. A
  bracket ``[lo, hi]`` with eps(lo) > target >= eps(hi) is found by doubling /
  halving from x = 1, then `dp_accounting.calibrate_dp_mechanism` (Brent's method)
  returns an ``x`` within ``tol`` of the exact threshold whose epsilon is <= target.

  Args:
    make_event: ``x -> DpEvent``.
    target_epsilon: epsilon budget, finite and > 0.
    delta: delta in (0, 1).
    accountant: ``"rdp"`` or ``"pld"`` (each evaluation composes from scratch).
    tol: absolute tolerance on ``x`` (> 0).
    orders: RDP orders (default `DEFAULT_RDP_ORDERS`).
    pld_value_discretization_interval: PLD loss grid step in nats (> 0).
    name: what ``x`` is called in error messages.

  Returns:
    ``x`` (float).

  Raises:
    FedJaxDpError: invalid arguments, or a target so large that even x < 1e-3 meets it
      (possible when q is below delta) or so small that x > 2**40 is needed.
    UnsupportedAccountingError: ``"pld"`` with sampling without replacement.
  """
  target_epsilon = check_epsilon(target_epsilon, "target_epsilon")
  delta = check_delta(delta)
  check_choice("accountant", accountant, ACCOUNTANTS)
  tol = check_positive("tol", tol)
  orders = _check_orders(orders)
  interval = _check_pld_interval(pld_value_discretization_interval)
  probe = make_event(1.0)
  _check_event_supported(accountant, probe)
  relation = dp_accounting_relation(probe)

  def make_accountant() -> dp_accounting.PrivacyAccountant:
    return _make_accountant(accountant, relation, orders, interval)

  def gap(x: float) -> float:
    return make_accountant().compose(make_event(x)).get_epsilon(delta) - target_epsilon

  with deduplicate_rdp_convergence_warnings():
    lo, hi = 1.0, 1.0
    if gap(1.0) > 0:
      while gap(hi) > 0:
        lo, hi = hi, 2.0 * hi
        if hi > 2.0 ** 40:
          raise FedJaxDpError(
              f"target_epsilon={target_epsilon!r} needs a {name} above 2**40 at "
              f"delta={delta!r}; it is unreachable in practice.")
    else:
      while gap(lo) <= 0:
        lo, hi = lo / 2.0, lo
        if lo < 1e-3:
          raise FedJaxDpError(
              f"target_epsilon={target_epsilon!r} is met even with {name} {hi!r} "
              f"(delta={delta!r}); calibration below 1e-3 is not supported.")
    x = dp_accounting.calibrate_dp_mechanism(
        make_accountant, make_event, target_epsilon, delta,
        bracket_interval=dp_accounting.ExplicitBracketInterval(lo, hi), tol=tol)
  return float(x)


def calibrate_noise_multiplier(target_epsilon: float, delta: float,
                               sampling_rate: Optional[float], rounds: int,
                               steps_per_round: int = 1, sampler: str = "poisson",
                               accountant: str = "rdp",
                               population_size: Optional[int] = None,
                               cohort_size: Optional[int] = None, tol: float = 1e-5,
                               orders: Optional[Sequence[float]] = None,
                               pld_value_discretization_interval: float =
                               DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL) -> float:
  """The smallest noise multiplier (of the event, `make_dp_event`'s convention) whose
  epsilon after ``rounds`` identical rounds is <= target (`calibrate`).

  For a fixed-size cohort this ``z`` is relative to the replace-one sensitivity: a
  DP-FedAvg round whose noise std is ``z_hp * C`` on a sum of updates clipped to C has
  ``z = z_hp / 2`` (`fedjax_dp.privacy.sensitivity.sum_sensitivity`); the algorithms'
  `PrivacySpec` does this conversion (``calibrate_noise_multiplier`` there).

  Args:
    target_epsilon: epsilon budget, finite and > 0.
    delta: delta in (0, 1).
    sampling_rate: q in (0, 1] (see `make_dp_event` for ``"fixed_size"``).
    rounds: number of rounds, int >= 1.
    steps_per_round: noisy releases per round (int >= 1).
    sampler: one of `SAMPLERS`.
    accountant: ``"rdp"`` or ``"pld"`` (with ``"pld"`` calibration takes seconds to
      tens of seconds).
    population_size: n (``"fixed_size"`` only).
    cohort_size: m (``"fixed_size"`` only).
    tol: absolute tolerance on z (> 0).
    orders: RDP orders (default `DEFAULT_RDP_ORDERS`).
    pld_value_discretization_interval: PLD loss grid step in nats (> 0).

  Returns:
    z (float) with ``compute_epsilon(z, ...) <= target_epsilon``.

  Raises:
    FedJaxDpError: invalid arguments, or an unreachable target (see `calibrate`).
    UnsupportedAccountingError: ``accountant="pld"`` with a fixed-size cohort smaller
      than the population.
  """
  rounds = check_int("rounds", rounds, minimum=1)
  steps_per_round = _check_count(steps_per_round, "steps_per_round")
  # Validates sampler / q / steps / sizes once, with the argument names.
  _constant_schedule_event(1.0, sampling_rate, rounds, steps_per_round, sampler,
                           population_size, cohort_size)
  return calibrate(
      lambda z: _constant_schedule_event(z, sampling_rate, rounds, steps_per_round, sampler,
                                         population_size, cohort_size),
      target_epsilon, delta, accountant, tol, orders, pld_value_discretization_interval)


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
    delta: the accountant's delta in (0, 1).
    num_rounds: rounds composed.
    num_releases: noisy releases composed (sum over rounds of ``dp_steps``).
    truncation_probability: union bound on the probability that any padded Poisson
      draw of the run was truncated (0 without truncation).
    delta_total: ``delta + (1 + e^epsilon) truncation_probability``: the delta of the
      guarantee (`truncation_delta`).
  """
  privacy_unit: str
  neighboring_relation: str
  sampler: str
  accountant: str
  epsilon: float
  delta: float
  num_rounds: int
  num_releases: int
  truncation_probability: float = 0.0
  delta_total: Optional[float] = None

  def to_dict(self) -> Dict[str, Any]:
    """Plain dict (``epsilon`` may be ``inf``; JSON writers must allow it)."""
    return dataclasses.asdict(self)

  def __str__(self) -> str:
    sampling = "Poisson sampling" if self.sampler == "poisson" else "fixed-size sampling"
    delta = self.delta if self.delta_total is None else self.delta_total
    return (f"({self.epsilon:.4g}, {delta:.4g})-DP at {self.privacy_unit} "
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


def _check_truncation(truncation: Any) -> Optional[Truncation]:
  if truncation is None:
    return None
  if isinstance(truncation, dict):
    truncation = Truncation(**truncation)
  if not isinstance(truncation, Truncation):
    raise FedJaxDpError(f"truncation must be a Truncation or None, got "
                        f"{type(truncation).__name__}.")
  return Truncation(check_int("truncation.population_size", truncation.population_size,
                              minimum=1),
                    check_int("truncation.cap", truncation.cap, minimum=1),
                    check_int("truncation.draws_per_step", truncation.draws_per_step,
                              minimum=1))


class PrivacyLedger:
  """Run-length composition of per-round DP events, with epsilon on demand.

  Every recorded noise multiplier is ``noise_stddev / sensitivity`` under the ledger's
  relation (module docstring): the ledger builds each round's event with
  `make_dp_event` and never rescales. Make it from the mechanism's statement
  (``algorithm.privacy.make_ledger(delta)``) so that sampler, relation, cohort sizes and
  the truncation model are the ones the rounds ran with.

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

    ledger = PrivacyLedger(delta=1e-5)
    eps_per_round = ledger.record_many(z_block, q_block, steps_block)
    eps = ledger.epsilon(accountant="pld")
  """

  def __init__(self, delta: float, orders: Optional[Sequence[float]] = None,
               sampler: str = "poisson", population_size: Optional[int] = None,
               cohort_size: Optional[int] = None, privacy_unit: str = "user",
               relation: Optional[str] = None, truncation: Optional[Truncation] = None,
               pld_value_discretization_interval: float =
               DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL):
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
    self._truncation = _check_truncation(truncation)
    self._runs: List[_Run] = []
    self._num_rounds = 0
    self._version = 0
    # RDP caches.
    self._nonconvergence_reported = False
    self._history: Dict[float, List[float]] = {}
    # PLD caches: accountant holding runs[:n_prefix], and results per (delta, version).
    self._pld_prefix: Optional[dp_accounting.PrivacyAccountant] = None
    self._pld_prefix_runs = 0
    self._pld_prefix_interval: Optional[float] = None
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
    """The sampler."""
    return self._sampler

  @property
  def neighboring_relation(self) -> str:
    """The relation (one of `RELATIONS`) every recorded noise multiplier is relative to."""
    return self._relation

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
    """Whether ``epsilon(accountant=...)`` is available: PLD is not for events of
    sampling without replacement (fixed-size cohorts smaller than the population)."""
    check_choice("accountant", accountant, ACCOUNTANTS)
    if accountant == "rdp":
      return True
    if self._runs:
      return not any(_has_sampling_without_replacement(r.event) for r in self._runs)
    return self._sampler == "poisson" or self._cohort_size == self._population_size

  # -- recording -------------------------------------------------------------

  def _round_event(self, z: float, q: float, steps: int) -> dp_accounting.DpEvent:
    population, cohort = self._population_size, None
    if self._sampler == "fixed_size":
      population, cohort = _resolve_cohort_size(q, population, self._cohort_size)
    return _build_event(z, q, steps, self._sampler, population, cohort)

  def _append(self, z: float, q: float, steps: int, count: int) -> None:
    event = self._round_event(z, q, steps)
    if (self._runs and self._runs[-1].event == event
        and self._runs[-1].sampling_rate == q):
      self._runs[-1].count += count
    else:
      self._runs.append(_Run(event, z, q, steps, count))
    self._num_rounds += count
    self._version += 1

  def record(self, noise_multiplier: float, sampling_rate: float, dp_steps: int = 1,
             count: int = 1) -> None:
    """Records ``count`` identical rounds.

    Args:
      noise_multiplier: z >= 0 (noise std / L2 sensitivity under the ledger's relation);
        numpy / jax scalars are converted to float64 exactly.
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

  def _run_rdp(self, run: _Run) -> Tuple[np.ndarray, int]:
    """(RDP vector of the run's base event, releases per round)."""
    base, steps = _split_self_composed(run.event)
    vec, seen = _rdp_of(base, self._orders, dp_accounting_relation(base))
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
      # No sampling without replacement here (`supports`): shift semantics throughout.
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
      UnsupportedAccountingError: ``"pld"`` with sampling without replacement.
    """
    delta = self._delta if delta is None else check_delta(delta)
    check_choice("accountant", accountant, ACCOUNTANTS)
    if not self.supports(accountant):
      _raise_unsupported()
    if accountant == "rdp":
      return self._rdp_epsilon(delta)
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
        delta_total=self.delta_total(delta, accountant))

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
    if state.get("version") != _LEDGER_VERSION:
      raise FedJaxDpError(f"state version must be {_LEDGER_VERSION}, got "
                          f"{state.get('version')!r} (version 1 ledgers stored noise "
                          "multipliers under another convention; recompute from "
                          "metrics.jsonl).")
    ledger = cls(delta=state["delta"], orders=state["orders"], sampler=state["sampler"],
                 population_size=state["population_size"],
                 cohort_size=state["cohort_size"], privacy_unit=state["privacy_unit"],
                 relation=state["relation"], truncation=state["truncation"],
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
    return (f"PrivacyLedger(sampler={self._sampler!r}, relation={self._relation!r}, "
            f"delta={self._delta!r}, rounds={self._num_rounds}, runs={len(self._runs)})")
