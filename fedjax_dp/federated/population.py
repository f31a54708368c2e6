"""Device-resident populations and the per-chunk gather of a cohort's data.

Two layouts, both pytrees that the jitted round takes as an argument:

* `PopulationData`: every client's padded examples, ``x [N, max_n, ...]``. Simple and
  exact; memory is ``N * max_n`` examples.
* `PooledPopulation`: a compact layout for very large simulated populations (10^6
  clients and more): one shared pool of ``M`` examples, and client ``k``'s ``j``-th
  example is pool row ``(k * client_stride + j * example_stride) mod M``. Memory is
  ``M`` examples plus ``counts [N]``, whatever ``N``; the rows are gathered only for
  the clients of the chunk being trained. This is a *simulation* layout (clients
  share examples), meant for throughput and scale studies, not for accuracy claims.

`gather_clients(data, ids)` returns ``(x [k, max_n, ...], y [k, max_n], counts [k])``
for population ids ``ids [k]`` in either layout.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.validation import FedJaxDpError, check_int


MAX_POOL = 2**16  # row arithmetic stays exact in uint32


class PopulationData(NamedTuple):
  """Device-resident population: ``x [N, max_n, ...]``, ``y [N, max_n]``, ``counts [N]``.

  ``weights`` (float32 ``[N]``, optional) are per-population-client aggregation
  weights (public, finite, >= 0), read only with ``RoundConfig(weighting="custom")``
  (validate them with `fedjax_dp.federated.aggregation.custom_weights`). With central
  noise one client moves the weighted sum by at most ``max_k w_k`` times the clip
  norm, the sensitivity the round reports (so weights above 1 cost privacy; see
  `fedjax_dp.federated.round.RoundHParams.client_weights`).
  """
  x: jax.Array
  y: jax.Array
  counts: jax.Array
  weights: Optional[jax.Array] = None

  @property
  def num_clients(self) -> int:
    return int(self.counts.shape[0])

  @property
  def max_examples(self) -> int:
    return int(self.x.shape[1])

  @property
  def example_shape(self) -> Tuple[int, ...]:
    return tuple(self.x.shape[2:])


class PooledPopulation(NamedTuple):
  """Compact population over a shared example pool (see the module docstring).

  Attributes:
    pool_x: float ``[M, ...]`` example features.
    pool_y: int32 ``[M]`` labels.
    counts: int32 ``[N]`` examples per client (each <= ``max_examples``).
    max_examples: static padded per-client example count (a Python int; pytree aux).
    client_stride, example_stride: Python ints; client ``k``'s example ``j`` is pool
      row ``(k * client_stride + j * example_stride) mod M``.
    weights: optional float32 ``[N]`` custom aggregation weights.
  """
  pool_x: jax.Array
  pool_y: jax.Array
  counts: jax.Array
  max_examples: int
  client_stride: int
  example_stride: int
  weights: Optional[jax.Array] = None

  @property
  def num_clients(self) -> int:
    return int(self.counts.shape[0])

  @property
  def example_shape(self) -> Tuple[int, ...]:
    return tuple(self.pool_x.shape[1:])


# max_examples and the strides are static structure, not traced leaves.
jax.tree_util.register_pytree_node(
    PooledPopulation,
    lambda p: ((p.pool_x, p.pool_y, p.counts, p.weights),
               (p.max_examples, p.client_stride, p.example_stride)),
    lambda aux, ch: PooledPopulation(ch[0], ch[1], ch[2], aux[0], aux[1], aux[2], ch[3]))


def check_population(data: Any) -> None:
  """Host-side checks of a population before it is handed to a compiled round.

  `PopulationData`: ``y`` is ``[N, max_n]`` like ``x``'s first two axes, ``counts`` an
  integer ``[N]`` in ``[0, max_n]`` (a client with 0 examples takes part with a zero
  update). Either layout: ``weights``, when given, are ``[N]``, finite and >= 0 (any
  size: the round's sensitivity scales with their maximum).

  Raises:
    FedJaxDpError: naming the field and what is allowed.
  """
  if isinstance(data, PopulationData):
    xs, ys, cs = np.shape(data.x), np.shape(data.y), np.shape(data.counts)
    if len(xs) < 2 or ys != xs[:2] or cs != xs[:1]:
      raise FedJaxDpError(
          f"PopulationData shapes disagree: x {xs}, y {ys}, counts {cs}; expected x [N, "
          "max_n, ...], y [N, max_n], counts [N].")
    if xs[0] == 0:
      raise FedJaxDpError("PopulationData has no clients (N = 0).")
    counts = np.asarray(data.counts)
    if not np.issubdtype(counts.dtype, np.integer):
      raise FedJaxDpError(f"counts must be integers, got dtype {counts.dtype}.")
    if counts.min() < 0 or counts.max() > xs[1]:
      raise FedJaxDpError(f"counts must lie in [0, max_n={xs[1]}], got [{counts.min()}, "
                          f"{counts.max()}].")
  elif not isinstance(data, PooledPopulation):
    raise FedJaxDpError(f"data must be a PopulationData or PooledPopulation, got "
                        f"{type(data).__name__}.")
  if data.weights is not None:
    w = np.asarray(data.weights, np.float64)
    if w.shape != (data.num_clients,):
      raise FedJaxDpError(f"weights must have shape ({data.num_clients},), got {w.shape}.")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
      raise FedJaxDpError("weights must be finite and >= 0.", option="weights")


def make_pooled_population(pool_x: Any, pool_y: Any, counts: Any, *,
                           max_examples: Optional[int] = None,
                           weights: Any = None) -> PooledPopulation:
  """Builds a `PooledPopulation` on the default device.

  Args:
    pool_x: ``[M, ...]`` example features (float), ``1 <= M <= MAX_POOL`` (2^16).
    pool_y: ``[M]`` integer labels.
    counts: ``[N]`` examples per client, each in ``[1, max_examples]``.
    max_examples: static per-client padding (default ``max(counts)``).
    weights: optional ``[N]`` custom aggregation weights.

  The strides are fixed odd primes coprime with ``M`` (chosen here), so the clients'
  windows are spread over the pool and a client's examples are distinct when
  ``count <= M``.

  Raises:
    FedJaxDpError: mismatched shapes, an empty pool or counts outside ``[1, max]``.
  """
  pool_x = np.asarray(pool_x)
  pool_y = np.asarray(pool_y)
  counts = np.asarray(counts)
  if pool_x.ndim < 2 or pool_y.shape != pool_x.shape[:1] or pool_x.shape[0] == 0:
    raise FedJaxDpError(
        f"pool_x must be [M, ...] and pool_y [M] with M >= 1, got {pool_x.shape} and "
        f"{pool_y.shape}.")
  if counts.ndim != 1 or counts.size == 0:
    raise FedJaxDpError(f"counts must be a non-empty [N] vector, got shape {counts.shape}.")
  max_n = int(counts.max()) if max_examples is None else check_int(
      "max_examples", max_examples, minimum=1)
  if counts.min() < 1 or counts.max() > max_n:
    raise FedJaxDpError(
        f"counts must lie in [1, max_examples={max_n}], got [{counts.min()}, "
        f"{counts.max()}].")
  m = pool_x.shape[0]
  if m > MAX_POOL:
    raise FedJaxDpError(f"pool_x may hold at most {MAX_POOL} examples, got {m}.")
  strides = [p for p in (104729, 7919, 6151, 3571, 1021, 97, 13, 7, 3, 1)
             if math.gcd(p, m) == 1]
  client_stride, example_stride = strides[0], 1
  return PooledPopulation(
      jnp.asarray(pool_x, jnp.float32), jnp.asarray(pool_y, jnp.int32),
      jnp.asarray(counts, jnp.int32), max_n, client_stride, example_stride,
      None if weights is None else jnp.asarray(weights, jnp.float32))


def gather_clients(data, ids: jax.Array) -> Tuple[jax.Array, jax.Array, jax.Array]:
  """The padded data of population clients ``ids`` (int32 ``[k]``).

  Returns:
    ``(x [k, max_n, ...], y int32 [k, max_n], counts int32 [k])``. For a
    `PooledPopulation`, rows past a client's count are real pool rows; local training
    masks them by ``counts``, exactly as it masks padding in `PopulationData`.
  """
  if isinstance(data, PooledPopulation):
    m = data.pool_x.shape[0]
    # Exact in uint32: every factor is reduced mod M <= 2^16 before multiplying.
    k = ids.astype(jnp.uint32) % m
    j = jnp.arange(data.max_examples, dtype=jnp.uint32) % m
    rows = ((k[:, None] * jnp.uint32(data.client_stride % m)) % m +
            (j[None, :] * jnp.uint32(data.example_stride % m)) % m) % m
    rows = rows.astype(jnp.int32)
    return data.pool_x[rows], data.pool_y[rows], data.counts[ids]
  return data.x[ids], data.y[ids], data.counts[ids]
