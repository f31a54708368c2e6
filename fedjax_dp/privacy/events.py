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
(RDP only, Wang, Balle, Kasiviswanathan 2019, Thm. 27) under ``REPLACE_ONE``, where its
inner ``z`` is relative to the replace-one sensitivity, as here. A fixed-size cohort
that is the whole population is no sampling at all: a plain `GaussianDpEvent`, which
the PLD accountant supports.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple, Optional, Tuple

import dp_accounting
import numpy as np
from scipy import stats

from fedjax_dp.privacy.sensitivity import RELATION_TEXT, RELATIONS, check_relation
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int,
                                  check_non_negative, check_probability)

__all__ = [
    "SAMPLERS", "PRIVACY_UNITS", "RELATIONS", "NeighborRel", "Truncation",
    "default_relation", "neighboring_relation", "make_dp_event", "dp_accounting_relation",
    "truncation_delta",
]

NeighborRel = dp_accounting.NeighboringRelation

#: Client / record samplers understood by `make_dp_event`.
SAMPLERS = ("poisson", "fixed_size")
#: What one neighbouring step changes: all data of one user, or one record.
PRIVACY_UNITS = ("user", "record")
#: The relations each sampler's events are valid under (the first is the default).
_SAMPLER_RELATIONS = {"poisson": ("add_remove", "zero_out"), "fixed_size": ("replace_one",)}

# Relative tolerance when matching a (float32) sampling rate to cohort/population.
_COHORT_RATE_RTOL = 1e-6


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


# ---------------------------------------------------------------------------
# Constant schedules.
# ---------------------------------------------------------------------------

def _constant_schedule_event(noise_multiplier, sampling_rate, rounds, steps_per_round,
                             sampler, population_size, cohort_size):
  event = make_dp_event(noise_multiplier, sampling_rate, steps_per_round, sampler,
                        population_size, cohort_size)
  return dp_accounting.SelfComposedDpEvent(event, rounds)
