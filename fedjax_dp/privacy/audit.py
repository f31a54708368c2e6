"""Empirical privacy audit: a canary, many repetitions, a lower bound on epsilon.

An audit runs a mechanism many times on two neighbouring inputs ("out": without the
canary, "in": with it), each repetition with fresh noise. A distinguisher scores each
release; the test "score > t means the canary was present" has a false-positive rate
FPR and a false-negative rate FNR. An (epsilon, delta)-DP mechanism has
``FPR + e^eps FNR >= 1 - delta`` and the symmetric inequality (Kairouz, Oh, Viswanath,
ICML 2015, Thm. 2.1), so one-sided Clopper-Pearson upper bounds on both rates turn a
test into a lower bound on epsilon at ``delta``:

    epsilon_lb = max( log((1 - delta - FNR_ub) / FPR_ub),
                      log((1 - delta - FPR_ub) / FNR_ub) )

(used for auditing by Jagielski, Ullman, Oprea, NeurIPS 2020, Sec. 3, and Nasr et al.,
IEEE S&P 2021). The bound holds with confidence ``1 - alpha`` only for a test fixed
before the scored releases are seen: the maximum over thresholds of per-threshold
bounds computed on the same releases is *not* a confidence bound (it overstates epsilon;
the canary audit of a correctly calibrated Gaussian measured 2.74 > its exact 2.56 that
way). So `choose_test` picks the score, threshold and direction on a calibration split,
and `epsilon_lower_bound_at` evaluates that one test on fresh releases.
`epsilon_lower_bound` (best threshold on the data themselves) remains as a diagnostic.

A correct mechanism must give ``epsilon_lb <= epsilon`` of the accountant; a lower
bound above the accountant's epsilon proves the implementation (or its calibration)
wrong. With ``n`` scored repetitions and thresholds fixed on ``m`` calibration ones,
the largest provable bound is about ``log(n / (4 n / m))`` ... ``log(n / 4)``, so a
broken mechanism is caught only if its claimed epsilon is below that.

This module is the statistics only (it depends on nothing else in fedjax_dp):
`audit_mechanism` audits any ``mechanism(updates, key)`` on materialised updates, and
`fedjax_dp.auditing` audits whole algorithms through their real rounds.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Tuple

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
  """The best bound over every threshold of the scores themselves (a diagnostic: the
  threshold is chosen on the same releases, so this overstates the bound; use
  `choose_test` and `epsilon_lower_bound_at` for a confidence bound).

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


