"""Empirical privacy audit: a canary client, many repetitions, a lower bound on epsilon.

The audit runs a mechanism ``n`` times on the same cohort *without* a canary client and
``n`` times *with* one (the add/remove-one-client neighbouring relation of user-level
DP), each repetition with fresh noise, vmapped over repetitions. A distinguisher
scores each release by its projection on the canary's direction. For every threshold
``t`` the test "score > t means the canary was present" has a false-positive and a
false-negative rate; Clopper-Pearson upper bounds on both (confidence ``1 - alpha``)
turn it into a lower bound on epsilon at ``delta`` that holds with that confidence:

    epsilon_lb = max_t max( log((1 - delta - FNR_ub) / FPR_ub),
                            log((1 - delta - FPR_ub) / FNR_ub) )

(Kairouz, Oh, Viswanath, ICML 2015, Thm. 2.1: an (epsilon, delta)-DP mechanism has
``FPR + e^eps FNR >= 1 - delta`` and the symmetric inequality; used for auditing by
Jagielski, Ullman, Oprea, NeurIPS 2020, Sec. 3, and Nasr et al., IEEE S&P 2021).

A correct mechanism must give ``epsilon_lb <= epsilon`` of the accountant; a lower
bound above the accountant's epsilon proves the implementation (or its calibration)
wrong. With ``n`` repetitions the largest provable bound is about ``log(n / 3)``
(both error rates 0), so a broken mechanism is caught only if its claimed epsilon is
below that.

The mechanism audited by default is the DP-FedAvg aggregation primitive
`fedjax_dp.federated.aggregation.dp_aggregate` (clip each update to C, sum, add
``N(0, (z C)^2 I)``), the one the round uses.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from fedjax_dp.validation import (FedJaxDpError, check_delta, check_int, check_positive,
                                  check_probability)

# mechanism(updates [K, P], key) -> release [P]
Mechanism = Callable[[jax.Array, jax.Array], jax.Array]


@dataclasses.dataclass(frozen=True)
class AuditResult:
  """Outcome of `audit_mechanism`.

  Attributes:
    epsilon_lower_bound: empirical lower bound on epsilon at ``delta`` (0 when no
      threshold proves anything), holding with confidence ``1 - alpha``.
    delta: the delta of the bound.
    alpha: one minus the confidence level of the Clopper-Pearson bounds.
    repetitions: releases per world (with and without the canary).
    threshold: the score threshold that gave the bound.
    fpr_upper, fnr_upper: Clopper-Pearson upper bounds at that threshold.
  """
  epsilon_lower_bound: float
  delta: float
  alpha: float
  repetitions: int
  threshold: float
  fpr_upper: float
  fnr_upper: float


def clopper_pearson_upper(errors: np.ndarray, n: int, alpha: float) -> np.ndarray:
  """One-sided ``1 - alpha`` Clopper-Pearson upper bounds on a binomial rate.

  Args:
    errors: int array of error counts (each in ``[0, n]``).
    n: trials.
    alpha: in (0, 1).

  Returns:
    float64 array of upper bounds in (0, 1] (``Beta(k + 1, n - k).ppf(1 - alpha)``,
    1 where ``k == n``).
  """
  k = np.asarray(errors, np.float64)
  upper = stats.beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1e-12))
  return np.where(k >= n, 1.0, upper)


def epsilon_lower_bound(scores_out: np.ndarray, scores_in: np.ndarray, delta: float,
                        alpha: float = 0.05) -> AuditResult:
  """Lower bound on epsilon from distinguisher scores (module docstring formula).

  Args:
    scores_out: float ``[n]`` scores of releases without the canary.
    scores_in: float ``[n]`` scores of releases with it (larger means "present").
    delta: in (0, 1).
    alpha: in (0, 1); the bound holds with confidence ``1 - alpha`` (each of the two
      Clopper-Pearson bounds at ``alpha / 2``).

  Raises:
    FedJaxDpError: empty or mismatched scores, non-finite scores, bad delta or alpha.
  """
  delta = check_delta(delta)
  alpha = check_probability("alpha", alpha)
  if alpha >= 1.0:
    raise FedJaxDpError(f"alpha must be in (0, 1), got {alpha!r}.")
  s0 = np.asarray(scores_out, np.float64).ravel()
  s1 = np.asarray(scores_in, np.float64).ravel()
  if s0.size == 0 or s0.size != s1.size:
    raise FedJaxDpError(f"scores_out and scores_in must be non-empty and of equal size, "
                        f"got {s0.size} and {s1.size}.")
  if not (np.isfinite(s0).all() and np.isfinite(s1).all()):
    raise FedJaxDpError("scores must be finite.")
  n = s0.size
  thresholds = np.unique(np.concatenate([s0, s1, [-np.inf]]))
  # Test "present iff score > t": false positives among s0, false negatives among s1.
  fp = n - np.searchsorted(np.sort(s0), thresholds, side="right")
  fn = np.searchsorted(np.sort(s1), thresholds, side="right")
  fpr = clopper_pearson_upper(fp, n, alpha / 2)
  fnr = clopper_pearson_upper(fn, n, alpha / 2)
  with np.errstate(divide="ignore", invalid="ignore"):
    a = np.log(np.maximum(1.0 - delta - fnr, 0.0) / fpr)
    b = np.log(np.maximum(1.0 - delta - fpr, 0.0) / fnr)
  eps = np.nan_to_num(np.maximum(a, b), nan=0.0, neginf=0.0)
  i = int(np.argmax(eps))
  return AuditResult(max(float(eps[i]), 0.0), delta, alpha, n, float(thresholds[i]),
                     float(fpr[i]), float(fnr[i]))


def gaussian_sum_mechanism(clip_norm: float, noise_multiplier: float) -> Mechanism:
  """DP-FedAvg's aggregation as audited by default: clip -> sum -> Gaussian noise
  (`fedjax_dp.federated.aggregation.dp_aggregate`, uniform weights)."""
  from fedjax_dp.federated import aggregation  # the engine depends on privacy, not back

  def mechanism(updates, key):
    w = jnp.ones(updates.shape[0], jnp.float32)
    return aggregation.dp_aggregate(updates, w, clip_norm, noise_multiplier * clip_norm,
                                    key)

  return mechanism


def audit_mechanism(mechanism: Mechanism, updates: jax.Array, canary: jax.Array, *,
                    delta: float, repetitions: int = 2000, alpha: float = 0.05,
                    key: Optional[jax.Array] = None) -> AuditResult:
  """Audits ``mechanism`` with a canary client (user-level, add/remove one client).

  Args:
    mechanism: ``mechanism(updates [K, P], key) -> release [P]`` (jittable).
    updates: float32 ``[K, P]``, the other clients' updates (the same in every
      repetition: the worst case fixes everything but the canary and the noise).
    canary: float32 ``[P]``, the canary client's update; the distinguisher scores a
      release by its projection on ``canary / ||canary||``.
    delta: the delta of the claimed guarantee.
    repetitions: releases per world, >= 10 (larger proves larger bounds).
    alpha: one minus the confidence level.
    key: PRNG key (default ``jax.random.key(0)``).

  Returns:
    An `AuditResult`.

  Raises:
    FedJaxDpError: mismatched shapes, a zero canary, bad counts or probabilities.
  """
  repetitions = check_int("repetitions", repetitions, minimum=10)
  updates = jnp.asarray(updates, jnp.float32)
  canary = jnp.asarray(canary, jnp.float32)
  if updates.ndim != 2 or canary.shape != updates.shape[1:]:
    raise FedJaxDpError(f"updates must be [K, P] and canary [P], got {updates.shape} and "
                        f"{canary.shape}.")
  norm = float(jnp.linalg.norm(canary))
  check_positive("canary norm", norm)
  direction = canary / norm
  with_canary = jnp.concatenate([updates, canary[None]], axis=0)
  key = jax.random.key(0) if key is None else key
  k_out, k_in = jax.random.split(key)

  @jax.jit
  def scores(data, k):
    keys = jax.random.split(k, repetitions)
    releases = jax.vmap(lambda kk: mechanism(data, kk))(keys)
    return releases @ direction

  s0 = np.asarray(scores(updates, k_out))
  s1 = np.asarray(scores(with_canary, k_in))
  return epsilon_lower_bound(s0, s1, delta, alpha)
