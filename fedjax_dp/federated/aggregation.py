"""Aggregation of per-client updates (client axis first).

DP-FedAvg (McMahan, Ramage, Talwar, Zhang, ICLR 2018, Alg. 1, the "fixed denominator"
estimator f~_f): ``Delta = (sum_k w_k Delta_k + N(0, (z S)^2 I)) / (q W)`` where the
weights are bounded ``w_k in [0, 1]`` (so one client changes the sum by at most S),
``q`` is the sampling rate and ``W = sum_k w_k`` over the whole population: a public
constant, never the data-dependent cohort weight.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.validation import FedJaxDpError, check_positive

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
  """Validates a user-given per-population-client weight vector ``[N]`` in [0, 1].

  Use it for ``PopulationData(..., weights=w)`` with ``RoundConfig(weighting="custom",
  population_weight=w.sum())``: the fixed DP-FedAvg denominator is then ``q * sum(w)``.

  Returns:
    float64 ``[N]``.

  Raises:
    FedJaxDpError: wrong shape, non-finite entries or entries outside [0, 1].
  """
  w = np.asarray(weights, np.float64)
  if w.shape != (num_clients,):
    raise FedJaxDpError(f"weights must have shape ({num_clients},), got {w.shape}.")
  if not np.all(np.isfinite(w)) or np.any(w < 0) or np.any(w > 1):
    raise FedJaxDpError("weights must be finite and in [0, 1] (bounded for DP).")
  return w
