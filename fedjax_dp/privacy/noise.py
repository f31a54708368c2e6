"""Gaussian noise on pytrees, central (once on an aggregate) or local (per client).

Randomness is explicit: callers pass keys derived by `fedjax_dp.federated.keys`
(``fold_in(round)``, then ``fold_in(population client id)``), so a run is reproducible
whatever the cohort padding, chunking or device count.

Reference: the Gaussian mechanism, Dwork & Roth (2014), Sec. 3.5 / App. A; its use in
DP-FedAvg: McMahan et al., ICLR 2018, Algorithm 1 (noise N(0, I sigma^2) with
sigma = z * S on the clipped sum).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any


def gaussian_like(key: jax.Array, tree: PyTree, stddev) -> PyTree:
  """I.i.d. N(0, stddev^2) noise with the structure, shapes and dtypes of ``tree``.

  Args:
    key: a PRNG key; each leaf gets an independent stream ``fold_in(key, leaf_index)``.
    tree: pytree of float arrays (only shapes/dtypes are used).
    stddev: float scalar >= 0 (same units as the tree's entries).

  Returns:
    A pytree of noise. ``stddev == 0`` gives exact zeros.
  """
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  stddev = jnp.asarray(stddev, jnp.float32)
  noise = [
      (jax.random.normal(jax.random.fold_in(key, i), l.shape, jnp.float32) * stddev)
      .astype(l.dtype) for i, l in enumerate(leaves)
  ]
  return jax.tree_util.tree_unflatten(treedef, noise)


def add_gaussian_noise(key: jax.Array, tree: PyTree, stddev) -> PyTree:
  """Central noise: ``tree + N(0, stddev^2 I)`` (one draw for the whole aggregate).

  For DP-FedAvg, ``tree`` is the clipped sum and ``stddev = z * C * max_weight``
  (McMahan et al. 2018, Alg. 1).
  """
  return jax.tree_util.tree_map(jnp.add, tree, gaussian_like(key, tree, stddev))


def add_local_noise(keys: jax.Array, updates: PyTree, stddevs) -> PyTree:
  """Local noise: client k's update gets its own ``N(0, stddevs[k]^2 I)``.

  Args:
    keys: ``[K]`` PRNG keys, one per client (fold in the population client id).
    updates: pytree with leaves ``[K, ...]``.
    stddevs: float ``[K]`` per-client standard deviations (or a scalar for all).

  Returns:
    The noisy updates, leaves ``[K, ...]``.
  """
  stddevs = jnp.broadcast_to(jnp.asarray(stddevs, jnp.float32), (keys.shape[0],))
  return jax.vmap(add_gaussian_noise)(keys, updates, stddevs)
