"""Aggregation of per-client updates (client axis first).

DP-FedAvg (McMahan, Ramage, Talwar, Zhang, ICLR 2018, Alg. 1, the "fixed denominator"
estimator f~_f): ``Delta = (sum_k w_k Delta_k + N(0, (z S)^2 I)) / (q W)`` where the
weights are bounded ``w_k in [0, 1]`` (so one client changes the sum by at most S),
``q`` is the sampling rate and ``W = sum_k w_k`` over the whole population: a public
constant, never the data-dependent cohort weight.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.privacy import clipping, noise
from fedjax_dp.validation import FedJaxDpError, check_positive, check_weights

PyTree = Any


def weighted_sum(updates: PyTree, weights: jax.Array) -> PyTree:
  """``sum_k weights[k] * updates[k]``.

  Args:
    updates: pytree of ``[K, ...]`` leaves.
    weights: float32 ``[K]`` (0 for padded slots: they then contribute exactly 0).

  Returns:
    Pytree of the per-client leaf shapes ``[...]``.
  """
  w = jnp.asarray(weights, jnp.float32)
  return jax.tree_util.tree_map(
      lambda l: jnp.tensordot(w, l.astype(jnp.float32), axes=(0, 0)).astype(l.dtype),
      updates)


def weighted_mean(updates: PyTree, weights: jax.Array,
                  denominator: Optional[Any] = None) -> PyTree:
  """Weighted mean ``sum_k w_k u_k / D``.

  Args:
    updates: ``[K, ...]`` leaves.
    weights: float32 ``[K]``.
    denominator: a fixed public denominator (DP-FedAvg: ``q W``); ``None`` divides by
      the actual ``sum_k w_k`` (non-private FedAvg; a cohort with zero total weight
      yields zeros, not NaN).
  """
  total = weighted_sum(updates, weights)
  if denominator is None:
    denominator = jnp.maximum(jnp.sum(jnp.asarray(weights, jnp.float32)), 1e-12)
  d = jnp.asarray(denominator, jnp.float32)
  return jax.tree_util.tree_map(lambda l: l / d, total)


def uniform_weights(mask: jax.Array) -> jax.Array:
  """float32 ``[K]``: 1 for participants, 0 for padding."""
  return mask.astype(jnp.float32)


def data_size_weights(counts: jax.Array, mask: jax.Array,
                      cap: Optional[float] = None) -> jax.Array:
  """Data-size weights, bounded for DP: ``w_k = min(n_k / cap, 1)`` (McMahan et al.
  2018, Sec. 2), or raw ``n_k`` when ``cap`` is None (non-private FedAvg only)."""
  n = counts.astype(jnp.float32)
  w = n if cap is None else jnp.minimum(n / cap, 1.0)
  return w * mask.astype(jnp.float32)


def population_weight_total(counts: np.ndarray, weighting: str,
                            cap: Optional[float] = None) -> float:
  """``W = sum_k w_k`` over the whole population (host, float): the public constant of
  the fixed denominator ``q W``."""
  counts = np.asarray(counts, np.float64)
  if weighting == "uniform":
    return float(len(counts))
  if weighting == "data_size":
    if cap is None:
      return float(counts.sum())
    check_positive("data_size_cap", cap)
    return float(np.minimum(counts / cap, 1.0).sum())
  raise FedJaxDpError(f"weighting must be 'uniform' or 'data_size', got {weighting!r}; "
                      "for custom weights W is their sum.")


def custom_weights(weights: Any, num_clients: int) -> np.ndarray:
  """Validates a user-given per-population-client weight vector ``[N]`` (public,
  finite, >= 0).

  Use it for ``PopulationData(..., weights=w)`` with ``RoundConfig(weighting="custom",
  population_weight=w.sum())``: the fixed DP-FedAvg denominator is then ``q * sum(w)``.
  Weights above 1 are accounted, not refused: with central noise one client moves the
  weighted sum by at most ``max_k w_k * C`` (add/remove, zero-out; twice that under
  replace-one), which the round uses as its sensitivity
  (`fedjax_dp.privacy.sensitivity.sum_sensitivity`), so it reports the noise
  multiplier ``z / max_k w_k`` and the ledger composes that.

  Returns:
    float64 ``[N]``.

  Raises:
    FedJaxDpError: wrong shape (option ``weights``), non-finite or negative entries.
  """
  return check_weights("weights", weights, size=num_clients)


def clipped_weighted_sum(updates: PyTree, weights: jax.Array,
                         clip_norm) -> Tuple[PyTree, jax.Array, jax.Array]:
  """``sum_k w_k clip(Delta_k, C)`` in two passes over the updates (the DP hot path).

  Same result as `fedjax_dp.privacy.clipping.clip_per_client` followed by
  `weighted_sum`, but the common case (every update finite, no float overflow) reads
  the ``[K, P]`` updates only twice: once for the per-client sums of squares and once
  for the weighted sum ``(w * s)^T Delta`` with ``s_k = min(1, C / ||Delta_k||)``
  (McMahan et al., ICLR 2018, Alg. 1, ClipFn). If any sum of squares is NaN/Inf (a
  non-finite update, or entries above ~1e19), a ``lax.cond`` takes the exact
  overflow-safe path of `clip_per_client`, which zeroes and flags non-finite updates.
  (Under an outer ``vmap`` both branches are computed; the result is the same.)

  Args:
    updates: pytree of ``[K, ...]`` float leaves.
    weights: float32 ``[K]`` (0 for padding).
    clip_norm: float scalar C >= 0.

  Returns:
    ``(total, norms float32 [K], finite bool [K])``: ``total`` has the per-client leaf
    shapes in float32; ``norms`` are the pre-clip L2 norms (0 for a non-finite update;
    entries so small that their squares underflow give a norm of 0, which clips
    exactly as their true norm would for any C > 1e-19).
  """
  leaves = jax.tree_util.tree_leaves(updates)
  k = leaves[0].shape[0]
  c = jnp.asarray(clip_norm, jnp.float32)
  w = jnp.asarray(weights, jnp.float32)
  flat = [l.reshape(k, -1).astype(jnp.float32) for l in leaves]
  ss = sum(jnp.sum(f * f, axis=1) for f in flat)

  def fast(_):
    norms = jnp.sqrt(ss)
    scale = jnp.where(norms > c, c / jnp.maximum(norms, 1e-30), 1.0)
    coef = w * scale
    total = jax.tree_util.tree_map(
        lambda l: jnp.tensordot(coef, l.astype(jnp.float32), axes=(0, 0)), updates)
    return total, norms, jnp.ones((k,), bool)

  def safe(_):
    clipped, norms, finite = clipping.clip_per_client(updates, c)
    total = jax.tree_util.tree_map(
        lambda l: jnp.tensordot(w, l.astype(jnp.float32), axes=(0, 0)), clipped)
    return total, norms, finite

  return jax.lax.cond(jnp.all(jnp.isfinite(ss)), fast, safe, None)


def dp_aggregate(updates: PyTree, weights: jax.Array, clip_norm, noise_stddev,
                 key: jax.Array) -> PyTree:
  """Central-DP aggregate of materialised client updates: clip -> sum -> noise.

  ``sum_k w_k clip(Delta_k, C) + N(0, sigma^2 I)`` (McMahan et al., ICLR 2018, Alg. 1,
  before the division by the public denominator), with ``sigma = noise_stddev``
  (``z * C`` for DP-FedAvg with weights in [0, 1]). Two passes over the updates
  (`clipped_weighted_sum`) and one Gaussian draw of the aggregate's size.

  Args:
    updates: pytree of ``[K, ...]`` float leaves.
    weights: float32 ``[K]``.
    clip_norm: C >= 0.
    noise_stddev: sigma >= 0 (units of the updates).
    key: PRNG key of the noise.

  Returns:
    Pytree of the per-client leaf shapes (float32).
  """
  total, _, _ = clipped_weighted_sum(updates, weights, clip_norm)
  return noise.add_gaussian_noise(key, total, noise_stddev)
