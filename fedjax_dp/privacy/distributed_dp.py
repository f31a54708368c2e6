"""Privacy of distributed DP with secure aggregation: the distributed discrete Gaussian
(DDGauss) and Skellam mechanisms, their RDP / zCDP bounds, and a planner that picks the
granularity of the integer grid for a given bit width.

The pipeline (Kairouz, Liu, Steinke, ICML 2021, arXiv:2102.06387, Algorithms 1-2;
Agarwal, Kairouz, Liu, NeurIPS 2021, arXiv:2110.04995, Algorithm 1). Each of the ``n``
surviving clients clips its update to L2 norm ``c`` (model units), scales it by ``1 /
gamma`` (``gamma``, the *granularity*, is the model units per integer step), rotates it
(randomized Hadamard transform in dimension ``d``, a power of two at least the model
size: norm-preserving, data-independent), rounds it to integers by conditional
randomized rounding (L2 norm at most ``Delta2 = rounded_l2_bound(c / gamma, d, beta)``)
and adds integer noise of standard deviation ``sigma`` per coordinate: a discrete
Gaussian ``N_Z(0, sigma^2)`` or a symmetric Skellam ``Sk(sigma^2/2, sigma^2/2)``. The
server sees only the sum modulo ``2^bits`` and who took part. The reduction modulo
``2^bits`` is a function of the integer sum (post-processing): it never weakens privacy;
an overflow (a coordinate of the sum outside ``[-2^(bits-1), 2^(bits-1))``) only
corrupts the update, which `plan` keeps unlikely.

Neighbouring relation: zero-out. One client's data is replaced by nothing: its rounded
vector becomes 0 while it still adds its noise share, so one round is "sum of the noise
shares, shifted by ``v``" with ``||v||_2 <= Delta2`` and ``||v||_1 <= Delta1 =
rounded_l1_bound(Delta2, d)``.

Units: integer units (after the ``1 / gamma`` scaling) everywhere except `plan`'s and
`min_bits`' ``clip`` (model units) and ``noise_multiplier`` (the sum's noise standard
deviation is ``noise_multiplier * clip`` in model units when the planned number of
clients survives).

Reporting: each round's privacy is a zCDP ``rho`` (Renyi DP ``eps(alpha) <= rho *
alpha`` for every ``alpha >= 1``; Bun and Steinke, TCC 2016, Def. 1.1) and its
Gaussian-equivalent noise multiplier ``z_eq = 1 / sqrt(2 rho)`` (the Gaussian mechanism
with noise multiplier ``z`` has RDP ``alpha / (2 z^2)``; Mironov 2017, Prop. 7), which
the rest of the library composes as Gaussian RDP without amplification (participation
is visible). These are Renyi bounds, not for PLD accounting;
`epsilon_visible_participation` is an independent check of such an accounting.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Optional, Tuple

import numpy as np
import numpy.typing as npt
from dp_accounting.rdp import rdp_privacy_accountant as _rdp
from scipy import stats

from fedjax_dp.validation import (FedJaxDpError, check_choice, check_delta,
                                  check_finite, check_int, check_non_negative,
                                  check_positive, check_probability)

__all__ = [
    "MECHANISMS", "DEFAULT_BETA", "DEFAULT_OVERFLOW_PROB", "DEFAULT_ROUNDING_FRACTION",
    "rounded_l2_bound", "rounded_l1_bound", "ddgauss_tau", "ddgauss_rdp", "ddgauss_rho",
    "skellam_rdp", "skellam_rho", "gaussian_equivalent_noise_multiplier",
    "DistributedPlan", "plan", "min_bits", "epsilon_visible_participation",
]

#: The mechanisms `plan` knows: the distributed discrete Gaussian and Skellam.
MECHANISMS = ("ddgauss", "skellam")
#: Conditional randomized rounding's default ``beta`` (TFF's distributed DP default),
#: making ``sqrt(2 ln(1/beta)) = 1``.
DEFAULT_BETA = math.exp(-0.5)
#: `plan`'s default probability that some coordinate of one round's sum overflows.
DEFAULT_OVERFLOW_PROB = 1e-6
#: `min_bits`' default: rounding variance at most 1% of the noise variance.
DEFAULT_ROUNDING_FRACTION = 0.01

_MIN_DDGAUSS_SIGMA = 0.5   # Kairouz et al. 2021, Thm. 1 / Prop. 14: sigma >= 1/2.
_TAU_EXACT_TERMS = 1 << 21  # ddgauss_tau sums this many terms exactly, bounds the rest.
_MAX_BITS = 32


def _check_dim(dim: Any, power_of_two: bool = False) -> int:
  d = check_int("dim", dim, minimum=1)
  if power_of_two and d & (d - 1):
    raise FedJaxDpError(f"dim must be a power of two (the size of the randomized "
                        f"Hadamard transform), got {d}.", option="dim")
  return d


def _check_beta(beta: Any) -> float:
  b = check_finite("beta", beta, "in [0, 1)")
  if not 0.0 <= b < 1.0:
    raise FedJaxDpError(f"beta must be in [0, 1), got {beta!r}.", option="beta")
  return b


def _check_bounds(l2_bound: Any, l1_bound: Any) -> Tuple[float, float]:
  l2 = check_non_negative("l2_bound", l2_bound)
  l1 = check_non_negative("l1_bound", l1_bound)
  if l1 < l2 * (1.0 - 1e-12):
    raise FedJaxDpError(f"l1_bound must be >= l2_bound (a vector's L1 norm is at least "
                        f"its L2 norm), got l1_bound={l1_bound!r} < l2_bound="
                        f"{l2_bound!r}.", option="l1_bound")
  return l2, l1


def _check_orders(orders: Any, minimum: float = 1.0, strict: bool = False) -> np.ndarray:
  a = np.asarray(orders, dtype=np.float64)
  if a.ndim == 0:
    a = a.reshape(1)
  bad = (a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a))
         or np.any(a <= minimum if strict else a < minimum))
  if bad:
    rel = ">" if strict else ">="
    raise FedJaxDpError(f"orders must be a non-empty 1-D sequence of finite Renyi orders "
                        f"{rel} {minimum:g}, got {orders!r}.", option="orders")
  return a


def _check_ddgauss_sigma(local_sigma: Any) -> float:
  s = check_positive("local_sigma", local_sigma)
  if s < _MIN_DDGAUSS_SIGMA:
    raise FedJaxDpError(f"local_sigma must be >= 1/2 (the hypothesis of Kairouz et al. "
                        f"2021, Thm. 1 / Prop. 14), got {local_sigma!r}.",
                        option="local_sigma")
  return s


def rounded_l2_bound(scaled_clip: float, dim: int, beta: float) -> float:
  """L2 norm bound of a conditionally randomized-rounded vector (integer units).

  ``min(c + sqrt(d), sqrt(c^2 + d/4 + sqrt(2 ln(1/beta)) (c + sqrt(d)/2)))`` for
  ``beta`` in (0, 1), and ``c + sqrt(d)`` for ``beta == 0`` (plain randomized rounding
  moves each coordinate by less than 1). Source: Kairouz, Liu, Steinke 2021
  (arXiv:2102.06387), Thm. 1 (its ``Delta_2^2``, divided by ``gamma^2``), with
  conditional randomized rounding (Sec. 4.1, Prop. 22): the rounding is retried until
  the rounded norm is at most the second expression, which happens with probability at
  least ``1 - beta`` per try.

  Args:
    scaled_clip: ``c = clip / gamma``, the L2 norm bound before rounding (>= 0).
    dim: ``d``, the vector's dimension (int >= 1).
    beta: the conditional rounding parameter, in [0, 1).

  Returns: ``Delta2`` (float, integer units).

  Raises:
    FedJaxDpError: naming ``scaled_clip``, ``dim`` or ``beta`` when out of range.
  """
  c = check_non_negative("scaled_clip", scaled_clip)
  d = _check_dim(dim)
  b = _check_beta(beta)
  plain = c + math.sqrt(d)
  if b == 0.0:
    return plain
  conditional = c * c + d / 4.0 + math.sqrt(2.0 * math.log(1.0 / b)) * (
      c + math.sqrt(d) / 2.0)
  return min(plain, math.sqrt(conditional))


def rounded_l1_bound(l2_bound: float, dim: int) -> float:
  """L1 norm bound of an integer vector of L2 norm at most ``Delta2``: ``Delta2 *
  min(sqrt(d), Delta2)`` (``||v||_1 <= sqrt(d) ||v||_2`` by Cauchy-Schwarz, and for an
  integer vector ``|v_i| <= v_i^2``, so ``||v||_1 <= ||v||_2^2``; Kairouz et al. 2021,
  Sec. 4.1).

  Args: ``l2_bound`` ``Delta2`` (>= 0, integer units); ``dim`` ``d`` (int >= 1).
  Returns: ``Delta1`` (float, integer units).
  Raises: FedJaxDpError naming ``l2_bound`` or ``dim`` when out of range.
  """
  l2 = check_non_negative("l2_bound", l2_bound)
  d = _check_dim(dim)
  return l2 * min(math.sqrt(d), l2)


def ddgauss_tau(local_sigma: float, n: int) -> float:
  """``tau = 10 * sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k / (k+1))``; 0 for ``n <= 1``.

  How far the sum of ``n`` i.i.d. discrete Gaussians ``N_Z(0, sigma^2)`` is from a
  discrete Gaussian (Kairouz, Liu, Steinke 2021, arXiv:2102.06387, Thm. 1 / Prop. 14).
  The terms decrease in ``k``: the first ``2^21`` are summed exactly and the rest are
  bounded by their count times the first of them (within a relative ``2 pi^2 sigma^2 /
  2^21`` of exact, and never below it, so the privacy bound stays valid).

  Args: ``local_sigma`` ``sigma > 0``, each client's discrete Gaussian parameter
  (integer units); ``n`` the number of clients (int >= 0).
  Returns: ``tau`` (float, >= 0). Raises: FedJaxDpError naming ``local_sigma``, ``n``.
  """
  s = check_positive("local_sigma", local_sigma)
  n = check_int("n", n, minimum=0)
  if n <= 1:
    return 0.0
  a = 2.0 * math.pi ** 2 * s * s
  m = min(n - 1, _TAU_EXACT_TERMS)
  k = np.arange(1, m + 1, dtype=np.float64)
  total = float(np.sum(np.exp(-a * k / (k + 1.0))))
  rest = n - 1 - m
  if rest > 0:
    total += rest * math.exp(-a * (m + 1.0) / (m + 2.0))
  return 10.0 * total


def _ddgauss_terms(l2_bound, l1_bound, local_sigma, n, dim):
  """``(r2, extra2, r3, tau_d)``: Prop. 14's three RDP bounds are ``alpha/2 * r2 +
  tau_d``, ``alpha/2 * (r2 + extra2)`` and ``alpha/2 * r3``."""
  l2, l1 = _check_bounds(l2_bound, l1_bound)
  s = _check_ddgauss_sigma(local_sigma)
  n = check_int("n", n, minimum=1)
  d = _check_dim(dim)
  l1 = min(l1, math.sqrt(d) * l2)  # ||v||_1 <= sqrt(d) ||v||_2 always holds.
  tau = ddgauss_tau(s, n)
  scale = math.sqrt(n) * s
  r2 = (l2 / scale) ** 2
  extra2 = 2.0 * (l1 / scale) * tau + tau * tau * d
  r3 = (l2 / scale + math.sqrt(d) * tau) ** 2
  return r2, extra2, r3, tau * d


def ddgauss_rdp(orders: npt.ArrayLike, l2_bound: float, l1_bound: float,
                local_sigma: float, n: int, dim: int) -> np.ndarray:
  """Renyi DP of the sum of ``n`` i.i.d. ``N_Z(0, sigma^2)^d`` shifted by ``v``.

  ``eps(alpha) = min(alpha/2 (D2/S)^2 + tau d, alpha/2 ((D2/S)^2 + 2 (D1/S) tau +
  tau^2 d), alpha/2 (D2/S + sqrt(d) tau)^2)`` with ``S = sqrt(n) sigma``, ``D2 >=
  ||v||_2``, ``D1 >= ||v||_1`` and ``tau = ddgauss_tau(sigma, n)``: Kairouz, Liu,
  Steinke 2021 (arXiv:2102.06387), Prop. 14 / Eq. (17), for ``sigma >= 1/2`` and every
  ``alpha >= 1`` (its third term and the zCDP form of its first are Thm. 1). ``D1`` is
  replaced by ``min(D1, sqrt(d) D2)`` (Cauchy-Schwarz).

  Args:
    orders: Renyi orders, each >= 1 (float ``[K]``).
    l2_bound: ``D2`` (integer units). l1_bound: ``D1 >= D2`` (integer units).
    local_sigma: each client's ``sigma >= 1/2`` (integer units).
    n: the number of clients whose noise is in the sum (int >= 1). dim: ``d``.

  Returns:
    float64 ``[K]``, the RDP bound at each order (nats).

  Raises:
    FedJaxDpError: naming the argument out of range (``local_sigma < 1/2`` included).
  """
  a = _check_orders(orders)
  r2, extra2, r3, tau_d = _ddgauss_terms(l2_bound, l1_bound, local_sigma, n, dim)
  half = a / 2.0
  return np.minimum(np.minimum(half * r2 + tau_d, half * (r2 + extra2)), half * r3)


def ddgauss_rho(l2_bound: float, l1_bound: float, local_sigma: float, n: int,
                dim: int) -> float:
  """zCDP ``rho`` of `ddgauss_rdp`'s mechanism: ``eps(alpha) <= rho * alpha`` for all
  ``alpha >= 1``.

  ``rho = min((D2/S)^2 / 2 + tau d, ((D2/S)^2 + 2 (D1/S) tau + tau^2 d) / 2, (D2/S +
  sqrt(d) tau)^2 / 2)``: the second and third of Prop. 14's (Eq. 17) bounds are already
  ``rho * alpha``; the first, ``alpha/2 (D2/S)^2 + tau d``, is at most ``alpha ((D2/S)^2
  / 2 + tau d)`` because ``alpha >= 1`` (and no smaller ``rho`` holds for it at
  ``alpha = 1``). This is Kairouz et al. 2021's Thm. 1 (``1/2 eps^2``-concentrated DP)
  with Prop. 14's L1 term added. Arguments, units and errors as `ddgauss_rdp`.

  Returns: ``rho`` (float, >= 0).
  """
  r2, extra2, r3, tau_d = _ddgauss_terms(l2_bound, l1_bound, local_sigma, n, dim)
  return min(r2 / 2.0 + tau_d, (r2 + extra2) / 2.0, r3 / 2.0)


def skellam_rdp(orders: npt.ArrayLike, l2_bound: float, l1_bound: float,
                variance: float) -> np.ndarray:
  """Renyi DP of the multidimensional Skellam mechanism: i.i.d. symmetric Skellam noise
  of variance ``mu`` per coordinate (``Sk(mu/2, mu/2)``; a sum of independent Skellam
  shares is Skellam with the summed variance), shifted by ``v``.

  ``eps(alpha) = alpha D2^2 / (2 mu) + min(((2 alpha - 1) D2^2 + 6 D1) / (4 mu^2),
  3 D1 / (2 mu))`` with ``D2 >= ||v||_2``, ``D1 >= ||v||_1``: Agarwal, Kairouz, Liu
  2021 (arXiv:2110.04995), Thm. 3.5 / Cor. 3.6 (stated with the total variance ``mu``).
  google-research/federated's ``distributed_dp/accounting_utils._skellam_rdp`` writes
  it in model units with the scale ``s = 1 / gamma``; substituting ``D = s * sens`` and
  ``mu = s^2 * var`` gives this form exactly.

  Args:
    orders: Renyi orders, each >= 1 (float ``[K]``).
    l2_bound: ``D2`` (integer units). l1_bound: ``D1 >= D2`` (integer units).
    variance: ``mu`` > 0, the total noise variance per coordinate (integer units^2).

  Returns:
    float64 ``[K]``, the RDP bound at each order (nats).

  Raises:
    FedJaxDpError: naming ``orders``, ``l2_bound``, ``l1_bound`` or ``variance``.
  """
  a = _check_orders(orders)
  l2, l1 = _check_bounds(l2_bound, l1_bound)
  mu = check_positive("variance", variance)
  lead = a * l2 * l2 / (2.0 * mu)
  first = ((2.0 * a - 1.0) * l2 * l2 + 6.0 * l1) / (4.0 * mu * mu)
  return lead + np.minimum(first, 3.0 * l1 / (2.0 * mu))


def skellam_rho(l2_bound: float, l1_bound: float, variance: float) -> float:
  """The smallest ``rho`` with `skellam_rdp`'s ``eps(alpha) <= rho * alpha`` for every
  ``alpha >= 1``: ``rho = sup_{alpha >= 1} min(f(alpha), g(alpha))`` with

  * ``f(alpha) = eps_1(alpha) / alpha = A + C / alpha``, ``A = D2^2/(2 mu) + D2^2 /
    (2 mu^2)``, ``C = (6 D1 - D2^2) / (4 mu^2)`` (the first branch, rearranged);
  * ``g(alpha) = eps_2(alpha) / alpha = B + E / alpha``, ``B = D2^2 / (2 mu)``, ``E = 3
    D1 / (2 mu)`` (the second branch).

  Each is monotone in ``alpha``, so ``min(f, g)`` is monotone between their crossing
  ``alpha* = (E - C) / (A - B)``, and the supremum is the largest of ``min(f, g)`` at
  ``alpha = 1``, at ``alpha*`` (when ``> 1``) and its limit ``B`` at infinity. With ``C
  >= 0`` (``6 D1 >= D2^2``, the usual case) this is ``min(A + C, B + E)``, the smaller of
  the two branches' pure bounds ``alpha (A + max(C, 0))`` and ``alpha (B + E)``.
  Arguments, units and errors as `skellam_rdp`.

  Returns: ``rho`` (float, > 0).
  """
  l2, l1 = _check_bounds(l2_bound, l1_bound)
  mu = check_positive("variance", variance)
  big_a = l2 * l2 / (2.0 * mu) + l2 * l2 / (2.0 * mu * mu)
  big_c = (6.0 * l1 - l2 * l2) / (4.0 * mu * mu)
  big_b = l2 * l2 / (2.0 * mu)
  big_e = 3.0 * l1 / (2.0 * mu)

  def lower(alpha: float) -> float:
    return min(big_a + big_c / alpha, big_b + big_e / alpha)

  candidates = [lower(1.0), big_b]
  if big_a > big_b:
    crossing = (big_e - big_c) / (big_a - big_b)
    if crossing > 1.0:
      candidates.append(lower(crossing))
  return max(candidates)


def gaussian_equivalent_noise_multiplier(rho: float) -> float:
  """``z_eq = 1 / sqrt(2 rho)``: the Gaussian mechanism with noise multiplier ``z`` is
  exactly ``1 / (2 z^2)``-zCDP (Bun and Steinke 2016, Prop. 1.6), so a ``rho``-zCDP
  round can be accounted as a Gaussian round of noise multiplier ``z_eq``.

  Args: ``rho >= 0`` (``inf`` allowed).
  Returns: ``z_eq`` (float): ``inf`` for ``rho == 0``, 0 for ``rho == inf``.
  Raises: FedJaxDpError naming ``rho`` when negative or NaN.
  """
  if isinstance(rho, numbers.Real) and not isinstance(rho, bool) and rho == math.inf:
    return 0.0
  r = check_non_negative("rho", rho)
  return math.inf if r == 0.0 else 1.0 / math.sqrt(2.0 * r)


def _rho_of(mechanism: str, l2: float, l1: float, sigma: float, survivors: int,
            dim: int) -> float:
  if survivors == 0:
    return math.inf
  if mechanism == "ddgauss":
    return ddgauss_rho(l2, l1, sigma, survivors, dim)
  return skellam_rho(l2, l1, survivors * sigma * sigma)


@dataclasses.dataclass(frozen=True)
class DistributedPlan:
  """One round's integer grid and privacy, from `plan`.

  Attributes:
    mechanism, clip, dim, bits, num_clients, noise_multiplier, beta, overflow_prob: the
      arguments of `plan` (``clip`` in model units; ``num_clients`` the planning count).
    gamma: the granularity, model units per integer step.
    local_sigma: each client's noise standard deviation, integer units (``noise_multiplier
      * clip / (gamma * sqrt(num_clients))``); for Skellam the share is ``Sk(sigma^2/2,
      sigma^2/2)``.
    l2_bound, l1_bound: ``Delta2``, ``Delta1`` of a rounded update (integer units).
    k: the number of standard deviations of a coordinate of the sum that fits in the
      half-range ``2^(bits-1)``: ``Phi^{-1}(1 - overflow_prob / (2 dim))``.
    coordinate_overflow_prob: the predicted probability that one coordinate of the
      unwrapped sum leaves ``[-2^(bits-1), 2^(bits-1))`` (two-sided Gaussian tail).
    round_overflow_prob: ``min(1, dim * coordinate_overflow_prob)``, the union bound
      over the coordinates (equals ``overflow_prob`` up to rounding).
    rho: the round's zCDP when ``num_clients`` clients survive. z_eq: ``1/sqrt(2 rho)``.
  """
  mechanism: str
  clip: float
  dim: int
  bits: int
  num_clients: int
  noise_multiplier: float
  beta: float
  overflow_prob: float
  gamma: float
  local_sigma: float
  l2_bound: float
  l1_bound: float
  k: float
  coordinate_overflow_prob: float
  round_overflow_prob: float
  rho: float
  z_eq: float

  def rho_for(self, survivors: int) -> float:
    """The round's zCDP ``rho`` when ``survivors`` clients actually survive (int >= 0).

    Each survivor adds a noise share, so the noise variance is ``survivors *
    local_sigma^2``: dropouts remove noise and raise ``rho`` (0 survivors: ``inf``, the
    sum is the protected update itself); more survivors than planned lower it. The
    shift is still the one client's rounded update (zero-out relation)."""
    m = check_int("survivors", survivors, minimum=0)
    return _rho_of(self.mechanism, self.l2_bound, self.l1_bound, self.local_sigma, m,
                   self.dim)

  def z_eq_for(self, survivors: int) -> float:
    """`gaussian_equivalent_noise_multiplier` of `rho_for` (``survivors`` int >= 0)."""
    return gaussian_equivalent_noise_multiplier(self.rho_for(survivors))