def _bound(fp: np.ndarray, fn: np.ndarray, n0: int, n1: int, delta: float, alpha: float
           ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Both directions' bounds from error counts (Clopper-Pearson at ``alpha / 2`` each)."""
  fpr = clopper_pearson_upper(fp, n0, alpha / 2)
  fnr = clopper_pearson_upper(fn, n1, alpha / 2)
  with np.errstate(divide="ignore", invalid="ignore"):
    a = np.log(np.maximum(1.0 - delta - fnr, 0.0) / fpr)
    b = np.log(np.maximum(1.0 - delta - fpr, 0.0) / fnr)
  return np.nan_to_num(np.maximum(a, b), nan=0.0, neginf=0.0), fpr, fnr


@dataclasses.dataclass(frozen=True)
class Test:
  """A distinguishing test fixed before the scored releases are seen.

  Attributes:
    score: which score column it reads.
    threshold: "present" iff ``sign * score > threshold``.
    sign: +1 or -1 (a canary may lower a score, e.g. a variance).
    predicted: the bound the calibration split predicts for a test split of the
      intended size (how it was chosen; not a bound).
  """
  score: int
  threshold: float
  sign: float
  predicted: float


#: Expected false positives on the test split tried when choosing a threshold.
_FP_GRID = (1, 2, 3, 5, 8, 12, 20, 30, 50, 80, 120, 200, 300, 500, 800, 1200, 2000, 3000,
            5000)


def choose_test(cal_out: np.ndarray, cal_in: np.ndarray, n_test: int, delta: float,
                alpha: float = 0.05) -> Test:
  """Picks the score column, direction and threshold whose bound on a test split of
  ``n_test`` releases per world the calibration releases predict to be largest.

  Thresholds are the calibration "out" quantiles at which ``k`` false positives are
  expected among ``n_test`` (k in a fixed grid, not finer than the calibration split
  resolves); the false-negative rate is estimated on the calibration "in" releases.

  Args:
    cal_out, cal_in: float ``[m, k]`` (or ``[m]``) calibration scores of each world.
    n_test: scored releases per world that the test will be evaluated on.
    delta, alpha: as in `epsilon_lower_bound_at`.

  Returns:
    A `Test`.

  Raises:
    FedJaxDpError: mismatched or non-finite scores.
  """
  s0 = np.asarray(cal_out, np.float64)
  s1 = np.asarray(cal_in, np.float64)
  s0 = s0[:, None] if s0.ndim == 1 else s0
  s1 = s1[:, None] if s1.ndim == 1 else s1
  if s0.ndim != 2 or s1.shape[1:] != s0.shape[1:] or not len(s0) or not len(s1):
    raise FedJaxDpError(f"calibration scores must be [m, k] with the same k, got "
                        f"{s0.shape} and {s1.shape}.")
  if not (np.isfinite(s0).all() and np.isfinite(s1).all()):
    raise FedJaxDpError("scores must be finite.")
  m0, m1 = len(s0), len(s1)
  best = Test(0, float("inf"), 1.0, -1.0)
  for j in range(s0.shape[1]):
    for sign in (1.0, -1.0):
      out, inn = np.sort(sign * s0[:, j]), np.sort(sign * s1[:, j])
      for k in _FP_GRID:
        level = k / n_test
        if level < 1.0 / m0 or level >= 1.0:
          continue
        t = float(np.quantile(out, 1.0 - level))
        fnr = np.searchsorted(inn, t, side="right") / m1
        pred, _, _ = _bound(np.array([k]), np.array([fnr * n_test]), n_test, n_test,
                            delta, alpha)
        if pred[0] > best.predicted:
          best = Test(j, t, sign, float(pred[0]))
  return best


def epsilon_lower_bound_at(scores_out: np.ndarray, scores_in: np.ndarray, test: Test,
                           delta: float, alpha: float = 0.05) -> AuditResult:
  """The lower bound of one fixed `Test` on fresh releases (a valid confidence bound).

  Args:
    scores_out, scores_in: float ``[n, k]`` (or ``[n]``) scores of each world's
      releases, not used to choose ``test``.
    test: from `choose_test` on other releases.
    delta: in (0, 1).
    alpha: in (0, 1); the bound holds with confidence ``1 - alpha``.

  Raises:
    FedJaxDpError: empty or non-finite scores, bad delta or alpha.
  """
  delta = check_delta(delta)
  alpha = check_probability("alpha", alpha)
  s0 = np.asarray(scores_out, np.float64)
  s1 = np.asarray(scores_in, np.float64)
  s0 = s0[:, test.score] if s0.ndim == 2 else s0
  s1 = s1[:, test.score] if s1.ndim == 2 else s1
  if s0.size == 0 or s1.size == 0:
    raise FedJaxDpError("scores must be non-empty.")
  if not (np.isfinite(s0).all() and np.isfinite(s1).all()):
    raise FedJaxDpError("scores must be finite.")
  fp = int(np.sum(test.sign * s0 > test.threshold))
  fn = int(np.sum(test.sign * s1 <= test.threshold))
  eps, fpr, fnr = _bound(np.array([fp]), np.array([fn]), s0.size, s1.size, delta, alpha)
  return AuditResult(max(float(eps[0]), 0.0), delta, alpha, int(s0.size),
                     float(test.threshold), float(fpr[0]), float(fnr[0]))


def audit_mechanism(mechanism: Mechanism, updates: jax.Array, canary: jax.Array, *,
                    delta: float, repetitions: int = 2000, alpha: float = 0.05,
                    calibration: Optional[int] = None,
                    key: Optional[jax.Array] = None) -> AuditResult:
  """Audits ``mechanism`` with a canary client (user-level, add/remove one client).

  The threshold is chosen on ``calibration`` extra releases per world (`choose_test`)
  and the bound evaluated on ``repetitions`` fresh ones (`epsilon_lower_bound_at`).

  Args:
    mechanism: ``mechanism(updates [K, P], key) -> release [P]`` (jittable).
    updates: float32 ``[K, P]``, the other clients' updates (the same in every
      repetition: the worst case fixes everything but the canary and the noise).
    canary: float32 ``[P]``, the canary client's update; the distinguisher scores a
      release by its projection on ``canary / ||canary||``.
    delta: the delta of the claimed guarantee.
    repetitions: scored releases per world, >= 10 (larger proves larger bounds).
    alpha: one minus the confidence level.
    calibration: releases per world that choose the threshold (default
      ``repetitions // 4``, at least 10).
    key: PRNG key (default ``jax.random.key(0)``).

  Returns:
    An `AuditResult`.

  Raises:
    FedJaxDpError: mismatched shapes, a zero canary, bad counts or probabilities.
  """
  repetitions = check_int("repetitions", repetitions, minimum=10)
  calibration = (max(10, repetitions // 4) if calibration is None else
                 check_int("calibration", calibration, minimum=10))
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

  total = repetitions + calibration

  @jax.jit
  def scores(data, k):
    keys = jax.random.split(k, total)
    releases = jax.vmap(lambda kk: mechanism(data, kk))(keys)
    return releases @ direction

  s0 = np.asarray(scores(updates, k_out))
  s1 = np.asarray(scores(with_canary, k_in))
  test = choose_test(s0[:calibration], s1[:calibration], repetitions, delta, alpha)
  return epsilon_lower_bound_at(s0[calibration:], s1[calibration:], test, delta, alpha)
