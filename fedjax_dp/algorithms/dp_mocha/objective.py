"""The federated multi-task SVM objective of DP-MOCHA (Hu et al. 2020, Sec. III-IV):
hinge loss, the primal P(W, Omega) (eq. 1/4), the dual D(alpha) (eq. 5), the primal-dual
map (eq. 6), the duality gap, and the per-device test error.

Layout (static shapes, the device axis first, as everywhere in fedjax_dp): the paper's
X_t in R^{d x n_t} (a column per sample) is stored row-wise and padded,

* ``x``: float32 ``[m, n_max, d]``, rows past a device's count are zero;
* ``y``: float32 ``[m, n_max]`` labels in {-1, +1} (0 on padding rows);
* ``mask``: float32 ``[m, n_max]``, 1 on real rows;
* ``w``: float32 ``[m, d]``, row t is the paper's column w_t of W;
* ``alpha``: float32 ``[m, n_max]`` dual variables, ``y * alpha`` in [0, 1] (the hinge
  conjugate's box) and 0 on padding rows;
* ``omega``: float32 ``[m, m]`` task covariance, PSD with trace 1.

The loss is a SUM over samples (not a per-task mean) and the regulariser is
``lam * tr(W Omega^{-1} W^T)``, as the paper writes eq. (1); MOCHA's code uses per-task
means and ``lam/2``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def hinge_loss(margins: Array, y: Array) -> Array:
  """max(0, 1 - y u) elementwise (paper Sec. VII-A; L-Lipschitz with L = 1).

  Args:
    margins: float ``[...]`` predictions u = w^T x.
    y: float ``[...]`` labels in {-1, +1}.
  """
  return jnp.maximum(0.0, 1.0 - y * margins)


def device_sums(alpha: Array, x: Array, mask: Array) -> Array:
  """v_t = X_t alpha_t for every device: float32 ``[m, d]`` (padding rows excluded)."""
  return jnp.einsum("tn,tnd->td", alpha * mask, x)


def regulariser(w: Array, omega: Array, lam) -> Array:
  """lam * tr(W Omega^{-1} W^T) = lam * sum_{s,t} (Omega^{-1})_{st} w_s^T w_t (eq. 1),
  via a linear solve (no explicit inverse). ``w`` ``[m, d]``, ``omega`` ``[m, m]``."""
  gram = w @ w.T
  return lam * jnp.trace(jnp.linalg.solve(omega, gram))


def primal(w: Array, omega: Array, x: Array, y: Array, mask: Array, lam) -> Array:
  """P(W, Omega) of eq. (1) / (4): sum of hinge losses over every real sample plus the
  regulariser. Returns a float32 scalar."""
  margins = jnp.einsum("tnd,td->tn", x, w)
  return jnp.sum(hinge_loss(margins, y) * mask) + regulariser(w, omega, lam)


def primal_dual_map(alpha: Array, omega: Array, x: Array, mask: Array, lam) -> Array:
  """w(alpha) = (1 / (2 lam)) Omega~ X alpha (eq. 6), i.e.
  w_t = (1 / (2 lam)) sum_s Omega_ts X_s alpha_s. Returns float32 ``[m, d]``."""
  return omega @ device_sums(alpha, x, mask) / (2.0 * lam)


def dual(alpha: Array, omega: Array, x: Array, y: Array, mask: Array, lam) -> Array:
  """D(alpha) of eq. (5) for the hinge loss, whose conjugate is l*(-a) = -a y on the box
  y a in [0, 1]:

    D(alpha) = -sum_t sum_i y_t^i alpha_t^i
               + (1 / (4 lam)) sum_{s,t} Omega_st (X_s alpha_s)^T (X_t alpha_t).

  The caller keeps ``alpha`` feasible (the local solver projects onto the box). The
  paper's "P(W*) = D(alpha*)" holds as P(W*) = -D(alpha*) in this sign convention.
  Returns a float32 scalar.
  """
  v = device_sums(alpha, x, mask)
  return -jnp.sum(y * alpha * mask) + jnp.sum(omega * (v @ v.T)) / (4.0 * lam)


def duality_gap(alpha: Array, omega: Array, x: Array, y: Array, mask: Array, lam) -> Array:
  """G(alpha) = P(W(alpha), Omega) + D(alpha) >= 0 (Sec. V, Lemma 3): zero exactly at
  the optimum for this Omega; the convergence certificate. Float32 scalar."""
  w = primal_dual_map(alpha, omega, x, mask, lam)
  return primal(w, omega, x, y, mask, lam) + dual(alpha, omega, x, y, mask, lam)


def predict(w: Array, x: Array) -> Array:
  """sign(w_t^T x) in {-1, +1} for ``x`` ``[m, n, d]``, with sign(0) = -1 (the majority
  class "not sitting"; our choice, so w = 0 is not counted as all wrong)."""
  return jnp.where(jnp.einsum("tnd,td->tn", x, w) > 0, 1.0, -1.0)


def device_errors(w: Array, x: Array, y: Array, mask: Array) -> Array:
  """Per-device 0/1 test error: float32 ``[m]`` (a device with no rows gets 0)."""
  wrong = (predict(w, x) != y).astype(jnp.float32) * mask
  return jnp.sum(wrong, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1.0)


def mean_device_error(w: Array, x: Array, y: Array, mask: Array) -> Array:
  """The paper's test metric: the average over devices of each device's 0/1 error
  (MOCHA ``avg=1``). Float32 scalar."""
  return jnp.mean(device_errors(w, x, y, mask))


def mean_device_hinge(w: Array, x: Array, y: Array, mask: Array) -> Array:
  """Average over devices of each device's mean hinge loss. Float32 scalar."""
  h = hinge_loss(jnp.einsum("tnd,td->tn", x, w), y) * mask
  return jnp.mean(jnp.sum(h, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1.0))