_Grid = Tuple[Optional[Tuple[float, float]], str]


def _grid(mechanism, clip, dim, bits, n, z, k) -> _Grid:
  """``((gamma, sigma), "")`` at ``bits``, or ``(None, reason)`` when infeasible.

  The unwrapped sum's coordinate is treated as Gaussian with variance ``A / gamma^2 +
  n/4``, ``A = clip^2 (n^2 / dim + z^2)`` (the ``n`` rotated updates aligned, each
  coordinate ``clip / sqrt(dim)``; the noise ``z^2 clip^2``; rounding ``1/4`` per
  client); ``k * std <= 2^(bits-1)`` gives ``gamma >= sqrt(A / ((2^(bits-1)/k)^2 -
  n/4))``, and the smallest such ``gamma`` is taken.
  """
  half = 2.0 ** (bits - 1)
  room = (half / k) ** 2 - n / 4.0
  if room <= 0.0:
    return None, (f"the rounding error of {n} clients alone, k * sqrt(n/4) = "
                  f"{k * math.sqrt(n / 4.0):.4g}, reaches 2^(bits-1) = {half:.0f}")
  a = clip * clip * (n * n / dim + z * z)
  gamma = math.sqrt(a / room)
  sigma = z * clip / (gamma * math.sqrt(n))
  if mechanism == "ddgauss" and sigma < _MIN_DDGAUSS_SIGMA:
    return None, (f"the per-client discrete Gaussian sigma would be {sigma:.4g} < 1/2, "
                  f"below the hypothesis of Kairouz et al. 2021, Thm. 1")
  return (gamma, sigma), ""


