"""Per-round noise schedules as data, and the amplitude-varying calibration of
Yuan, Ni, Ding, Wei, Li, Poor, "Amplitude-Varying Perturbation for Balancing Privacy and
Utility in Federated Learning" (IEEE TIFS 2023; equation numbers below are the
paper's).

A schedule is a float array ``[M]`` of per-round noise standard deviations sigma_m (or
variances Theta(m) = sigma_m^2). The compiled round reads sigma_m from that array, so
changing vartheta, M or epsilon never recompiles.

The paper's privacy rule (Theorem 1, Appendix A, eqs. 15-27) is a moments-accountant
bound in which round m costs ``q lambda (lambda + 1) Delta_s^2 / (2 Theta(m))``. With the
"privacy load" ``R = q Delta_s^2 sum_m 1 / Theta(m)`` it certifies
``epsilon_paper = sqrt(2 R ln(1/delta))``; equivalently a schedule meets (epsilon,
delta) iff ``sum_m 1/Theta(m) <= B = epsilon^2 / (2 q Delta_s^2 ln(1/delta))`` (the
budget invariant; our reading of Appendix A, eqs. 15-27). Eq. (8) is the geometric
schedule that spends exactly B. The paper drops terms when it minimises over lambda:
its own bound gives ``R/2 + sqrt(2 R ln(1/delta))`` (`paper_epsilon_exact`), and a
standard RDP accountant gives more again for strongly varying schedules. Use the
`fedjax_dp.privacy.ledger.PrivacyLedger` for the epsilon you report; these
functions reproduce the paper.

Units: sigma is in parameter units (the noise is added to model weights), Delta_s in
the same units, epsilon and delta are the usual DP parameters.
"""

from __future__ import annotations

import math
from typing import Literal, Optional, Sequence, Tuple, get_args

import numpy as np

from fedjax_dp.validation import (FedJaxDpError, check_delta, check_epsilon, check_int,
                                  check_positive, check_probability)

__all__ = ["RefinementMode", "LaplaceMode", "REFINEMENT_MODES", "LAPLACE_MODES",
           "sensitivity", "geometric_sum", "noise_budget", "initial_amplitude",
           "geometric_variances", "geometric_schedule", "privacy_load", "paper_epsilon",
           "paper_epsilon_exact", "refined_amplitude", "laplace_scale",
           "constant_noise_schedule"]

#: The choices of online refinement (`OnlineRefinement.mode`) and of the Laplace
#: baseline's calibration (`laplace_scale`); the tuples are their values.
RefinementMode = Literal["paper", "exact_budget"]
LaplaceMode = Literal["pure_dp_split", "variance_matched"]
REFINEMENT_MODES: Tuple[str, ...] = get_args(RefinementMode)
LAPLACE_MODES: Tuple[str, ...] = get_args(LaplaceMode)


def sensitivity(clip_norm: float, local_dataset_size: int) -> float:
  """L2 sensitivity ``Delta_s = 2 C / |D_k|`` of a client's locally trained model when
  full-batch gradient descent keeps ``||w|| <= C`` (the paper's section III-C, after
  Wei et al., NbAFL; example-level neighbouring datasets).

  Raises:
    FedJaxDpError: non-positive ``clip_norm`` or ``local_dataset_size`` < 1.
  """
  c = check_positive("clip_norm", clip_norm)
  n = check_int("local_dataset_size", local_dataset_size, minimum=1)
  return 2.0 * c / n


def geometric_sum(vartheta: float, rounds: int) -> float:
  """``S(vartheta, M) = (vartheta - vartheta^(1-M)) / (vartheta - 1)`` of eq. (8),
  computed as the stable sum ``sum_{j=0}^{M-1} vartheta^(-j)``; ``S(1, M) = M``
  (Remark 3).

  Raises:
    FedJaxDpError: ``vartheta <= 0`` or ``rounds < 1``.
  """
  v = check_positive("vartheta", vartheta)
  m = check_int("rounds", rounds, minimum=1)
  return float(np.sum(v ** -np.arange(m, dtype=np.float64)))


def noise_budget(epsilon: float, delta: float, sampling_rate: float,
                 sensitivity: float) -> float:
  """``B = epsilon^2 / (2 q Delta_s^2 ln(1/delta))``: the largest ``sum_m 1/Theta(m)``
  (units 1/parameter^2) the paper's rule allows (our reading of Appendix A; equivalent to
  eq. 8).

  Raises:
    FedJaxDpError: invalid epsilon, delta, sampling rate or sensitivity.
  """
  eps = check_epsilon(epsilon)
  d = check_delta(delta)
  q = check_probability("sampling_rate", sampling_rate)
  s = check_positive("sensitivity", sensitivity)
  return eps ** 2 / (2.0 * q * s ** 2 * math.log(1.0 / d))


