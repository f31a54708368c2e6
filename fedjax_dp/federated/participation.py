"""Structured participation: cohorts drawn per epoch or per cycle, not per round.

Two families of samplers, both with the `fedjax_dp.federated.sampling.Cohort` output and
the ``sample(key, sampling_rate, round_index)`` signature of the round samplers:

* Cyclic participation (`assign_groups`, `CyclicSampler`). Each client ``i`` is
  assigned a group ``g_i`` in ``[0, R)`` once, from a public seed and its id only
  (``jax.random.randint(fold_in(key(seed), i), (), 0, R)``: i.i.d. uniform groups,
  counter-based, so adding or removing a client moves nobody else). Round ``r``
  (0-based) serves group ``r mod R``; each member joins with probability
  ``group_rate`` independently of everything else. ``group_rate == 1`` is DP-FTRL's
  fixed "epoch" order (Kairouz et al., ICML 2021, arXiv 2103.00039); ``group_rate < 1``
  is cyclic Poisson sampling (b-min-separation with ``b = R``; Choquette-Choo et al.,
  NeurIPS 2023, arXiv 2306.08153, Algorithm 2; ``jax_privacy.batch_selection.
  CyclicPoissonSampling``). Used by DP-FTRL (``kind="cyclic"``) and by DP-FedAvg's
  ``cyclic_poisson`` sampler.
* Random allocation (`AllocationSampler`). The rounds are split into epochs of ``t``
  rounds; in every epoch each client takes part in a uniformly random ``k``-subset of
  the epoch's ``t`` rounds, independently of the other clients and epochs (Feldman &
  Shenfeld, "Privacy amplification by random allocation", 2025). ``k = 1`` is
  balls-in-bins sampling (Chua et al., "Balls-and-bins sampling for DP-SGD", 2024): every
  client is thrown into exactly one round of each epoch. A round's cohort has a random
  size (``Binomial(N, k / t)``), padded to a static ``k_max`` like a Poisson cohort
  (`fedjax_dp.federated.sampling.poisson_k_max` at rate ``k / t``; overflow is a
  truncation, `fedjax_dp.privacy.events.Truncation` at the same rate: in one round each
  client is in the cohort independently with probability ``k / t``).

Keys. The assignment of an epoch must be the same for all its rounds, so it cannot come
from the round's key. `epoch_key` derives it from the run's root key and the epoch only:
``fold_in(fold_in(root, EPOCH_STREAM), epoch)`` with `EPOCH_STREAM` = 2^32 - 1, a value
no round index reaches (round keys are ``fold_in(root, r)``,
`fedjax_dp.federated.keys`). The engine passes ``root_key`` to samplers whose
``needs_root_key`` is True.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.federated.sampling import DEFAULT_OVERFLOW_PROB, Cohort, poisson_k_max
from fedjax_dp.validation import FedJaxDpError, check_int, check_probability

__all__ = ["EPOCH_STREAM", "epoch_key", "assign_groups", "CyclicSampler",
           "AllocationSampler", "allocation_epoch_length", "cyclic_group_rate"]

#: The fold-in value of the epoch-assignment stream (module docstring).
EPOCH_STREAM = 2**32 - 1


def epoch_key(root_key: jax.Array, epoch) -> jax.Array:
  """The key of epoch ``epoch`` (int scalar, may be traced) of a run with ``root_key``:
  ``fold_in(fold_in(root_key, EPOCH_STREAM), epoch)`` (module docstring)."""
  base = jax.random.fold_in(root_key, jnp.uint32(EPOCH_STREAM))
  return jax.random.fold_in(base, jnp.asarray(epoch, jnp.uint32))


def assign_groups(population_size: int, cycle_length: int, seed: int = 0) -> np.ndarray:
  """Each client's group: ``g_i = randint(fold_in(PRNGKey(seed), i), 0, R)``.

  A function of ``(seed, i)`` alone, so the groups of clients ``0..N-1`` are the same in a
  population of ``N + 1`` (the neighbouring population under add-one).

  Args:
    population_size: N >= 1.
    cycle_length: R >= 1.
    seed: int >= 0 (public; never derived from data).

  Returns:
    int32 numpy array ``[N]`` with values in ``[0, R)``.

  Raises:
    FedJaxDpError: invalid arguments.
  """
  n = check_int("population_size", population_size, minimum=1)
  r = check_int("cycle_length", cycle_length, minimum=1)
  seed = check_int("seed", seed, minimum=0)
  key = jax.random.PRNGKey(seed)
  draw = jax.jit(jax.vmap(
      lambda i: jax.random.randint(jax.random.fold_in(key, i), (), 0, r, jnp.int32)))
  return np.asarray(draw(jnp.arange(n, dtype=jnp.uint32)), np.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class CyclicSampler:
  """Cyclic participation (module docstring): client ``i`` takes part only in rounds
  ``r`` with ``r % R == g_i``, each time with probability ``group_rate``.

  Attributes:
    population_size: N.
    cycle_length: R >= 1 (rounds per cycle = number of groups; the min-separation b).
    group_rate: probability in (0, 1] that a group member joins one of its rounds.
    groups: int32 ``[R, G]`` member ids of each group, increasing, padded with 0.
    group_mask: bool ``[R, G]``, True for real members.
    seed: the public seed the groups were drawn from.
    kind: ``"cyclic"`` (DP-FTRL) or ``"cyclic_poisson"`` (DP-FedAvg's sampler name).

  Build it with `create`. ``eq=False``: instances compare by identity (they hold
  arrays) and hash, so jitted functions may close over them.
  """
  population_size: int
  cycle_length: int
  group_rate: float
  groups: np.ndarray
  group_mask: np.ndarray
  seed: int = 0
  kind: str = "cyclic"
  needs_root_key = False

  @classmethod
  def create(cls, population_size: int, cycle_length: int, group_rate: float = 1.0,
             seed: int = 0, kind: str = "cyclic") -> "CyclicSampler":
    """Draws the groups (`assign_groups`) and packs them into ``[R, G]`` arrays.

    Args:
      population_size: N >= 1.
      cycle_length: R in [1, N].
      group_rate: in (0, 1].
      seed: int >= 0.
      kind: ``"cyclic"`` or ``"cyclic_poisson"`` (the name the ledger reads).

    Raises:
      FedJaxDpError: an argument out of range (the message names it).
    """
    n = check_int("population_size", population_size, minimum=1)
    r = check_int("cycle_length", cycle_length, minimum=1)
    if r > n:
      raise FedJaxDpError(f"cycle_length must be <= population_size={n} (R groups of "
                          f"clients), got {r}.", option="cycle_length")
    rate = check_probability("group_rate", group_rate)
    seed = check_int("seed", seed, minimum=0)
    if kind not in ("cyclic", "cyclic_poisson"):
      raise FedJaxDpError(f"kind must be 'cyclic' or 'cyclic_poisson', got {kind!r}.",
                          option="kind")
    g = assign_groups(n, r, seed)
    sizes = np.bincount(g, minlength=r)
    width = max(int(sizes.max()), 1)
    groups = np.zeros((r, width), np.int32)
    mask = np.zeros((r, width), bool)
    order = np.argsort(g, kind="stable")  # ids grouped, increasing within a group
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    for j in range(r):
      members = order[starts[j]:starts[j] + sizes[j]]
      groups[j, :sizes[j]] = members
      mask[j, :sizes[j]] = True
    groups.setflags(write=False)
    mask.setflags(write=False)
    return cls(n, r, rate, groups, mask, seed, kind)

  @property
  def k_max(self) -> int:
    """G, the largest group: a round's padded cohort size (no draw can exceed it, so no
    cohort is ever truncated)."""
    return int(self.groups.shape[1])

  @property
  def min_separation(self) -> int:
    """b = R: two participations of one client are at least b rounds apart."""
    return self.cycle_length

  @property
  def group_sizes(self) -> np.ndarray:
    """int ``[R]``: members per group."""
    return self.group_mask.sum(axis=1)

  @property
  def sampling_rate(self) -> float:
    """``group_rate / R``: the probability that a given client takes part in a given
    round, over the draw of its group (its marginal rate; a client's actual rate is
    ``group_rate`` in its group's rounds and 0 elsewhere)."""
    return self.group_rate / self.cycle_length

  @property
  def expected_cohort_size(self) -> float:
    """``N * group_rate / R``: the public denominator of the round's average."""
    return self.population_size * self.sampling_rate

  def group_of(self, client: int) -> int:
    """The group of client id ``client`` (host int)."""
    c = check_int("client", client, minimum=0, maximum=self.population_size - 1)
    return int(np.argwhere((self.groups == c) & self.group_mask)[0, 0])

  def participations(self, rounds: int) -> int:
    """The most rounds any client can take part in among rounds ``0..rounds-1``:
    ``ceil(rounds / R)`` (group 0's count; every client's is ``ceil`` or ``floor``).

    Raises:
      FedJaxDpError: ``rounds`` not an int >= 0.
    """
    t = check_int("rounds", rounds, minimum=0)
    return int(math.ceil(t / self.cycle_length))

  def sample(self, key, sampling_rate=None, round_index=None, root_key=None) -> Cohort:
    """The cohort of round ``round_index`` (jit-safe; ``round_index`` may be traced).

    Args:
      key: PRNG key (the round's sampling stream); unused when ``group_rate == 1``.
      sampling_rate: ignored: the rate within a group is the static ``group_rate``
        (the round passes its marginal rate, ``sampling_rate``, for the denominator).
      round_index: int32 scalar, the 0-based round (required).
      root_key: ignored.

    Returns:
      A `Cohort` with ``k_max`` slots: the joining members of group
      ``round_index % R`` in increasing id order, then masked padding (id 0);
      ``num_truncated`` is always 0.

    Raises:
      FedJaxDpError: ``round_index`` is None.
    """
    del sampling_rate, root_key
    if round_index is None:
      raise FedJaxDpError("CyclicSampler.sample needs round_index (the 0-based round): "
                          "the round decides which group takes part.",
                          option="round_index")
    g = jnp.mod(jnp.asarray(round_index, jnp.int32), self.cycle_length)
    members = jnp.asarray(self.groups)[g]
    mask = jnp.asarray(self.group_mask)[g]
    if self.group_rate < 1.0:
      mask = mask & (jax.random.uniform(key, mask.shape) < self.group_rate)
      (pos,) = jnp.nonzero(mask, size=self.k_max, fill_value=0)
      num = jnp.sum(mask, dtype=jnp.int32)
      live = jnp.arange(self.k_max) < num
      members = jnp.where(live, members[pos], 0)
      mask = live
    else:
      num = jnp.sum(mask, dtype=jnp.int32)
    return Cohort(members.astype(jnp.int32), mask, num, jnp.zeros((), jnp.int32))


def allocation_epoch_length(sampling_rate: float, participations: int = 1) -> int:
  """Rounds per epoch t of a random allocation of ``k`` participations at per-round
  rate q: ``t = round(k / q)`` (at least k), so that a client's marginal rate ``k / t``
  is the nearest such rate to q (``t = round(1 / q)`` for balls-in-bins).

  Raises:
      FedJaxDpError: q not in (0, 1] or k < 1.
  """
  q = check_probability("sampling_rate", sampling_rate)
  k = check_int("participations_per_epoch", participations, minimum=1)
  return max(k, int(round(k / q)))


def cyclic_group_rate(sampling_rate: float, min_separation: int) -> float:
  """The within-group rate of cyclic Poisson sampling with marginal rate q and b groups:
  ``q_group = q b`` (the expected cohort ``N q_group / b = N q`` is the same as a
  Poisson cohort's at rate q).

  Raises:
    FedJaxDpError: ``q b > 1`` (naming sampling_rate) or invalid values.
  """
  q = check_probability("sampling_rate", sampling_rate)
  b = check_int("min_separation", min_separation, minimum=1)
  if q * b > 1.0 + 1e-9:
    raise FedJaxDpError(
        f"sampling_rate={q!r} with min_separation={b} needs a within-group rate q*b = "
        f"{q * b:g} > 1: the eligible group (about N/{b} clients) is smaller than the "
        f"expected cohort. Lower the rate or min_separation (at most {int(1 / q)}).",
        option="sampling_rate")
  return min(1.0, q * b)


@dataclasses.dataclass(frozen=True)
class AllocationSampler:
  """Random allocation of ``k`` participations per epoch of ``t`` rounds (module
  docstring; ``k = 1``: balls-in-bins).

  Attributes:
    population_size: N.
    epoch_length: t >= k, rounds per epoch.
    participations: k in [1, t], rounds each client takes part in per epoch.
    k_max: static padded cohort size.
    kind: ``"balls_in_bins"`` (k = 1) or ``"random_allocation"``.
  """
  population_size: int
  epoch_length: int
  participations: int
  k_max: int
  kind: str = "random_allocation"
  needs_root_key = True

  @classmethod
  def create(cls, population_size: int, epoch_length: int, participations: int = 1,
             k_max: Optional[int] = None, overflow_prob: float = DEFAULT_OVERFLOW_PROB,
             kind: Optional[str] = None) -> "AllocationSampler":
    """The sampler; ``k_max`` (None) is `poisson_k_max` at rate ``k / t`` (each client is
    in a given round's cohort independently with that probability).

    Args:
      population_size: N >= 1.
      epoch_length: t >= 1.
      participations: k in [1, t].
      k_max: static padded cohort size in [1, N + 1], or None.
      overflow_prob: the target overflow probability of the default ``k_max``.
      kind: ``"balls_in_bins"`` (needs k = 1) or ``"random_allocation"``; None: the
        first for k = 1, else the second.

    Raises:
      FedJaxDpError: an argument out of range (naming it).
    """
    n = check_int("population_size", population_size, minimum=1)
    t = check_int("epoch_length", epoch_length, minimum=1)
    k = check_int("participations_per_epoch", participations, minimum=1, maximum=t)
    kind = kind or ("balls_in_bins" if k == 1 else "random_allocation")
    if kind not in ("balls_in_bins", "random_allocation") or (
        kind == "balls_in_bins" and k != 1):
      raise FedJaxDpError(f"kind must be 'balls_in_bins' (k = 1) or "
                          f"'random_allocation', got {kind!r} with k={k}.", option="kind")
    if k_max is None:
      k_max = poisson_k_max(n, k / t, overflow_prob)
    k_max = check_int("k_max", k_max, minimum=1, maximum=n + 1)
    return cls(n, t, k, k_max, kind)

  @property
  def sampling_rate(self) -> float:
    """``k / t``: the probability that a client is in a given round's cohort."""
    return self.participations / self.epoch_length

  @property
  def expected_cohort_size(self) -> float:
    """``N k / t``: the public denominator of the round's average."""
    return self.population_size * self.sampling_rate

  def membership(self, epoch_key_: jax.Array, position) -> jax.Array:
    """bool ``[N]``: who takes part in round ``position`` (in ``[0, t)``, may be traced)
    of the epoch whose key is ``epoch_key_``. Client i's k rounds are the positions of
    the k smallest of t i.i.d. uniforms (a uniformly random k-subset); k = 1 draws the
    round directly (``randint``). O(N t) work and memory for k > 1."""
    n, t, k = self.population_size, self.epoch_length, self.participations
    if k == 1:
      return jax.random.randint(epoch_key_, (n,), 0, t, jnp.int32) == position
    if k == t:
      return jnp.ones((n,), bool)
    u = jax.random.uniform(epoch_key_, (n, t))
    mine = jnp.take(u, jnp.asarray(position, jnp.int32), axis=1)
    return jnp.sum(u < mine[:, None], axis=1) < k

  def sample(self, key, sampling_rate=None, round_index=None, root_key=None) -> Cohort:
    """The cohort of round ``round_index`` (jit-safe; ``round_index`` may be traced).

    Args:
      key: the round's sampling stream (unused: the epoch's key decides).
      sampling_rate: ignored (``k / t`` is static).
      round_index: int32 scalar, the 0-based round (required).
      root_key: the run's root key (required): the epoch's assignment comes from
        ``epoch_key(root_key, round_index // t)``.

    Returns:
      A `Cohort`: the members in increasing id order, then masked padding;
      ``num_truncated = max(members - k_max, 0)``.

    Raises:
      FedJaxDpError: ``round_index`` or ``root_key`` is None.
    """
    del key, sampling_rate
    if round_index is None or root_key is None:
      raise FedJaxDpError("AllocationSampler.sample needs round_index and root_key: the "
                          "epoch's assignment is drawn once per epoch from the run's "
                          "root key.", option="round_index")
    r = jnp.asarray(round_index, jnp.int32)
    member = self.membership(epoch_key(root_key, r // self.epoch_length),
                             r % self.epoch_length)
    num = jnp.sum(member, dtype=jnp.int32)
    (idx,) = jnp.nonzero(member, size=self.k_max, fill_value=0)
    mask = jnp.arange(self.k_max) < num
    return Cohort(idx.astype(jnp.int32), mask, num, jnp.maximum(num - self.k_max, 0))