def _smallest_feasible_bits(mechanism, clip, dim, n, z, k) -> int:
  """The smallest bits (up to 64) at which `_grid` is feasible (65 if none)."""
  for b in range(2, 65):
    if _grid(mechanism, clip, dim, b, n, z, k)[0] is not None:
      return b
  return 65


def _check_plan_args(mechanism, clip, dim, num_clients, noise_multiplier, beta,
                     overflow_prob):
  mechanism = check_choice("mechanism", mechanism, MECHANISMS)
  return (mechanism, check_positive("clip", clip), _check_dim(dim, power_of_two=True),
          check_int("num_clients", num_clients, minimum=1),
          check_positive("noise_multiplier", noise_multiplier), _check_beta(beta),
          check_delta(overflow_prob, name="overflow_prob"))


def plan(mechanism: str, clip: float, dim: int, bits: int, num_clients: int,
         noise_multiplier: float, beta: float = DEFAULT_BETA,
         overflow_prob: float = DEFAULT_OVERFLOW_PROB) -> DistributedPlan:
  """Chooses the granularity ``gamma`` for ``bits``-bit secure aggregation.

  ``gamma`` is the smallest granularity such that, treating each coordinate of the
  unwrapped integer sum as Gaussian with variance ``n^2 c^2 / (d gamma^2)`` (worst case:
  all ``n`` updates aligned; the rotation spreads a vector's norm evenly, ``c / sqrt(d)``
  per coordinate) ``+ n/4`` (rounding) ``+ z^2 c^2 / gamma^2`` (noise), the union bound
  over the ``d`` coordinates keeps the probability that any coordinate leaves
  ``[-2^(b-1), 2^(b-1))`` at most ``overflow_prob``: ``k sqrt(var) <= 2^(b-1)`` with
  ``k = Phi^{-1}(1 - overflow_prob / (2 d))``, solved in closed form. This is the
  union-bound form, with a stated probability, of the ``k``-standard-deviations
  heuristic of Kairouz et al. 2021, Sec. 4.4 / Eq. (61) (also used by TFF). The
  per-client noise is ``sigma = z c / (gamma sqrt(n))`` (integer units), so the sum's
  noise standard deviation is ``z c`` in model units when ``n`` clients survive.

  Args:
    mechanism: ``"ddgauss"`` or ``"skellam"``.
    clip: ``c`` > 0, the L2 clip norm (model units).
    dim: ``d``, the rotation's dimension: a power of two, at least the model size.
    bits: ``b``, the secure aggregation's bit width (int in [2, 32]).
    num_clients: ``n``, the expected number of surviving clients (int >= 1).
    noise_multiplier: ``z`` > 0 (noise std of the sum / ``clip``, at ``n`` survivors).
    beta: conditional rounding's ``beta`` in [0, 1) (`rounded_l2_bound`).
    overflow_prob: the target probability of an overflow in one round, in (0, 1).

  Returns: a `DistributedPlan`.

  Raises:
    FedJaxDpError: naming the argument out of range; naming ``bits`` when no ``gamma``
      works at ``bits`` (the rounding error of ``n`` clients alone overflows, or for
      ``"ddgauss"`` the per-client ``sigma`` would fall below 1/2), with the smallest
      feasible bit width in the message.
  """
  mechanism, c, d, n, z, beta, p = _check_plan_args(
      mechanism, clip, dim, num_clients, noise_multiplier, beta, overflow_prob)
  b = check_int("bits", bits, minimum=2, maximum=_MAX_BITS)
  k = float(stats.norm.isf(p / (2.0 * d)))
  grid, reason = _grid(mechanism, c, d, b, n, z, k)
  if grid is None:
    need = _smallest_feasible_bits(mechanism, c, d, n, z, k)
    allowed = (f"bits must be in [{need}, {_MAX_BITS}] here" if need <= _MAX_BITS else
               f"no bits <= {_MAX_BITS} is enough (the minimum is "
               f"{need if need <= 64 else 'above 64'}): lower num_clients or raise "
               f"overflow_prob")
    raise FedJaxDpError(f"bits={b} is too few for {mechanism} with num_clients={n}, "
                        f"dim={d}, overflow_prob={p:g}: {reason}; {allowed}.",
                        option="bits")
  gamma, sigma = grid
  l2 = rounded_l2_bound(c / gamma, d, beta)
  l1 = rounded_l1_bound(l2, d)
  std = math.sqrt(c * c * (n * n / d + z * z) / gamma ** 2 + n / 4.0)
  coord = float(2.0 * stats.norm.sf(2.0 ** (b - 1) / std))
  rho = _rho_of(mechanism, l2, l1, sigma, n, d)
  return DistributedPlan(
      mechanism=mechanism, clip=c, dim=d, bits=b, num_clients=n, noise_multiplier=z,
      beta=beta, overflow_prob=p, gamma=gamma, local_sigma=sigma, l2_bound=l2,
      l1_bound=l1, k=k, coordinate_overflow_prob=coord,
      round_overflow_prob=min(1.0, d * coord), rho=rho,
      z_eq=gaussian_equivalent_noise_multiplier(rho))


