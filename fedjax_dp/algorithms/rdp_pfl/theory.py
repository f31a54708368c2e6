"""Convergence theory of RDP-PFL (Wei et al., "Personalized Federated Learning
With Differential Privacy and Convergence Guarantee", IEEE TIFS 2023), as calculators.

Everything here is host-side NumPy / SciPy in float64. The paper never estimates its
constants (L, rho, B, lambda, l, epsilon_i, gamma_i, sigma_G, sigma_H), so
they are inputs. Equation numbers ``(n)`` are the paper's; what is marked "ours" is our
derivation, not in the paper.

* Meta-objective constants: `meta_smoothness` L' (Lemma 1, Eq. 22),
  `meta_strong_convexity` l' (Lemma 6, Eq. 30), `zeta` (Theorem 2).
* Noise norm: `theta_paper` (Eq. 27, the paper's Theta), `theta_exact` (the true
  E||n|| for n ~ N(0, C^2 sigma^2 I_S)), `theta_ratio` (paper / exact: exactly 2 for odd
  S and exactly 4 for even S), `noise_norm_factor` (Theta / (C sigma)).
* Error terms: `lemma2_dissimilarity` (Eq. 23), `lemma3_bias` (Eq. 25; also a corrected
  form, see its docstring: the printed bound misses the support-gradient sampling error),
  `xi` (Lemma 4, Eq. 26), `h` (Lemma 5, Eq. 28), `local_drift_sum`.
* Bounds: `Constants`, `theorem2_bound` (Eq. 31, strongly convex), `theorem3_bound`
  (Eq. 32 in our reconstructed form, non-convex); both return `BoundParts`.
* Trade-offs: `sigma_approx` (leading-order noise calibration, ours),
  `nonconvex_round_coefficients` / `optimal_rounds_nonconvex` (T* = (2A/B1)^(2/3), ours),
  `optimal_rounds_numeric` (any bound, exact sigma(T)), `u_shape_in_C` (ours).

Errors are `fedjax_dp.validation.FedJaxDpError` (a ``ValueError``) naming the argument.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
from scipy import special

from fedjax_dp.validation import (FedJaxDpError, check_choice, check_delta, check_epsilon,
                                  check_finite, check_int, check_non_negative, check_positive,
                                  check_probability, check_weights)

__all__ = [
    "THETA_FORMS", "LEMMA3_FORMS", "Constants", "BoundParts", "UShape",
    "meta_smoothness", "meta_strong_convexity", "zeta",
    "theta_paper", "theta_exact", "theta_ratio", "noise_norm_factor",
    "xi", "h", "lemma2_dissimilarity", "lemma3_bias", "local_drift_sum",
    "theorem2_bound", "theorem3_bound",
    "sigma_approx", "nonconvex_round_coefficients", "optimal_rounds_nonconvex",
    "optimal_rounds_numeric", "u_shape_in_C",
]

#: How Theta (the bound on E||n||) is computed: the paper's Eq. (27) or the exact value.
THETA_FORMS = ("paper", "exact")
#: Lemma 3's bound: as printed (Eq. 25) or re-derived (see `lemma3_bias`).
LEMMA3_FORMS = ("paper", "corrected")

# Terms per block of the log-products of Eq. (27) (bounds memory for S up to 1e7+).
_LOG_PRODUCT_BLOCK = 1 << 20

ArrayLike = Union[float, Sequence[float], np.ndarray]


# ---------------------------------------------------------------------------
# Constants of the meta-objective G_i(w) = F_i(w - eta grad F_i(w)).
# ---------------------------------------------------------------------------

def meta_smoothness(L: float, rho: float, B: float, eta: float) -> float:
  """L', the Lipschitz constant of grad G_i (Lemma 1, Eq. 22): ``L (1 + eta L)^2 + eta rho B``.

  Args:
    L: gradient-Lipschitz constant of F_i (Eq. 16), > 0.
    rho: Hessian-Lipschitz constant of F_i (Eq. 17), >= 0.
    B: gradient-norm bound of F_i (Assumption 1), >= 0.
    eta: inner (query) learning rate, >= 0. ``eta = 0`` gives ``L' = L``.

  Returns:
    L' (float).

  Raises:
    FedJaxDpError: an argument outside the ranges above.
  """
  L = check_positive("L", L)
  rho = check_non_negative("rho", rho)
  B = check_non_negative("B", B)
  eta = check_non_negative("eta", eta)
  return L * (1.0 + eta * L) ** 2 + eta * rho * B


def meta_strong_convexity(l: float, L: float, rho: float, B: float, eta: float) -> float:
  """l', the strong-convexity constant of G_i (Lemma 6, Eq. 30):
  ``(1 - eta L)(l - eta L^2) - eta rho B``.

  The value may be <= 0 (then Lemma 6 gives no strong convexity; `zeta` refuses it).

  Args:
    l: strong-convexity constant of F_i (Assumption 5, Eq. 29), in [0, L].
    L: gradient-Lipschitz constant of F_i, > 0.
    rho: Hessian-Lipschitz constant, >= 0.
    B: gradient-norm bound, >= 0.
    eta: inner learning rate, in [0, 1/L) (the proof needs 1 - eta L > 0).

  Returns:
    l' (float).

  Raises:
    FedJaxDpError: an argument outside the ranges above.
  """
  L = check_positive("L", L)
  l = check_non_negative("l", l)
  if l > L:
    raise FedJaxDpError(f"l must be <= L (a function cannot be more strongly convex than "
                        f"it is smooth), got l={l!r}, L={L!r}.", option="l")
  rho = check_non_negative("rho", rho)
  B = check_non_negative("B", B)
  eta = check_non_negative("eta", eta)
  if eta * L >= 1.0:
    raise FedJaxDpError(f"eta must be < 1/L for Lemma 6 (1 - eta L > 0), got eta={eta!r} "
                        f"with L={L!r} (eta L = {eta * L!r}).", option="eta")
  return (1.0 - eta * L) * (l - eta * L * L) - eta * rho * B


def zeta(l_prime: float, L_prime: float, beta: float) -> float:
  """The linear rate of Theorem 2: ``zeta = 1 - 2 l' beta + L' l' beta^2``.

  (Appendix Eq. 216 prints ``1 + 2 l' beta - L' l' beta^2``, a typo; Eq. 218 and the
  theorem use this form.) With ``0 < l' <= L'`` and ``0 < beta < 2/L'``,
  ``zeta`` lies in ``[1 - l'/L', 1)``.

  Args:
    l_prime: l' (`meta_strong_convexity`), in (0, L'].
    L_prime: L' (`meta_smoothness`), > 0.
    beta: outer (support) learning rate, in (0, 2/L').

  Returns:
    zeta (float) in [0, 1).

  Raises:
    FedJaxDpError: ``l' <= 0`` (no strong convexity), ``l' > L'``, or beta outside
      (0, 2/L').
  """
  L_prime = check_positive("L_prime", L_prime)
  l_prime = check_finite("l_prime", l_prime)
  if l_prime <= 0:
    raise FedJaxDpError(f"l_prime must be > 0 for Theorem 2 (G strongly convex), got "
                        f"{l_prime!r}; decrease eta or check l, L, rho, B.", option="l_prime")
  if l_prime > L_prime:
    raise FedJaxDpError(f"l_prime must be <= L_prime, got l_prime={l_prime!r}, "
                        f"L_prime={L_prime!r}.", option="l_prime")
  beta = check_positive("beta", beta)
  if beta >= 2.0 / L_prime:
    raise FedJaxDpError(f"beta must be < 2/L' = {2.0 / L_prime!r} for zeta < 1, got "
                        f"{beta!r}.", option="beta")
  return 1.0 - 2.0 * l_prime * beta + L_prime * l_prime * beta * beta


# ---------------------------------------------------------------------------
# Theta: the norm of the Gaussian noise vector (Lemma 4, Eq. 27).
# ---------------------------------------------------------------------------

def _check_S(S: Any) -> int:
  return check_int("S", S, minimum=1)


def _log1p_inv_sum(first: int, count: int) -> float:
  """``sum_{j=0}^{count-1} log(1 + 1/(first + 2 j))`` (float64, blocked, pairwise sums)."""
  total = 0.0
  for start in range(0, count, _LOG_PRODUCT_BLOCK):
    j = np.arange(start, min(count, start + _LOG_PRODUCT_BLOCK), dtype=np.float64)
    total += float(np.sum(np.log1p(1.0 / (first + 2.0 * j))))
  return total


def _log_theta_paper_unit(S: int) -> float:
  """log of Eq. (27) with C = sigma = 1, as a literal log-product (no Gamma function).

  Odd S = 2m+1: 2 sqrt(2/pi) prod_{k=1..m} (2k)/(2k-1); the factors (S-1)/(S-2), ...,
  4/3, 2 are 1 + 1/(2k-1). Even S = 2m: 2 sqrt(2 pi) prod_{k=2..m} (2k-1)/(2k-2); the
  factors (S-1)/(S-2), ..., 3/2 are 1 + 1/(2k-2). Empty products (S = 1, 2) are 1.
  """
  if S % 2 == 1:
    m = (S - 1) // 2
    return math.log(2.0) + 0.5 * math.log(2.0 / math.pi) + _log1p_inv_sum(1, m)
  m = S // 2
  return math.log(2.0) + 0.5 * math.log(2.0 * math.pi) + _log1p_inv_sum(2, m - 1)


def _log_theta_exact_unit(S: int) -> float:
  """log E||z|| for z ~ N(0, I_S): log(sqrt 2) + lgamma((S+1)/2) - lgamma(S/2)."""
  return 0.5 * math.log(2.0) + float(special.gammaln((S + 1) / 2.0) - special.gammaln(S / 2.0))


def _check_C_sigma(C: Any, sigma: Any) -> Tuple[float, float]:
  return check_positive("C", C), check_non_negative("sigma", sigma)


def theta_paper(C: float, S: int, sigma: float) -> float:
  """The paper's Theta (Lemma 4, Eq. 27; Appendix E, Eq. 162, which drops the factor C).

  ``Theta = 2 sigma C sqrt(2/pi) (S-1)/(S-2) (S-3)/(S-4) ... 4/3 * 2`` for odd S and
  ``2 sigma C sqrt(2 pi) (S-1)/(S-2) (S-3)/(S-4) ... 3/2`` for even S. Computed as a
  log-product of ``log1p`` terms in float64, so S up to 1e7 and beyond is fine (the
  plain product overflows near S ~ 1e5). It is exactly 2 (odd S) or 4 (even S) times
  the true E||n|| (`theta_ratio`), so it is a valid but loose upper bound, discontinuous
  in the parity of S.

  Args:
    C: clipping threshold, > 0 (the noise std per coordinate is C sigma).
    S: number of model parameters (the noise dimension), int >= 1.
    sigma: noise multiplier, >= 0.

  Returns:
    Theta (float, same units as the gradient norm).

  Raises:
    FedJaxDpError: C <= 0, sigma < 0 or not finite, S not an integer >= 1.
  """
  C, sigma = _check_C_sigma(C, sigma)
  S = _check_S(S)
  if sigma == 0.0:
    return 0.0
  return C * sigma * math.exp(_log_theta_paper_unit(S))


def theta_exact(C: float, S: int, sigma: float) -> float:
  """The exact ``E||n||`` for ``n ~ N(0, C^2 sigma^2 I_S)`` (chi distribution mean):
  ``sqrt(2) Gamma((S+1)/2) / Gamma(S/2) C sigma`` (about ``C sigma sqrt(S - 1/2)``),
  via ``scipy.special.gammaln``. Not in the paper (which uses Eq. 27's bound).

  Args:
    C: clipping threshold, > 0.
    S: noise dimension, int >= 1.
    sigma: noise multiplier, >= 0.

  Returns:
    E||n|| (float).

  Raises:
    FedJaxDpError: as `theta_paper`.
  """
  C, sigma = _check_C_sigma(C, sigma)
  S = _check_S(S)
  if sigma == 0.0:
    return 0.0
  return C * sigma * math.exp(_log_theta_exact_unit(S))


def theta_ratio(S: int) -> float:
  """``theta_paper / theta_exact`` (independent of C and sigma), in log space.

  Derivation: for S = 2m+1, prod (2k)/(2k-1) = 4^m (m!)^2 / (2m)! and
  Gamma(m+1)/Gamma(m+1/2) = 4^m (m!)^2 / ((2m)! sqrt(pi)), so the ratio is exactly 2; for
  S = 2m the same algebra gives exactly 4. Numerically 2 or 4 up to rounding (about
  1e-9 relative at S = 1e7, from the lgamma differences).

  Args:
    S: int >= 1.

  Returns:
    The ratio (float): 2 for odd S, 4 for even S.

  Raises:
    FedJaxDpError: S not an integer >= 1.
  """
  S = _check_S(S)
  return math.exp(_log_theta_paper_unit(S) - _log_theta_exact_unit(S))


def noise_norm_factor(S: int, theta: str = "exact") -> float:
  """``kappa_S = Theta / (C sigma)`` (ours), i.e. Theta at C = sigma = 1.

  About ``sqrt(S)`` for ``theta="exact"``, 2 or 4 times that for ``"paper"``.

  Args:
    S: int >= 1.
    theta: ``"paper"`` (Eq. 27) or ``"exact"``.

  Returns:
    kappa_S (float).

  Raises:
    FedJaxDpError: bad S or theta.
  """
  check_choice("theta", theta, THETA_FORMS)
  S = _check_S(S)
  return math.exp(_log_theta_paper_unit(S) if theta == "paper" else _log_theta_exact_unit(S))


# ---------------------------------------------------------------------------
# Lemmas 2-5.
# ---------------------------------------------------------------------------

def _check_eta_L_B(eta: Any, L: Any, B: Any) -> Tuple[float, float, float]:
  return (check_non_negative("eta", eta), check_positive("L", L),
          check_non_negative("B", B))


def _nonneg_array(name: str, value: Any) -> np.ndarray:
  arr = np.asarray(value, dtype=np.float64)
  if not np.all(np.isfinite(arr)) or np.any(arr < 0):
    raise FedJaxDpError(f"{name} must be finite and >= 0, got {value!r}.", option=name)
  return arr


def _as_output(arr: np.ndarray) -> Union[float, np.ndarray]:
  return float(arr) if arr.ndim == 0 else arr


def xi(C: float, S: int, sigma: float, eta: float, L: float, B: float,
       theta: str = "paper") -> float:
  """Xi(C, S, sigma), the clipping-plus-noise error of Lemma 4 (Eq. 26):

  ``(1 + eta L) (2 eta L B + eta L Theta + sqrt(C) / min(sqrt(C)/B, 1)
  - sqrt(C) min(sqrt(C)/(1 + eta L), 1))``, i.e. (our simplification)
  ``(1 + eta L) (2 eta L B + eta L Theta + max(sqrt(C), B) - min(C/(1 + eta L), sqrt(C)))``.

  Theta is `theta_paper` (Eq. 27) or `theta_exact`. For C >= max(B^2, (1 + eta L)^2) and
  sigma = 0 it is ``2 eta L B (1 + eta L)`` (not 0: the bound keeps a clipping term).

  Args:
    C: clipping threshold (> 0, finite).
    S: number of model parameters, int >= 1.
    sigma: noise multiplier, >= 0.
    eta: inner learning rate, >= 0.
    L: gradient-Lipschitz constant, > 0.
    B: gradient-norm bound, >= 0.
    theta: ``"paper"`` or ``"exact"``.

  Returns:
    Xi (float, gradient-norm units).

  Raises:
    FedJaxDpError: an argument outside the ranges above.
  """
  check_choice("theta", theta, THETA_FORMS)
  eta, L, B = _check_eta_L_B(eta, L, B)
  C, sigma = _check_C_sigma(C, sigma)
  th = sigma * C * noise_norm_factor(S, theta)
  c = 1.0 + eta * L
  root = math.sqrt(C)
  return c * (2.0 * eta * L * B + eta * L * th + max(root, B) - min(C / c, root))


def _growth(tau0: int, x: float) -> float:
  """``((1 + x)^tau0 - 1)/x - tau0`` (= sum_{j<tau0} ((1+x)^j - 1)), stable for small x."""
  if x == 0.0:
    return 0.0
  return math.expm1(tau0 * math.log1p(x)) / x - tau0


def h(tau0: int, beta: float, L_prime: float, eps_het: float, gamma_het: float, eta: float,
      L: float, B: float) -> float:
  """h(tau0), the multi-step local-drift bound of Lemma 5 (Eq. 28):

  ``beta (eps (1 + eta L) + eta B gamma) (((1 + beta L')^tau0 - 1)/(beta L') - tau0)``.
  ``h(1) = 0``; h increases with tau0.

  Args:
    tau0: local epochs per round, int >= 1.
    beta: outer learning rate, > 0.
    L_prime: L' (`meta_smoothness`), > 0.
    eps_het: gradient dissimilarity epsilon = sum_i p_i epsilon_i (Eq. 18), >= 0.
    gamma_het: Hessian dissimilarity gamma = sum_i p_i gamma_i (Eq. 19), >= 0.
    eta: inner learning rate, >= 0.
    L: gradient-Lipschitz constant, > 0.
    B: gradient-norm bound, >= 0.

  Returns:
    h (float, parameter-distance units).

  Raises:
    FedJaxDpError: an argument outside the ranges above.
  """
  tau0 = check_int("tau0", tau0, minimum=1)
  beta = check_positive("beta", beta)
  L_prime = check_positive("L_prime", L_prime)
  eps_het = check_non_negative("eps_het", eps_het)
  gamma_het = check_non_negative("gamma_het", gamma_het)
  eta, L, B = _check_eta_L_B(eta, L, B)
  return beta * (eps_het * (1.0 + eta * L) + eta * B * gamma_het) * _growth(tau0, beta * L_prime)


def lemma2_dissimilarity(eps_i: ArrayLike, gamma_i: ArrayLike, eta: float, L: float,
                         B: float) -> Union[float, np.ndarray]:
  """Lemma 2 (Eq. 23): ``||grad G_i - grad G|| <= eps_i (1 + eta L) + eta B gamma_i``.

  Args:
    eps_i: client gradient dissimilarity (Eq. 18), scalar or ``[N]``, >= 0.
    gamma_i: client Hessian dissimilarity (Eq. 19), broadcastable with eps_i, >= 0.
    eta: inner learning rate, >= 0.
    L: gradient-Lipschitz constant, > 0.
    B: gradient-norm bound, >= 0.

  Returns:
    float, or float64 array of the broadcast shape.

  Raises:
    FedJaxDpError: negative or non-finite inputs.
  """
  eta, L, B = _check_eta_L_B(eta, L, B)
  e = _nonneg_array("eps_i", eps_i)
  g = _nonneg_array("gamma_i", gamma_i)
  return _as_output(e * (1.0 + eta * L) + eta * B * g)


def lemma3_bias(eta: float, L: float, B: float, sigma_G: float, sigma_H: float,
                n_support: ArrayLike, form: str = "paper",
                n_query: Optional[ArrayLike] = None) -> Union[float, np.ndarray]:
  """Bound on ``E||grad~ G_i(w) - grad G_i(w)||`` (Lemma 3, Eqs. 24-25).

  grad~ G_i = (I - eta hess F_i(w, D^Q)) grad F_i(w - eta grad F_i(w, D^Q), D^S) is the
  stochastic meta-gradient, grad G_i its exact (population) value.

  ``form="paper"`` (Eq. 25, as printed; the proof uses |D^S| everywhere):
  ``eta (1 + eta L) L sigma_G / sqrt(n_S) + eta B sigma_H / sqrt(n_S)
  + eta^2 L sigma_G sigma_H / n_S``.

  ``form="corrected"`` (re-derived for this project, not in the paper): Appendix D
  bounds ``E||e^G|| <= eta L sigma_G / sqrt(n_S)`` (Eq. 112), forgetting that e^G also
  contains the sampling error of the outer gradient ``grad F_i(theta~, D^S) -
  grad F_i(theta~)``, of size ``sigma_G / sqrt(n_S)`` with no factor eta. With
  ``e^G <= sigma_G/sqrt(n_S) + eta L sigma_G/sqrt(n_Q)`` (D^S independent of D^Q, A4 at
  every w), ``E||H_Q - H|| <= sigma_H/sqrt(n_Q)`` (Frobenius sigma_H) and
  Cauchy-Schwarz for the cross term:
  ``(1 + eta L)(sigma_G/sqrt(n_S) + eta L sigma_G/sqrt(n_Q)) + eta B sigma_H/sqrt(n_Q)
  + eta sigma_G sigma_H/sqrt(n_Q n_S) + eta^2 L sigma_G sigma_H / n_Q``.
  A Monte-Carlo check (tests) shows the printed bound fails and this one holds.

  Args:
    eta: inner learning rate, >= 0.
    L: gradient-Lipschitz constant, > 0.
    B: bound on ||grad F_i|| (at the adapted point), >= 0.
    sigma_G: per-sample gradient std bound (Eq. 20), >= 0.
    sigma_H: per-sample Hessian std bound (Eq. 21; Frobenius for ``"corrected"``), >= 0.
    n_support: |D_i^S|, scalar or ``[N]`` array, each > 0.
    form: ``"paper"`` or ``"corrected"``.
    n_query: |D_i^Q| for ``"corrected"`` (default: n_support); ignored by ``"paper"``.

  Returns:
    float, or float64 ``[N]``.

  Raises:
    FedJaxDpError: bad form, negative constants, non-positive sizes.
  """
  check_choice("form", form, LEMMA3_FORMS)
  eta, L, B = _check_eta_L_B(eta, L, B)
  sG = check_non_negative("sigma_G", sigma_G)
  sH = check_non_negative("sigma_H", sigma_H)
  nS = _sizes("n_support", n_support)
  if form == "paper":
    out = (eta * (1.0 + eta * L) * L * sG / np.sqrt(nS) + eta * B * sH / np.sqrt(nS)
           + eta * eta * L * sG * sH / nS)
    return _as_output(out)
  nQ = nS if n_query is None else _sizes("n_query", n_query)
  eG = sG / np.sqrt(nS) + eta * L * sG / np.sqrt(nQ)
  out = ((1.0 + eta * L) * eG + eta * B * sH / np.sqrt(nQ)
         + eta * sG * sH / np.sqrt(nQ * nS) + eta * eta * L * sG * sH / nQ)
  return _as_output(out)


def _sizes(name: str, value: Any) -> np.ndarray:
  arr = np.asarray(value, dtype=np.float64)
  if arr.ndim > 1 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
    raise FedJaxDpError(f"{name} must be a positive size (scalar or 1-D array), got "
                        f"{value!r}.", option=name)
  return arr


def local_drift_sum(tau0: int, beta: float, L_prime: float) -> float:
  """``sum_{j=0}^{tau0-1} (tau0 - j) (1 + beta L')^j``, the factor of Eqs. (31)/(32).

  Equal to 1 at tau0 = 1 and to ``(r^(tau0+1) - (tau0+1) r + tau0)/(r - 1)^2`` with
  ``r = 1 + beta L'``.

  Args:
    tau0: local epochs, int >= 1.
    beta: outer learning rate, >= 0.
    L_prime: L', >= 0.

  Returns:
    The sum (float).

  Raises:
    FedJaxDpError: bad tau0, negative beta or L'.
  """
  tau0 = check_int("tau0", tau0, minimum=1)
  x = check_non_negative("beta", beta) * check_non_negative("L_prime", L_prime)
  j = np.arange(tau0, dtype=np.float64)
  return float(np.sum((tau0 - j) * np.exp(j * math.log1p(x))))


# ---------------------------------------------------------------------------
# Theorems 2 and 3.
# ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Constants:
  """The paper's problem constants (Assumptions 1-5), all inputs (the paper never estimates them).

  Attributes:
    L: gradient-Lipschitz constant of every F_i (Eq. 16), > 0.
    rho: Hessian-Lipschitz constant (Eq. 17), >= 0.
    B: gradient-norm bound (Assumption 1), >= 0.
    lam: loss-Lipschitz constant lambda (Eq. 15), >= 0.
    l: strong-convexity constant (Eq. 29; only Theorem 2 uses it), in [0, L].
    eps_het: gradient dissimilarity epsilon = sum_i p_i epsilon_i (Eq. 18), >= 0.
    gamma_het: Hessian dissimilarity gamma = sum_i p_i gamma_i (Eq. 19), >= 0.
    sigma_G: per-sample gradient std bound (Eq. 20), >= 0.
    sigma_H: per-sample Hessian std bound (Eq. 21), >= 0.

  Raises:
    FedJaxDpError: on construction, a value outside its range.
  """
  L: float
  rho: float
  B: float
  lam: float
  l: float
  eps_het: float
  gamma_het: float
  sigma_G: float
  sigma_H: float

  def __post_init__(self):
    set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
    set_("L", check_positive("L", self.L))
    for name in ("rho", "B", "lam", "l", "eps_het", "gamma_het", "sigma_G", "sigma_H"):
      set_(name, check_non_negative(name, getattr(self, name)))
    if self.l > self.L:
      raise FedJaxDpError(f"l must be <= L, got l={self.l!r}, L={self.L!r}.", option="l")


class BoundParts(NamedTuple):
  """A bound's right-hand side and its parts (total = the sum of the other four).

  Attributes:
    total: the RHS.
    optimization: the initial-gap term (zeta^{T tau0} (G(w0) - G*) in Eq. 31;
      (G(w0) - G*)/(T beta (1 - beta L'/2)) in Eq. 32).
    multi_step: term (a), from h(tau0) (0 at tau0 = 1).
    dp: term (b), from Xi(C, S, sigma) (clipping and noise).
    data_size: term (c), from Lemma 3 (finite |D^S|).
  """
  total: float
  optimization: float
  multi_step: float
  dp: float
  data_size: float


def _bound_terms(consts: Constants, tau0: int, eta: float, beta: float, C: float, S: int,
                 sigma: float, n_support: ArrayLike, p: Optional[ArrayLike], theta: str,
                 lemma3_form: str) -> Tuple[float, float, float, float]:
  """(L', bracket parts (a), (b), (c) before the theorem's prefactor)."""
  if not isinstance(consts, Constants):
    raise FedJaxDpError(f"consts must be a theory.Constants, got {type(consts).__name__}.",
                        option="consts")
  tau0 = check_int("tau0", tau0, minimum=1)
  eta = check_non_negative("eta", eta)
  beta = check_positive("beta", beta)
  L_prime = meta_smoothness(consts.L, consts.rho, consts.B, eta)
  c = 1.0 + eta * consts.L
  n = _sizes("n_support", n_support)
  if n.ndim == 0:
    weights = np.ones(1)
    n = n.reshape(1)
  elif p is None:  # the paper's p_i = |D_i^S| / |D^S| (Eq. 3)
    weights = n / n.sum()
  else:
    weights = check_weights("p", p, size=n.shape[0], sum_to_one=True)
  data = lemma3_bias(eta, consts.L, consts.B, consts.sigma_G, consts.sigma_H, n,
                     form=lemma3_form)
  drift = local_drift_sum(tau0, beta, L_prime)
  part_a = c * h(tau0, beta, L_prime, consts.eps_het, consts.gamma_het, eta, consts.L,
                 consts.B)
  part_b = beta * tau0 * c * xi(C, S, sigma, eta, consts.L, consts.B, theta) * drift
  part_c = beta * tau0 * c * float(np.sum(weights * np.atleast_1d(data))) * drift
  return L_prime, part_a, part_b, part_c


def theorem2_bound(consts: Constants, T: float, tau0: int, eta: float, beta: float, C: float,
                   S: int, sigma: float, n_support: ArrayLike, gap0: float,
                   p: Optional[ArrayLike] = None, theta: str = "paper",
                   lemma3_form: str = "paper") -> BoundParts:
  """RHS of Theorem 2 (strongly convex, Eq. 31) on ``G(w^T) - G(w*)``:

  ``zeta^{T tau0} gap0 + (1 - zeta^{T tau0})/(1 - zeta^{tau0}) lambda [ (1 + eta L) h(tau0)
  + beta tau0 (1 + eta L) sum_i p_i (Xi + lemma3_i) sum_j (tau0 - j)(1 + beta L')^j ]``
  with zeta, L', l' from `zeta`, `meta_smoothness`, `meta_strong_convexity`.

  Args:
    consts: the problem constants (`Constants`; l used for l').
    T: rounds, > 0 (real values allowed for plotting).
    tau0: local epochs per round, int >= 1.
    eta: inner learning rate, in [0, 1/L).
    beta: outer learning rate, in (0, 2/L').
    C: clipping threshold, > 0.
    S: number of model parameters, int >= 1.
    sigma: noise multiplier, >= 0.
    n_support: |D_i^S|: a scalar (every client) or ``[N]`` per client.
    gap0: G(w^0) - G(w*), >= 0.
    p: ``[N]`` aggregation weights summing to 1 (default |D_i^S| / |D^S|, Eq. 3).
    theta: Theta form for Xi (``"paper"`` Eq. 27 or ``"exact"``).
    lemma3_form: ``"paper"`` (Eq. 25) or ``"corrected"`` (see `lemma3_bias`).

  Returns:
    `BoundParts`; ``optimization`` is the zeta^{T tau0} gap0 term, the others carry the
    geometric prefactor (1 - zeta^{T tau0})/(1 - zeta^{tau0}) lambda.

  Raises:
    FedJaxDpError: invalid arguments, l' <= 0, beta >= 2/L'.
  """
  T = check_positive("T", T)
  gap0 = check_non_negative("gap0", gap0)
  L_prime, a, b, c = _bound_terms(consts, tau0, eta, beta, C, S, sigma, n_support, p, theta,
                                  lemma3_form)
  l_prime = meta_strong_convexity(consts.l, consts.L, consts.rho, consts.B, eta)
  z = zeta(l_prime, L_prime, beta)
  tau0 = int(tau0)
  zT = z ** (T * tau0)
  pre = (1.0 - zT) / (1.0 - z ** tau0) * consts.lam
  parts = (zT * gap0, pre * a, pre * b, pre * c)
  return BoundParts(float(sum(parts)), *map(float, parts))


def theorem3_bound(consts: Constants, T: float, tau0: int, eta: float, beta: float, C: float,
                   S: int, sigma: float, n_support: ArrayLike, gap0: float,
                   p: Optional[ArrayLike] = None, theta: str = "paper",
                   lemma3_form: str = "paper") -> BoundParts:
  """RHS of Theorem 3 (non-convex, Eq. 32, in our reconstructed form) on
  ``(1/T) sum_t sum_tau ||grad G(w^_{t,tau})||^2``:

  ``gap0 / (T beta (1 - beta L'/2)) + lambda / (beta (1 - beta L'/2)) [ (1 + eta L) h(tau0)
  + beta tau0 (1 + eta L) sum_i p_i (Xi + lemma3_i) sum_j (tau0 - j)(1 + beta L')^j ]``.

  (The printed Eq. 32 is garbled; Appendix I, Eqs. 274-277, has an extra lambda inside
  the bracket. This is the form consistent with Eq. 31.) At tau0 = 1, sigma = 0 and C
  large, ``multi_step = 0`` and ``dp = lambda/(1 - beta L'/2) (1 + eta L)^2 2 eta L B``
  (finite, not 0: the "recovers conventional meta-learning" remark holds only up to that
  clipping term of Lemma 4).

  Args:
    consts: the problem constants (l unused).
    T: rounds, > 0.
    tau0, eta, C, S, sigma, n_support, gap0, p, theta, lemma3_form: as `theorem2_bound`
      (eta >= 0 here).
    beta: outer learning rate, in (0, 2/L').

  Returns:
    `BoundParts` (the last three carry the prefactor lambda / (beta (1 - beta L'/2))).

  Raises:
    FedJaxDpError: invalid arguments or beta >= 2/L'.
  """
  T = check_positive("T", T)
  gap0 = check_non_negative("gap0", gap0)
  L_prime, a, b, c = _bound_terms(consts, tau0, eta, beta, C, S, sigma, n_support, p, theta,
                                  lemma3_form)
  denom = _nonconvex_denominator(beta, L_prime)
  pre = consts.lam / denom
  parts = (gap0 / (T * denom), pre * a, pre * b, pre * c)
  return BoundParts(float(sum(parts)), *map(float, parts))


def _nonconvex_denominator(beta: float, L_prime: float) -> float:
  """``beta (1 - beta L'/2)``; raises unless beta < 2/L'."""
  if beta >= 2.0 / L_prime:
    raise FedJaxDpError(f"beta must be < 2/L' = {2.0 / L_prime!r} (Theorem 3 needs "
                        f"1 - beta L'/2 > 0), got {beta!r}.", option="beta")
  return beta * (1.0 - beta * L_prime / 2.0)


# ---------------------------------------------------------------------------
# Trade-offs: T and C.
# ---------------------------------------------------------------------------

def sigma_approx(T: float, tau0: int, q: float, epsilon: float, delta: float) -> float:
  """Leading-order noise multiplier for a target (epsilon, delta) (ours, from Theorem 1):
  ``sigma ~ 2 q sqrt(T tau0 ln(1/delta)) / epsilon``.

  From per stage-step RDP ``q^2 alpha / (2 sigma^2)`` (small q, large sigma), two stages
  (inner and outer, Theorem 1's sum) over T tau0 steps, the conversion
  ``+ ln(1/delta)/(alpha - 1)`` minimised over alpha. Against the exact calibration
  (`paper_accounting.paper_calibrate_sigma`, T = 200, delta = 1e-3, q = 0.1) it is 11%
  high at eps = 2, 6% low at eps = 4 and 18% low at eps = 6; it degrades at small sigma
  (0.37 vs 0.76 at eps = 10, q = 0.05) and small T (0.83 vs 1.16 at T = 10, eps = 2).

  Args:
    T: rounds, > 0.
    tau0: local epochs, int >= 1.
    q: Poisson sampling rate (q^Q = q^S), in (0, 1].
    epsilon: target epsilon, > 0.
    delta: target delta, in (0, 1).

  Returns:
    sigma (float).

  Raises:
    FedJaxDpError: arguments outside the ranges above.
  """
  T = check_positive("T", T)
  tau0 = check_int("tau0", tau0, minimum=1)
  q = check_probability("q", q)
  epsilon = check_epsilon(epsilon)
  delta = check_delta(delta)
  return 2.0 * q * math.sqrt(T * tau0 * math.log(1.0 / delta)) / epsilon


def nonconvex_round_coefficients(consts: Constants, tau0: int, eta: float, beta: float,
                                 C: float, S: int, q: float, epsilon: float, delta: float,
                                 gap0: float, n_support: ArrayLike = 1.0,
                                 theta: str = "exact") -> Tuple[float, float, float]:
  """(A, B0, B1) with Theorem 3's RHS = A/T + B0 + B1 sqrt(T) when sigma = `sigma_approx`
  (ours):

  ``A = gap0 / (beta (1 - beta L'/2))``, ``B1 = lambda / (beta (1 - beta L'/2)) beta tau0
  (1 + eta L)^2 eta L kappa_S C 2 q sqrt(tau0 ln(1/delta)) / epsilon sum_j (tau0-j)(1+beta
  L')^j``, with ``kappa_S = Theta/(C sigma)`` (`noise_norm_factor`; equivalently
  ``kappa C sqrt(S)``, kappa = 1, 2 or 4), and B0 the T-independent rest (at sigma = 0).

  Args:
    consts, tau0, eta, beta, C, S, gap0, n_support, theta: as `theorem3_bound`.
    q, epsilon, delta: as `sigma_approx`.

  Returns:
    (A, B0, B1), floats.

  Raises:
    FedJaxDpError: invalid arguments.
  """
  tau0 = check_int("tau0", tau0, minimum=1)
  s_per_root_T = sigma_approx(1.0, tau0, q, epsilon, delta)
  L_prime = meta_smoothness(consts.L, consts.rho, consts.B, eta)
  denom = _nonconvex_denominator(check_positive("beta", beta), L_prime)
  A = check_non_negative("gap0", gap0) / denom
  c = 1.0 + eta * consts.L
  B1 = (consts.lam / denom * beta * tau0 * c * c * eta * consts.L
        * noise_norm_factor(S, theta) * check_positive("C", C) * s_per_root_T
        * local_drift_sum(tau0, beta, L_prime))
  at_zero = theorem3_bound(consts, 1.0, tau0, eta, beta, C, S, 0.0, n_support, 0.0,
                           theta=theta)
  return float(A), float(at_zero.total), float(B1)


def optimal_rounds_nonconvex(consts: Constants, tau0: int, eta: float, beta: float, C: float,
                             S: int, q: float, epsilon: float, delta: float, gap0: float,
                             theta: str = "exact") -> float:
  """T* = (2A / B1)^(2/3), the minimiser of A/T + B0 + B1 sqrt(T) (ours).

  Not in the paper (Remark 1 only says an optimal T exists). Uses `sigma_approx`, so it
  is a leading-order estimate; compare `optimal_rounds_numeric` with the exact sigma(T).

  Args:
    As `nonconvex_round_coefficients`.

  Returns:
    T* (float, rounds; not rounded).

  Raises:
    FedJaxDpError: invalid arguments, or B1 = 0 (lambda, eta or L zero: no DP penalty,
      no finite optimum) or A = 0.
  """
  A, _, B1 = nonconvex_round_coefficients(consts, tau0, eta, beta, C, S, q, epsilon, delta,
                                          gap0, theta=theta)
  if B1 <= 0 or A <= 0:
    raise FedJaxDpError(f"no finite optimal T: A={A!r}, B1={B1!r} (need gap0 > 0 and "
                        "lambda, eta, L > 0).", option="gap0" if A <= 0 else "eta")
  return (2.0 * A / B1) ** (2.0 / 3.0)


def optimal_rounds_numeric(bound_fn: Callable[[float, float], Any],
                           sigma_of_T: Callable[[float], float],
                           T_grid: Sequence[float]) -> Tuple[float, np.ndarray]:
  """Minimises a bound over a grid of T with the noise each T needs (exact or approximate).

  Args:
    bound_fn: ``(T, sigma) -> float`` or ``-> BoundParts`` (its ``total`` is used), e.g.
      ``lambda T, s: theorem3_bound(consts, T, ..., sigma=s, ...)``.
    sigma_of_T: ``T -> sigma`` at the fixed privacy target, e.g.
      ``lambda T: paper_calibrate_sigma(eps, delta, q, q, T, tau0)`` or `sigma_approx`.
    T_grid: candidate T values (1-D, > 0).

  Returns:
    (T*, values): the grid point with the smallest bound (the first one on ties) and the
    float64 ``[len(T_grid)]`` bound values.

  Raises:
    FedJaxDpError: empty or non-positive grid, non-callables, non-finite bound values.
  """
  if not callable(bound_fn) or not callable(sigma_of_T):
    raise FedJaxDpError("bound_fn and sigma_of_T must be callables.", option="bound_fn")
  grid = np.asarray(T_grid, dtype=np.float64)
  if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
    raise FedJaxDpError(f"T_grid must be a non-empty 1-D sequence of positive numbers, got "
                        f"{T_grid!r}.", option="T_grid")
  values = np.empty(grid.size)
  for k, T in enumerate(grid):
    T = int(T) if float(T).is_integer() else float(T)
    out = bound_fn(T, float(sigma_of_T(T)))
    values[k] = float(getattr(out, "total", out))
  if not np.all(np.isfinite(values)):
    raise FedJaxDpError("bound_fn returned non-finite values on T_grid.", option="bound_fn")
  k = int(np.argmin(values))
  return float(grid[k]), values


class UShape(NamedTuple):
  """Shape of Xi (Lemma 4) as a function of C, at fixed sigma (ours).

  Attributes:
    has_interior_minimum: Xi(C) has a minimum at some finite C* > 0 strictly below its
      limits at C -> 0+ and C -> inf (a "U" in C).
    slope_small_c: dXi/dC as C -> 0+: ``(1 + eta L) eta L kappa_S sigma - 1`` (+inf if
      B = 0).
    argmin_c: the smallest minimiser C* (0.0 if Xi increases from C = 0; for sigma = 0,
      where Xi is flat for C >= max(B^2, (1 + eta L)^2), that plateau's start).
    note_condition: the closed-form criterion ``(1 + eta L) eta L kappa_S sigma < 1``
      (equal to has_interior_minimum whenever B > 0 and eta, L, sigma > 0).
    kappa_s: Theta / (C sigma).
  """
  has_interior_minimum: bool
  slope_small_c: float
  argmin_c: float
  note_condition: bool
  kappa_s: float


def u_shape_in_C(eta: float, L: float, B: float, sigma: float, S: int,
                 theta: str = "exact") -> UShape:
  """Whether the DP error Xi(C, S, sigma) of Lemma 4 (Eq. 26) is U-shaped in C.

  With a = eta L kappa_S sigma and c = 1 + eta L, Xi/c = 2 eta L B + a C + max(sqrt C, B)
  - min(C/c, sqrt C). Near 0 (C < min(B^2, c^2)) the slope is a - 1/c; for
  C >= max(B^2, c^2) Xi/c = 2 eta L B + a C increases; on [c^2, B^2] it is convex with
  stationary point 1/(4 a^2); on [B^2, c^2] it is concave. So, for B > 0 and sigma > 0,
  an interior minimum exists iff a c < 1 (``note_condition``), and C* is the best of
  {B^2, c^2, clip(1/(4 a^2), c^2, B^2)} (closed form, checked against a grid in tests).
  With realistic S (kappa_S ~ sqrt(S) ~ 450) it needs eta L sigma < ~2e-3.

  Args:
    eta: inner learning rate, >= 0.
    L: gradient-Lipschitz constant, > 0.
    B: gradient-norm bound, >= 0.
    sigma: noise multiplier, >= 0 (it does not depend on C).
    S: number of model parameters, int >= 1.
    theta: ``"exact"`` (default) or ``"paper"`` for kappa_S.

  Returns:
    `UShape`.

  Raises:
    FedJaxDpError: an argument outside the ranges above.
  """
  eta, L, B = _check_eta_L_B(eta, L, B)
  sigma = check_non_negative("sigma", sigma)
  kappa = noise_norm_factor(S, theta)
  a = eta * L * kappa * sigma
  c = 1.0 + eta * L
  note_condition = bool(c * a < 1.0)
  slope = math.inf if B == 0.0 else c * (a - 1.0 / c)

  def xi_over_c(C: float) -> float:
    return 2.0 * eta * L * B + a * C + max(math.sqrt(C), B) - min(C / c, math.sqrt(C))

  plateau = max(B * B, c * c)
  if a == 0.0:  # Xi decreases to its floor 2 eta L B c and stays there: no U
    return UShape(False, slope, plateau, note_condition, kappa)
  candidates = [B * B, c * c]
  if c * c <= B * B:
    candidates.append(min(max(1.0 / (4.0 * a * a), c * c), B * B))
  candidates = [C for C in candidates if C > 0.0]
  at_zero = xi_over_c(0.0)  # the limit C -> 0+ (Xi is continuous there)
  best = min(candidates, key=lambda C: (xi_over_c(C), C)) if candidates else 0.0
  has_min = bool(candidates) and xi_over_c(best) < at_zero * (1.0 - 1e-12)
  return UShape(has_min, slope, best if has_min else 0.0, note_condition, kappa)
