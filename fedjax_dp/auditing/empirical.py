"""Empirical privacy from one training run's canary scores: the estimate of Andrew et
al. and a one-run lower bound (numbers only; the canary clients themselves are
`fedjax_dp.auditing.one_run`'s).

Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical Privacy
Estimation for Federated Learning", ICLR 2024 (arXiv:2302.03098), Sec. 3 / Alg. 2: each
canary client has a random unit direction u_i; after training, canary i's score is the
cosine between the final model delta and u_i. The scores of the canaries that never
took part ("held out") and of those inserted into the population are each fitted with
a Gaussian, N(mu_0, s_0^2) and N(mu_1, s_1^2), and the estimate is the epsilon at the
run's delta of that pair of Gaussians: the smallest eps with

  H_{e^eps}(P || Q) = integral max(0, p(x) - e^eps q(x)) dx <= delta      (hockey stick)

for both orders (P, Q) = (N_1, N_0) and (N_0, N_1) (`gaussian_pair_delta`). With equal
variances the pair is mu-Gaussian DP with mu = |mu_1 - mu_0| / s and the curve is
Dong, Roth, Su, "Gaussian Differential Privacy", JRSS-B 2022, Cor. 2.13:

  delta(eps) = Phi(-eps / mu + mu / 2) - e^eps Phi(-eps / mu - mu / 2)   (`gdp_delta`)

The estimate is *not* a bound: it assumes the scores are Gaussian and that the
cosine is the strongest attack (Andrew et al. show it tracks the true epsilon of the
Gaussian mechanism on the final model). The one-run lower bound (Steinke, Nasr,
Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023, Thm. 3.1 with
the Bonferroni-corrected threshold search) is jax_privacy's
``CanaryScoreAuditor.epsilon_one_run``: a statistical test that holds with probability
at least the confidence whatever the scores' distribution, so an accountant's epsilon
below it would be a bug. Its f-DP variant (Mahloujifar, Melis, Chaudhuri, "Auditing
f-Differential Privacy in One Run", 2024; ``epsilon_one_run_fdp``) tests the claim that
the run is as private as a Gaussian mechanism with that (eps, delta); each bound holds at
its own confidence (they are not a joint statement).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import numpy as np
from scipy import optimize, special

from fedjax_dp.validation import FedJaxDpError, check_delta, check_probability

__all__ = ["gdp_delta", "gaussian_pair_delta", "gaussian_pair_epsilon", "report",
           "fit_gaussian", "estimate_epsilon", "one_run_lower_bound", "EPS_MAX"]

#: Epsilons are searched in [0, EPS_MAX]; an estimate at EPS_MAX is reported as inf.
EPS_MAX = 200.0


def _log_ndtr(x: float) -> float:
  return float(special.log_ndtr(x))


def gdp_delta(mu: float, eps: float) -> float:
  """delta(eps) of mu-Gaussian DP (Dong, Roth, Su 2022, Cor. 2.13), in the log domain.

  Args:
    mu: >= 0 (dimensionless: the mean shift in standard deviations).
    eps: >= 0.

  Returns:
    delta in [0, 1] (float).
  """
  if mu <= 0:
    return 0.0
  a = _log_ndtr(-eps / mu + mu / 2)
  b = eps + _log_ndtr(-eps / mu - mu / 2)
  return float(math.exp(a) * -math.expm1(b - a)) if a > b else 0.0


def _mass(m: float, s: float, lo: float, hi: float) -> float:
  """P(lo < X < hi) for X ~ N(m, s^2) (lo, hi may be +-inf)."""
  zl, zh = (lo - m) / s, (hi - m) / s
  if zl > 0:  # upper tail: difference of survival functions, accurate far out
    return float(special.ndtr(-zl) - special.ndtr(-zh))
  return float(special.ndtr(zh) - special.ndtr(zl))


def _region(m1: float, s1: float, m0: float, s0: float, eps: float):
  """The intervals where log p(x) - log q(x) > eps, p = N(m1, s1^2), q = N(m0, s0^2).

  The log ratio is the quadratic a x^2 + b x + c with a = 1/(2 s0^2) - 1/(2 s1^2),
  b = m1/s1^2 - m0/s0^2, c = m0^2/(2 s0^2) - m1^2/(2 s1^2) + log(s0/s1).
  """
  a = 0.5 / s0**2 - 0.5 / s1**2
  b = m1 / s1**2 - m0 / s0**2
  c = 0.5 * m0**2 / s0**2 - 0.5 * m1**2 / s1**2 + math.log(s0 / s1) - eps
  inf = math.inf
  if abs(a) < 1e-12 * max(1.0 / s0**2, 1.0 / s1**2):
    if b == 0:
      return [(-inf, inf)] if c > 0 else []
    root = -c / b
    return [(root, inf)] if b > 0 else [(-inf, root)]
  disc = b * b - 4 * a * c
  if disc <= 0:
    return [(-inf, inf)] if a > 0 else []
  r = sorted(((-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)))
  return [(-inf, r[0]), (r[1], inf)] if a > 0 else [(r[0], r[1])]


def gaussian_pair_delta(m1: float, s1: float, m0: float, s0: float, eps: float) -> float:
  """The hockey-stick divergence H_{e^eps}(N(m1, s1^2) || N(m0, s0^2)) in closed form:
  P(S) - e^eps Q(S) on the set S where the density ratio exceeds e^eps (the roots of
  the quadratic log ratio, `_region`).

  Args:
    m1, s1, m0, s0: means and standard deviations (s > 0), in score units.
    eps: >= 0.

  Returns:
    delta in [0, 1].
  """
  region = _region(m1, s1, m0, s0, eps)
  p = sum(_mass(m1, s1, lo, hi) for lo, hi in region)
  q = sum(_mass(m0, s0, lo, hi) for lo, hi in region)
  return float(min(1.0, max(0.0, p - math.exp(eps) * q)))


def gaussian_pair_epsilon(m0: float, s0: float, m1: float, s1: float, delta: float
                          ) -> float:
  """The smallest eps in [0, EPS_MAX] at which N(m0, s0^2) and N(m1, s1^2) are
  (eps, delta)-indistinguishable in both directions (`gaussian_pair_delta` is
  decreasing in eps; root by Brent's method); inf if even EPS_MAX does not suffice.

  Raises:
    FedJaxDpError: a standard deviation <= 0 or not finite (option ``canaries``), a
      delta outside (0, 1).
  """
  delta = check_delta(delta)
  for name, s in (("s0", s0), ("s1", s1)):
    if not (math.isfinite(s) and s > 0):
      raise FedJaxDpError(f"canary score standard deviation {name} must be finite and > 0, "
                          f"got {s!r} (too few canaries, or identical scores).",
                          option="canaries")
  eps = 0.0
  for ma, sa, mb, sb in ((m1, s1, m0, s0), (m0, s0, m1, s1)):
    def gap(e: float, ma=ma, sa=sa, mb=mb, sb=sb) -> float:
      return gaussian_pair_delta(ma, sa, mb, sb, e) - delta
    if gap(EPS_MAX) > 0:
      return math.inf
    if gap(eps) > 0:
      eps = float(optimize.brentq(gap, eps, EPS_MAX, xtol=1e-9))  # type: ignore
  return float(eps)


def fit_gaussian(scores: Any) -> Tuple[float, float]:
  """Mean and standard deviation (ddof 1) of ``scores`` (float ``[n]``, n >= 2)."""
  x = np.asarray(scores, np.float64)
  if x.ndim != 1 or x.size < 2 or not np.all(np.isfinite(x)):
    raise FedJaxDpError(f"canary scores must be a finite [n] vector with n >= 2, got shape "
                        f"{x.shape}.", option="canaries")
  return float(x.mean()), float(x.std(ddof=1))


def estimate_epsilon(inserted: Any, held_out: Any, delta: float) -> Dict[str, Any]:
  """Andrew et al.'s estimate (ICLR 2024, Sec. 3) from the canaries' scores.

  Args:
    inserted: float ``[n1]`` cosines of the canaries that joined the population.
    held_out: float ``[n0]`` cosines of those that never did.
    delta: the run's delta.

  Returns:
    ``{"epsilon", "method", "mu0", "s0", "mu1", "s1", "gdp_mu",
    "epsilon_equal_variance"}``: the estimate (inf when the fitted Gaussians are further
    apart than EPS_MAX can express), the fitted means and standard deviations (cosine
    units), the equal-variance GDP mu ``(mu1 - mu0) / s0`` and its epsilon at ``delta``
    (`gdp_delta`; both fits' variance taken as the held-out one, N(0, 1/d) in theory:
    less sensitive to a noisy variance fit than the paper's two-variance estimate, whose
    privacy loss is unbounded whenever the fitted variances differ).
  """
  mu0, s0 = fit_gaussian(held_out)
  mu1, s1 = fit_gaussian(inserted)
  if s1 <= 0:  # noise-free runs can give identical inserted scores
    s1 = max(s0, 1e-12)
  eps = gaussian_pair_epsilon(mu0, s0, mu1, s1, delta)
  eps_eq = gaussian_pair_epsilon(mu0, s0, mu1, s0, delta)
  return {"epsilon": eps, "method": "gaussian_fit_andrew_2024", "mu0": mu0, "s0": s0,
          "mu1": mu1, "s1": s1, "gdp_mu": (mu1 - mu0) / s0,
          "epsilon_equal_variance": eps_eq}


def one_run_lower_bound(inserted: Any, held_out: Any, delta: float,
                        confidence: float = 0.95) -> Dict[str, Any]:
  """A lower bound on the run's epsilon that holds with probability ``confidence``:
  Steinke, Nasr, Jagielski 2023 (one run, Thm. 3.1; threshold by Bonferroni over all
  cut-offs) via ``jax_privacy.auditing.CanaryScoreAuditor.epsilon_one_run``, with the
  canaries' cosines as scores (higher: guessed inserted).

  Returns:
    ``{"epsilon", "confidence", "method"}``.

  Raises:
    FedJaxDpError: a confidence outside (0, 1) (option ``confidence``).
  """
  from jax_privacy.auditing import CanaryScoreAuditor  # deferred: heavy import
  confidence = check_probability("confidence", confidence)
  if confidence >= 1.0:
    raise FedJaxDpError("confidence must be < 1.", option="confidence")
  auditor = CanaryScoreAuditor(np.asarray(inserted, np.float64),
                               np.asarray(held_out, np.float64))
  eps = float(auditor.epsilon_one_run(significance=1.0 - confidence, delta=delta))
  return {"epsilon": eps, "confidence": confidence,
          "method": "steinke_nasr_jagielski_2023_one_run (jax_privacy "
                    "CanaryScoreAuditor.epsilon_one_run, Bonferroni thresholds)"}


#: What each reported number means (summary.json and the printed lines repeat it).
ESTIMATE_MEANING = (
    "Andrew et al. (ICLR 2024) estimate: the epsilon at the run's delta of the two "
    "Gaussians fitted to the held-out and inserted canaries' cosines with the final "
    "model delta (an observer who sees only the final model). An estimate, not a bound: "
    "it can lie above or below the run's true epsilon; it is not a privacy guarantee")
BOUND_MEANING = (
    "one-run lower bound (Steinke, Nasr, Jagielski 2023): with probability at least the "
    "confidence, the run is not (eps, delta)-DP for any eps below it (for the canaries' "
    "add/remove neighbours); an accountant's epsilon below it would be a bug. Vacuous "
    "(0) when delta times the number of canaries is large")
GDP_BOUND_MEANING = (
    "one-run f-DP lower bound (Mahloujifar et al. 2024): the same test against the "
    "claim that the run is as private as a Gaussian mechanism with this (eps, delta); "
    "valid for a run whose trade-off curve is Gaussian (approximately so for DP-FedAvg)")


#: Fewer canaries than this in either group: the variance fits are too noisy to trust.
MIN_RELIABLE_CANARIES = 100


def _reliability(n1: int, n0: int) -> str:
  """A sentence on how far the estimate can be trusted for ``n1`` inserted and ``n0``
  held-out canaries (a standard deviation fitted from n samples has relative error
  about 1/sqrt(2n); the two-variance estimate's tail, and so its epsilon, is sensitive
  to it)."""
  n = min(n1, n0)
  rel = 1.0 / math.sqrt(2.0 * max(n - 1, 1))
  if n < MIN_RELIABLE_CANARIES:
    return (f"UNRELIABLE: {n1} inserted / {n0} held-out canaries; each fitted std has "
            f"about {100 * rel:.0f}% relative error, and the two-variance estimate can "
            f"land far above or below the truth: use >= {2 * MIN_RELIABLE_CANARIES} "
            "canaries, or read epsilon_equal_variance")
  return (f"{n1} inserted / {n0} held-out canaries: fitted stds within about "
          f"{100 * rel:.0f}% (one standard error)")


def report(plan, inserted: Any, held_out: Any, delta: float,
           accountant_epsilon: Any = None, confidence: float = 0.95) -> Dict[str, Any]:
  """summary.json's canary fields from the scores (simulation diagnostics).

  Args:
    plan: the `fedjax_dp.auditing.one_run.CanaryPlan`.
    inserted, held_out: float ``[K/2]`` cosines (`one_run.canary_cosines`).
    delta: the run's delta.
    accountant_epsilon: the run's accountant epsilon (for the comparison), or None.

  Returns:
    ``{"canary_audit", "empirical_epsilon", "one_run_lower_bound",
    "one_run_lower_bound_gdp"}`` (dicts; ``canary_audit`` holds the counts, the cosine
    statistics and the scores themselves).
  """
  from jax_privacy.auditing import CanaryScoreAuditor
  est = estimate_epsilon(inserted, held_out, delta)
  bound = one_run_lower_bound(inserted, held_out, delta, confidence)
  auditor = CanaryScoreAuditor(np.asarray(inserted, np.float64),
                               np.asarray(held_out, np.float64))
  gdp = float(auditor.epsilon_one_run_fdp(significance=1.0 - confidence, delta=delta))
  acc = None if accountant_epsilon is None else float(accountant_epsilon)
  audit = dict(plan.to_dict(), real_clients=plan.num_real_clients,
               observer="final model (theta_T - theta_0)",
               inserted_cosine_mean=est["mu1"], inserted_cosine_std=est["s1"],
               held_out_cosine_mean=est["mu0"], held_out_cosine_std=est["s0"],
               gdp_mu=est["gdp_mu"], accountant_epsilon=acc,
               scores={"inserted": [float(v) for v in np.asarray(inserted)],
                       "held_out": [float(v) for v in np.asarray(held_out)]},
               note=("simulation diagnostics of the auditor, not releases: the canaries "
                     "are simulated users added to the population (the accountant's "
                     "epsilon is for that population of N + K/2); an inserted canary "
                     "uploads clip_norm * u_i, the worst-case norm"))
  return {
      "canary_audit": audit,
      "empirical_epsilon": {"epsilon": est["epsilon"], "delta": delta,
                            "method": est["method"], "meaning": ESTIMATE_MEANING,
                            "epsilon_equal_variance": est["epsilon_equal_variance"],
                            "reliability": _reliability(len(np.asarray(inserted)),
                                                        len(np.asarray(held_out)))},
      "one_run_lower_bound": dict(bound, delta=delta, meaning=BOUND_MEANING),
      "one_run_lower_bound_gdp": {"epsilon": gdp, "confidence": confidence,
                                  "delta": delta, "method": "mahloujifar_2024_fdp_one_run "
                                  "(jax_privacy CanaryScoreAuditor.epsilon_one_run_fdp)",
                                  "meaning": GDP_BOUND_MEANING},
  }