def min_bits(mechanism: str, clip: float, dim: int, num_clients: int,
             noise_multiplier: float, beta: float = DEFAULT_BETA,
             overflow_prob: float = DEFAULT_OVERFLOW_PROB,
             rounding_fraction: float = DEFAULT_ROUNDING_FRACTION) -> int:
  """The smallest bit width in [2, 32] at which `plan` is feasible *and* quantization is
  not the dominant error: the rounding variance of the sum, ``n / 4`` (integer units^2,
  ``1/4`` per client), is at most ``rounding_fraction`` times the noise variance of the
  sum, ``n sigma^2 = z^2 c^2 / gamma^2`` (integer units^2). More bits give a smaller
  ``gamma``, hence a larger noise variance in integer units, so the first such width is
  the answer and every wider one qualifies too. This criterion is about accuracy only:
  rounding also inflates ``Delta2`` (the ``d/4`` term of `rounded_l2_bound`), which can
  cost far more privacy when ``d`` is much larger than ``n`` (``z_eq`` about ``z / 3``
  at the width returned for ``c = 0.5, d = 2^20, n = 1000, z = 1.2``): check
  ``plan(...).z_eq`` at the width chosen.

  Args:
    mechanism, clip, dim, num_clients, noise_multiplier, beta, overflow_prob: as `plan`.
    rounding_fraction: the largest allowed ratio (> 0) of rounding to noise variance.

  Returns: ``bits`` (int in [2, 32]).

  Raises:
    FedJaxDpError: naming the argument out of range; naming ``num_clients`` when no
      width up to 32 is feasible, or ``rounding_fraction`` when none up to 32 makes the
      rounding small enough.
  """
  mechanism, c, d, n, z, beta, p = _check_plan_args(
      mechanism, clip, dim, num_clients, noise_multiplier, beta, overflow_prob)
  frac = check_positive("rounding_fraction", rounding_fraction)
  k = float(stats.norm.isf(p / (2.0 * d)))
  feasible = False
  for b in range(2, _MAX_BITS + 1):
    grid, _ = _grid(mechanism, c, d, b, n, z, k)
    if grid is None:
      continue
    feasible = True
    if n / 4.0 <= frac * (z * c / grid[0]) ** 2:
      return b
  if not feasible:
    raise FedJaxDpError(f"num_clients={n} is too many for {mechanism} with at most "
                        f"{_MAX_BITS} bits (dim={d}, overflow_prob={p:g}): no bits in "
                        f"[2, {_MAX_BITS}] is feasible.", option="num_clients")
  raise FedJaxDpError(f"rounding_fraction={frac:g} is not reached with bits <= "
                      f"{_MAX_BITS} (num_clients={n}, noise_multiplier={z:g}); allowed: "
                      f"a larger rounding_fraction.", option="rounding_fraction")


