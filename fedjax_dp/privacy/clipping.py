"""Clipping primitives: global-L2 clipping of pytrees, per client or per example.

Edge cases (all handled without branching on the host, so they are jit-safe):

=====================  ==========================================================
input                  result
=====================  ==========================================================
norm <= C              unchanged (scale factor exactly 1)
norm > C               scaled by C / norm, so the clipped norm is C (up to float
                       rounding, never more than C * (1 + 1e-6))
norm == 0              unchanged (zeros); no division by zero
C == 0                 all zeros
any NaN / +-Inf leaf   the WHOLE update is replaced by zeros and flagged
                       (``is_finite = False``); its reported norm is 0
=====================  ==========================================================

Reference: McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent
Language Models", ICLR 2018, Algorithm 1 (``ClipFn`` flat clipping, pi(Delta, S) =
Delta * min(1, S / ||Delta||)); Abadi et al., "Deep Learning with Differential
Privacy", CCS 2016, Algorithm 1 (per-example gradient clipping).
"""

from __future__ import annotations

from typing import Any, Tuple

import jax
import jax.numpy as jnp

PyTree = Any


def global_norm(tree: PyTree) -> jax.Array:
  """Global L2 norm of all leaves, float32 scalar: sqrt(sum_l ||leaf_l||_2^2)."""
  leaves = [l.astype(jnp.float32) for l in jax.tree_util.tree_leaves(tree)]
  leaves = [l for l in leaves if l.size]
  if not leaves:
    return jnp.zeros((), jnp.float32)
  # Rescale by the largest magnitude so that squaring neither overflows (entries
  # above ~1e19 would give an infinite norm) nor underflows (entries below ~1e-19
  # would give a zero norm). NaN/Inf entries still give a NaN/Inf norm.
  m = jnp.max(jnp.stack([jnp.max(jnp.abs(l)) for l in leaves]))
  s = jnp.where((m > 0) & jnp.isfinite(m), m, 1.0)
  return s * jnp.sqrt(sum(jnp.sum(jnp.square(l / s)) for l in leaves))


def is_finite(tree: PyTree) -> jax.Array:
  """bool scalar: True iff every entry of every leaf is finite."""
  leaves = jax.tree_util.tree_leaves(tree)
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(l)) for l in leaves])) if leaves else (
      jnp.array(True))


def zero_if_nonfinite(tree: PyTree) -> Tuple[PyTree, jax.Array]:
  """Replaces the whole tree by zeros if any entry is NaN/Inf.

  Returns:
    ``(tree_or_zeros, finite)`` with ``finite`` a bool scalar.
  """
  finite = is_finite(tree)
  return jax.tree_util.tree_map(lambda l: jnp.where(finite, l, jnp.zeros_like(l)), tree), finite


def clip_by_global_norm(tree: PyTree, clip_norm) -> Tuple[PyTree, jax.Array, jax.Array]:
  """Clips a pytree to global L2 norm at most ``clip_norm`` (see the table above).

  Args:
    tree: pytree of float arrays (one client's update, or one example's gradient).
    clip_norm: float scalar (array or Python float) C >= 0.

  Returns:
    ``(clipped, norm, finite)``: the clipped tree (same structure and dtypes), the
    pre-clip global norm (float32 scalar, 0 for a non-finite tree) and a bool scalar
    that is False when the tree had NaN/Inf entries and was zeroed.
  """
  tree, finite = zero_if_nonfinite(tree)
  norm = global_norm(tree)
  clip_norm = jnp.asarray(clip_norm, jnp.float32)
  # min(1, C / norm) with norm == 0 -> 1; the maximum() only guards the division.
  scale = jnp.where(norm > clip_norm, clip_norm / jnp.maximum(norm, 1e-30), 1.0)
  clipped = jax.tree_util.tree_map(lambda l: (l * scale).astype(l.dtype), tree)
  return clipped, norm, finite


def clip_per_client(updates: PyTree, clip_norm) -> Tuple[PyTree, jax.Array, jax.Array]:
  """`clip_by_global_norm` vmapped over the leading (client) axis.

  Args:
    updates: pytree whose leaves are ``[K, ...]``.
    clip_norm: float scalar C.

  Returns:
    ``(clipped [K, ...], norms float32 [K], finite bool [K])``.
  """
  return jax.vmap(clip_by_global_norm, in_axes=(0, None))(updates, clip_norm)


def clip_per_example(grads: PyTree, clip_norm) -> Tuple[PyTree, jax.Array, jax.Array]:
  """Per-example clipping for DP-SGD: `clip_by_global_norm` over the batch axis.

  Args:
    grads: per-example gradients, leaves ``[B, ...]``.
    clip_norm: float scalar C.

  Returns:
    ``(clipped [B, ...], norms float32 [B], finite bool [B])``.
  """
  return jax.vmap(clip_by_global_norm, in_axes=(0, None))(grads, clip_norm)
