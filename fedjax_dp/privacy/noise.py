"""Gaussian (or Laplace) noise on pytrees, central (once on an aggregate) or local (per
client).

Randomness is explicit: callers pass keys derived by `fedjax_dp.federated.keys`
(``fold_in(round)``, then ``fold_in(population client id)``), so a run is reproducible
whatever the cohort padding, chunking or device count.

Reference: the Gaussian mechanism, Dwork & Roth (2014), Sec. 3.5 / App. A; its use in
DP-FedAvg: McMahan et al., ICLR 2018, Algorithm 1 (noise N(0, I sigma^2) with
sigma = z * S on the clipped sum).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any

_SQRT2 = np.float32(np.sqrt(2.0))
# -1 + 2^-24 (float32 -1's neighbour towards 0): ``jax.random.normal``'s uniform's lower
# bound, so that erfinv stays finite.
_U_LO = np.nextafter(np.float32(-1.0), np.float32(0.0))
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # Threefry-2x32 (Salmon et al. 2011)


def _threefry2x32_hash(k0, k1, x0, x1):
  """The Threefry-2x32 block function, 20 rounds (5 groups of 4, a key injection after
  each), on uint32 arrays: the same function as ``jax.extend.random.threefry_2x32``
  (bit for bit, tested), written unrolled with constant rotations. JAX lowers its own
  hash on a CPU as a 5-iteration loop with loop-carried rotation amounts (for compile
  time); unrolled, XLA fuses the 20 rounds into one loop over the elements."""
  ks = (k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA))
  x0, x1 = x0 + ks[0], x1 + ks[1]
  for g in range(5):
    for r in _ROTATIONS[g % 2]:
      x0 = x0 + x1
      x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
    x0 = x0 + ks[(g + 1) % 3]
    x1 = x1 + ks[(g + 2) % 3] + np.uint32(g + 1)
  return x0, x1


def _threefry_words(key: jax.Array, n: int) -> jax.Array:
  """uint32 ``[n]``: Threefry-2x32-20 in counter mode under ``key`` (threefry key data).

  The counters ``0 .. n-1`` are hashed in pairs ``(j, j + ceil(n/2))`` (an odd ``n``
  pads the last pair with 0) and *both* output words of every block are used:
  ``ceil(n / 2)`` blocks for ``n`` words. This is ``jax.extend.random.threefry_2x32(
  key_data, arange(n))``, i.e. JAX's ``random_bits`` with
  ``jax_threefry_partitionable=False`` (its default before JAX 0.5.0), bit for bit,
  and the Random123 counter-mode use of Threefry-2x32-20 (Salmon, Moraes, Dror, Shaw,
  "Parallel random numbers: as easy as 1, 2, 3", SC 2011: Threefry-2x32 with 13 or
  more rounds passes TestU01's BigCrush; JAX uses 20). JAX's current partitionable
  layout hashes one block per word and XORs its halves: the same generator, twice the
  hashing (the hash was ~75% of a normal draw on a CPU, measured in
  `benchmarks/RESULTS.md`).
  """
  kd = jax.random.key_data(key)
  h = (n + 1) // 2
  c1 = jnp.arange(h, 2 * h, dtype=jnp.uint32)
  if n % 2:
    c1 = c1.at[-1].set(0)
  y0, y1 = _threefry2x32_hash(kd[0], kd[1], jnp.arange(h, dtype=jnp.uint32), c1)
  return jnp.concatenate([y0, y1])[:n]


def _standard_normal(key: jax.Array, shape) -> jax.Array:
  """float32 N(0, 1) of ``shape``: JAX's ``normal`` transform (23 random mantissa bits
  to a uniform on (-1, 1), then ``sqrt(2) erfinv``) of `_threefry_words`; other key
  implementations (rbg, philox, ...) and leaves of 2^32 - 1 or more entries go through
  ``jax.random.normal`` itself."""
  n = math.prod(shape)
  if jax.random.key_impl(key) != "threefry2x32" or n >= 2**32 - 1:
    return jax.random.normal(key, shape, jnp.float32)
  bits = _threefry_words(key, n).reshape(shape)
  one = jax.lax.bitcast_convert_type(
      jax.lax.shift_right_logical(bits, np.uint32(9)) | np.uint32(0x3F800000),
      jnp.float32) - np.float32(1.0)  # uniform on [0, 1), 2^-23 grid
  u = jnp.maximum(_U_LO, one * (np.float32(1.0) - _U_LO) + _U_LO)
  return _SQRT2 * jax.lax.erf_inv(u)


def gaussian_like(key: jax.Array, tree: PyTree, stddev) -> PyTree:
  """I.i.d. N(0, stddev^2) noise with the structure, shapes and dtypes of ``tree``.

  Leaf ``i`` is ``stddev * z_i`` with ``z_i`` float32 standard normal drawn under its
  own key ``fold_in(key, i)`` (independent streams), cast to the leaf's dtype.
  ``z_i`` is exactly ``jax.random.normal(fold_in(key, i), shape, float32)`` as JAX
  computes it with ``jax_threefry_partitionable=False`` (its inverse-CDF transform of
  Threefry-2x32-20 counter-mode bits, both words of each block used; see
  `_threefry_words` for the generator and its tested quality); keys of another
  implementation use ``jax.random.normal`` as is. Under a sharded ``jit`` whose
  output is split along a leaf axis, this layout may be computed unsplit (same
  values); under ``vmap`` / ``shard_map`` over clients (the rounds here) it is local.

  Args:
    key: a PRNG key (typed or raw uint32); each leaf gets ``fold_in(key, leaf_index)``.
    tree: pytree of float arrays (only shapes/dtypes are used).
    stddev: float scalar >= 0 (same units as the tree's entries).

  Returns:
    A pytree of noise. ``stddev == 0`` gives exact zeros.
  """
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  stddev = jnp.asarray(stddev, jnp.float32)
  noise = [(_standard_normal(jax.random.fold_in(key, i), l.shape) * stddev).astype(l.dtype)
           for i, l in enumerate(leaves)]
  return jax.tree_util.tree_unflatten(treedef, noise)


def add_gaussian_noise(key: jax.Array, tree: PyTree, stddev) -> PyTree:
  """Central noise: ``tree + N(0, stddev^2 I)`` (one draw for the whole aggregate).

  For DP-FedAvg, ``tree`` is the clipped sum and ``stddev = z * C * max_weight``
  (McMahan et al. 2018, Alg. 1).
  """
  return jax.tree_util.tree_map(jnp.add, tree, gaussian_like(key, tree, stddev))


def laplace_like(key: jax.Array, tree: PyTree, stddev) -> PyTree:
  """I.i.d. Laplace noise of standard deviation ``stddev`` (scale ``b = stddev /
  sqrt(2)``) with the structure, shapes and dtypes of ``tree``; leaf ``i`` uses
  ``fold_in(key, i)``. ``stddev == 0`` gives exact zeros. (The Laplace mechanism:
  Dwork & Roth 2014, Def. 3.3.)"""
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  scale = jnp.asarray(stddev, jnp.float32) / jnp.sqrt(jnp.float32(2.0))
  noise = [(jax.random.laplace(jax.random.fold_in(key, i), l.shape, jnp.float32) * scale)
           .astype(l.dtype) for i, l in enumerate(leaves)]
  return jax.tree_util.tree_unflatten(treedef, noise)


DISTRIBUTIONS = ("gaussian", "laplace")


def add_local_noise(keys: jax.Array, updates: PyTree, stddevs,
                    distribution: str = "gaussian") -> PyTree:
  """Local noise: client k's update gets its own zero-mean noise of standard deviation
  ``stddevs[k]`` per coordinate, Gaussian ``N(0, stddevs[k]^2 I)`` or Laplace.

  Args:
    keys: ``[K]`` PRNG keys, one per client (fold in the population client id).
    updates: pytree with leaves ``[K, ...]``.
    stddevs: float ``[K]`` per-client standard deviations (or a scalar for all).
    distribution: ``"gaussian"`` or ``"laplace"`` (static).

  Returns:
    The noisy updates, leaves ``[K, ...]``.
  """
  stddevs = jnp.broadcast_to(jnp.asarray(stddevs, jnp.float32), (keys.shape[0],))
  like = laplace_like if distribution == "laplace" else gaussian_like
  add = lambda k, u, s: jax.tree_util.tree_map(jnp.add, u, like(k, u, s))
  return jax.vmap(add)(keys, updates, stddevs)