def epsilon_visible_participation(rhos: npt.ArrayLike, sampling_rate: float,
                                  delta: float,
                                  orders: Optional[npt.ArrayLike] = None) -> float:
  """Epsilon of rounds of per-round zCDP ``rho_t`` with visible participation.

  Each round a unit takes part with probability ``q`` and the server sees whether it
  did, so the output is ``(took part, M(D))`` or ``(did not, M(D'))`` with disjoint
  supports: ``exp((alpha - 1) D_alpha) = 1 - q + q exp((alpha - 1) eps_t(alpha))``, i.e.
  per round ``log(1 - q + q exp((alpha - 1) alpha rho_t)) / (alpha - 1)`` (the same
  form as `fedjax_dp.privacy.events.VisibleParticipationDpEvent`), summed over rounds
  (Mironov 2017, Prop. 1) and converted with ``dp_accounting``'s RDP conversion
  (``rdp_privacy_accountant.compute_epsilon``: Canonne, Kamath, Steinke 2020, Prop. 12).
  An independent check, not the library's ledger.

  Args:
    rhos: per-round ``rho_t >= 0`` (float ``[T]``; ``inf`` allowed; empty: epsilon 0).
    sampling_rate: ``q`` in (0, 1].
    delta: in (0, 1).
    orders: Renyi orders > 1 (default ``dp_accounting``'s ``DEFAULT_RDP_ORDERS``).

  Returns: epsilon (float; ``inf`` when a round has ``rho_t = inf``).

  Raises:
    FedJaxDpError: naming ``rhos``, ``sampling_rate``, ``delta`` or ``orders``.
  """
  r = np.asarray(rhos, dtype=np.float64)
  if r.ndim != 1 or np.any(np.isnan(r)) or np.any(r < 0):
    raise FedJaxDpError(f"rhos must be a 1-D sequence of per-round rho >= 0 (inf "
                        f"allowed), got {rhos!r}.", option="rhos")
  q = check_probability("sampling_rate", sampling_rate)
  delta = check_delta(delta)
  a = _check_orders(_rdp.DEFAULT_RDP_ORDERS if orders is None else orders,
                    minimum=1.0, strict=True)
  if q == 1.0:
    per_round = a[None, :] * r[:, None]
  else:
    log_moment = np.logaddexp(math.log1p(-q),
                              math.log(q) + ((a - 1.0) * a)[None, :] * r[:, None])
    per_round = log_moment / (a - 1.0)[None, :]
  eps, _ = _rdp.compute_epsilon(list(a), list(per_round.sum(axis=0)), delta)
  return float(eps)