def initial_amplitude(epsilon: float, delta: float, sampling_rate: float,
                      sensitivity: float, vartheta: float, rounds: int) -> float:
  """First-round noise standard deviation, eq. (8) (Theorem 1):
  ``sigma = (Delta_s / epsilon) sqrt(2 q S(vartheta, M) ln(1/delta))``.

  With ``vartheta = 1`` this is the persistent Gaussian mechanism of Remark 3,
  ``(Delta_s / epsilon) sqrt(2 q M ln(1/delta))``.

  Returns:
    sigma (parameter units).

  Raises:
    FedJaxDpError: invalid arguments (each named).
  """
  b = noise_budget(epsilon, delta, sampling_rate, sensitivity)
  return math.sqrt(geometric_sum(vartheta, rounds) / b)


def geometric_variances(sigma: float, vartheta: float, rounds: int) -> np.ndarray:
  """``Theta(m) = vartheta^(m-1) sigma^2`` for ``m = 1..M``, eq. (6).

  Returns:
    float64 ``[rounds]`` variances (parameter units squared).

  Raises:
    FedJaxDpError: ``sigma < 0``, ``vartheta <= 0`` or ``rounds < 1``.
  """
  if not (np.isfinite(sigma) and sigma >= 0):
    raise FedJaxDpError(f"sigma must be finite and >= 0, got {sigma!r}.")
  v = check_positive("vartheta", vartheta)
  m = check_int("rounds", rounds, minimum=1)
  return float(sigma) ** 2 * v ** np.arange(m, dtype=np.float64)


def geometric_schedule(epsilon: float, delta: float, sampling_rate: float,
                       sensitivity: float, vartheta: float, rounds: int) -> np.ndarray:
  """Per-round standard deviations ``sqrt(Theta(m))`` of the calibrated geometric
  schedule, eqs. (6) and (8): float64 ``[rounds]``.

  Raises:
    FedJaxDpError: invalid arguments (each named).
  """
  sigma = initial_amplitude(epsilon, delta, sampling_rate, sensitivity, vartheta, rounds)
  return np.sqrt(geometric_variances(sigma, vartheta, rounds))


def privacy_load(stddevs: Sequence[float], sampling_rate: float,
                 sensitivity: float) -> float:
  """``R = q Delta_s^2 sum_m 1/sigma_m^2`` over the rounds actually run (eq. 16 with
  the per-round variances; note, section 2.8). ``sigma_m = 0`` gives ``inf``.

  Raises:
    FedJaxDpError: negative or non-finite standard deviations.
  """
  s = np.asarray(stddevs, np.float64)
  if s.ndim != 1 or not np.all(np.isfinite(s)) or np.any(s < 0):
    raise FedJaxDpError("stddevs must be a finite, non-negative [rounds] vector.")
  q = check_probability("sampling_rate", sampling_rate)
  d = check_positive("sensitivity", sensitivity)
  if np.any(s == 0):
    return math.inf
  return float(q * d ** 2 * np.sum(1.0 / s ** 2))


def paper_epsilon(stddevs: Sequence[float], sampling_rate: float, sensitivity: float,
                  delta: float) -> float:
  """The paper's epsilon for the noise actually added: ``sqrt(2 R ln(1/delta))``
  (eqs. 16-27 solved for epsilon; equals the target epsilon for eq. (8)'s schedule)."""
  r = privacy_load(stddevs, sampling_rate, sensitivity)
  return math.sqrt(2.0 * r * math.log(1.0 / check_delta(delta)))


def paper_epsilon_exact(stddevs: Sequence[float], sampling_rate: float,
                        sensitivity: float, delta: float) -> float:
  """The exact minimum over lambda of the paper's own moment bound (eq. 16):
  ``R/2 + sqrt(2 R ln(1/delta))`` (the paper drops R/2)."""
  r = privacy_load(stddevs, sampling_rate, sensitivity)
  return r / 2.0 + math.sqrt(2.0 * r * math.log(1.0 / check_delta(delta)))


