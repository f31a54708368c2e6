"""Correlated Gaussian noise across rounds, as generators for `RoundConfig.central_noise`.

A generator has ``init(params) -> state`` (a pytree of fixed shapes, carried in
``ServerState.mechanism["noise"]``, so the round stays jitted and scannable) and
``sample(state, key, like, stddev) -> (noise, state)``: ``noise`` has ``like``'s
structure (float32 leaves) and is round t's share ``w_t`` of a correlated Gaussian whose
underlying i.i.d. draws have standard deviation ``stddev`` (``z * S``). ``key`` is the
round's own noise key: every i.i.d. draw comes from exactly one round's key.

* `TreeNoise`: binary-tree aggregation (Dwork, Naor, Pitassi, Rothblum, STOC 2010; Chan,
  Shi, Song, ACM TISSEC 2011), as used by DP-FTRL (Kairouz, McMahan, Song, Thakkar,
  Thakurta, Xu, ICML 2021, arXiv 2103.00039, Alg. 1), restarted every
  ``restart_every`` rounds.
* `BandedNoise`: banded matrix factorisation (Choquette-Choo, Ganesh, McKenna, McMahan,
  Rush, Thakurta, Xu, NeurIPS 2023, arXiv 2306.08153): ``w = C^-1 z`` for a
  column-normalised lower-triangular b-banded C, generated in O(b) memory per parameter
  by jax-privacy's streaming ``C^-1`` (ibid., Algorithm 9).

Standard normal draws come from `standard_normal_like` (one key per leaf, ``split`` of
the round's key), which the tests use to recompute the noise densely.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal, Tuple, get_args

import jax
import jax.numpy as jnp
import numpy as np
from jax_privacy.matrix_factorization import banded as jp_banded
from jax_privacy.matrix_factorization import toeplitz as jp_toeplitz

from fedjax_dp.validation import check_choice, check_int

__all__ = ["Strategy", "STRATEGIES", "standard_normal_like", "tree_levels", "TreeNoise",
           "BandedNoise"]

#: The banded strategy matrices (`BandedNoise.create`; the tuple: their names).
Strategy = Literal["optimized", "sqrt"]
STRATEGIES: Tuple[str, ...] = get_args(Strategy)


def standard_normal_like(key: jax.Array, like: Any) -> Any:
  """i.i.d. N(0, 1) float32 leaves shaped like ``like``'s (leaf i from
  ``jax.random.split(key, num_leaves)[i]``)."""
  leaves, treedef = jax.tree_util.tree_flatten(like)
  keys = jax.random.split(key, max(len(leaves), 1))
  return jax.tree_util.tree_unflatten(
      treedef, [jax.random.normal(k, jnp.shape(l), jnp.float32)
                for k, l in zip(keys, leaves)])


def tree_levels(steps: int) -> int:
  """Tree nodes a leaf can be in when a tree holds ``steps`` leaves (>= 1):
  ``floor(log2(steps)) + 1`` (= ``ceil(log2(steps + 1))``, dp_accounting's depth of a
  ``SingleEpochTreeAggregationDpEvent``)."""
  steps = check_int("steps", steps, minimum=1)
  return int(steps).bit_length()


def _trailing_zeros(s: jax.Array) -> jax.Array:
  """Number of trailing zero bits of the int32 ``s >= 1``."""
  return jax.lax.population_count((s & -s) - 1)


@dataclasses.dataclass(frozen=True, eq=False)
class TreeNoise:
  """Binary-tree aggregation restarted every ``restart_every`` rounds.

  Within a tree, step ``s = 1, 2, ...`` (round ``t``'s position since the last restart,
  plus one) completes the dyadic node of level ``j = ctz(s)`` (number of trailing zero
  bits) covering leaves ``s - 2^j + 1 .. s``; that node gets a fresh noise
  ``v ~ N(0, stddev^2 I)`` drawn from round t's key. The noisy prefix sum after ``s``
  leaves carries the noise ``N(s) = sum of the node noises of s's dyadic decomposition``
  (one node per set bit of ``s``, so its variance is ``popcount(s) stddev^2``), and the
  round's noise is ``w_t = N(s) - N(s - 1) = v - (the level < j nodes of N(s - 1))``.
  So the running sum of the rounds' noisy sums is the tree's noisy prefix sum: SGD on
  the noisy round sums (a model ``theta_0 - eta * sum_t (x_t + w_t)``) is FTRL on the
  tree's prefix sums (Kairouz et al. 2021, Alg. 1). At a restart ``N`` starts again from
  0 and the previous trees' noise stays in the model (their last prefix noise is never
  subtracted), as in the paper's restarted trees.

  Privacy: a client whose clipped update (norm <= S) enters one leaf changes at most
  `levels` released node sums by it, so one tree is a Gaussian mechanism with
  sensitivity ``sqrt(levels) S`` (`fedjax_dp.algorithms.dp_ftrl.accounting`).

  Attributes:
    restart_every: leaves per tree, int >= 1.
  """
  restart_every: int

  def __post_init__(self):
    check_int("restart_every", self.restart_every, minimum=1)

  @property
  def levels(self) -> int:
    """``floor(log2(restart_every)) + 1``: tree nodes one leaf is in (and the rows of
    the state)."""
    return tree_levels(self.restart_every)

  def init(self, params) -> Any:
    """``{"nodes": float32 [levels, *leaf.shape] per leaf of params (zeros),
    "step": int32 0}``; ``step`` counts rounds since the last restart."""
    nodes = jax.tree_util.tree_map(
        lambda p: jnp.zeros((self.levels,) + jnp.shape(p), jnp.float32), params)
    return {"nodes": nodes, "step": jnp.zeros((), jnp.int32)}

  def sample(self, state, key, like, stddev):
    """Round noise ``w_t`` (float32, ``like``'s structure) and the next state.

    Args:
      state: from `init` or a previous `sample`.
      key: the round's noise key.
      like: pytree (e.g. the round's sum of updates) whose structure and shapes the
        noise takes.
      stddev: float scalar >= 0 (may be traced): std of each node's noise (``z S``).
    """
    step = state["step"]
    restart = step >= self.restart_every
    step = jnp.where(restart, 0, step)
    s = step + 1
    level = _trailing_zeros(s)
    std = jnp.asarray(stddev, jnp.float32)
    fresh = jax.tree_util.tree_map(lambda v: v * std, standard_normal_like(key, like))

    # Only the levels < ctz(s) are read, and each of them was written in this tree
    # after the last restart (s - 1 has all those bits set), so neither a restart nor
    # a read needs to clear anything: one masked read, one slice written.
    weights = (jnp.arange(self.levels, dtype=jnp.int32) < level).astype(jnp.float32)

    def one(nodes, v):
      older = jnp.tensordot(weights, nodes, axes=1)
      return v - older, jax.lax.dynamic_update_index_in_dim(nodes, v, level, 0)

    nodes_leaves, treedef = jax.tree_util.tree_flatten(state["nodes"])
    out = [one(n, v) for n, v in zip(nodes_leaves, treedef.flatten_up_to(fresh))]
    noise = treedef.unflatten([o[0] for o in out])
    nodes = treedef.unflatten([o[1] for o in out])
    return noise, {"nodes": nodes, "step": s.astype(jnp.int32)}


@functools.lru_cache(maxsize=64)
def _optimized_coefs(rounds: int, bands: int) -> np.ndarray:
  """jax-privacy's mean-squared-error-optimal b-banded Toeplitz strategy for the
  prefix-sum workload (``toeplitz.optimize_banded_toeplitz``, L-BFGS), unit norm.
  Cached per (rounds, bands) in the process: about 1 s (100, 4), 1 s (500, 16) and
  2.5 s (2000, 32) on a 2-core CPU."""
  if bands == 1:
    return np.ones(1, np.float64)
  coefs = np.asarray(jp_toeplitz.optimize_banded_toeplitz(rounds, bands), np.float64)
  return coefs / np.linalg.norm(coefs)


@dataclasses.dataclass(frozen=True, eq=False)
class BandedNoise:
  """Banded matrix factorisation noise: round t's noise is ``stddev * (C^-1 z)_t``.

  C is n x n (n = ``rounds``), lower triangular with ``bands`` bands, Toeplitz before
  column normalisation (every column scaled to unit L2 norm: jax-privacy's
  ``ColumnNormalizedBanded``). The mechanism releases ``C x + stddev z`` for the
  stacked round sums x, i.e. the model sees ``x + stddev C^-1 z``; ``z`` is drawn round by
  round (`standard_normal_like` of the round's key) and ``C^-1`` applied by jax-privacy's
  streaming inverse (O(bands) buffers per parameter). ``bands == 1`` gives C = I:
  independent noise every round.

  Rounds beyond ``rounds`` are not covered by C: their noise is NaN (a run must be
  built with its planned rounds; the accounting refuses more rounds as well).

  Attributes:
    rounds: n, the planned rounds (size of C), int >= 1.
    bands: b in [1, n].
    strategy: the ``jax_privacy.matrix_factorization.banded.ColumnNormalizedBanded``.
    strategy_name: ``"optimized"`` or ``"sqrt"`` (see `create`).
  """
  rounds: int
  bands: int
  strategy: Any
  strategy_name: str = "optimized"

  @classmethod
  def create(cls, rounds: int, bands: int, strategy: str = "optimized") -> "BandedNoise":
    """Builds C.

    Args:
      rounds: n >= 1.
      bands: b in [1, n].
      strategy: ``"optimized"``: jax-privacy's
        ``toeplitz.optimize_banded_toeplitz(n, b)`` (b Toeplitz coefficients minimising
        the mean squared error of the prefix sums, then column-normalised; cached per
        (n, b) in the process); ``"sqrt"``: ``ColumnNormalizedBanded.default(n, b)``,
        the square-root-of-the-prefix-matrix Toeplitz coefficients of Fichtenberger,
        Henzinger, Upadhyay (ICML 2023) truncated to b bands.

    Raises:
      FedJaxDpError: an argument out of range.
    """
    n = check_int("rounds", rounds, minimum=1)
    b = check_int("bands", bands, minimum=1, maximum=n)
    check_choice("strategy", strategy, STRATEGIES)
    if strategy == "sqrt":
      strat = jp_banded.ColumnNormalizedBanded.default(n, b)
    else:
      coefs = jnp.asarray(_optimized_coefs(n, b), jnp.float32)
      strat = jp_banded.ColumnNormalizedBanded.from_banded_toeplitz(n, coefs)
    return cls(n, b, strat, strategy)

  @property
  def coefs(self) -> np.ndarray:
    """float64 [b]: the Toeplitz coefficients (first column of C before normalisation)."""
    return np.asarray(self.strategy.params, np.float64)[0]

  def bands_matrix(self, rounds: int | None = None) -> np.ndarray:
    """float64 ``[r, b]``: ``B[t, d] = C[t + d, t]`` of ``C[:r, :r]`` (r = ``rounds``,
    default n; zero where ``t + d >= r``), C column-normalised over all n rows in
    float64. The compact form of `matrix` (the accounting uses it).

    Raises:
      FedJaxDpError: ``rounds`` outside [1, n].
    """
    r = self.rounds if rounds is None else check_int("rounds", rounds, minimum=1,
                                                      maximum=self.rounds)
    p = np.asarray(self.strategy.params, np.float64).copy()  # [n, b]: C[j + d, j]
    n, b = p.shape
    rows = np.arange(n)[:, None] + np.arange(b)[None, :]
    p[rows >= n] = 0.0
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    p = p[:r].copy()
    p[(np.arange(r)[:, None] + np.arange(b)[None, :]) >= r] = 0.0
    return p

  def matrix(self) -> np.ndarray:
    """float64 ``[n, n]``: C (lower triangular, b bands, unit-norm columns)."""
    band = self.bands_matrix()
    n, b = band.shape
    c = np.zeros((n, n), np.float64)
    for d in range(b):
      idx = np.arange(n - d)
      c[idx + d, idx] = band[:n - d, d]
    return c

  def _inverse(self):
    return self.strategy.inverse_as_streaming_matrix()

  def init(self, params) -> Any:
    """``{"inner": jax-privacy's streaming state per leaf (an int32 index and float32
    [b, *leaf.shape] buffers), "step": int32 0}`` (fixed shapes)."""
    like = jax.tree_util.tree_map(lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params)
    inner = self._inverse().init_multiply(like)
    return {"inner": _fix_dtypes(inner), "step": jnp.zeros((), jnp.int32)}

  def sample(self, state, key, like, stddev):
    """Round noise ``stddev * (C^-1 z)_t`` (float32, ``like``'s structure; NaN past
    ``rounds``) and the next state.

    Args:
      state: from `init` or a previous `sample`.
      key: the round's noise key (z_t = `standard_normal_like` of it).
      like: pytree whose structure and shapes the noise takes.
      stddev: float scalar >= 0 (may be traced).
    """
    z = standard_normal_like(key, like)
    corr, inner = self._inverse().multiply_next(z, state["inner"])
    std = jnp.asarray(stddev, jnp.float32)
    inside = state["step"] < self.rounds
    noise = jax.tree_util.tree_map(
        lambda c: jnp.where(inside, c.astype(jnp.float32) * std, jnp.nan), corr)
    inner = jax.tree_util.tree_map(lambda new, old: jnp.asarray(new, old.dtype),
                                   inner, state["inner"])
    return noise, {"inner": inner, "step": state["step"] + 1}


def _fix_dtypes(tree):
  """Strong (non-weak) dtypes, so that the state is a stable scan carry."""
  return jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.asarray(a).dtype), tree)

