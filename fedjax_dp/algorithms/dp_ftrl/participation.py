"""Cyclic participation: the client schedule DP-FTRL and banded matrix factorisation need.

Each client ``i`` is assigned a group ``g_i`` in ``[0, R)`` once, from a public seed and
its id only (``jax.random.randint(fold_in(key(seed), i), (), 0, R)``: i.i.d. uniform
groups, counter-based, so adding or removing a client moves nobody else, and the law of
everyone else's group is the same in neighbouring populations). Round ``t`` (0-based)
serves group ``t mod R``; each of its members joins with probability ``group_rate``
independently of everything else:

* ``group_rate == 1``: every member of the group, every cycle: the fixed "epoch" order of
  DP-FTRL (Kairouz, McMahan, Song, Thakkar, Thakurta, Xu, ICML 2021, arXiv 2103.00039)
  and of multi-epoch matrix factorisation, where a client takes part at most
  ``ceil(rounds / R)`` times, ``R`` rounds apart (min-separation ``R``);
* ``group_rate < 1``: cyclic Poisson sampling, the sampler of "amplified" banded MF
  (Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta, Xu, NeurIPS 2023,
  arXiv 2306.08153, Algorithm 2 with ``R`` groups).

Which epsilon this schedule allows is `fedjax_dp.algorithms.dp_ftrl.accounting`'s business;
it needs the deployment to enforce the schedule (a client must not take part outside its
group's rounds), which a simulation can only assume.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.federated.sampling import Cohort
from fedjax_dp.validation import FedJaxDpError, check_int, check_probability


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
  ``t`` with ``t % R == g_i``, each time with probability ``group_rate``.

  Attributes:
    population_size: N.
    cycle_length: R >= 1 (rounds per cycle = number of groups).
    group_rate: probability in (0, 1] that a group member joins one of its rounds.
    groups: int32 ``[R, G]`` member ids of each group, increasing, padded with 0.
    group_mask: bool ``[R, G]``, True for real members.
    seed: the public seed the groups were drawn from.
    kind: ``"cyclic"``.

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

  @classmethod
  def create(cls, population_size: int, cycle_length: int, group_rate: float = 1.0,
             seed: int = 0) -> "CyclicSampler":
    """Draws the groups (`assign_groups`) and packs them into ``[R, G]`` arrays.

    Args:
      population_size: N >= 1.
      cycle_length: R in [1, N].
      group_rate: in (0, 1].
      seed: int >= 0.

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
    return cls(n, r, rate, groups, mask, seed)

  @property
  def k_max(self) -> int:
    """G, the largest group: a round's padded cohort size (no draw can exceed it, so no
    cohort is ever truncated)."""
    return int(self.groups.shape[1])

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

  def sample(self, key, sampling_rate=None, round_index=None) -> Cohort:
    """The cohort of round ``round_index`` (jit-safe; ``round_index`` may be traced).

    Args:
      key: PRNG key (the round's sampling stream); unused when ``group_rate == 1``.
      sampling_rate: ignored: the rate within a group is the static ``group_rate``
        (the round passes its marginal rate, ``sampling_rate``, for the denominator).
      round_index: int32 scalar, the 0-based round (required).

    Returns:
      A `Cohort` with ``k_max`` slots: the joining members of group
      ``round_index % R`` in increasing id order, then masked padding (id 0);
      ``num_truncated`` is always 0.

    Raises:
      FedJaxDpError: ``round_index`` is None.
    """
    del sampling_rate
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
