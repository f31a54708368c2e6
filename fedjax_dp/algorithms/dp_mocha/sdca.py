"""The devices' local solver (DP-MOCHA, Hu et al. 2020, Algorithm 1 line 4): SDCA on
the local dual subproblem (eq. 7) with the hinge loss's closed-form coordinate step.

Subproblem of device t (eq. 7), with Omega~_t = Omega_tt I_d:

  min_{dalpha_t} sum_i l*(-alpha_i - dalpha_i) + w_t^T X_t dalpha_t
                 + (beta / (4 lam)) Omega_tt ||X_t dalpha_t||^2.

Restricted to one coordinate i (our derivation for Sec. VII-A's hinge loss), with
v = X_t dalpha_t and c_t = beta Omega_tt / (2 lam):

  a_old = y_i (alpha_i + dalpha_i)                                     (in [0, 1])
  a_new = clip(a_old + (1 - y_i x_i^T (w_t + c_t v)) / (c_t ||x_i||^2), 0, 1)
  dalpha_i += y_i (a_new - a_old);  v += y_i (a_new - a_old) x_i.

Coordinates are drawn uniformly with replacement (the paper's SDCA), ``steps[t]`` of
them on device t: a ``lax.fori_loop`` over the static maximum with a per-device step
mask, ``vmap``ped over devices, so heterogeneous step counts never recompile.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def local_sdca_one(key: jax.Array, w: jax.Array, alpha: jax.Array, x: jax.Array,
                   y: jax.Array, count: jax.Array, c: jax.Array, steps: jax.Array,
                   max_steps: int):
  """SDCA on one device's subproblem (eq. 7).

  Args:
    key: PRNG key of this device's coordinate draws.
    w: float32 ``[d]`` this device's model w_t.
    alpha: float32 ``[n_max]`` its current duals (``y * alpha`` in [0, 1]).
    x: float32 ``[n_max, d]`` its rows (zero padding), y: float32 ``[n_max]`` in {-1, 1}.
    count: int32 n_t >= 1, the real rows (coordinates are drawn from 0..n_t - 1).
    c: float32 c_t = beta Omega_tt / (2 lam) > 0.
    steps: int32 number of coordinate steps this round (0 <= steps <= max_steps).
    max_steps: static loop length.

  Returns:
    ``(dalpha [n_max], v [d])`` with ``v = X_t dalpha`` (float32); entries on padding
    rows stay 0 and ``y * (alpha + dalpha)`` stays in [0, 1].
  """
  u = jax.random.uniform(key, (max_steps,))
  idx = jnp.minimum((u * count).astype(jnp.int32), count - 1)

  def body(s, carry):
    dalpha, v = carry
    i = idx[s]
    xi, yi = x[i], y[i]
    sq = jnp.dot(xi, xi)
    a_old = yi * (alpha[i] + dalpha[i])
    step = (1.0 - yi * jnp.dot(xi, w + c * v)) / jnp.maximum(c * sq, 1e-30)
    a_new = jnp.clip(a_old + step, 0.0, 1.0)
    delta = jnp.where((s < steps) & (sq > 0), yi * (a_new - a_old), 0.0)
    return dalpha.at[i].add(delta), v + delta * xi

  init = (jnp.zeros_like(alpha), jnp.zeros_like(w))
  return jax.lax.fori_loop(0, max_steps, body, init)


def local_sdca(keys: jax.Array, w: jax.Array, alpha: jax.Array, x: jax.Array,
               y: jax.Array, counts: jax.Array, c: jax.Array, steps: jax.Array,
               max_steps: int):
  """`local_sdca_one` vmapped over the m devices (every argument but ``max_steps`` has a
  leading ``[m]`` axis). Returns ``(dalpha [m, n_max], v [m, d])``."""
  return jax.vmap(local_sdca_one, in_axes=(0, 0, 0, 0, 0, 0, 0, 0, None))(
      keys, w, alpha, x, y, counts, c, steps, max_steps)


def local_objective(dalpha: jax.Array, w: jax.Array, alpha: jax.Array, x: jax.Array,
                    y: jax.Array, mask: jax.Array, c: jax.Array) -> jax.Array:
  """G_t^beta(dalpha; w_t, alpha_t) of eq. (7) for the hinge loss, divided by nothing
  (``c = beta Omega_tt / (2 lam)``, so the quadratic term is (c / 2) ||X_t dalpha||^2),
  for one device: float32 scalar (+inf outside the box is not checked here)."""
  v = jnp.einsum("n,nd->d", dalpha * mask, x)
  return (-jnp.sum(y * (alpha + dalpha) * mask) + jnp.dot(w, v)
          + 0.5 * c * jnp.dot(v, v))
