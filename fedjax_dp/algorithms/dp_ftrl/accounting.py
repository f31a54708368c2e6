"""Accounting for correlated noise across rounds: the run's DpEvent (its ledger is
`fedjax_dp.privacy.correlated_ledger.CorrelatedNoiseLedger`, given ``run_event``).

The rounds of DP-FTRL's tree and of banded matrix factorisation are not independent
releases (round t's noise is correlated with earlier rounds'), so the run is one event,
built here from the mechanism's own sensitivity under the participation schedule of
`fedjax_dp.algorithms.dp_ftrl.participation.CyclicSampler`. Relation: add/remove one user
(all of its data); ``z = sigma / S``, sigma the std of the i.i.d. draws and S the clip
norm of one client's update (the L2 sensitivity of one round's sum). Every event is one
dp_accounting composes under ``ADD_OR_REMOVE_ONE`` with either accountant, so that
calibration (`fedjax_dp.runs.privacy.calibrate_noise_multiplier`) can invert it.

Tree (`tree_run_event`): trees are blocks of ``T = restart_every`` consecutive rounds
(the last one may be partial) and a client's rounds are ``R = cycle_length`` apart; the
run event keeps requiring ``R >= T`` (each client in at most one round of each tree, the
schedule the runs accept), though the count below holds for any R. Round s of a
tree (s = 1, 2, ..., counted from its start) completes the dyadic node of level
``ctz(s)``, the leaves ``s - 2^ctz(s) + 1 .. s``, and draws its noise
(`fedjax_dp.algorithms.dp_ftrl.noise.TreeNoise`); the noisy prefix sum after s leaves is
the sum of the noisy nodes of s's dyadic decomposition, and the node of step s is
``P(s) - P(s - 2^ctz(s))``, so the rounds' noisy sums are exactly as private as the
noisy node sums completed within the run: one node per round, i.i.d. N(0, sigma^2)
noise each, the dyadic blocks ``(a 2^j, (a + 1) 2^j]`` with ``a`` even (left children)
that end within the tree's run (Kairouz et al., ICML 2021, arXiv 2103.00039, Sec. 4 and
Appendix D; the exact count below is our derivation from `TreeNoise`). A client's
contribution to a node is the sum of its clipped updates in the node's leaves (norm <=
S times the number of its leaves there), each node's bound is fixed by the public
schedule, and Gaussian releases with fixed sensitivities compose adaptively to the
Gaussian of the root-sum-square sensitivity (their privacy-loss distributions multiply;
Dong, Roth, Su, arXiv 1905.02383, GDP composition), attained by a client whose updates
all point the same way at norm S, so the value is exact, not a bound. Hence the run is
``GaussianDpEvent(z / sqrt(sens^2))`` with (`tree_sensitivity_squared`)

  ``sens^2 = max_g sum_{released nodes n} |n & P_g|^2``, ``P_g = {t < rounds : t mod R = g}``
  (``|n & P_g|``: the rounds of group g among n's leaves),

which for ``R >= T`` (one leaf of a client per node) is ``max_g sum_{t in P_g} c(t)``,
``c(t)`` the released nodes containing leaf t: ``c = #{j : bit j of p - 1 is 0 and the
level-j block of p ends within the tree's m rounds}`` for t at position p (1-based) of a
tree run for m rounds. ``c <= L(m) = floor(log2 m) + 1``, with equality for the first
leaf. Without the cycle length the bound ``sens^2 = k L(T) + L(rest)`` (k full trees,
a partial last tree of ``rest`` rounds) charges every tree its depth, as if the client
were in every tree at its first leaf: dp_accounting's ``SingleEpochTreeAggregationDpEvent``
per tree, composed (its RDP is ``alpha L(T) / (2 z^2)``). With ``R == T`` (the default)
both agree (group 0 is the first leaf of every tree); with ``R > T`` some trees hold none
of a client's rounds and its leaves move across the trees' positions, so the exact value
is at most the bound and often smaller (R = 4, T = 3, 10 rounds: 4 against 7). No
amplification by the Poisson draws within a group is claimed.

Banded MF (`banded_run_event`): the release is ``C x + sigma z`` for the stacked round
sums x (C n x n, truncated to the rounds run).

* ``group_rate == 1`` (every group member in each of its rounds; or no amplification
  theorem applies): ``GaussianDpEvent(z / sqrt(sens^2))`` with
  ``sens^2 = max_g sum_{t, t' in P_g} |(C^T C)[t, t']|`` over the rounds ``P_g`` of group g
  (`banded_sensitivity_squared`). This bounds ``max ||C u||^2`` over a client's
  contributions u (norm <= 1 in each of its rounds) for any C (Choquette-Choo et al.,
  NeurIPS 2023, arXiv 2306.08153, Eq. (5)); it is exact when the entries of C^T C over
  P_g are >= 0 (all C here: non-negative coefficients), and when ``cycle_length >=
  bands`` a client's columns do not overlap, so it is the sum of their squared norms,
  ``<= ceil(rounds / R)`` (the b-min-sep sensitivity of a b-banded C, ibid. Sec. 4).
  Adaptively chosen inputs keep this guarantee for lower-triangular C (Denisov, McMahan,
  Rush, Smith, Thakurta, NeurIPS 2022, arXiv 2202.08312).
* ``group_rate < 1`` with ``cycle_length >= bands``: amplified banded MF (ibid., Thm. 4
  with Algorithm 2's cyclic Poisson sampling over R groups; a b-banded C is R-banded for
  R >= b, and its columns have norm <= 1): the same privacy as DP-SGD with sampling
  probability ``group_rate`` run for ``ceil(rounds / R)`` steps,
  ``jax_privacy.experimental.accounting.amplified_bandmf_event(z, rounds,
  num_bands=R, sampling_prob=group_rate)``.

Both need the schedule to hold: a client takes part only in its group's rounds, its
group drawn independently of the data and of other clients (`CyclicSampler`).
"""

