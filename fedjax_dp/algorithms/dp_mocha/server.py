"""The server side of DP-MOCHA (Hu et al. 2020, Algorithm 1 lines 10 and 13): the w update
from the devices' uploads, the closed-form task covariance (eq. 3), and the correction
parameter beta = xi m (Sec. V, after Lemma 1)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_dp.validation import check_int, check_positive

#: Eigenvalue floor of W^T W before the square root (MOCHA's code clips at 1e-7) so
#: that Omega^{-1} exists.
EIGENVALUE_FLOOR = 1e-7


def omega_update(w: jax.Array, floor: float = EIGENVALUE_FLOOR) -> jax.Array:
  """Omega* = (W^T W)^{1/2} / tr((W^T W)^{1/2}) (eq. 3), the minimiser of
  lam tr(W Omega^{-1} W^T) over {Omega PSD, tr Omega = 1} (eq. 2).

  Args:
    w: float32 ``[m, d]`` (row t = w_t), so the paper's m x m W^T W is ``w @ w.T``.
    floor: eigenvalues of W^T W below it are raised to it (> 0) before the square root.

  Returns:
    float32 ``[m, m]``, symmetric positive definite with trace 1 (computed with
    ``eigh``; with W = 0 it is I / m).
  """
  gram = w @ w.T
  gram = 0.5 * (gram + gram.T)
  evals, evecs = jnp.linalg.eigh(gram)
  root = jnp.sqrt(jnp.maximum(evals, floor))
  omega = (evecs * root) @ evecs.T
  omega = 0.5 * (omega + omega.T)
  return omega / jnp.sum(root)


def w_update(w: jax.Array, omega: jax.Array, du: jax.Array, lam) -> jax.Array:
  """Algorithm 1 line 10: w <- w + (1 / (2 lam)) Omega~ du, i.e.
  w_t += (1 / (2 lam)) sum_s Omega_ts du_s. ``du`` float32 ``[m, d]`` (zero rows for
  devices that uploaded nothing). Returns ``[m, d]``."""
  return w + omega @ du / (2.0 * lam)


def resync(u: jax.Array, omega: jax.Array, lam) -> jax.Array:
  """w := (1 / (2 lam)) Omega~ u with u the server's running sum of the uploads
  (our addition to Algorithm 1): the primal-dual map (eq. 6) applied to what the server
  received, so that w = w(alpha) again after an Omega update (without noise
  u = X alpha exactly; with noise it is post-processing of the uploads). Returns ``[m, d]``."""
  return omega @ u / (2.0 * lam)


def correction_parameter(xi: float, num_devices: int) -> float:
  """beta = xi m (Sec. V): enough for eq. (9) whatever Omega, because
  ||X alpha||^2_{Omega~} <= m sum_t Omega_tt ||X_t alpha_t||^2 for PSD Omega.

  Raises:
    FedJaxDpError: ``xi`` not in (0, 1] or ``num_devices`` < 1.
  """
  xi = check_positive("xi", xi)
  if xi > 1:
    from fedjax_dp.validation import FedJaxDpError
    raise FedJaxDpError(f"xi (aggregation parameter) must be in (0, 1], got {xi}.",
                        option="xi")
  return xi * check_int("num_devices", num_devices, minimum=1)
