"""NbAFL-style classical-Gaussian noise calibration, as used by PADPFL.

PADPFL (Talaei & Izadi, "Enhancing Federated Learning with Adaptive
Differential Privacy and Priority-Based Aggregation", arXiv:2406.18491) extends
NbAFL (Wei et al., "Federated Learning with Differential Privacy: Algorithms and
Performance Analysis", IEEE TIFS 2020) to non-uniform aggregation weights
("impact factors") ``p``. Every client clips its *model weights* to L2 norm
``<= B`` and adds Gaussian noise of one common standard deviation ``sigma_C``
before uploading; the server forms ``sum_i p_i x~_i`` and adds ``N(0, sigma_S^2)``
so that the broadcast model carries total noise ``sigma_A``:

* ``c = sqrt(2 ln(1.25 / delta))``                      (Sec. II-B, Dwork & Roth)
* ``sigma_C = 2 B R c / (m_min epsilon)``                (Eq. 8)
* ``sigma_AC = sigma_C sqrt(sum_i p_i^2)``               (Eq. 12)
* ``sigma_A = 2 B T c max_i p_i / (m_min epsilon)``      (proof of Thm. 1)
* ``sigma_S = 2 B c sqrt(T^2 max p^2 - R^2 sum p^2) / (m_min epsilon)`` if
  ``T > R sqrt(sum p^2) / max p``, else 0                  (Eq. 13; Eq. 14 is
  ``sigma_S^2 = sigma_A^2 - sigma_AC^2``)

Symbols: ``B`` the clip bound on the weights (``clip_bound``, same units as the
weights); ``R`` the number of times a client's upload may be revealed
(``exposures``, ``1 <= R <= T``); ``T`` the number of aggregation rounds
(``rounds``); ``m_min`` the smallest local dataset (``min_dataset_size``,
examples); ``epsilon``, ``delta`` the calibration target. All standard deviations
are per coordinate and carry the units of the weights (they scale linearly in
``B``).

Privacy statement. The paper's guarantee is the *classical* one-shot Gaussian
mechanism (proved for ``epsilon < 1`` only; the paper uses 5 and 20) with the
noise scaled linearly by ``R`` (uplink) and ``T`` (downlink): `nominal_privacy`
echoes it, labelled as such. The neighbouring relation is replace-one at record
level: ``D_i`` and ``D'_i`` have the same size and differ in one example, and the
L2 sensitivity of a client's clipped weights is ``2B / m_i`` (Eq. 7); the
sensitivity of the aggregate is ``2B max p / m_min`` (Eq. 10). As an extra
analysis, not in the paper, `accountant_epsilon` reports the epsilon that
``dp_accounting`` (RDP, optionally PLD) gives for the noise actually added, with
the same sensitivities and no subsampling (every client takes part, full-batch
local data).

All functions are host-side float64 NumPy; nothing is traced.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Dict, NamedTuple, Optional, Sequence, Union

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
import numpy as np

from fedjax_dp.privacy.accountants import (ACCOUNTANTS,
                                           DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL,
                                           DEFAULT_RDP_ORDERS)
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_delta, check_epsilon,
                                  check_int, check_non_negative, check_positive, check_weights)

__all__ = [
    "MECHANISM_LABEL", "THRESHOLD_RTOL", "NBAFL_RDP_ORDERS", "NoiseLevels", "NominalPrivacy",
    "gaussian_constant", "client_noise_stddev", "aggregated_client_noise_stddev",
    "total_noise_stddev", "server_noise_stddev", "server_noise_threshold",
    "max_exposures_with_server_noise", "noise_levels", "noise_levels_per_round",
    "nominal_privacy", "gaussian_epsilon", "accountant_epsilon",
]

#: How the paper's own (epsilon, delta) statement is obtained.
MECHANISM_LABEL = "classical Gaussian mechanism, per-iteration, linear R/T scaling"

#: Relative tolerance of the Eq. (13) branch: sigma_S > 0 only if
#: ``T^2 max p^2 - R^2 sum p^2 > THRESHOLD_RTOL * T^2 max p^2``. At the exact
#: threshold (e.g. p = "0-1-2" over 20/20/20 clients, T = 30, R = 6) the difference
#: is 0 in exact arithmetic but +-1e-16 in floating point; this puts it in the
#: paper's "otherwise" branch (sigma_S = 0).
THRESHOLD_RTOL = 1e-9

#: RDP orders used by `gaussian_epsilon`: dp_accounting's defaults plus orders
#: 1.01 ... 1.09. The paper's calibration gives small noise multipliers (z = R c /
#: epsilon ~ 0.15 at epsilon = 20), whose epsilon is minimised at orders just above 1.
NBAFL_RDP_ORDERS = tuple(sorted(set(DEFAULT_RDP_ORDERS) |
                                {round(1.0 + 0.01 * k, 2) for k in range(1, 10)}))

_P_ATOL = 1e-6


class NoiseLevels(NamedTuple):
  """The four noise standard deviations of PADPFL (per coordinate, units of ``B``).

  Fields are Python floats (`noise_levels`) or float64 arrays ``[T]``, one entry
  per aggregation round (`noise_levels_per_round`).

  Attributes:
    sigma_c: client noise SD sigma_C (Eq. 8); the same for every client.
    sigma_ac: SD of the aggregated client noise ``sum_i p_i n_i``,
      ``sigma_C sqrt(sum p^2)`` (Eq. 12).
    sigma_a: required total SD of the broadcast model's noise (proof of Thm. 1).
    sigma_s: server noise SD sigma_S (Eq. 13); 0 at or beyond the threshold.
  """

  sigma_c: Any
  sigma_ac: Any
  sigma_a: Any
  sigma_s: Any


class NominalPrivacy(NamedTuple):
  """The privacy the paper claims for its calibration (not an accountant's result).

  Attributes:
    epsilon: the calibration target epsilon (echoed).
    delta: the calibration target delta (echoed).
    mechanism: `MECHANISM_LABEL`.
    scope: what the (epsilon, delta) refers to, in words.
    within_proven_range: whether ``epsilon < 1``, the range where the classical
      Gaussian mechanism bound ``sigma >= c Delta / epsilon`` is proved.
  """

  epsilon: float
  delta: float
  mechanism: str
  scope: str
  within_proven_range: bool


# ---------------------------------------------------------------------------
# Validation.
# ---------------------------------------------------------------------------

def _check_rounds_exposures(rounds: Any, exposures: Any) -> tuple:
  t = check_int("rounds", rounds, minimum=1)
  r = check_int("exposures", exposures, minimum=1)
  if r > t:
    raise FedJaxDpError(
        f"exposures (R, the number of times an upload may be revealed) must be <= rounds "
        f"(T = {t}), as the paper assumes (R <= T); got exposures={r}.")
  return t, r


def _check_common(clip_bound: Any, min_dataset_size: Any, epsilon: Any, delta: Any) -> tuple:
  b = check_positive("clip_bound", clip_bound)
  m = check_int("min_dataset_size", min_dataset_size, minimum=1)
  return b, m, check_epsilon(epsilon), check_delta(delta)


def _check_p(p: Any, name: str = "p") -> np.ndarray:
  return check_weights(name, p, sum_to_one=True, atol=_P_ATOL)


def _check_p_schedule(p_schedule: Any, name: str = "p_schedule") -> np.ndarray:
  arr = np.asarray(p_schedule, dtype=np.float64)
  if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
    raise FedJaxDpError(
        f"{name} must be a non-empty 2-D array [rounds, num_clients], got shape {arr.shape}.")
  for t in range(arr.shape[0]):
    _check_p(arr[t], f"{name}[{t}] (impact factors of aggregation round {t + 1})")
  return arr


# ---------------------------------------------------------------------------
# Noise standard deviations.
# ---------------------------------------------------------------------------

def gaussian_constant(delta: float) -> float:
  """The classical Gaussian-mechanism constant ``c = sqrt(2 ln(1.25 / delta))``.

  PADPFL, Sec. II-B (Dwork & Roth, Thm. A.1): adding ``N(0, sigma^2)`` with
  ``sigma >= c Delta / epsilon`` is (epsilon, delta)-DP for ``epsilon in (0, 1)``.
  ``delta = 0.01`` gives ``c = 3.107511``.

  Args:
    delta: delta in the open interval (0, 1).

  Returns:
    c (float, unitless).

  Raises:
    FedJaxDpError: ``delta`` not in (0, 1) or not finite.
  """
  d = check_delta(delta)
  return math.sqrt(2.0 * math.log(1.25 / d))


def client_noise_stddev(clip_bound: float, exposures: int, min_dataset_size: int,
                        epsilon: float, delta: float) -> float:
  """Client (uplink) noise SD ``sigma_C = 2 B R c / (m_min epsilon)``, Eq. (8).

  Args:
    clip_bound: B > 0, the L2 bound on each client's weights (units of the weights).
    exposures: R >= 1 (int), the number of times one client's upload may be revealed.
      (R <= T is checked by the functions that also take ``rounds``.)
    min_dataset_size: m_min >= 1 (int), the smallest local dataset, in examples.
    epsilon: calibration target > 0.
    delta: calibration target in (0, 1).

  Returns:
    sigma_C (float), per coordinate, in the units of ``clip_bound``.

  Raises:
    FedJaxDpError: any argument out of range.
  """
  r = check_int("exposures", exposures, minimum=1)
  b, m, eps, d = _check_common(clip_bound, min_dataset_size, epsilon, delta)
  return 2.0 * b * r * gaussian_constant(d) / (m * eps)


def aggregated_client_noise_stddev(sigma_c: float, p: Any) -> float:
  """SD of ``sum_i p_i n_i`` with ``n_i ~ N(0, sigma_C^2)``: ``sigma_C sqrt(sum p^2)``, Eq. (12).

  Args:
    sigma_c: sigma_C >= 0.
    p: impact factors, float ``[N]``, non-negative, summing to 1 (within 1e-6).

  Returns:
    sigma_AC (float), in the units of ``sigma_c``.

  Raises:
    FedJaxDpError: ``sigma_c`` negative or not finite; invalid ``p``.
  """
  s = check_non_negative("sigma_c", sigma_c)
  return s * math.sqrt(float(np.sum(_check_p(p) ** 2)))


def total_noise_stddev(clip_bound: float, rounds: int, max_impact: float,
                       min_dataset_size: int, epsilon: float, delta: float) -> float:
  """Required total SD of the broadcast noise, ``sigma_A = 2 B T c max p / (m_min epsilon)``.

  Proof of Thm. 1 of PADPFL: the downlink sensitivity (Eq. 10),
  ``2 B max p / m_min``, times ``T c / epsilon``.

  Args:
    clip_bound: B > 0.
    rounds: T >= 1 (int), the number of aggregation rounds.
    max_impact: ``max_i p_i``, in (0, 1].
    min_dataset_size: m_min >= 1 (int), examples.
    epsilon: calibration target > 0.
    delta: calibration target in (0, 1).

  Returns:
    sigma_A (float), per coordinate, in the units of ``clip_bound``.

  Raises:
    FedJaxDpError: any argument out of range.
  """
  t = check_int("rounds", rounds, minimum=1)
  pmax = check_positive("max_impact", max_impact)
  if pmax > 1.0 + _P_ATOL:
    raise FedJaxDpError(f"max_impact must be in (0, 1], got {max_impact!r}.")
  b, m, eps, d = _check_common(clip_bound, min_dataset_size, epsilon, delta)
  return 2.0 * b * t * gaussian_constant(d) * pmax / (m * eps)


def _server_scale(rounds: int, exposures: Union[int, np.ndarray], pmax: np.ndarray,
                  sum_sq: np.ndarray) -> np.ndarray:
  """``sqrt(T^2 pmax^2 - R^2 sum_sq)`` where above the relative threshold, else 0 (R one
  exposure count, or one per entry)."""
  full = (rounds * pmax) ** 2
  v = full - (exposures ** 2) * sum_sq
  return np.where(v > THRESHOLD_RTOL * full, np.sqrt(np.maximum(v, 0.0)), 0.0)


def server_noise_stddev(p: Any, clip_bound: float, rounds: int, exposures: int,
                        min_dataset_size: int, epsilon: float, delta: float) -> float:
  """Server (downlink) noise SD sigma_S, Theorem 1, Eq. (13).

  ``v = T^2 max(p)^2 - R^2 sum_i p_i^2``; ``sigma_S = 2 B c sqrt(v) / (m_min epsilon)``
  if ``T > R sqrt(sum p^2) / max p`` (i.e. ``v > 0``), else 0. ``v`` at or below
  ``THRESHOLD_RTOL * T^2 max(p)^2`` counts as the "otherwise" branch, so that the
  exact threshold (an equality in exact arithmetic) gives 0. When sigma_S > 0,
  ``sigma_AC^2 + sigma_S^2 = sigma_A^2`` (Eq. 14).

  Args:
    p: impact factors, float ``[N]``, non-negative, summing to 1 (within 1e-6).
    clip_bound: B > 0.
    rounds: T >= 1 (int).
    exposures: R (int), ``1 <= R <= T``.
    min_dataset_size: m_min >= 1 (int), examples.
    epsilon: calibration target > 0.
    delta: calibration target in (0, 1).

  Returns:
    sigma_S (float, >= 0), per coordinate, in the units of ``clip_bound``.

  Raises:
    FedJaxDpError: any argument out of range, ``exposures > rounds``, invalid ``p``.
  """
  return noise_levels(p, clip_bound, rounds, exposures, min_dataset_size, epsilon,
                      delta).sigma_s


def server_noise_threshold(p: Any, exposures: int) -> float:
  """The right-hand side of Eq. (13)'s condition, ``R sqrt(sum p^2) / max p``.

  sigma_S > 0 iff ``rounds`` is strictly larger than this value.

  Args:
    p: impact factors, float ``[N]`` summing to 1.
    exposures: R >= 1 (int).

  Returns:
    The threshold, in rounds (float).

  Raises:
    FedJaxDpError: invalid ``p`` or ``exposures``.
  """
  w = _check_p(p)
  r = check_int("exposures", exposures, minimum=1)
  return r * math.sqrt(float(np.sum(w ** 2))) / float(w.max())


def max_exposures_with_server_noise(p: Any, rounds: int) -> int:
  """The largest R in ``[1, T]`` for which Eq. (13) gives sigma_S > 0 (0 if none).

  Args:
    p: impact factors, float ``[N]`` summing to 1.
    rounds: T >= 1 (int).

  Returns:
    R (int); 0 when even R = 1 is at or beyond the threshold.

  Raises:
    FedJaxDpError: invalid ``p`` or ``rounds``.
  """
  w = _check_p(p)
  t = check_int("rounds", rounds, minimum=1)
  r = np.arange(1, t + 1)
  scale = _server_scale(t, r, np.full(t, w.max()), np.full(t, np.sum(w ** 2)))
  positive = np.flatnonzero(scale > 0)
  return int(r[positive[-1]]) if positive.size else 0


def noise_levels(p: Any, clip_bound: float, rounds: int, exposures: int,
                 min_dataset_size: int, epsilon: float, delta: float) -> NoiseLevels:
  """All four PADPFL noise SDs for fixed impact factors (Eqs. 8, 12, 13, Thm. 1).

  Args:
    p: impact factors, float ``[N]``, non-negative, summing to 1 (within 1e-6).
    clip_bound: B > 0 (units of the weights).
    rounds: T >= 1 (int), aggregation rounds.
    exposures: R (int), ``1 <= R <= T``.
    min_dataset_size: m_min >= 1 (int), the smallest local dataset over all clients.
    epsilon: calibration target > 0.
    delta: calibration target in (0, 1).

  Returns:
    `NoiseLevels` of floats, in the units of ``clip_bound``.

  Raises:
    FedJaxDpError: any argument out of range, ``exposures > rounds``, invalid ``p``.
  """
  w = _check_p(p)
  levels = _levels(w[None, :], clip_bound, rounds, exposures, min_dataset_size, epsilon,
                   delta)
  return NoiseLevels(*(float(v[0]) for v in levels))


def noise_levels_per_round(p_schedule: Any, clip_bound: float, exposures: int,
                           min_dataset_size: int, epsilon: float,
                           delta: float) -> NoiseLevels:
  """The noise SDs of every round of a time-varying impact-factor schedule (Sec. V).

  T is the number of rows of ``p_schedule``; row ``t - 1`` holds ``p^(t)``, the
  weights of aggregation round ``t``. sigma_C does not depend on p; sigma_AC,
  sigma_A and sigma_S are recomputed from each round's ``max p`` and ``sum p^2``
  ("the calculated amount of Gaussian noise ... can still be utilized", Sec. V,
  with Eq. 13 evaluated per round).

  Args:
    p_schedule: float ``[T, N]``; every row non-negative and summing to 1.
    clip_bound: B > 0.
    exposures: R (int), ``1 <= R <= T``.
    min_dataset_size: m_min >= 1 (int).
    epsilon: calibration target > 0.
    delta: calibration target in (0, 1).

  Returns:
    `NoiseLevels` of float64 arrays ``[T]``.

  Raises:
    FedJaxDpError: any argument out of range, an invalid row (named by its round).
  """
  ps = _check_p_schedule(p_schedule)
  return _levels(ps, clip_bound, ps.shape[0], exposures, min_dataset_size, epsilon, delta)


def _levels(ps: np.ndarray, clip_bound, rounds, exposures, min_dataset_size, epsilon,
            delta) -> NoiseLevels:
  t, r = _check_rounds_exposures(rounds, exposures)
  b, m, eps, d = _check_common(clip_bound, min_dataset_size, epsilon, delta)
  c = gaussian_constant(d)
  unit = 2.0 * b * c / (m * eps)   # 2 B c / (m_min epsilon)
  pmax = ps.max(axis=1)
  sum_sq = np.sum(ps ** 2, axis=1)
  sigma_c = np.full(ps.shape[0], unit * r)
  return NoiseLevels(sigma_c=sigma_c,
                     sigma_ac=sigma_c * np.sqrt(sum_sq),
                     sigma_a=unit * t * pmax,
                     sigma_s=unit * _server_scale(t, r, pmax, sum_sq))


def nominal_privacy(epsilon: float, delta: float) -> NominalPrivacy:
  """The (epsilon, delta) the paper states for its calibration, labelled as such.

  The paper claims (epsilon, delta)-DP "in the uploading and downloading channels
  for each iteration" when the noise follows Eqs. (8) and (13): the classical
  Gaussian mechanism with the noise scaled linearly by R (uplink) and T
  (downlink) to cover R revealed uploads and T broadcasts. No accountant is
  involved; this function only echoes the calibration target.

  Args:
    epsilon: calibration target > 0.
    delta: calibration target in (0, 1).

  Returns:
    `NominalPrivacy`.

  Raises:
    FedJaxDpError: ``epsilon <= 0`` or ``delta`` not in (0, 1).
  """
  eps, d = check_epsilon(epsilon), check_delta(delta)
  return NominalPrivacy(
      epsilon=eps, delta=d, mechanism=MECHANISM_LABEL,
      scope=("record-level, replace-one (Eq. 7), per channel: the uplink over R revealed "
             "uploads, the downlink over T broadcasts (PADPFL, Thm. 1)"),
      within_proven_range=eps < 1.0)


# ---------------------------------------------------------------------------
# Accountant epsilon of the noise actually added (extra analysis).
# ---------------------------------------------------------------------------

def _check_orders(orders: Optional[Sequence[float]]) -> list:
  if orders is None:
    return list(NBAFL_RDP_ORDERS)
  arr = np.asarray(orders, dtype=np.float64)
  if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 1.0):
    raise FedJaxDpError(
        f"orders must be a non-empty 1-D sequence of finite Renyi orders > 1, got {orders!r}.")
  return arr.tolist()


def gaussian_epsilon(noise_multipliers: Union[float, Sequence[float], np.ndarray],
                     delta: float, releases: int = 1, accountant: str = "rdp",
                     orders: Optional[Sequence[float]] = None,
                     pld_value_discretization_interval: float =
                     DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL) -> float:
  """Epsilon of composed, unsampled Gaussian releases, from ``dp_accounting``.

  A scalar ``z`` is composed ``releases`` times
  (``SelfComposedDpEvent(GaussianDpEvent(z), releases)``); a 1-D array composes
  one ``GaussianDpEvent(z_k)`` per entry (``releases`` must then be 1).

  Observation model: every release is seen by the server with its sender and every
  client uploads in every round (PADPFL samples no one), so nothing is amplified: each
  upload (or broadcast) is a plain Gaussian, exactly the "attributable" event of
  `fedjax_dp.privacy.events.make_dp_event` with participation probability 1.

  Neighbouring relation. ``z`` must be relative to the L2 distance between the
  two neighbouring outputs, which for PADPFL is the replace-one sensitivity
  (``2B / m_i``, Eq. 7). An unsampled Gaussian's privacy depends only on that
  distance over the noise SD, so the releases are composed in accountants built
  with dp_accounting's ``ADD_OR_REMOVE_ONE`` relation, whose `GaussianDpEvent`
  shifts the output by exactly one sensitivity. (dp_accounting's PLD under
  ``REPLACE_ONE`` shifts it by *twice* the sensitivity, i.e. reads ``z`` as
  relative to one record's contribution; that would double-count the factor 2
  already in Eq. 7.)

  Args:
    noise_multipliers: z > 0, noise SD / L2 sensitivity (unitless), scalar or
      float ``[k]``.
    delta: target delta in (0, 1).
    releases: number of identical releases for a scalar ``z`` (int >= 1).
    accountant: ``"rdp"`` (`RdpAccountant` over `NBAFL_RDP_ORDERS` unless
      ``orders`` is given) or ``"pld"`` (`PLDAccountant`; tighter, but slow at
      large epsilon: about 30 s for z = 0.155 composed 30 times).
    orders: RDP orders (> 1).
    pld_value_discretization_interval: PLD grid step in nats (> 0).

  Returns:
    epsilon (float).

  Raises:
    FedJaxDpError: invalid arguments.
  """
  d = check_delta(delta)
  k = check_int("releases", releases, minimum=1)
  check_choice("accountant", accountant, ACCOUNTANTS)
  z = np.asarray(noise_multipliers, dtype=np.float64)
  if z.ndim > 1 or z.size == 0:
    raise FedJaxDpError(
        f"noise_multipliers must be a scalar or a non-empty 1-D array, got shape {z.shape}.")
  if not np.all(np.isfinite(z)) or np.any(z <= 0):
    raise FedJaxDpError(
        f"noise_multipliers must be finite and > 0, got {noise_multipliers!r}.")
  if z.ndim == 1 and k != 1:
    raise FedJaxDpError(
        f"releases must be 1 when noise_multipliers is an array (one release per entry); "
        f"got releases={k}.")
  relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
  if z.ndim == 0:
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(float(z)), k)
  else:
    values, counts = np.unique(z, return_counts=True)
    event = dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(float(v)), int(n))
        for v, n in zip(values, counts)])
  if accountant == "rdp":
    acc = dp_rdp.RdpAccountant(_check_orders(orders), relation)
  else:
    interval = check_positive("pld_value_discretization_interval",
                              pld_value_discretization_interval)
    acc = dp_pld.PLDAccountant(relation, interval)
  return float(acc.compose(event).get_epsilon(d))


def accountant_epsilon(p: Any, clip_bound: float, rounds: int, exposures: int,
                       min_dataset_size: int, epsilon: float, delta: float,
                       accountant: str = "rdp",
                       orders: Optional[Sequence[float]] = None,
                       pld_value_discretization_interval: float =
                       DEFAULT_PLD_VALUE_DISCRETIZATION_INTERVAL) -> Dict[str, Any]:
  """Accountant epsilon of the noise PADPFL actually adds (extra analysis, not in the paper).

  The noise is calibrated with Eqs. (8) and (13) to the target (epsilon, delta);
  this composes the resulting Gaussian releases with ``dp_accounting`` instead of
  the paper's linear scaling:

  * uplink: one client's upload ``x_i + N(0, sigma_C^2)`` with sensitivity
    ``2B / m_min`` (Eq. 7, the worst client), so
    ``z_up = sigma_C / (2B / m_min) = R c / epsilon``; composed over R revealed
    uploads (``uplink_epsilon``, the paper's assumption) and over all T uploads
    (``uplink_all_uploads_epsilon``).
  * downlink: the broadcast ``sum_i p_i x~_i + n_s`` with sensitivity
    ``2B max p / m_min`` (Eq. 10) and the noise actually present,
    ``sqrt(sigma_AC^2 + sigma_S^2)`` (= sigma_A when sigma_S > 0, sigma_AC > sigma_A
    at or beyond the Eq. 13 threshold), so ``z_down = T c / epsilon`` below the
    threshold; composed over the T broadcasts, one event per round.

  Args:
    p: impact factors: fixed float ``[N]``, or a schedule float ``[T, N]`` whose
      row ``t - 1`` is ``p^(t)`` (then its number of rows must equal ``rounds``).
    clip_bound: B > 0.
    rounds: T >= 1 (int).
    exposures: R (int), ``1 <= R <= T``.
    min_dataset_size: m_min >= 1 (int).
    epsilon: the calibration target > 0 (the paper's nominal epsilon).
    delta: delta in (0, 1), used for calibration and for the accountant.
    accountant: ``"rdp"`` or ``"pld"``.
    orders: RDP orders (default `NBAFL_RDP_ORDERS`).
    pld_value_discretization_interval: PLD grid step in nats (> 0).

  Returns:
    dict with ``nominal_epsilon``, ``delta``, ``accountant``, ``relation`` (text),
    ``z_uplink`` (float), ``z_downlink`` (float64 ``[T]``), ``uplink_epsilon``,
    ``uplink_all_uploads_epsilon``, ``downlink_epsilon`` (floats) and ``label``.

  Raises:
    FedJaxDpError: invalid arguments, or a schedule whose length differs from
      ``rounds``.
  """
  t, r = _check_rounds_exposures(rounds, exposures)
  arr = np.asarray(p, dtype=np.float64)
  if arr.ndim == 2:
    ps = _check_p_schedule(arr, "p")
    if ps.shape[0] != t:
      raise FedJaxDpError(
          f"p has {ps.shape[0]} rows (one per aggregation round) but rounds={t}; they "
          "must be equal.")
  else:
    ps = np.broadcast_to(_check_p(arr), (t, arr.shape[0]))
  levels = _levels(ps, clip_bound, t, r, min_dataset_size, epsilon, delta)
  b, m, _, d = _check_common(clip_bound, min_dataset_size, epsilon, delta)
  z_up = float(levels.sigma_c[0]) / (2.0 * b / m)
  actual_total = np.sqrt(levels.sigma_ac ** 2 + levels.sigma_s ** 2)
  z_down = actual_total / (2.0 * b * ps.max(axis=1) / m)
  epsilon_of = functools.partial(
      gaussian_epsilon, accountant=accountant, orders=orders,
      pld_value_discretization_interval=pld_value_discretization_interval)
  return {
      "label": ("accountant epsilon of the noise actually added (dp_accounting, "
                "unsampled Gaussian releases); an extra analysis, not the paper's claim"),
      "nominal_epsilon": check_epsilon(epsilon),
      "delta": d,
      "accountant": accountant,
      "relation": ("replace-one, one record of one client (Eq. 7); z relative to the "
                   "replace-one sensitivity"),
      "z_uplink": z_up,
      "z_downlink": z_down,
      "uplink_epsilon": epsilon_of(z_up, d, releases=r),
      "uplink_all_uploads_epsilon": epsilon_of(z_up, d, releases=t),
      "downlink_epsilon": epsilon_of(z_down, d),
  }