from __future__ import annotations

import functools
import math
from typing import List, Optional

import dp_accounting
import numpy as np
from jax_privacy.experimental import accounting as jp_accounting

from fedjax_dp.algorithms.dp_ftrl.noise import BandedNoise, tree_levels
from fedjax_dp.algorithms.dp_ftrl.participation import CyclicSampler
# Composing run events is generic over dp_accounting's events (privacy/, beside the
# run's ledger); kept importable from here.
from fedjax_dp.privacy.correlated_ledger import (event_epsilon, event_rdp,
                                                 gaussian_equivalent)
from fedjax_dp.validation import FedJaxDpError, check_int, check_non_negative

__all__ = ["tree_sensitivity_squared", "tree_released_nodes", "tree_aggregation_event",
           "tree_run_event", "banded_sensitivity_squared", "banded_run_event",
           "event_epsilon", "event_rdp", "gaussian_equivalent"]


# ---------------------------------------------------------------------------
# Events.
# ---------------------------------------------------------------------------

def tree_sensitivity_squared(rounds: int, restart_every: int,
                             cycle_length: Optional[int] = None) -> int:
  """Squared L2 sensitivity (units of S^2) of ``rounds`` rounds of `TreeNoise` restarted
  every ``T = restart_every`` rounds, for the worst client (module docstring).

  * ``cycle_length`` R given (a client's rounds are ``P_g = {t < rounds : t mod R = g}``
    for its group g, `CyclicSampler`): exact, ``max_g sum_n |n & P_g|^2`` over the node
    sums the run releases (`tree_released_nodes`), valid for any R (a node holding
    several of a client's leaves counts their number squared); for ``R >= T``
    ``max_g sum_{t in P_g} c(t)``, ``c(t)`` the released nodes holding leaf t;
  * ``None``: the bound ``k L(T) + L(rest)`` (k = rounds // T full trees, a last tree
    of ``rest = rounds % T`` rounds, ``L(m) = floor(log2 m) + 1``, 0 for m = 0) for a
    client in at most one round per tree, charged the first leaf's depth in every tree
    (>= the exact value for every R >= T, equal for R == T).

  Raises:
    FedJaxDpError: invalid arguments.
  """
  r = check_int("rounds", rounds, minimum=0)
  t = check_int("restart_every", restart_every, minimum=1)
  if cycle_length is None:
    full, rest = divmod(r, t)
    return full * tree_levels(t) + (tree_levels(rest) if rest else 0)
  return _tree_sensitivity_squared_exact(r, t, check_int("cycle_length", cycle_length,
                                                         minimum=1))


def tree_released_nodes(rounds: int, restart_every: int) -> np.ndarray:
  """int64 ``[rounds, 2]``: row t is ``(start, end)``, the rounds ``start .. end - 1``
  (0-based, end = t + 1) whose sum is the node `TreeNoise` completes, and draws noise
  for, at round t: with ``s = t mod T + 1`` the round's step in its tree, the node of
  level ``ctz(s)``, ``2^ctz(s)`` rounds ending at t. Every such node enters the noisy
  prefix sum of step s, so these are exactly the node sums the first ``rounds`` rounds
  release (nodes not completed by then are never drawn).

  Raises:
    FedJaxDpError: invalid arguments.
  """
  r = check_int("rounds", rounds, minimum=0)
  t = check_int("restart_every", restart_every, minimum=1)
  end = np.arange(1, r + 1, dtype=np.int64)
  step = (end - 1) % t + 1
  return np.stack([end - (step & -step), end], axis=1)


