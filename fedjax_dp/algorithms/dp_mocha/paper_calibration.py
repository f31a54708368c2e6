"""The paper's privacy calibration, as written (DP-MOCHA, Hu et al. 2020, Sec. VI),
labelled as the paper's: the classical Gaussian mechanism, Lemma 4, Corollary 4's moments
bound and Theorem 5 with our choice of Theorem 5's constants (the paper does not state
them).

These formulas treat the SDCA coordinate draws as sampling at rate q = n_iter / n_t and
the active probability p = 1 - P(drop) as an amplification factor, and they rely on
Corollary 2's sensitivity; none of the three is backed by a standard accountant for
this mechanism (the server sees which devices upload, and on HAR q is far above
Corollary 4's q < 1 / (16 sigma1); see `fedjax_dp.algorithms.dp_mocha.mechanism`).
A run reports their epsilon as ``epsilon_paper`` next to the ledger's.
"""

from __future__ import annotations

import math
from typing import Dict, NamedTuple

import numpy as np

from fedjax_dp.validation import (FedJaxDpError, check_delta, check_epsilon, check_int,
                                  check_positive, check_probability)


def gaussian_sigma(epsilon: float, delta: float) -> float:
  """sigma = sqrt(2 ln(1.25 / delta)) / epsilon: the classical Gaussian mechanism (Dwork
  & Roth, Thm. A.1, quoted in Sec. IV-A), (epsilon, delta)-DP only for epsilon < 1.

  Raises:
    FedJaxDpError: epsilon <= 0 or delta outside (0, 1).
  """
  return math.sqrt(2.0 * math.log(1.25 / check_delta(delta))) / check_epsilon(epsilon)


def lemma4_epsilon(q: float, epsilon1: float, epsilon2: float) -> float:
  """Per-iteration privacy loss of Lemma 4: sqrt(q^2 eps1^2 + eps2^2).

  Raises:
    FedJaxDpError: q outside (0, 1] or a negative epsilon.
  """
  q = check_probability("q", q)
  if epsilon1 < 0 or epsilon2 < 0:
    raise FedJaxDpError(f"epsilon1, epsilon2 must be >= 0, got {epsilon1}, {epsilon2}.",
                        option="epsilon1")
  return math.sqrt(q * q * epsilon1 * epsilon1 + epsilon2 * epsilon2)


class PaperSigmas(NamedTuple):
  """Theorem 5's noise multipliers for one device (our choice of Theorem 5's constants).

  Attributes:
    sigma1, sigma2: noise multipliers of lines 6 and 7 (std / s1, std / s2).
    epsilon_iteration: eps_bar = epsilon / (p sqrt(K)), the per-round budget.
    epsilon1, epsilon2: the budgets of lines 6 and 7 (epsilon2 = r epsilon1).
    gaussian_valid: epsilon1 < 1 and epsilon2 < 1 (where the classical Gaussian bound
      the proof uses holds).
    corollary4_valid: sigma1 >= 1 and q < 1 / (16 sigma1) (Corollary 4's conditions).
  """
  sigma1: float
  sigma2: float
  epsilon_iteration: float
  epsilon1: float
  epsilon2: float
  gaussian_valid: bool
  corollary4_valid: bool


def theorem5_sigmas(epsilon: float, delta: float, q: float, p: float, rounds: int,
                    r: float = 1.0) -> PaperSigmas:
  """Theorem 5 with c2 = sqrt(2 ln(1.25/delta) / ln(1/delta)) (our choice of Theorem 5's
  constants):

    eps_bar = epsilon / (p sqrt(K)),  eps1 = eps_bar / sqrt(q^2 + r^2),  eps2 = r eps1,
    sigma_i = sqrt(2 ln(1.25 / delta)) / eps_i,
  i.e. sigma1 = sqrt(2 ln(1.25/delta)) p sqrt(K (q^2 + r^2)) / epsilon, sigma2 = sigma1/r.

  Args:
    epsilon: the target epsilon of the whole run (> 0).
    delta: in (0, 1).
    q: data sampling rate n_iter / n_t in (0, 1] (the paper's; expected steps / n_t).
    p: active probability 1 - P(drop) in (0, 1].
    rounds: K, the number of compositions (H * K inner rounds by default).
    r: budget ratio eps2 / eps1 (> 0; the paper leaves it open, default 1).

  Raises:
    FedJaxDpError: an argument out of range (named).
  """
  epsilon = check_epsilon(epsilon)
  c = math.sqrt(2.0 * math.log(1.25 / check_delta(delta)))
  q = check_probability("q", q)
  p = check_probability("p", p)
  k = check_int("rounds", rounds, minimum=1)
  r = check_positive("r", r)
  eps_bar = epsilon / (p * math.sqrt(k))
  eps1 = eps_bar / math.sqrt(q * q + r * r)
  eps2 = r * eps1
  s1, s2 = c / eps1, c / eps2
  return PaperSigmas(s1, s2, eps_bar, eps1, eps2, eps1 < 1 and eps2 < 1,
                     s1 >= 1 and q < 1.0 / (16.0 * s1))


def theorem5_epsilon(sigma1: float, delta: float, q: float, p: float, rounds: int,
                     r: float = 1.0) -> float:
  """The inverse of `theorem5_sigmas`: the epsilon Theorem 5 (with Sec. 6.1's constants)
  claims for noise multiplier ``sigma1`` (and sigma2 = sigma1 / r); inf for sigma1 = 0."""
  q = check_probability("q", q)
  p = check_probability("p", p)
  rounds = check_int("rounds", rounds, minimum=1)
  r = check_positive("r", r)
  c = math.sqrt(2.0 * math.log(1.25 / check_delta(delta)))
  if sigma1 <= 0:
    return math.inf
  return c * p * math.sqrt(rounds * (q * q + r * r)) / sigma1


def corollary4_epsilon(sigma1: float, sigma2: float, q: float, rounds: int,
                       delta: float) -> Dict[str, float]:
  """Corollary 4's moments bound composed over ``rounds`` (Theorems 1-2):

    mu(g) = g (g + 1) / (2 sigma2^2) + q^2 g (g + 1) / ((1 - q) sigma1^2),
    eps = min over integer g in [1, sigma1^2 ln(1 / (q sigma1))) of
          (K mu(g) + ln(1 / delta)) / g,

  dropping the O(q^3 g^3 / sigma1^3) term, as the paper does.

  Returns:
    ``{"epsilon": ..., "order": g, "conditions_hold": 1.0 or 0.0}`` where the conditions
    are sigma1 >= 1, q < 1 / (16 sigma1) and a non-empty order range; without them the
    minimum is taken over g in [1, 4096] and flagged (q = 1 gives inf).
  """
  delta = check_delta(delta)
  if q >= 1.0:
    return {"epsilon": math.inf, "order": float("nan"), "conditions_hold": 0.0}
  top = sigma1 ** 2 * math.log(1.0 / (q * sigma1)) if q * sigma1 < 1 else 0.0
  ok = sigma1 >= 1 and q < 1.0 / (16.0 * sigma1) and top > 1
  g = np.arange(1, int(min(top, 1e6)) + 1 if ok else 4097, dtype=np.float64)
  mu = g * (g + 1) / (2 * sigma2 ** 2) + q * q * g * (g + 1) / ((1 - q) * sigma1 ** 2)
  eps = (rounds * mu + math.log(1.0 / delta)) / g
  i = int(np.argmin(eps))
  return {"epsilon": float(eps[i]), "order": float(g[i]), "conditions_hold": float(ok)}
