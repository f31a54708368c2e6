"""Monte Carlo accounting of random allocation (balls-in-bins is its k = 1 case).

Mechanism. Rounds come in epochs of ``t`` rounds; in each epoch every user takes part in
a uniformly random ``k``-subset of the epoch's rounds (balls-in-bins: ``k = 1``, Chua,
Ghazi, Kamath, Kumar, Manurangsi, Sinha, Zhang, "Balls-and-bins sampling for DP-SGD",
2024; random allocation: Feldman & Shenfeld, "Privacy amplification by random
allocation", 2025). Each round releases the cohort's clipped sum plus Gaussian noise of
standard deviation ``z`` times the add/remove sensitivity, and the server sees only the
noisy sums (``observation="aggregate"``).

Dominating pair (add/remove one user; our reading of both papers, which reduce one
epoch to a t-dimensional pair of Gaussian mixtures): with ``mu = 1 / z``,

* ``P = (1 / C(t, k)) sum_{|S| = k} N(mu 1_S, I_t)``: the epoch's t noisy outputs
  projected on the user's clipped contribution, when the user is present;
* ``Q = N(0, I_t)``: when the user is absent.

The privacy loss of ``x`` is (the density ratio, averaged over the k-subsets)::

    L(x) = log P(x) / Q(x) = log e_k(exp(mu x_1), ..., exp(mu x_t)) - log C(t, k)
                             - k mu^2 / 2,

with ``e_k`` the elementary symmetric polynomial of degree k (`log_elementary_symmetric`:
the recursion ``e_j(a_1..a_i) = e_j(a_1..a_{i-1}) + a_i e_{j-1}(a_1..a_{i-1})`` in log
space, O(t k)). E epochs are independent, so their losses add. The hockey-stick
divergence is ``delta(eps) = E_P[(1 - e^(eps - L))_+]`` (remove direction) and
``E_Q[(1 - e^(eps + L))_+]`` (add direction, the loss of Q against P is -L); the
guarantee takes the larger.

Confidence. Each delta is the mean of ``n`` i.i.d. values in [0, 1], estimated from n
Monte Carlo draws; its upper confidence bound at level ``beta / 2`` per direction
(`delta_upper_confidence`: the Chernoff-Hoeffding bound ``P(p_hat <= a) <= exp(-n
KL(a || p))`` for ``p > a``, Hoeffding 1963, Thm. 1; the same bound as
``jax_privacy.experimental.monte_carlo.delta_calculation``'s, Fact 4.2 of
arXiv 2412.16802). The reported epsilon is the smallest eps whose upper confidence
bound on delta (both directions) is at most the target delta: the statement "(eps,
delta)-DP" holds with probability >= 1 - beta over the Monte Carlo draw (for each
reported epsilon separately; the per-round history reuses the same draw).

A partial epoch (only its first r < t rounds released) is a post-processing of the full
epoch (drop the last t - r outputs), so its loss is bounded by the full epoch's: after
R rounds a run is charged ``ceil(R / t)`` epochs (`epochs_touched`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import numpy as np
from scipy import special

from fedjax_dp.validation import (FedJaxDpError, check_delta, check_int, check_positive,
                                  check_probability)

__all__ = ["DEFAULT_NUM_SAMPLES", "DEFAULT_BETA", "AllocationEstimate",
           "log_elementary_symmetric", "allocation_privacy_loss", "sample_losses",
           "delta_upper_confidence", "epsilon_from_losses", "allocation_epsilons",
           "calibrate_allocation", "epochs_touched"]

#: Monte Carlo draws per direction in production (tests pass fewer).
DEFAULT_NUM_SAMPLES = 200_000
#: Probability that a reported guarantee fails because of the Monte Carlo draw.
DEFAULT_BETA = 1e-3
_CHUNK = 50_000  # draws generated at a time (bounds memory: chunk x t floats)


def epochs_touched(rounds: int, epoch_length: int) -> int:
  """``ceil(rounds / t)``: the epochs a run of ``rounds`` rounds is charged (a partial
  epoch is bounded by a full one, module docstring).

  Raises:
    FedJaxDpError: rounds < 0 or t < 1.
  """
  r = check_int("rounds", rounds, minimum=0)
  t = check_int("epoch_length", epoch_length, minimum=1)
  return -(-r // t)


def log_elementary_symmetric(log_a: np.ndarray, k: int) -> np.ndarray:
  """``log e_k(exp(log_a[..., 0]), ..., exp(log_a[..., t-1]))`` over the last axis.

  The recursion ``e_j(a_1..a_i) = e_j(a_1..a_{i-1}) + a_i e_{j-1}(a_1..a_{i-1})``
  (``e_0 = 1``) in log space (``logaddexp``): O(t k) per row, no overflow.

  Args:
    log_a: float64 ``[..., t]``.
    k: degree in [1, t].

  Returns:
    float64 ``[...]``.

  Raises:
    FedJaxDpError: k out of range.
  """
  log_a = np.asarray(log_a, np.float64)
  t = log_a.shape[-1]
  k = check_int("k", k, minimum=1, maximum=t)
  if k == 1:
    return np.asarray(special.logsumexp(log_a, axis=-1))
  e = np.full((k + 1,) + log_a.shape[:-1], -np.inf)
  e[0] = 0.0
  for i in range(t):
    for j in range(min(i + 1, k), 0, -1):
      e[j] = np.logaddexp(e[j], e[j - 1] + log_a[..., i])
  return e[k]


def allocation_privacy_loss(x: np.ndarray, noise_multiplier: float,
                            participations: int) -> np.ndarray:
  """``L(x) = log e_k(exp(mu x)) - log C(t, k) - k mu^2 / 2`` with ``mu = 1 / z``
  (module docstring): the privacy loss of one epoch's outputs ``x`` (in units of the
  noise standard deviation) under the dominating pair of random allocation.

  Args:
    x: float ``[..., t]``.
    noise_multiplier: z > 0.
    participations: k in [1, t].

  Returns:
    float64 ``[...]`` (nats).

  Raises:
    FedJaxDpError: z <= 0 or k out of range.
  """
  mu = 1.0 / check_positive("noise_multiplier", noise_multiplier)
  x = np.asarray(x, np.float64)
  t = x.shape[-1]
  k = check_int("participations", participations, minimum=1, maximum=t)
  log_binom = special.gammaln(t + 1) - special.gammaln(k + 1) - special.gammaln(t - k + 1)
  return log_elementary_symmetric(mu * x, k) - log_binom - k * mu * mu / 2.0


def _epoch_losses(rng: np.random.Generator, n: int, t: int, k: int, mu: float,
                  present: bool) -> np.ndarray:
  """n one-epoch losses; x ~ P (``present``: a uniform k-subset shifted by mu) or Q."""
  out = np.empty(n)
  for start in range(0, n, _CHUNK):
    m = min(_CHUNK, n - start)
    x = rng.standard_normal((m, t))
    if present:  # a uniform k-subset: k = 1 one uniform index, else the k smallest keys
      subset = (rng.integers(0, t, size=(m, 1)) if k == 1 else
                np.argsort(rng.random((m, t)), axis=1)[:, :k])
      np.put_along_axis(x, subset, np.take_along_axis(x, subset, 1) + mu, axis=1)
    out[start:start + m] = allocation_privacy_loss(x, 1.0 / mu, k)
  return out


def sample_losses(noise_multiplier: float, epoch_length: int, participations: int,
                  epochs: int, num_samples: int, seed: int, present: bool = True
                  ) -> np.ndarray:
  """Monte Carlo privacy losses of 1, 2, ..., ``epochs`` epochs.

  Args:
    noise_multiplier: z > 0.
    epoch_length: t >= 1.
    participations: k in [1, t].
    epochs: E >= 1.
    num_samples: n >= 1 draws.
    seed: numpy seed (int >= 0).
    present: True: x ~ P, losses L (remove direction); False: x ~ Q, losses -L.

  Returns:
    float64 ``[E, n]``: row e holds n draws of the loss of e + 1 epochs (cumulative
    sums of independent epochs, so row e's marginal law is exact).

  Raises:
    FedJaxDpError: an argument out of range.
  """
  z = check_positive("noise_multiplier", noise_multiplier)
  t = check_int("epoch_length", epoch_length, minimum=1)
  k = check_int("participations", participations, minimum=1, maximum=t)
  e = check_int("epochs", epochs, minimum=1)
  n = check_int("num_samples", num_samples, minimum=1)
  rng = np.random.default_rng(check_int("seed", seed, minimum=0))
  sign = 1.0 if present else -1.0
  out = np.empty((e, n))
  total = np.zeros(n)
  for i in range(e):
    total += sign * _epoch_losses(rng, n, t, k, 1.0 / z, present)
    out[i] = total
  return out


def delta_upper_confidence(delta_hat: float, num_samples: int, beta: float) -> float:
  """Upper confidence bound on the mean p of n i.i.d. [0, 1] values whose sample mean is
  ``delta_hat``: ``sup {p >= delta_hat : n KL(delta_hat || p) <= log(1 / beta)}`` with
  KL the Bernoulli relative entropy (Chernoff-Hoeffding, Hoeffding 1963, Thm. 1:
  ``P(p_hat <= a) <= exp(-n KL(a || p))`` for ``a < p``). Holds with probability
  ``>= 1 - beta``.

  Raises:
    FedJaxDpError: delta_hat not in [0, 1], n < 1, beta not in (0, 1).
  """
  a = check_probability("delta_hat", delta_hat, allow_zero=True)
  n = check_int("num_samples", num_samples, minimum=1)
  b = check_probability("beta", beta)
  target = math.log(1.0 / b) / n
  kl = lambda p: float(special.rel_entr(a, p) + special.rel_entr(1 - a, 1 - p))
  if a >= 1.0:
    return 1.0
  lo, hi = a, 1.0
  if kl(1.0 - 1e-15) <= target:
    return 1.0
  for _ in range(200):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if kl(mid) <= target else (lo, mid)
  return hi


def _max_delta_hat(delta: float, n: int, beta: float) -> float:
  """The largest estimate whose upper confidence bound is <= delta (-1 if none)."""
  if delta_upper_confidence(0.0, n, beta) > delta:
    return -1.0
  lo, hi = 0.0, delta
  for _ in range(100):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if delta_upper_confidence(mid, n, beta) <= delta else (lo, mid)
  return lo


def _delta_hat(sorted_losses: np.ndarray, suffix: np.ndarray, eps: float) -> float:
  """``mean((1 - e^(eps - L))_+)`` from ascending losses and suffix sums of e^(-L)."""
  n = sorted_losses.shape[0]
  i = int(np.searchsorted(sorted_losses, eps, side="right"))
  if i >= n:
    return 0.0
  # e^eps * sum_{j >= i} e^(-L_j) with every L_j > eps: at most n - i, so computed as
  # exp(eps + log(suffix)), which cannot overflow for large eps; a suffix that
  # underflowed to 0 counts as 0 (delta over-estimated: eps only grows, conservative).
  tail = math.exp(eps + math.log(suffix[i])) if suffix[i] > 0 else 0.0
  return max(0.0, ((n - i) - tail) / n)


def epsilon_from_losses(losses: np.ndarray, delta_hat_max: float) -> float:
  """The smallest eps >= 0 with ``mean((1 - e^(eps - L))_+) <= delta_hat_max``
  (bisection; the estimate decreases in eps). inf if ``delta_hat_max < 0``."""
  if delta_hat_max < 0:
    return math.inf
  s = np.sort(np.asarray(losses, np.float64))
  pos = s > 0
  w = np.zeros_like(s)
  w[pos] = np.exp(-s[pos])
  suffix = np.concatenate([np.cumsum(w[::-1])[::-1], [0.0]])
  if _delta_hat(s, suffix, 0.0) <= delta_hat_max:
    return 0.0
  lo, hi = 0.0, max(float(s[-1]), 0.0)
  for _ in range(60):
    mid = (lo + hi) / 2
    lo, hi = (lo, mid) if _delta_hat(s, suffix, mid) <= delta_hat_max else (mid, hi)
  return hi


@dataclasses.dataclass(frozen=True)
class AllocationEstimate:
  """Monte Carlo epsilons of 1..E epochs of random allocation.

  Attributes:
    epsilons: float64 ``[E]``: entry e is the epsilon of e + 1 epochs at ``delta``,
      an upper confidence bound: holds with probability >= 1 - ``beta`` over the draw.
    delta: the target delta.
    beta: the failure probability of the Monte Carlo draw.
    num_samples: draws per direction.
    seed: the draw's seed.
    delta_hat_max: the largest delta estimate accepted (its upper confidence bound at
      level beta / 2 is <= delta).
  """
  epsilons: np.ndarray
  delta: float
  beta: float
  num_samples: int
  seed: int
  delta_hat_max: float

  @property
  def confidence(self) -> str:
    """The confidence statement, in words."""
    return (f"Monte Carlo accountant ({self.num_samples} draws per direction, seed "
            f"{self.seed}): holds with probability >= {1 - self.beta:g} over the Monte "
            "Carlo draw")


def allocation_epsilons(noise_multiplier: float, epoch_length: int, participations: int,
                        epochs: int, delta: float,
                        num_samples: int = DEFAULT_NUM_SAMPLES,
                        beta: float = DEFAULT_BETA, seed: int = 0) -> AllocationEstimate:
  """Epsilon of 1..E epochs of random allocation (k of t) with Gaussian noise z.

  Both directions (module docstring) are sampled with n draws each; each direction's
  delta gets an upper confidence bound at level beta / 2 (union bound: both hold with
  probability >= 1 - beta); epsilon is the larger of the two directions'.

  Args:
    noise_multiplier: z >= 0 (0: epsilon inf).
    epoch_length: t >= 1.
    participations: k in [1, t].
    epochs: E >= 1.
    delta: target delta in (0, 1).
    num_samples: n draws per direction; must satisfy roughly ``n > log(2 / beta) /
      delta`` (else every epsilon is inf).
    beta: in (0, 1).
    seed: int >= 0.

  Returns:
    An `AllocationEstimate`.

  Raises:
    FedJaxDpError: an argument out of range.
  """
  delta = check_delta(delta)
  n = check_int("num_samples", num_samples, minimum=1)
  beta = check_probability("beta", beta)
  e = check_int("epochs", epochs, minimum=1)
  cap = _max_delta_hat(delta, n, beta / 2)
  if float(noise_multiplier) == 0.0:
    return AllocationEstimate(np.full(e, math.inf), delta, beta, n, seed, cap)
  eps = np.zeros(e)
  for j, present in enumerate((True, False)):
    losses = sample_losses(noise_multiplier, epoch_length, participations, e, n,
                           seed * 2 + j, present)
    for i in range(e):
      eps[i] = max(eps[i], epsilon_from_losses(losses[i], cap))
  return AllocationEstimate(eps, delta, beta, n, seed, cap)


def calibrate_allocation(target_epsilon: float, delta: float, epoch_length: int,
                         participations: int, epochs: int,
                         num_samples: int = DEFAULT_NUM_SAMPLES, beta: float = DEFAULT_BETA,
                         seed: int = 0, bounds: Tuple[float, float] = (0.05, 100.0),
                         tol: float = 1e-3) -> float:
  """The smallest z (to relative tolerance ``tol``) whose Monte Carlo epsilon of
  ``epochs`` epochs (`allocation_epsilons`, fixed ``seed``) is <= ``target_epsilon``:
  bisection in log z (the estimate is monotone in z for a fixed draw in practice).

  Raises:
    FedJaxDpError: no z in ``bounds`` reaches the target (e.g. too few samples for
      the delta).
  """
  target = check_positive("target_epsilon", target_epsilon)
  eps = lambda z: allocation_epsilons(z, epoch_length, participations, epochs, delta,
                                      num_samples, beta, seed).epsilons[-1]
  lo, hi = (float(b) for b in bounds)
  if eps(hi) > target:
    raise FedJaxDpError(
        f"no noise multiplier <= {hi:g} reaches target_epsilon={target:g} at "
        f"delta={delta:g} with {num_samples} Monte Carlo draws (the draws can certify "
        f"delta only down to about log(2/beta)/n = {math.log(2 / beta) / num_samples:.3g}"
        "); raise the samples, delta or the target.", option="target_epsilon")
  if eps(lo) <= target:
    return lo
  while hi / lo > 1 + tol:
    mid = math.sqrt(lo * hi)
    lo, hi = (lo, mid) if eps(mid) <= target else (mid, hi)
  return hi