@functools.lru_cache(maxsize=4096)
def _tree_sensitivity_squared_exact(rounds: int, restart_every: int,
                                    cycle_length: int) -> int:
  """``max_g sum_n |n & P_g|^2`` in O(rounds + R): a node of ``len = q R + rem``
  consecutive rounds from ``start`` holds q + 1 rounds of the groups
  ``start .. start + rem - 1 (mod R)`` and q of the others."""
  if rounds == 0:
    return 0
  nodes = tree_released_nodes(rounds, restart_every)
  length = nodes[:, 1] - nodes[:, 0]
  q, rem = np.divmod(length, cycle_length)
  extra = 2 * q + 1  # (q + 1)^2 - q^2, for the rem groups with one more round
  a = nodes[:, 0] % cycle_length
  b = a + rem
  diff = np.zeros(cycle_length + 1, np.int64)  # cyclic interval adds [a, b) mod R
  np.add.at(diff, a, extra)
  np.add.at(diff, np.minimum(b, cycle_length), -extra)
  wrap = b > cycle_length
  np.add.at(diff, np.zeros(int(wrap.sum()), np.int64), extra[wrap])
  np.add.at(diff, b[wrap] - cycle_length, -extra[wrap])
  per_group = int(np.sum(q * q)) + np.cumsum(diff[:cycle_length])
  return int(per_group.max())


def tree_aggregation_event(noise_multiplier: float, rounds: int,
                           restart_every: int) -> dp_accounting.DpEvent:
  """dp_accounting's own form of the restarted tree for a client in at most one round
  per tree: ``SelfComposedDpEvent(SingleEpochTreeAggregationDpEvent(z, T), k)`` then
  ``SingleEpochTreeAggregationDpEvent(z, rest)`` (dp_accounting's ``step_counts`` list
  is for a record in at most one round across *all* its trees, Kairouz et al. 2021,
  Appendix D, which cyclic participation does not give). Its RDP needs
  ``REPLACE_SPECIAL`` and dp_accounting has no PLD for it. It is the bound without the
  cycle length (each tree charged its depth): `tree_run_event` without ``cycle_length``
  is the same privacy as a plain Gaussian (equal RDP at every order); with it (the
  runs), the exact event, never less private than this and equal for R == T.

  Raises:
    FedJaxDpError: invalid arguments.
  """
  z = check_non_negative("noise_multiplier", noise_multiplier)
  r = check_int("rounds", rounds, minimum=0)
  t = check_int("restart_every", restart_every, minimum=1)
  full, rest = divmod(r, t)
  parts: List[dp_accounting.DpEvent] = []
  if full:
    parts.append(dp_accounting.SelfComposedDpEvent(
        dp_accounting.SingleEpochTreeAggregationDpEvent(z, t), full))
  if rest:
    parts.append(dp_accounting.SingleEpochTreeAggregationDpEvent(z, rest))
  if not parts:
    return dp_accounting.NoOpDpEvent()
  return parts[0] if len(parts) == 1 else dp_accounting.ComposedDpEvent(parts)


def tree_run_event(noise_multiplier: float, rounds: int, restart_every: int,
                   cycle_length: Optional[int] = None) -> dp_accounting.DpEvent:
  """The event of ``rounds`` rounds of `TreeNoise(restart_every)` at noise multiplier z:
  ``GaussianDpEvent(z / sqrt(tree_sensitivity_squared(rounds, restart_every,
  cycle_length)))`` (module docstring). With ``cycle_length`` the sensitivity is exact
  for the cyclic schedule; without it, the bound ``k L(T) + L(rest)`` whose RDP equals
  `tree_aggregation_event`'s at every order.

  Observation model: the server sees only the noisy aggregates (central noise, observation
  ``"aggregate"``) and the participation schedule, which is public (groups from a public
  seed); no amplification by the draws within a group is claimed, so seeing who took part
  would change nothing.

  Args:
    noise_multiplier: z >= 0 (node noise std / S).
    rounds: rounds run, int >= 0 (0: ``NoOpDpEvent``).
    restart_every: T >= 1, rounds per tree.
    cycle_length: R of the `CyclicSampler`, if given: checked to be >= T (each client
      in at most one round per tree, the schedule the runs accept), and used for the
      exact sensitivity.

  Raises:
    FedJaxDpError: invalid arguments, or ``cycle_length < restart_every``.
  """
  z = check_non_negative("noise_multiplier", noise_multiplier)
  t = check_int("restart_every", restart_every, minimum=1)
  if cycle_length is not None:
    r_cyc = check_int("cycle_length", cycle_length, minimum=1)
    if r_cyc < t:
      raise FedJaxDpError(
          f"restart_every must be <= cycle_length={r_cyc} for the tree's accounting (each "
          f"client in at most one round of each tree), got {t}.", option="restart_every")
  sens2 = tree_sensitivity_squared(rounds, t, cycle_length)
  if sens2 == 0:
    return dp_accounting.NoOpDpEvent()
  return dp_accounting.GaussianDpEvent(z / math.sqrt(sens2))


