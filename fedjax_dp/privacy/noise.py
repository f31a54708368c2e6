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
