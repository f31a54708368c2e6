"""Engineered client heterogeneity for PADPFL's scenarios (PADPFL, Table I).

PADPFL (Talaei & Izadi, arXiv:2406.18491, Sec. VI) gives 60 MNIST clients,
divided at random into three *parts*, a different data quality or quantity per
part:

* salt-and-pepper image noise of a "severe", "moderate" or "slight" density, or
  none (scenarios 1, 2 and 4). In scenario 4 the densities of parts 1 and 3 swap
  after the 10-th aggregation round;
* unequal local dataset sizes, 50 / 120 / 271 examples per client (scenario 3).

This module provides the pieces as host-side NumPy:

* `salt_and_pepper`: the corruption itself;
* `assign_parts`, `client_sizes`, `client_indices_by_size`: random parts and exact
  per-client sizes, as sorted disjoint index arrays (the `partition` module's
  conventions);
* `corruption_levels`, `corruption_at`, `corrupt_phases`: per-part densities, with
  a per-phase schedule. The jitted round sees static-shape arrays, so every phase's
  corrupted client data is precomputed once (`corrupt_phases`) and the driver
  switches arrays at the phase's first round;
* `SCENARIOS`: Table I as data, plus the ratios and phases the figures use;
* `build_scenario`: all of the above for one scenario, as a `FederatedData`.

The paper gives no densities; `DENSITIES` holds our defaults, which a
caller can override. Corruption is applied once, statically, to the stored training
images of the clients, never to the test set.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.data.partition import RngLike, _as_rng, _check_labels, gather_padded
from fedjax_dp.validation import FedJaxDpError, check_finite, check_int, check_positive

__all__ = [
    "DENSITIES", "LEVELS", "Scenario", "SCENARIOS", "CorruptedPhase", "ScenarioData",
    "salt_and_pepper", "assign_parts", "client_sizes", "client_indices_by_size",
    "corruption_levels", "corruption_at", "corrupt_phases", "phase_for_round",
    "build_scenario",
]

#: Salt-and-pepper densities per named level. Not in the paper (it names the levels
#: only); these are our defaults: severe 0.6, moderate 0.3, slight 0.1.
DENSITIES: Mapping[str, float] = {"none": 0.0, "slight": 0.1, "moderate": 0.3, "severe": 0.6}
#: The level names, mildest first.
LEVELS = ("none", "slight", "moderate", "severe")

Level = Union[str, float]
#: ``(start_round, levels per part)``: from aggregation round ``start_round`` (1-based).
Phase = Tuple[int, Sequence[Level]]


# ---------------------------------------------------------------------------
# Table I.
# ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Scenario:
  """One row of PADPFL's Table I, with what the figures add.

  Attributes:
    number: 1 .. 4.
    description: Table I's text, verbatim.
    num_clients: N (60).
    part_sizes: clients per part.
    examples_per_client: examples m_i of each client, per part. m = 150 is stated
      for scenario 1 ("identical in terms of dataset size, or m = 150"); scenarios
      2 and 4 presumably use it as well.
    noise_phases: ``((start_round, levels per part), ...)``, the salt-and-pepper
      level of each part from aggregation round ``start_round`` on (one phase
      except in scenario 4). Scenario 3 states no image noise ("none").
    impact_phases: ``((start_round, ratio), ...)``, the personalised impact-factor
      ratio of the private-mode figure (Figs. 3, 5, 7, 9), in the paper's "a-b-c"
      notation (see `fedjax_dp.algorithms.padpfl.impact_factors.from_part_ratios`).
    nonprivate_ratios: the non-private sweep of Figs. 2, 4, 6, 8. The paper names
      only some curves; the others are our choice.
      "1-1-1" is equal p; ``"0-1-2>2-1-0"`` is the adaptive switch of scenario 4.
    figures: (non-private figure, private figure) numbers.
    rounds: T = 30 aggregation rounds.
    delta: 0.01.
    epsilons: the private runs' epsilons (5 and 20).
  """

  number: int
  description: str
  num_clients: int
  part_sizes: Tuple[int, ...]
  examples_per_client: Tuple[int, ...]
  noise_phases: Tuple[Tuple[int, Tuple[str, ...]], ...]
  impact_phases: Tuple[Tuple[int, str], ...]
  nonprivate_ratios: Tuple[str, ...]
  figures: Tuple[int, int]
  rounds: int = 30
  delta: float = 0.01
  epsilons: Tuple[float, ...] = (5.0, 20.0)

  @property
  def num_parts(self) -> int:
    return len(self.part_sizes)

  @property
  def total_examples(self) -> int:
    """Training examples over all clients (9,000; 8,820 in scenario 3)."""
    return int(sum(n * m for n, m in zip(self.part_sizes, self.examples_per_client)))


SCENARIOS: Dict[int, Scenario] = {
    1: Scenario(
        number=1,
        description=("Part 1 : 20 clients with severe noisy data Part 2 : 20 clients with "
                     "moderate noisy data Part 3 : 20 clients without noise"),
        num_clients=60, part_sizes=(20, 20, 20), examples_per_client=(150, 150, 150),
        noise_phases=((1, ("severe", "moderate", "none")),),
        impact_phases=((1, "0-1-2"),),
        nonprivate_ratios=("1-1-1", "0-1-2", "0-1-1", "0-0-1", "2-1-0"),
        figures=(2, 3)),
    2: Scenario(
        number=2,
        description=("Part 1 : 20 clients with severe noisy data Part 2 : 35 clients with "
                     "slight noisy data Part 3 : 5 clients without noise"),
        num_clients=60, part_sizes=(20, 35, 5), examples_per_client=(150, 150, 150),
        noise_phases=((1, ("severe", "slight", "none")),),
        impact_phases=((1, "0-2-1"),),
        nonprivate_ratios=("1-1-1", "0-2-1", "0-1-2", "0-1-1", "1-2-1"),
        figures=(4, 5)),
    3: Scenario(
        number=3,
        description=("Part 1 : 20 clients with 50 samples Part 2 : 20 clients with 120 "
                     "samples Part 3 : 20 clients with 271 samples"),
        num_clients=60, part_sizes=(20, 20, 20), examples_per_client=(50, 120, 271),
        noise_phases=((1, ("none", "none", "none")),),
        impact_phases=((1, "1-3-5"),),
        nonprivate_ratios=("1-1-1", "1-3-5", "5-3-1"),
        figures=(6, 7)),
    4: Scenario(
        number=4,
        description=("t <= 10: Part 1 : 20 clients with severe noisy data Part 2 : 20 "
                     "clients with moderate noisy data Part 3 : 20 clients with slight "
                     "noisy data 10 < t <= 30: Part 1 : 20 clients with slight noisy data "
                     "Part 2 : 20 clients with moderate noisy data Part 3 : 20 clients "
                     "with severe noisy data"),
        num_clients=60, part_sizes=(20, 20, 20), examples_per_client=(150, 150, 150),
        noise_phases=((1, ("severe", "moderate", "slight")),
                      (11, ("slight", "moderate", "severe"))),
        impact_phases=((1, "0-1-2"), (11, "2-1-0")),
        nonprivate_ratios=("1-1-1", "0-1-2", "0-1-2>2-1-0"),
        figures=(8, 9)),
}


# ---------------------------------------------------------------------------
# Corruption.
# ---------------------------------------------------------------------------

def _check_amount(amount: Any, name: str = "amount") -> float:
  a = check_finite(name, amount, "in [0, 1]")
  if not 0.0 <= a <= 1.0:
    raise FedJaxDpError(f"{name} (a salt-and-pepper density) must be in [0, 1], got "
                        f"{amount!r}.")
  return a


def salt_and_pepper(images: Any, amount: float, rng: RngLike, low: float = 0.0,
                    high: float = 1.0) -> np.ndarray:
  """Salt-and-pepper noise: each pixel, independently, with probability ``amount``,
  is set to ``low`` or ``high`` (half each).

  The standard definition (MATLAB ``imnoise(I, 'salt & pepper', d)``): a pixel
  becomes ``low`` with probability ``amount / 2``, ``high`` with probability
  ``amount / 2``, and is unchanged otherwise. For ``[n, H, W, C]`` a pixel is all
  ``C`` channels of one location (they get the same value). Two uniform fields of
  the pixel shape are drawn from ``rng`` whatever ``amount`` is: "is it hit"
  (``u < amount``) and "salt or pepper" (``v < 1/2``). So, with equal seeds, the
  pixels hit at a smaller amount are a subset of those hit at a larger one and get
  the same value, and an equal amount gives identical images.

  Args:
    images: float ``[n, D]`` (flattened; each entry a pixel), ``[n, H, W]`` or
      ``[n, H, W, C]``.
    amount: density in ``[0, 1]`` (the expected fraction of pixels hit).
    rng: a ``np.random.Generator`` or a non-negative int seed.
    low: the "pepper" value (default 0.0, for pixels scaled to [0, 1]).
    high: the "salt" value (default 1.0); ``low < high``.

  Returns:
    A new array of the same shape and dtype as ``images``.

  Raises:
    FedJaxDpError: non-float images, a wrong number of dimensions, ``amount``
      outside [0, 1], ``low >= high`` or a bad ``rng``.
  """
  x = np.asarray(images)
  if not np.issubdtype(x.dtype, np.floating):
    raise FedJaxDpError(
        f"images must be floating point (pixels scaled, e.g. to [0, 1]), got dtype "
        f"{x.dtype}.")
  if x.ndim not in (2, 3, 4):
    raise FedJaxDpError(
        f"images must be [n, D], [n, H, W] or [n, H, W, C], got shape {x.shape}.")
  a = _check_amount(amount)
  lo, hi = check_finite("low", low), check_finite("high", high)
  if not lo < hi:
    raise FedJaxDpError(f"low must be < high, got low={low!r}, high={high!r}.")
  gen = _as_rng(rng)
  pixel_shape = x.shape[:3] if x.ndim == 4 else x.shape
  hit = gen.random(pixel_shape) < a
  salt = gen.random(pixel_shape) < 0.5
  if x.ndim == 4:
    hit, salt = hit[..., None], salt[..., None]
  return np.where(hit, np.where(salt, hi, lo), x).astype(x.dtype, copy=False)


def _resolve_level(level: Level, densities: Mapping[str, float], name: str) -> float:
  if isinstance(level, str):
    if level not in densities:
      raise FedJaxDpError(
          f"{name}={level!r} is not a known noise level; allowed: "
          f"{', '.join(map(repr, densities))} or a density in [0, 1].")
    return _check_amount(densities[level], f"densities[{level!r}]")
  return _check_amount(level, name)


def _check_part_of_client(part_of_client: Any, num_parts: Optional[int] = None) -> np.ndarray:
  a = np.asarray(part_of_client)
  if a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
    raise FedJaxDpError(
        f"part_of_client must be a non-empty 1-D integer array [num_clients], got shape "
        f"{a.shape} dtype {a.dtype}.")
  if a.min() < 0 or (num_parts is not None and a.max() >= num_parts):
    allowed = f"[0, {num_parts - 1}]" if num_parts is not None else ">= 0"
    raise FedJaxDpError(
        f"part_of_client must hold part indices in {allowed} (one level per part), got "
        f"min {a.min()} max {a.max()}.")
  return a.astype(np.int64)


def corruption_levels(part_of_client: Any, levels: Sequence[Level],
                      densities: Optional[Mapping[str, float]] = None) -> np.ndarray:
  """Per-client salt-and-pepper densities from per-part levels.

  Args:
    part_of_client: int ``[N]``, the part of each client.
    levels: one level per part: a name in ``densities`` (``"none"``, ``"slight"``,
      ``"moderate"``, ``"severe"``) or a density in [0, 1].
    densities: name -> density (default `DENSITIES`).

  Returns:
    float64 ``[N]`` densities.

  Raises:
    FedJaxDpError: an unknown level name, a density outside [0, 1], or a part index
      without a level.
  """
  dens = DENSITIES if densities is None else densities
  levels = list(levels)
  if not levels:
    raise FedJaxDpError("levels must give one level per part, got an empty sequence.")
  per_part = np.array([_resolve_level(lv, dens, f"levels[{k}]")
                       for k, lv in enumerate(levels)])
  return per_part[_check_part_of_client(part_of_client, len(levels))]


def _check_phases(phases: Sequence[Phase]) -> List[Tuple[int, Sequence[Level]]]:
  phases = list(phases)
  if not phases:
    raise FedJaxDpError("phases must contain at least one (start_round, levels) pair.")
  out = []
  for k, ph in enumerate(phases):
    try:
      start, levels = ph
    except (TypeError, ValueError):
      raise FedJaxDpError(
          f"phases[{k}] must be a (start_round, levels per part) pair, got {ph!r}.") from None
    out.append((check_int(f"phases[{k}] start_round", start, minimum=1), levels))
  starts = [s for s, _ in out]
  if starts[0] != 1:
    raise FedJaxDpError(f"phases must start at round 1, got first start_round={starts[0]}.")
  if any(b <= a for a, b in zip(starts, starts[1:])):
    raise FedJaxDpError(f"phases start rounds must be strictly increasing, got {starts}.")
  return out


def _phase_of(round_t: int, starts: Sequence[int]) -> int:
  t = check_int("round_t", round_t, minimum=1)
  return int(np.searchsorted(np.asarray(starts), t, side="right")) - 1


def corruption_at(round_t: int, part_of_client: Any, phases: Sequence[Phase],
                  densities: Optional[Mapping[str, float]] = None) -> np.ndarray:
  """Per-client densities in effect at aggregation round ``round_t`` (1-based).

  Scenario 4 (``SCENARIOS[4].noise_phases``): rounds 1..10 give part 1 severe,
  part 3 slight; rounds 11..30 give part 1 slight, part 3 severe (the local
  training of round 11 already uses the new data).

  Args:
    round_t: aggregation round, int >= 1.
    part_of_client: int ``[N]``.
    phases: ``[(start_round, levels per part), ...]``, first start 1, strictly
      increasing starts.
    densities: name -> density (default `DENSITIES`).

  Returns:
    float64 ``[N]``.

  Raises:
    FedJaxDpError: invalid round, phases or levels.
  """
  ph = _check_phases(phases)
  k = _phase_of(round_t, [s for s, _ in ph])
  return corruption_levels(part_of_client, ph[k][1], densities)


class CorruptedPhase(NamedTuple):
  """One phase of precomputed client data.

  Attributes:
    start_round: first aggregation round (1-based) that trains on ``x``.
    amounts: float64 ``[N]``, each client's density in this phase.
    x: float32 ``[N, max_examples, *feature_shape]``, the corrupted client features
      (padding rows stay 0), a drop-in for `FederatedData.x`.
  """

  start_round: int
  amounts: np.ndarray
  x: np.ndarray


def _base_seed(seed: RngLike) -> int:
  if isinstance(seed, np.random.Generator):
    return int(seed.integers(0, 2 ** 63 - 1))
  _as_rng(seed)  # validates: a non-negative int
  return int(seed)


def corrupt_phases(x: Any, counts: Any, part_of_client: Any, phases: Sequence[Phase],
                   seed: RngLike = 0, densities: Optional[Mapping[str, float]] = None,
                   low: float = 0.0, high: float = 1.0) -> List[CorruptedPhase]:
  """Precomputes every phase's corrupted client features (static shapes for jit).

  Each client ``i`` draws its noise from its own stream
  ``np.random.default_rng([i, seed])`` in every phase: a client whose density does
  not change between phases keeps identical data, and one whose density drops (or
  rises) loses (or gains) hits on a nested set of pixels (see `salt_and_pepper`).
  Only real rows ``x[i, :counts[i]]`` are corrupted; padding stays 0.

  Args:
    x: float ``[N, max_examples, *feature_shape]`` clean client features, with
      per-example shape ``[D]``, ``[H, W]`` or ``[H, W, C]``
      (`FederatedData.x`).
    counts: int ``[N]`` real examples per client.
    part_of_client: int ``[N]``.
    phases: ``[(start_round, levels per part), ...]`` (see `corruption_at`).
    seed: int seed >= 0 or a ``np.random.Generator`` (one integer is drawn from it).
    densities: name -> density (default `DENSITIES`).
    low, high: pepper and salt values (defaults 0 and 1).

  Returns:
    One `CorruptedPhase` per phase, in order.

  Raises:
    FedJaxDpError: mismatched shapes, invalid phases, levels or seed.
  """
  xa = np.asarray(x)
  if xa.ndim not in (3, 4, 5):
    raise FedJaxDpError(
        f"x must be [num_clients, max_examples, *feature_shape] with a feature shape of "
        f"[D], [H, W] or [H, W, C]; got shape {xa.shape}.")
  n = xa.shape[0]
  cnt = np.asarray(counts)
  if cnt.shape != (n,) or not np.issubdtype(cnt.dtype, np.integer):
    raise FedJaxDpError(f"counts must be an integer array of shape ({n},), got shape "
                        f"{cnt.shape} dtype {cnt.dtype}.")
  if cnt.min() < 0 or cnt.max() > xa.shape[1]:
    raise FedJaxDpError(f"counts must be in [0, max_examples={xa.shape[1]}], got min "
                        f"{cnt.min()} max {cnt.max()}.")
  parts = _check_part_of_client(part_of_client)
  if parts.shape != (n,):
    raise FedJaxDpError(f"part_of_client must have shape ({n},) (one part per client), got "
                        f"{parts.shape}.")
  ph = _check_phases(phases)
  amounts = [corruption_levels(parts, levels, densities) for _, levels in ph]
  base = _base_seed(seed)
  xa = xa.astype(np.float32, copy=False)
  out = []
  for (start, _), amt in zip(ph, amounts):
    xc = xa.copy()
    for i in range(n):
      if amt[i] > 0 and cnt[i] > 0:
        rng = np.random.default_rng([i, base])
        xc[i, :cnt[i]] = salt_and_pepper(xa[i, :cnt[i]], amt[i], rng, low, high)
    out.append(CorruptedPhase(start_round=start, amounts=amt, x=xc))
  return out


def phase_for_round(round_t: int, phases: Sequence[CorruptedPhase]) -> CorruptedPhase:
  """The precomputed phase whose data aggregation round ``round_t`` (1-based) trains on.

  Raises:
    FedJaxDpError: ``round_t < 1`` or an empty ``phases``.
  """
  if not phases:
    raise FedJaxDpError("phases is empty.")
  return phases[_phase_of(round_t, [p.start_round for p in phases])]


# ---------------------------------------------------------------------------
# Parts and exact per-client sizes.
# ---------------------------------------------------------------------------

def assign_parts(num_clients: int, part_sizes: Sequence[int], rng: RngLike) -> np.ndarray:
  """Randomly divides clients into parts of given sizes ("we randomly divide clients
  into three parts", PADPFL, Sec. VI).

  Args:
    num_clients: N >= 1.
    part_sizes: clients per part, ints >= 0 summing to N (e.g. (20, 35, 5)).
    rng: a ``np.random.Generator`` or a non-negative int seed.

  Returns:
    int64 ``[N]``: the part index of each client; part ``k`` has exactly
    ``part_sizes[k]`` clients.

  Raises:
    FedJaxDpError: sizes not non-negative integers or not summing to N.
  """
  n = check_int("num_clients", num_clients, minimum=1)
  sizes = [check_int(f"part_sizes[{k}]", s, minimum=0) for k, s in enumerate(part_sizes)]
  if sum(sizes) != n:
    raise FedJaxDpError(
        f"part_sizes must sum to num_clients={n}, got {sizes} (sum {sum(sizes)}).")
  out = np.empty(n, dtype=np.int64)
  out[_as_rng(rng).permutation(n)] = np.repeat(np.arange(len(sizes)), sizes)
  return out


def client_sizes(part_of_client: Any, examples_per_part: Sequence[int]) -> np.ndarray:
  """Per-client dataset sizes from per-part sizes (scenario 3: 50 / 120 / 271).

  Args:
    part_of_client: int ``[N]``.
    examples_per_part: examples per client of each part (ints >= 1).

  Returns:
    int64 ``[N]``.

  Raises:
    FedJaxDpError: a size < 1 or a part without a size.
  """
  sizes = np.array([check_int(f"examples_per_part[{k}]", m, minimum=1)
                    for k, m in enumerate(examples_per_part)], dtype=np.int64)
  if sizes.size == 0:
    raise FedJaxDpError("examples_per_part must give one size per part, got none.")
  return sizes[_check_part_of_client(part_of_client, len(sizes))]


def client_indices_by_size(client_sizes: Any, rng: RngLike, *,
                           num_examples: Optional[int] = None, labels: Any = None,
                           alpha: Optional[float] = None) -> List[np.ndarray]:
  """Disjoint example indices with exactly ``client_sizes[i]`` examples for client ``i``.

  Without ``alpha`` the examples are a uniformly random subset (IID). With
  ``alpha`` (needs ``labels``), each client draws class proportions
  ``q ~ Dir(alpha 1_K)`` and takes ``Multinomial(m_i, q)`` examples per class,
  without replacement from the remaining pool; a class that runs out is topped up
  from the remaining classes in order of decreasing ``q`` (our reading of "non-identically":
  Dirichlet label skew with exact sizes). Examples not requested stay unused.

  Args:
    client_sizes: int ``[N]``, each >= 1.
    rng: a ``np.random.Generator`` or a non-negative int seed.
    num_examples: dataset size n (needed when ``labels`` is None).
    labels: int ``[n]`` labels (needed with ``alpha``).
    alpha: Dirichlet concentration > 0, or None for IID.

  Returns:
    ``N`` sorted int64 index arrays, pairwise disjoint, ``len(out[i]) ==
    client_sizes[i]``, all in ``[0, n)``.

  Raises:
    FedJaxDpError: sizes < 1, neither or inconsistent ``num_examples``/``labels``,
      ``alpha`` without labels or <= 0, or a dataset too small for the sizes.
  """
  sizes = np.asarray(client_sizes)
  if sizes.ndim != 1 or sizes.size == 0 or not np.issubdtype(sizes.dtype, np.integer):
    raise FedJaxDpError(
        f"client_sizes must be a non-empty 1-D integer array, got shape {sizes.shape} "
        f"dtype {sizes.dtype}.")
  if sizes.min() < 1:
    raise FedJaxDpError(f"client_sizes must all be >= 1, got min {sizes.min()}.")
  sizes = sizes.astype(np.int64)
  y = None if labels is None else _check_labels(labels)
  if y is None:
    if num_examples is None:
      raise FedJaxDpError("client_indices_by_size needs num_examples or labels.")
    n = check_int("num_examples", num_examples, minimum=1)
  else:
    n = len(y)
    if num_examples is not None and check_int("num_examples", num_examples) != n:
      raise FedJaxDpError(f"num_examples={num_examples} but len(labels)={n}.")
  need = int(sizes.sum())
  if need > n:
    raise FedJaxDpError(
        f"the dataset is too small: client_sizes need {need} examples in total, the "
        f"dataset has {n}.")
  gen = _as_rng(rng)
  if alpha is None:
    perm = gen.permutation(n)[:need]
    return [np.sort(p).astype(np.int64) for p in np.split(perm, np.cumsum(sizes)[:-1])]
  a = check_positive("alpha", alpha)
  if y is None:
    raise FedJaxDpError("alpha (Dirichlet label skew) needs labels=[num_examples].")
  classes = np.unique(y)
  pools = [gen.permutation(np.flatnonzero(y == k)) for k in classes]
  used = np.zeros(len(classes), dtype=np.int64)
  avail = np.array([len(p) for p in pools], dtype=np.int64)
  out = []
  for m in sizes:
    q = gen.dirichlet(np.full(len(classes), a))
    take = np.minimum(gen.multinomial(int(m), q), avail - used)
    short = int(m - take.sum())
    for k in np.argsort(-q, kind="stable"):
      if short == 0:
        break
      add = min(short, int(avail[k] - used[k] - take[k]))
      take[k] += add
      short -= add
    idx = np.concatenate([pools[k][used[k]:used[k] + take[k]] for k in range(len(classes))])
    used += take
    out.append(np.sort(idx).astype(np.int64))
  return out


# ---------------------------------------------------------------------------
# A whole scenario.
# ---------------------------------------------------------------------------

class ScenarioData(NamedTuple):
  """A built scenario.

  Attributes:
    scenario: the `Scenario` row.
    fd: `FederatedData` whose ``x`` is the first phase's corrupted data.
    part_of_client: int64 ``[N]``.
    clean_x: float32 ``[N, max_examples, ...]``, the uncorrupted client features.
    phases: one `CorruptedPhase` per noise phase (``phases[0].x is fd.x``).
  """

  scenario: Scenario
  fd: FederatedData
  part_of_client: np.ndarray
  clean_x: np.ndarray
  phases: List[CorruptedPhase]


def build_scenario(scenario: Union[int, Scenario], x: Any, y: Any, seed: int = 0, *,
                   alpha: Optional[float] = 1.0, size_scale: float = 1.0,
                   densities: Optional[Mapping[str, float]] = None,
                   num_classes: Optional[int] = None, test_x: Any = None,
                   test_y: Any = None, name: Optional[str] = None, source: str = "",
                   is_subset: bool = False) -> ScenarioData:
  """Builds one of PADPFL's scenarios from central training arrays.

  Steps (independent random streams derived from ``seed``): `assign_parts` with
  the scenario's part sizes; per-client sizes ``max(1, round(m_part *
  size_scale))`` (``size_scale`` < 1 for small datasets such as the 5,000-image
  MNIST subset); `client_indices_by_size` (Dirichlet(alpha)
  label skew, or IID with ``alpha=None``); `corrupt_phases`. The test set is kept
  clean.

  Args:
    scenario: 1 .. 4 (a key of `SCENARIOS`) or a `Scenario`.
    x: ``[n, *feature_shape]`` float features in [0, 1] (feature shape ``[D]``,
      ``[H, W]`` or ``[H, W, C]``).
    y: int ``[n]`` labels.
    seed: int seed >= 0.
    alpha: Dirichlet label-skew concentration (> 0), or None for IID.
    size_scale: factor on the per-client sizes (> 0).
    densities: name -> density (default `DENSITIES`).
    num_classes: default ``max(y) + 1``.
    test_x, test_y: optional central test set (never corrupted).
    name: dataset name (default ``"padpfl_s<k>"``).
    source: provenance.
    is_subset: whether ``x`` is a subset of the named dataset.

  Returns:
    `ScenarioData`.

  Raises:
    FedJaxDpError: an unknown scenario, bad arrays or arguments, or a dataset too
      small for the scenario's sizes.
  """
  if isinstance(scenario, Scenario):
    sc = scenario
  elif (isinstance(scenario, (int, np.integer)) and not isinstance(scenario, bool)
        and int(scenario) in SCENARIOS):
    sc = SCENARIOS[int(scenario)]
  else:
    raise FedJaxDpError(f"scenario must be one of {sorted(SCENARIOS)} or a Scenario, got "
                        f"{scenario!r}.")
  seed = check_int("seed", seed, minimum=0)
  scale = check_positive("size_scale", size_scale)
  xa = np.asarray(x)
  ya = _check_labels(y)
  if xa.ndim < 2 or xa.shape[0] != ya.shape[0]:
    raise FedJaxDpError(f"x must be [n, *feature_shape] with n = len(y) = {len(ya)}, got "
                        f"shape {xa.shape}.")
  if num_classes is None:
    num_classes = int(ya.max()) + 1
  parts_ss, index_ss, noise_ss = np.random.SeedSequence(seed).spawn(3)
  part_of_client = assign_parts(sc.num_clients, sc.part_sizes, np.random.default_rng(parts_ss))
  per_part = [max(1, int(math.floor(m * scale + 0.5))) for m in sc.examples_per_client]
  sizes = client_sizes(part_of_client, per_part)
  idx = client_indices_by_size(sizes, np.random.default_rng(index_ss), labels=ya, alpha=alpha)
  clean_x, yp, counts = gather_padded(xa, ya, idx)
  phases = corrupt_phases(clean_x, counts, part_of_client, sc.noise_phases,
                          np.random.default_rng(noise_ss), densities)
  fd = FederatedData(
      name=name or f"padpfl_s{sc.number}", x=phases[0].x, y=yp, counts=counts,
      num_classes=check_int("num_classes", num_classes, minimum=1),
      test_x=None if test_x is None else np.asarray(test_x, dtype=np.float32),
      test_y=None if test_y is None else np.asarray(test_y, dtype=np.int32),
      source=source, is_subset=is_subset,
      partition=("iid" if alpha is None else f"dirichlet(alpha={alpha:g})")
      + f", exact sizes, PADPFL scenario {sc.number}")
  return ScenarioData(scenario=sc, fd=fd, part_of_client=part_of_client, clean_x=clean_x,
                      phases=phases)