def banded_sensitivity_squared(noise: BandedNoise, sampler: CyclicSampler,
                               rounds: int) -> float:
  """``max_g sum_{t, t' in P_g} |(C_r^T C_r)[t, t']|`` for ``C_r = C[:r, :r]``
  (r = ``rounds``) and ``P_g = {t < r : t mod R == g}``: the squared L2 sensitivity (in
  units of S^2) of ``C_r x`` when a client contributes at most S in each round of its
  group (Choquette-Choo et al. 2023, Eq. (5); exact when those Gram entries are >= 0;
  with ``R >= bands`` it is ``max_g sum_{t in P_g} ||C_r[:, t]||^2``). Computed from the
  band form in O(r b) (float64).

  Raises:
    FedJaxDpError: ``rounds`` outside [0, noise.rounds].
  """
  r = check_int("rounds", rounds, minimum=0, maximum=noise.rounds)
  if r == 0:
    return 0.0
  band = noise.bands_matrix(r)  # [r, b]: C_r[t + d, t]
  b = band.shape[1]
  cyc = sampler.cycle_length
  total = np.zeros(cyc, np.float64)
  for e in range(0, b, cyc):  # lags between two rounds of one group that overlap
    if e >= r:
      break
    # (C^T C)[t, t + e] = sum_d C[t + d, t] C[t + d, t + e] = sum_{d >= e} B[t, d] B[t + e, d - e]
    g = np.sum(band[:r - e, e:] * band[e:, :b - e], axis=1)
    weight = 1.0 if e == 0 else 2.0
    total += weight * np.bincount(np.arange(r - e) % cyc, weights=np.abs(g), minlength=cyc)
  return float(total.max())


def banded_run_event(noise_multiplier: float, rounds: int, noise: BandedNoise,
                     sampler: CyclicSampler) -> dp_accounting.DpEvent:
  """The event of ``rounds`` rounds of ``noise`` under ``sampler`` (module docstring).

  * ``sampler.group_rate < 1`` and ``sampler.cycle_length >= noise.bands``: amplified
    banded MF, ``amplified_bandmf_event(z, rounds, num_bands=R,
    sampling_prob=group_rate)`` = ``ceil(rounds / R)`` self-composed
    ``PoissonSampledDpEvent(group_rate, GaussianDpEvent(z))`` (Choquette-Choo et al.
    2023, Thm. 4);
  * otherwise ``GaussianDpEvent(z / sqrt(banded_sensitivity_squared(...)))`` (no
    amplification claimed: with ``group_rate < 1`` and ``R < bands`` this is the bound
    for every realisation of the draws, hence for their mixture).

  Observation model: only the noisy aggregates are seen (central noise, ``"aggregate"``);
  the amplified event needs the Poisson draws within a group hidden from the server,
  as in the paper's threat model (a trusted aggregator); the groups themselves are
  public.

  Args:
    noise_multiplier: z >= 0 (std of the i.i.d. draws / S).
    rounds: rounds run, int in [0, noise.rounds] (0: ``NoOpDpEvent``).
    noise: the run's `BandedNoise`.
    sampler: the run's `CyclicSampler`.

  Raises:
    FedJaxDpError: invalid arguments, or more rounds than C has.
  """
  z = check_non_negative("noise_multiplier", noise_multiplier)
  if not isinstance(noise, BandedNoise):
    raise FedJaxDpError(f"noise must be a BandedNoise, got {type(noise).__name__}.",
                        option="noise")
  if not isinstance(sampler, CyclicSampler):
    raise FedJaxDpError(f"sampler must be a CyclicSampler, got {type(sampler).__name__}.",
                        option="sampler")
  r = check_int("rounds", rounds, minimum=0)
  if r > noise.rounds:
    raise FedJaxDpError(f"rounds must be <= {noise.rounds}, the size of the banded strategy "
                        f"C, got {r}: a longer run needs a larger C.", option="rounds")
  if r == 0:
    return dp_accounting.NoOpDpEvent()
  if sampler.group_rate < 1.0 and sampler.cycle_length >= noise.bands:
    return jp_accounting.amplified_bandmf_event(
        z, r, num_bands=sampler.cycle_length, sampling_prob=sampler.group_rate)
  sens2 = banded_sensitivity_squared(noise, sampler, r)
  return dp_accounting.GaussianDpEvent(z / math.sqrt(sens2))

