"""Aggregation weights of LAPA (Sun et al., arXiv 2505.19823), Sec. III-C / V-B.

* FedAvg, eq. (2) (Benchmark 1): rho_i = |D_i| / sum_{j in S} |D_j|;
* Wasserstein softmax, eqs. (20)-(22) (Configurations 1 and 2): W_i = W1(P_i, P_g)
  between a device's label PMF and the global one, rho_i = softmax_S(-W_i);
* BEDA / FedAdp (Benchmark 2; Wu & Wang, "Fast-convergent federated learning with adaptive
  weighting"): psi_i proportional to |D_i| exp(f(theta~_i)) with FedAdp's Gompertz map,
  using the deviation angles of eq. (13) smoothed by eq. (14).

Every weight function takes a ``selected`` bool mask ``[N]`` (default: all devices) and
returns a vector ``[N]`` that sums to 1 over the selected devices and is exactly 0 for
the others, so shapes stay static inside the compiled round. The functions work
on numpy arrays (float64 results, values validated) and on jax arrays (jit-compatible,
shapes checked only); with no device selected the jax versions return all zeros and the
numpy versions raise.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.validation import FedJaxDpError, check_int, check_positive

_PMF_ATOL = 1e-6


def _is_jax(*values: Any) -> bool:
  return any(isinstance(v, jax.Array) for v in values)


def _selection(selected: Any, n: int, xp):
  """The mask ``selected`` as bool ``[n]`` (all True when None)."""
  if selected is None:
    return xp.ones((n,), dtype=bool)
  s = xp.asarray(selected)
  if s.shape != (n,):
    raise FedJaxDpError(f"selected must be a bool mask of shape ({n},), got {s.shape}.",
                        option="selected")
  if xp is np and s.dtype != np.bool_:
    raise FedJaxDpError(f"selected must be a bool mask, got dtype {s.dtype}.",
                        option="selected")
  return s.astype(bool)


def _vector(name: str, value: Any, xp, n: Optional[int] = None):
  v = xp.asarray(value) if xp is jnp else np.asarray(value, dtype=np.float64)
  if v.ndim != 1 or (n is not None and v.shape[0] != n):
    want = f"[{n}]" if n is not None else "[N]"
    raise FedJaxDpError(f"{name} must have shape {want}, got {v.shape}.", option=name)
  if xp is np and not np.all(np.isfinite(v)):
    raise FedJaxDpError(f"{name} must be finite, got {v!r}.", option=name)
  return v


def _masked_softmax(logits, sel, xp):
  """softmax over the entries with ``sel``; exactly 0 elsewhere (max subtracted)."""
  masked = xp.where(sel, logits, -xp.inf)
  top = xp.max(masked)
  top = xp.where(xp.isfinite(top), top, 0.0)
  e = xp.where(sel, xp.exp(xp.where(sel, logits, top) - top), 0.0)
  total = xp.sum(e)
  return xp.where(total > 0, e / xp.where(total > 0, total, 1.0), 0.0)


def fedavg_weights(counts: Any, selected: Any = None):
  """FedAvg weights, eq. (2) of LAPA (Benchmark 1): rho_i = |D_i| / sum_{j in S} |D_j|
  for i in S, 0 otherwise.

  Args:
    counts: ``[N]`` local dataset sizes |D_i| (>= 0).
    selected: bool ``[N]`` (default: all devices).

  Returns:
    ``[N]`` weights: float64 numpy, or a jax array for jax inputs.

  Raises:
    FedJaxDpError: on bad shapes; (numpy) on negative / non-finite counts, or when the
      selected devices hold no data at all.
  """
  xp = jnp if _is_jax(counts, selected) else np
  c = _vector("counts", counts, xp)
  sel = _selection(selected, c.shape[0], xp)
  if xp is np:
    if np.any(c < 0):
      raise FedJaxDpError(f"counts must be >= 0, got {c!r}.", option="counts")
    if not np.any(sel & (c > 0)):
      raise FedJaxDpError("the selected devices hold no examples (selected counts sum to 0).",
                          option="selected")
  w = xp.where(sel, c, 0)
  total = xp.sum(w)
  return xp.where(total > 0, w / xp.where(total > 0, total, 1), 0.0)


def _check_padded(labels: Any, counts: Any, num_classes: Any):
  k = check_int("num_classes", num_classes, minimum=1)
  y = np.asarray(labels)
  if y.ndim != 2:
    raise FedJaxDpError(f"labels must be padded [N, n_max], got shape {y.shape}.",
                        option="labels")
  if y.size and not np.issubdtype(y.dtype, np.integer):
    raise FedJaxDpError(f"labels must be integers, got dtype {y.dtype}.", option="labels")
  n = np.asarray(counts)
  if n.shape != (y.shape[0],) or (n.size and not np.issubdtype(n.dtype, np.integer)):
    raise FedJaxDpError(f"counts must be int [{y.shape[0]}], got {n.dtype} {n.shape}.",
                        option="counts")
  if np.any(n < 1) or np.any(n > y.shape[1]):
    raise FedJaxDpError(f"counts must be in [1, n_max={y.shape[1]}], got {n!r}.",
                        option="counts")
  mask = np.arange(y.shape[1])[None, :] < n[:, None]
  real = y[mask]
  if real.size and (real.min() < 0 or real.max() >= k):
    raise FedJaxDpError(
        f"labels must be in [0, num_classes={k}), got range [{real.min()}, {real.max()}].",
        option="labels")
  return y, n, mask, k


def label_pmfs(labels: Any, counts: Any, num_classes: int) -> np.ndarray:
  """Per-device label PMFs P_i of eq. (20) ([D]).

  Args:
    labels: int ``[N, n_max]`` padded labels (`FederatedData.y`); rows past
      ``counts[i]`` are padding and ignored.
    counts: int ``[N]`` real examples per device, in [1, n_max].
    num_classes: K (>= 1).

  Returns:
    float64 ``[N, K]``, rows summing to 1.

  Raises:
    FedJaxDpError: on bad shapes, counts out of range or labels outside [0, K).
  """
  y, n, mask, k = _check_padded(labels, counts, num_classes)
  rows = np.broadcast_to(np.arange(y.shape[0])[:, None], y.shape)
  hist = np.bincount((rows * k + y)[mask], minlength=y.shape[0] * k)
  return hist.reshape(y.shape[0], k).astype(np.float64) / n[:, None]


def global_pmf(labels: Any, counts: Any, num_classes: int) -> np.ndarray:
  """The global label PMF P_g of eq. (20): the label PMF of the union of all devices'
  data ([D]).

  Args and Raises: as `label_pmfs`.

  Returns:
    float64 ``[K]`` summing to 1.
  """
  y, n, mask, k = _check_padded(labels, counts, num_classes)
  return np.bincount(y[mask], minlength=k).astype(np.float64) / float(n.sum())


def wasserstein_1d(p: Any, q: Any):
  """W1 distance between label PMFs on the label indices 0..K-1, eq. (20) of LAPA
  in our 1-D form [D]:

    W(p, q) = sum_{k=0}^{K-2} |CDF_p(k) - CDF_q(k)|

  (equals ``scipy.stats.wasserstein_distance`` on the label values; point masses at 0 and
  9 are 9 apart).

  Args:
    p: ``[..., K]`` PMFs (e.g. `label_pmfs`).
    q: ``[K]`` reference PMF (e.g. `global_pmf`).

  Returns:
    ``[...]`` distances in label units: numpy float64 or a jax array.

  Raises:
    FedJaxDpError: on mismatched K; (numpy) on entries that are negative or rows that do
      not sum to 1.
  """
  xp, pa, qa = _pmf_pair(p, q)
  diff = xp.cumsum(pa, axis=-1) - xp.cumsum(qa)
  return xp.sum(xp.abs(diff[..., :-1]), axis=-1)


#: The ground cost between labels of eq. 20's W1 (`label_distance`).
GROUND_COSTS = ("index", "discrete")


def total_variation(p: Any, q: Any):
  """W1 between label PMFs under the discrete ground cost d(a, b) = 1{a != b}, i.e.
  the total-variation distance 0.5 sum_k |p_k - q_k| in [0, 1]: unlike
  `wasserstein_1d` it does not depend on how the labels are numbered (a two-class
  device {0, 1} and one {4, 5} are equally far from a uniform global PMF).

  Args:
    p: ``[..., K]`` PMFs.
    q: ``[K]`` reference PMF.

  Returns:
    ``[...]`` distances: numpy float64 or a jax array.

  Raises:
    FedJaxDpError: as `wasserstein_1d` (mismatched K; with numpy, not PMFs).
  """
  xp, pa, qa = _pmf_pair(p, q)
  return 0.5 * xp.sum(xp.abs(pa - qa), axis=-1)


def _pmf_pair(p: Any, q: Any):
  """``(xp, p, q)``: the array module (jax for traced or jax inputs, else numpy with
  float64) and the two label PMFs, checked.

  Raises:
    FedJaxDpError: mismatched K; (numpy) entries that are negative or non-finite, or
      rows that do not sum to 1.
  """
  xp = jnp if _is_jax(p, q) else np
  pa = xp.asarray(p) if xp is jnp else np.asarray(p, dtype=np.float64)
  qa = xp.asarray(q) if xp is jnp else np.asarray(q, dtype=np.float64)
  if qa.ndim != 1 or pa.ndim < 1 or pa.shape[-1] != qa.shape[0]:
    raise FedJaxDpError(
        f"p must be [..., K] and q [K] with the same K, got {pa.shape} and {qa.shape}.",
        option="p")
  if xp is np:
    for name, a in (("p", pa), ("q", qa)):
      if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(
          np.abs(a.sum(axis=-1) - 1.0) > _PMF_ATOL):
        raise FedJaxDpError(f"{name} must hold PMFs (entries >= 0, summing to 1).",
                            option=name)
  return xp, pa, qa


def label_distance(p: Any, q: Any, ground_cost: str = "index"):
  """Eq. 20's W1 between label PMFs under ``ground_cost`` (one of `GROUND_COSTS`):
  ``"index"`` |a - b| on the label indices (`wasserstein_1d`, [D]; depends
  on the label numbering) or ``"discrete"`` 1{a != b} (`total_variation`; invariant
  under any relabelling)."""
  if ground_cost == "index":
    return wasserstein_1d(p, q)
  if ground_cost == "discrete":
    return total_variation(p, q)
  raise FedJaxDpError(f"ground_cost must be one of {GROUND_COSTS}, got {ground_cost!r}.",
                      option="ground_cost")


def wasserstein_weights(distances: Any, selected: Any = None):
  """Aggregation weights of eqs. (21)-(22) of LAPA: a softmax of -W_i over the
  selected devices, rho_i = 1{i in S} exp(-W_i) / sum_{j in S} exp(-W_j) (no data-size
  factor, [R+]). Numerically stable (max subtracted).

  Args:
    distances: ``[N]`` Wasserstein distances W_i (`wasserstein_1d`), finite.
    selected: bool ``[N]`` (default: all devices), e.g. `channel.select_devices`.

  Returns:
    ``[N]``: numpy float64 or a jax array (jit-compatible).

  Raises:
    FedJaxDpError: on bad shapes; (numpy) on non-finite distances or no selected device.
  """
  xp = jnp if _is_jax(distances, selected) else np
  w = _vector("distances", distances, xp)
  sel = _selection(selected, w.shape[0], xp)
  if xp is np and not np.any(sel):
    raise FedJaxDpError("no device is selected; need at least one.", option="selected")
  return _masked_softmax(-w, sel, xp)


def fedadp_gompertz(theta, alpha: float = 5.0):
  """FedAdp's decreasing Gompertz map f(theta) = alpha (1 - exp(-exp(-alpha (theta - 1))))
  (Wu & Wang, FedAdp [X]; LAPA's Benchmark 2). jnp, jit-compatible."""
  return alpha * (1.0 - jnp.exp(-jnp.exp(-alpha * (theta - 1.0))))


def fedadp_angle_weights(smoothed_angles: Any, counts: Any, selected: Any = None,
                         alpha: float = 5.0) -> jax.Array:
  """BEDA / FedAdp weights (LAPA's Benchmark 2; Wu & Wang, FedAdp):

    psi_i = |D_i| exp(f(theta~_i)) / sum_{j in S} |D_j| exp(f(theta~_j)),
    f(theta) = alpha (1 - exp(-exp(-alpha (theta - 1))))   (decreasing in theta),

  computed as a softmax of log|D_i| + f(theta~_i) over S (max subtracted). A selected
  device with |D_i| = 0 gets weight 0. jnp, jit-compatible (called every round).

  Args:
    smoothed_angles: float ``[N]`` smoothed angles theta~_i in radians (`smoothed_angles`).
    counts: ``[N]`` local dataset sizes |D_i| (>= 0).
    selected: bool ``[N]`` (default: all devices).
    alpha: the Gompertz constant (> 0; FedAdp uses 5). A host number is validated.

  Returns:
    float32 (or the input float dtype) jax array ``[N]``; all zeros if nothing is
    selected.

  Raises:
    FedJaxDpError: on mismatched shapes or a host ``alpha`` that is not > 0.
  """
  if not _is_jax(alpha):
    alpha = check_positive("alpha", alpha)
  theta = _vector("smoothed_angles", smoothed_angles, jnp)
  c = _vector("counts", counts, jnp, n=theta.shape[0])
  sel = _selection(selected, theta.shape[0], jnp)
  dtype = jnp.result_type(theta.dtype, jnp.float32)
  c = c.astype(dtype)
  ok = sel & (c > 0)
  logits = jnp.log(jnp.where(ok, c, 1.0)) + fedadp_gompertz(theta.astype(dtype), alpha)
  return _masked_softmax(logits, ok, jnp)


def deviation_angles(local: Any, global_: Any) -> jax.Array:
  """Angles between local and global gradients, eq. (13) of LAPA ([R+]):

    theta_i = arccos(<g_i, g> / (||g_i|| ||g||)),

  computed on unit vectors (rescaled first, so no overflow), the cosine clipped to
  [-1, 1] so theta is in [0, pi]; when either norm is 0 the angle is defined as pi / 2.
  jnp, jit-compatible.

  Args:
    local: float ``[N, d]`` local (received) gradients.
    global_: float ``[d]`` global gradient.

  Returns:
    ``[N]`` angles in radians.

  Raises:
    FedJaxDpError: on mismatched shapes.
  """
  g_i = jnp.asarray(local)
  g = jnp.asarray(global_)
  if g_i.ndim != 2 or g.shape != (g_i.shape[1],):
    raise FedJaxDpError(
        f"local must be [N, d] and global_ [d], got {g_i.shape} and {g.shape}.",
        option="local")
  u, ok_u = _unit_rows(g_i)
  v, ok_v = _unit_rows(g[None, :])
  cos = jnp.where(ok_u & ok_v[0], u @ v[0], 0.0)
  return jnp.arccos(jnp.clip(cos, -1.0, 1.0))


def _unit_rows(a):
  """Rows of ``a`` [N, d] scaled to unit norm (divided by their max |entry| first, so
  squares cannot overflow), and a bool [N] that is False for all-zero rows."""
  top = jnp.max(jnp.abs(a), axis=1, keepdims=True)
  ok = top[:, 0] > 0
  s = a / jnp.where(top > 0, top, 1.0)
  norm = jnp.linalg.norm(s, axis=1, keepdims=True)
  return s / jnp.where(norm > 0, norm, 1.0), ok


def smoothed_angles(prev: Any, theta: Any, t) -> jax.Array:
  """Running mean of the angles, eq. (14) of LAPA (FedAdp form, [R+]):

    theta~_i[t] = ((t - 1) / t) theta~_i[t - 1] + theta_i[t] / t,

  with t the 1-based round, so t = 1 returns theta (``prev`` is ignored there, even if
  NaN). jnp,
  jit-compatible; ``t`` may be traced.

  Args:
    prev: float ``[N]`` smoothed angles of round t - 1.
    theta: float ``[N]`` angles of round t (`deviation_angles`).
    t: the 1-based round (>= 1; a host int is validated).

  Returns:
    ``[N]`` smoothed angles.

  Raises:
    FedJaxDpError: on mismatched shapes or a host ``t`` < 1.
  """
  if not _is_jax(t):
    check_int("t", t, minimum=1)
  p, th = jnp.asarray(prev), jnp.asarray(theta)
  if p.shape != th.shape:
    raise FedJaxDpError(f"prev and theta must have the same shape, got {p.shape} and "
                        f"{th.shape}.", option="prev")
  dtype = jnp.result_type(th.dtype, jnp.float32)
  tf = jnp.asarray(t, dtype=dtype)
  keep = (tf - 1.0) / tf
  # At t = 1 the previous value is not used at all (it may be uninitialised, even NaN).
  past = jnp.where(keep > 0, keep * p.astype(dtype), 0.0)
  return past + th.astype(dtype) / tf
