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
  neighbouring datasets (Wang, Balle, Kasiviswanathan, AISTATS 2019).
"""

from __future__ import annotations

import dataclasses
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


def fixed_size_sample(key: jax.Array, population_size: int, cohort_size: int) -> Cohort:
  """``cohort_size`` distinct clients, uniformly without replacement (jit-safe)."""
  idx = jax.random.choice(key, population_size, (cohort_size,), replace=False)
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

  def sample(self, key, sampling_rate=None) -> Cohort:
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

  def sample(self, key, sampling_rate=None) -> Cohort:
    del sampling_rate  # fixed by the static cohort size
    return fixed_size_sample(key, self.population_size, self.cohort_size)

