"""Client sampling with static shapes, each sampler paired with its DpEvent.

The DpEvent a sampler pairs with is built by the round that uses it, from its own
sensitivity (`fedjax_dp.federated.round.round_relation`); the samplers only sample.

* `PoissonSampler`: every client joins independently with probability ``q`` (the
  sampling rate). The cohort size is random; it is padded to a static ``k_max`` with a
  mask. ``k_max`` is chosen on the host so that ``P(Binomial(N + 1, q) > k_max) <
  1e-12`` (`poisson_k_max`; N + 1 because a neighbouring population may hold one more
  client, and at most N + 1, which makes truncation impossible for small populations).
  If a draw still overflows, the extra clients are dropped, the round reports
  ``num_truncated > 0`` and the driver warns: never silent. Truncation changes the
  mechanism on that event, so its probability is added to delta by the ledger
  (`fedjax_dp.privacy.events.Truncation`).
  Pairs with ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``, add/remove-one
  neighbouring datasets (McMahan et al., ICLR 2018; Zhu & Wang, ICML 2019).
* `FixedSizeSampler`: ``m`` distinct clients uniformly without replacement. Pairs with
  ``SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z))``, replace-one
  neighbouring datasets (Wang, Balle, Kasiviswanathan, AISTATS 2019). Small populations
  shuffle all N ids; from `DISTINCT_DRAWS_MIN_POPULATION` clients on, `distinct_draws`
  gives the same law (a uniformly random m-subset in uniformly random order) at a cost
  independent of N (`fixed_size_sample`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
from scipy import stats

from fedjax_dp.validation import FedJaxDpError, check_int, check_probability

DEFAULT_OVERFLOW_PROB = 1e-12


class Cohort(NamedTuple):
  """One round's cohort.

  Attributes:
    indices: int32 ``[k_max]`` population ids (padding slots hold 0 and are masked).
    mask: bool ``[k_max]``; True for real participants.
    num_sampled: int32 scalar, number of clients the sampler drew (before truncation).
    num_truncated: int32 scalar, number dropped because the draw exceeded ``k_max``.
  """
  indices: jax.Array
  mask: jax.Array
  num_sampled: jax.Array
  num_truncated: jax.Array


def poisson_k_max(population_size: int, sampling_rate: float,
                  overflow_prob: float = DEFAULT_OVERFLOW_PROB) -> int:
  """Smallest k with ``P(Binomial(N + 1, q) > k) < overflow_prob``, at most N + 1.

  N + 1: the truncation probability enters delta for a neighbouring population of one
  more client; with ``k = N + 1`` (small populations) no draw can ever overflow.

  Args:
    population_size: N >= 1.
    sampling_rate: q in (0, 1].
    overflow_prob: target overflow probability in (0, 1).

  Raises:
    FedJaxDpError: on invalid arguments.
  """
  n = check_int("population_size", population_size, minimum=1)
  q = check_probability("sampling_rate", sampling_rate)
  p = check_probability("overflow_prob", overflow_prob)
  if q >= 1.0:
    return n + 1
  k = int(stats.binom.isf(p, n + 1, q))
  # isf can be off by one at the boundary: step up until the tail is below p.
  while k < n + 1 and stats.binom.sf(k, n + 1, q) >= p:
    k += 1
  return max(1, min(n + 1, k))


def poisson_sample(key: jax.Array, population_size: int, sampling_rate,
                   k_max: int) -> Cohort:
  """Poisson cohort (jit-safe; ``population_size`` and ``k_max`` static).

  Args:
    key: PRNG key (the round's sampling stream).
    population_size: N (static int).
    sampling_rate: q, float scalar (may be traced: changing it does not recompile).
    k_max: static padded cohort size (may exceed N by one; extra slots are padding).

  Returns:
    A `Cohort`; selected ids in increasing order, then masked padding.
  """
  selected = jax.random.uniform(key, (population_size,)) < sampling_rate
  num = jnp.sum(selected, dtype=jnp.int32)
  (idx,) = jnp.nonzero(selected, size=k_max, fill_value=0)
  mask = jnp.arange(k_max) < num
  return Cohort(idx.astype(jnp.int32), mask, num, jnp.maximum(num - k_max, 0))


DISTINCT_DRAWS_MIN_POPULATION = 2048
"""Populations from this size on sample a fixed-size cohort with `distinct_draws` (cost
independent of N) instead of a permutation of the whole population (O(N log N)), when
``4 M <= N`` (M = `num_draws`). Below it the permutation is one sort of N <= 1625 keys
(JAX's shuffle needs a second sort above 1625) and costs under 0.15 ms on the 2-core CPU
machine, within 0.1 ms of the draws' cost (faster for some N <= 1024): nothing to gain,
and keeping it keeps every run recorded before the draws existed (tests/behaviour/, the
experiments: populations of at most a few hundred clients) bit for bit unchanged. The
numbers are in `fixed_size_sample`."""

DISTINCT_DRAWS_FAILURE_PROB = 1e-9
"""Target probability that `distinct_draws` needs a second attempt (`num_draws`)."""


def num_draws(population_size: int, cohort_size: int,
              failure_prob: float = DISTINCT_DRAWS_FAILURE_PROB) -> int:
  """M >= K: draws with replacement among which K distinct values are (nearly) sure.

  M - D (D = number of distinct values among M uniform draws from N) counts the draws
  that repeat an earlier value; it is close to Poisson with mean ``M (M - 1) / (2 N)``
  when M << N (the birthday problem). M is the smallest value with
  ``P(Poisson(M (M - 1) / (2 N)) > M - K) <= failure_prob`` (exponential search, then
  bisection: the tail decreases in M while M < N). This only sets the cost of
  `distinct_draws` (a failed attempt is redrawn), never its distribution.

  Args:
    population_size: N >= 1 (host int).
    cohort_size: K in [1, N] (host int).
    failure_prob: target in (0, 1).

  Returns:
    M, a host int in [K, 2 N]; 2 N when no M <= N reaches the target (K is then not small
    against N, and the permutation is the better method: see `fixed_size_sample`).

  Raises:
    FedJaxDpError: on invalid arguments.
  """
  n = check_int("population_size", population_size, minimum=1)
  k = check_int("cohort_size", cohort_size, minimum=1, maximum=n)
  p = check_probability("failure_prob", failure_prob)
  return _num_draws(n, k, p)


@functools.lru_cache(maxsize=256)
def _num_draws(n: int, k: int, p: float) -> int:
  ok = lambda m: stats.poisson.sf(m - k, m * (m - 1) / (2.0 * n)) <= p
  if ok(k):
    return k
  lo, step = k, 1  # ok(lo) is False
  while not ok(k + step):
    lo = k + step
    if lo >= n:
      return 2 * n
    step *= 2
  hi = k + step  # ok(hi) is True
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (lo, mid) if ok(mid) else (mid, hi)
  return hi


def _first_distinct(draws: jax.Array, cohort_size: int):
  """The first ``cohort_size`` distinct values of ``draws`` in order of first appearance.

  O(M log M) for M draws (one sort of (value, position) pairs). Returns ``(values
  int32 [K], number of distinct values int32)``; when fewer than K are distinct the tail
  of ``values`` is meaningless (the caller redraws).
  """
  m = draws.shape[0]
  pos = jnp.arange(m, dtype=jnp.int32)
  # Sorting by (value, position): the first of each run of equal values is the value's
  # first appearance.
  vals, order = jax.lax.sort((draws, pos), num_keys=2)
  first_sorted = jnp.concatenate([jnp.ones((1,), bool), vals[1:] != vals[:-1]])
  first = jnp.zeros((m,), bool).at[order].set(first_sorted, unique_indices=True)
  (where,) = jnp.nonzero(first, size=cohort_size, fill_value=0)  # increasing positions
  return draws[where], jnp.sum(first, dtype=jnp.int32)


def distinct_draws(key: jax.Array, population_size: int, cohort_size: int,
                   draws: Optional[int] = None):
  """A uniformly random ordered K-subset of ``range(N)`` in O(M log M), M ~ K.

  Draws M values uniformly with replacement and keeps the first K distinct ones in
  order of first appearance; if fewer than K of the M are distinct, it draws M new
  values (a ``lax.while_loop``, under ``vmap`` too) until K are.

  Why the result is exactly uniform over the ``N! / (N - K)!`` ordered K-tuples of
  distinct values: the M draws are i.i.d. uniform, so relabelling the population by any
  permutation pi leaves their joint law unchanged; "the first K distinct values, in
  order" maps to its image under pi, and the event "at least K distinct" is unchanged
  by pi. So the conditional law of the tuple given success is invariant under every
  relabelling; relabellings take any ordered K-tuple of distinct values to any other,
  so the only such law is the uniform one. Redrawing after a failure (rejection) returns a draw from exactly that
  conditional law. Up to ``jax.random.randint``'s own rounding (it reduces 64 random
  bits modulo N: relative bias below N / 2^64), this is the law of
  ``jax.random.choice(key, N, (K,), replace=False)``, without its O(N log N)
  permutation of the whole population.

  Args:
    key: PRNG key.
    population_size: N (static int, < 2^31).
    cohort_size: K in [1, N] (static int).
    draws: M >= K per attempt (static); default `num_draws` (a retry has probability
      at most about 1e-9). A small M (e.g. K) makes retries frequent: the tests use it.

  Returns:
    ``(indices int32 [K], attempts int32 scalar)``: the sample and the number of
    rounds of M draws it took (1 unless a retry was needed).
  """
  n, k = population_size, cohort_size
  m = num_draws(n, k) if draws is None else check_int("draws", draws, minimum=k)

  def attempt(i):
    d = jax.random.randint(jax.random.fold_in(key, i), (m,), 0, n, dtype=jnp.int32)
    return _first_distinct(d, k)

  def again(carry):
    i, _, count = carry
    return count < k

  def step(carry):
    i, _, _ = carry
    idx, count = attempt(i)
    return i + 1, idx, count

  attempts, idx, _ = jax.lax.while_loop(
      again, step, (jnp.int32(1), *attempt(jnp.int32(0))))
  return idx, attempts


def fixed_size_sample(key: jax.Array, population_size: int, cohort_size: int,
                      method: str = "auto") -> Cohort:
  """``cohort_size`` distinct clients, uniformly without replacement (jit-safe).

  The K ids are a uniformly random K-subset of the N clients, in uniformly random order
  (every ordered K-tuple of distinct ids is equally likely), whichever the method:

  * ``"permutation"``: ``jax.random.choice(..., replace=False)``, which shuffles all N
    ids (one sort of N random keys for N <= 1625, two up to 2.6 million) and keeps the
    first K: O(N log N) per round, the bulk of a round's time for N = 10^6, K = 10^3.
  * ``"distinct_draws"``: `distinct_draws`, O(M log M) with M = `num_draws` ~ K,
    independent of N (exact; see its docstring).
  * ``"auto"``: ``distinct_draws`` when N >= `DISTINCT_DRAWS_MIN_POPULATION` and
    ``4 M <= N``, else the permutation.

  Measured (``jit`` on the 2-core CPU machine, best of 15 calls, both methods side by
  side in one process; the machine was shared, so the figures are rough):

  =========  ======  ===============  ==============
  N          K       permutation      distinct draws
  =========  ======  ===============  ==============
  128        10      0.03 ms          0.04 ms
  1,024      10      0.15 ms          0.04 ms
  2,048      10      0.55 ms          0.02 ms
  32,768     1,000   11 ms            0.20 ms
  1,000,000  1,000   1,790 ms         0.20 ms
  1,000,000  10,000  1,840 ms         1.9 ms
  =========  ======  ===============  ==============

  Args:
    key: PRNG key (the round's sampling stream).
    population_size: N (static int).
    cohort_size: K in [1, N] (static int).
    method: ``"auto"``, ``"permutation"`` or ``"distinct_draws"`` (static).

  Returns:
    A `Cohort` with K ids, all real (mask all True).

  Raises:
    FedJaxDpError: an unknown ``method``.
  """
  if method == "auto":
    big = (population_size >= DISTINCT_DRAWS_MIN_POPULATION and
           4 * num_draws(population_size, cohort_size) <= population_size)
    method = "distinct_draws" if big else "permutation"
  if method == "permutation":
    idx = jax.random.choice(key, population_size, (cohort_size,), replace=False)
  elif method == "distinct_draws":
    idx, _ = distinct_draws(key, population_size, cohort_size)
  else:
    raise FedJaxDpError(f"method must be 'auto', 'permutation' or 'distinct_draws', got "
                        f"{method!r}.", option="method")
  m = jnp.asarray(cohort_size, jnp.int32)
  return Cohort(idx.astype(jnp.int32), jnp.ones((cohort_size,), bool), m,
                jnp.zeros((), jnp.int32))


@dataclasses.dataclass(frozen=True)
class PoissonSampler:
  """Poisson client sampling at rate ``q`` padded to ``k_max`` (see module docstring)."""
  population_size: int
  sampling_rate: float
  k_max: int
  kind: str = "poisson"

  @classmethod
  def create(cls, population_size: int, sampling_rate: float,
             k_max: Optional[int] = None,
             overflow_prob: float = DEFAULT_OVERFLOW_PROB) -> "PoissonSampler":
    n = check_int("population_size", population_size, minimum=1)
    q = check_probability("sampling_rate", sampling_rate)
    if k_max is None:
      k_max = poisson_k_max(n, q, overflow_prob)
    k_max = check_int("k_max", k_max, minimum=1, maximum=n + 1)
    return cls(n, q, k_max)

  @property
  def expected_cohort_size(self) -> float:
    return self.population_size * self.sampling_rate

  def sample(self, key, sampling_rate=None, round_index=None) -> Cohort:
    """``round_index`` (the 0-based round, int32, may be traced) is unused: every
    round draws from the whole population."""
    del round_index
    q = self.sampling_rate if sampling_rate is None else sampling_rate
    return poisson_sample(key, self.population_size, q, self.k_max)


@dataclasses.dataclass(frozen=True)
class FixedSizeSampler:
  """``cohort_size`` clients without replacement (see module docstring)."""
  population_size: int
  cohort_size: int
  kind: str = "fixed_size"

  @classmethod
  def create(cls, population_size: int, cohort_size: int) -> "FixedSizeSampler":
    n = check_int("population_size", population_size, minimum=1)
    m = check_int("cohort_size", cohort_size, minimum=1)
    if m > n:
      raise FedJaxDpError(
          f"cohort_size must be <= the population size {n}, got {m}.")
    return cls(n, m)

  @property
  def sampling_rate(self) -> float:
    return self.cohort_size / self.population_size

  @property
  def k_max(self) -> int:
    return self.cohort_size

  @property
  def expected_cohort_size(self) -> float:
    return float(self.cohort_size)

  def sample(self, key, sampling_rate=None, round_index=None) -> Cohort:
    del sampling_rate, round_index  # fixed by the static cohort size; memoryless
    return fixed_size_sample(key, self.population_size, self.cohort_size)