def refined_amplitude(epsilon: float, delta: float, sampling_rate: float,
                      sensitivity: float, vartheta: float, rounds_done: int,
                      new_rounds: int, mode: str = "paper",
                      spent_stddevs: Optional[Sequence[float]] = None) -> float:
  """Base amplitude sigma' after shrinking the horizon to ``M' = new_rounds`` once
  ``m = rounds_done`` aggregations have run; later rounds n use
  ``Theta(n) = vartheta^(n-1) sigma'^2`` (Theorem 2).

  ``mode="paper"`` is eq. (9) as printed:
  ``(Delta_s/epsilon) sqrt(2q X ln(1/delta))`` with
  ``X = S(vartheta, m) + M' - m`` (vartheta > 1), ``M'`` (vartheta = 1), or
  ``(vartheta^(1-m) - vartheta + vartheta^(m-M')) / (1 - vartheta)`` (vartheta < 1).
  For vartheta > 1 it can raise the noise and for vartheta < 1 it under-counts the
  remaining rounds.

  ``mode="exact_budget"`` (our budget-respecting variant) spends what is left of
  B exactly: ``sigma'^2 = sum_{n=m+1}^{M'} vartheta^-(n-1) / (B - sum_{n<=m} 1/sigma_n^2)``
  with the standard deviations ``spent_stddevs`` actually used, so that
  ``sum_n 1/Theta(n) = B`` over all ``M'`` rounds.

  Raises:
    FedJaxDpError: invalid arguments, ``new_rounds <= rounds_done``, a missing or
      mis-sized ``spent_stddevs`` in exact mode, or a budget already spent.
  """
  mode = str(mode)
  if mode not in REFINEMENT_MODES:
    raise FedJaxDpError(f"mode must be one of {REFINEMENT_MODES}, got {mode!r}.")
  v = check_positive("vartheta", vartheta)
  m = check_int("rounds_done", rounds_done, minimum=0)
  mp = check_int("new_rounds", new_rounds, minimum=m + 1)
  b = noise_budget(epsilon, delta, sampling_rate, sensitivity)
  if mode == "paper":
    if v > 1:
      x = (geometric_sum(v, m) if m > 0 else 0.0) + mp - m
    elif v == 1:
      x = float(mp)
    else:
      x = (v ** (1 - m) - v + v ** (m - mp)) / (1.0 - v)
    return math.sqrt(x / b)
  spent = np.asarray(spent_stddevs if spent_stddevs is not None else [], np.float64)
  if spent.shape != (m,) or np.any(spent <= 0):
    raise FedJaxDpError(f"exact_budget mode needs spent_stddevs: the {m} positive "
                        f"standard deviations already used, got shape {spent.shape}.")
  left = b - float(np.sum(1.0 / spent ** 2))
  if left <= 0:
    raise FedJaxDpError("the privacy budget is already spent; no round is left.")
  future = float(np.sum(v ** -np.arange(m, mp, dtype=np.float64)))
  return math.sqrt(future / left)


def laplace_scale(epsilon: float, sensitivity: float, rounds: int,
                  mode: str = "pure_dp_split",
                  gaussian_sigma: Optional[float] = None) -> float:
  """Per-coordinate scale b of the paper's constant-variance Laplace baseline ("Lap";
  its reference [40] is missing from the text, so the calibration is our
  choice).

  ``"pure_dp_split"``: ``b = M Delta_1 / epsilon`` (basic composition of M rounds of
  (epsilon/M)-DP of the Laplace mechanism, Dwork and Roth 2014, Thm. 3.6), where
  ``sensitivity`` must be the L1 sensitivity Delta_1 of the noised vector: the Laplace
  mechanism's privacy is set by the L1 distance, and a bound Delta_2 on the L2 distance of
  a P-dimensional model gives ``Delta_1 = sqrt(P) Delta_2`` (Cauchy-Schwarz), which the
  caller computes. ``"variance_matched"``: the persistent Gaussian's variance,
  ``b = gaussian_sigma / sqrt(2)``. The Laplace standard deviation is ``sqrt(2) b``.

  Raises:
    FedJaxDpError: invalid arguments or a missing ``gaussian_sigma``.
  """
  if mode not in LAPLACE_MODES:
    raise FedJaxDpError(f"mode must be one of {LAPLACE_MODES}, got {mode!r}.")
  if mode == "variance_matched":
    if gaussian_sigma is None:
      raise FedJaxDpError("variance_matched needs gaussian_sigma.")
    return check_positive("gaussian_sigma", gaussian_sigma) / math.sqrt(2.0)
  return (check_int("rounds", rounds, minimum=1) * check_positive("sensitivity", sensitivity)
          / check_epsilon(epsilon))


def constant_noise_schedule(stddev: float, rounds: int) -> np.ndarray:
  """``[rounds]`` copies of one standard deviation (the persistent baseline)."""
  if not (np.isfinite(stddev) and stddev >= 0):
    raise FedJaxDpError(f"stddev must be finite and >= 0, got {stddev!r}.")
  return np.full(check_int("rounds", rounds, minimum=1), float(stddev))
