"""Integer noise for distributed DP with secure aggregation: the discrete Gaussian and
the symmetric Skellam distribution, sampled on the device under ``jit`` and ``vmap``.

* The discrete Gaussian ``N_Z(0, sigma^2)``: ``P(x) ∝ exp(-x^2 / (2 sigma^2))`` on the
  integers (Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy",
  NeurIPS 2020, Def. 1), the per-client noise of the distributed discrete Gaussian
  mechanism (Kairouz, Liu, Steinke, "The Distributed Discrete Gaussian Mechanism for
  Federated Learning with Secure Aggregation", ICML 2021, arXiv:2102.06387, Alg. 1).
* The symmetric Skellam ``Sk(lam, lam) = Poisson(lam) - Poisson(lam)`` of variance
  ``2 lam`` (Agarwal, Kairouz, Liu, "The Skellam Mechanism for Differentially Private
  Federated Learning", NeurIPS 2021, arXiv:2110.04995, Sec. 3 and Alg. 1).

How the samplers work (the docstrings give each formula's source):

* ``sigma < 8`` (and ``lam < 50``): inversion on a tail table of 128 values, compared
  with one uniform of 48 random bits (no loop).
* ``sigma >= 8``: rejection from a rounded continuous Gaussian (`discrete_gaussian`),
  acceptance ``>= 0.99``; ``lam >= 50``: Hörmann's PTRS transformed rejection with the
  Poisson log-pmf of Loader (`_poisson_log_pmf`), acceptance ~0.9. Rejected entries
  are redrawn in blocks of 64 (8) entries holding at least one rejection: the
  redraws cost a small fraction of the first pass for the discrete Gaussian, about
  1.5 passes for PTRS.

Every candidate is an integer computed from float32 values below 2^13 (the discrete
Gaussian) or of the order of 2.5 sqrt(lam) (PTRS), so float32 rounding perturbs the
sampled pmf by a relative error of the order of their float32 spacing: at most ~5e-4
(the discrete Gaussian's far tail), ~1.5e-7 sqrt(lam) for the Skellam; "exact" below
means exact up to that float32 arithmetic. ``jax.random.poisson`` (JAX 0.10) is not
used: it evaluates ``-lam + k log lam - lgamma(k + 1)`` and ``k`` itself in float32, which at
``lam = 5e7`` returns only multiples of 4 with a variance 33% too large, and at
``lam = 5e5`` a variance 4% too small (checked when this module was written).

Invalid parameters: concrete ones raise `FedJaxDpError`; traced ones (inside ``jit``)
cannot, so a negative, NaN or too large traced ``sigma`` / ``variance`` fills the
output with `INVALID` (``-2^31``, a value no valid draw takes).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence, Tuple

import jax
import jax.core  # explicit: `jax.core.Tracer` (value checks skip traced arrays)
import jax.numpy as jnp
import numpy as np

from fedjax_dp.validation import FedJaxDpError, check_int, check_non_negative

__all__ = ["discrete_gaussian", "skellam", "discrete_gaussian_pmf", "MAX_SIGMA",
           "MAX_VARIANCE", "INVALID", "BRANCHES"]

INVALID = -2**31
"""int32 value filling the output of a traced invalid ``sigma`` or ``variance``."""

MAX_SIGMA = 1e7
"""Largest ``sigma`` of `discrete_gaussian`: its draws stay below 2^27 in magnitude."""

MAX_VARIANCE = 2.0**40
"""Largest ``variance`` of `skellam`: each Poisson's offset from ``floor(lam)``
(below 2^24 for all but a ~e^-64 fraction of candidates) stays an exact float32
integer."""

_F32 = jnp.float32
_TABLE_SIGMA = 8.0    # discrete Gaussian: inversion below, rejection at and above
_TABLE_LAM = 50.0     # Poisson: inversion below, PTRS (valid for lam >= 10) above
_TABLE_K = 128        # tail-table length (binary search of 8 steps)
_TAU_MAX = 1024       # largest scale of the rounded Gaussian proposal
# |Z| bound of the Box-Muller normals: u1 >= 2^-33, sqrt(-2 ln 2^-33) = 6.7636.
_Z_MAX = 6.77
_C_TABLE = int(math.ceil(_Z_MAX * _TAU_MAX)) + 2   # |C| <= tau * _Z_MAX + 1/2
_MAX_ITERS = 10_000   # redraw passes (reached with probability < 2^-1000)
# Gauss-Legendre nodes and weights on [-1/2, 1/2] (weights sum to 1).
_GL_T, _GL_W = np.polynomial.legendre.leggauss(8)
_GL_X, _GL_W = (0.5 * _GL_T).astype(np.float32), (0.5 * _GL_W).astype(np.float32)
# Loader's Stirling-series remainders stirlerr(n) for n = 0..15 (float64, host).
_STIRLERR = np.array([0.0] + [math.lgamma(n + 1.0) - (n + 0.5) * math.log(n) + n
                              - 0.5 * math.log(2 * math.pi) for n in range(1, 16)],
                     np.float32)


def _check_shape(shape: Any) -> Tuple[int, ...]:
  if isinstance(shape, (int, np.integer)):
    shape = (shape,)
  try:
    return tuple(check_int("shape", s, minimum=0) for s in shape)
  except TypeError:
    raise FedJaxDpError(f"shape must be a tuple of integers >= 0, got {shape!r}.",
                        option="shape") from None


def _scalar(name: str, value: Any, maximum: float) -> Tuple[jax.Array, jax.Array]:
  """(float32 value, bool validity): host checks for concrete values (raising
  `FedJaxDpError`), an on-device validity flag for traced ones."""
  if not isinstance(value, jax.core.Tracer):
    arr = np.asarray(value)
    if arr.shape != ():
      raise FedJaxDpError(f"{name} must be a scalar, got shape {arr.shape}.", option=name)
    v = check_non_negative(name, arr.item() if arr.dtype.kind in "fiu" else value)
    if v > maximum:
      raise FedJaxDpError(f"{name} must be <= {maximum:g}, got {v!r}.", option=name)
  x = jnp.asarray(value, _F32)
  valid = (x >= 0) & (x <= maximum)   # False for NaN
  return jnp.where(valid, x, _F32(0.0)), valid


def _uniform24(words: jax.Array) -> jax.Array:
  """float32 uniform on (0, 1): the midpoints of the 2^-24 grid, from the top 24 bits."""
  return ((words >> 8).astype(_F32) + _F32(0.5)) * _F32(2.0**-24)


def _uniform48(hi: jax.Array, lo: jax.Array) -> jax.Array:
  """float32 uniform on (0, 1] from 48 bits (the top 24 of ``hi`` and of ``lo``): its
  resolution near 0 is 2^-48, so tail probabilities down to ~1e-14 are represented."""
  return ((hi >> 8).astype(_F32)
          + ((lo >> 8).astype(_F32) + _F32(0.5)) * _F32(2.0**-24)) * _F32(2.0**-24)


def _count_below(u: jax.Array, survival: jax.Array) -> jax.Array:
  """int32 ``#{k : u < survival[k]}`` in [0, _TABLE_K] for a non-increasing
  ``survival`` [_TABLE_K]: binary search (8 steps; the table is zero-padded to 2 K).
  With ``survival[k] = P(X >= k + 1)`` and ``u`` uniform this is inversion:
  ``P(count >= k + 1) = survival[k]``."""
  table = jnp.concatenate([survival, jnp.zeros((_TABLE_K,), _F32)])
  idx = jnp.zeros(u.shape, jnp.int32)
  step = _TABLE_K
  while step >= 1:
    cand = idx + step
    idx = jnp.where(u < table[cand - 1], cand, idx)
    step //= 2
  return idx


Propose = Callable[[jax.Array, int], Tuple[jax.Array, jax.Array]]


def _rejection_fill(key: jax.Array, n: int, propose: Propose,
                    block: int = 64) -> jax.Array:
  """int32 [n]: one accepted draw per entry, ``propose(key, m) -> (int32 [m] candidates,
  bool [m] accepted)`` giving i.i.d. (candidate, accepted) pairs.

  A first pass proposes for every entry; then a ``lax.while_loop`` (state: key,
  values, accepted mask) redraws, until every entry is accepted, the entries not yet
  accepted, in blocks of ``block`` entries (static; 64 suits a rejection rate below
  ~1/64, 8 one of ~10%): at most 1/8 of the blocks per pass, those holding a
  rejection (an accepted entry is never redrawn, so each entry is the first
  accepted candidate of its own i.i.d. sequence: the accepted distribution). After
  `_MAX_ITERS` passes (probability < 2^-1000 for acceptance >= 1/2) the entries still
  rejected get `INVALID`.
  """
  nb = -(-n // block)
  cap = max(1, min(nb, max(16, nb // 8)))
  key0, key = jax.random.split(key)
  values, ok = propose(key0, nb * block)
  pad = jnp.arange(nb * block) >= n
  values, ok = values.reshape(nb, block), (ok | pad).reshape(nb, block)

  def cond(state):
    it, _, _, ok = state
    return jnp.logical_not(jnp.all(ok)) & (it < _MAX_ITERS)

  def body(state):
    it, key, values, ok = state
    key, sub = jax.random.split(key)
    rows = jnp.nonzero(~jnp.all(ok, axis=1), size=cap, fill_value=nb)[0]
    cur_v = values.at[rows].get(mode="fill", fill_value=0)
    cur_ok = ok.at[rows].get(mode="fill", fill_value=True)
    cand, cand_ok = propose(sub, cap * block)
    cand, cand_ok = cand.reshape(cap, block), cand_ok.reshape(cap, block)
    values = values.at[rows].set(jnp.where(cur_ok, cur_v, cand), mode="drop")
    ok = ok.at[rows].set(cur_ok | cand_ok, mode="drop")
    return it + 1, key, values, ok

  _, _, values, ok = jax.lax.while_loop(cond, body, (jnp.int32(0), key, values, ok))
  return jnp.where(ok, values, INVALID).reshape(-1)[:n]


# ------------------------------------------------------------------ discrete Gaussian


def _dg_table(key: jax.Array, n: int, sigma: jax.Array) -> jax.Array:
  """int32 [n] ~ N_Z(0, sigma^2) for 0 <= sigma <= 8, by inversion: ``|Y|`` from the
  exact tail ``P(|Y| >= k) = 2 sum_{j>=k} w_j / (1 + 2 sum_{j>=1} w_j)``,
  ``w_j = exp(-j^2 / (2 sigma^2))`` (CKS 2020, Def. 1), for k = 1..128 (the mass
  beyond 128 is below e^-128), and a uniform sign. ``sigma = 0`` gives zeros."""
  k = jnp.arange(1, _TABLE_K + 1, dtype=_F32)
  inv = jnp.where(sigma > 0, _F32(0.5) / jnp.maximum(sigma, _F32(1e-30)) ** 2,
                  _F32(np.inf))
  w = jnp.exp(-(k * k) * inv)
  tail = jnp.cumsum(w[::-1])[::-1]
  survival = 2.0 * tail / (1.0 + 2.0 * tail[0])
  words = jax.random.bits(key, (2, n), jnp.uint32)
  mag = _count_below(_uniform48(words[0], words[1]), survival)
  return jnp.where((words[1] & 1) == 1, -mag, mag)


def _dg_accept_table(tau: jax.Array, fine: jax.Array) -> jax.Array:
  """float32 [_C_TABLE]: ``exp(-log J(c) - log M)`` for c = 0, 1, ...: the acceptance
  of the coarse value ``c`` (times the fine factor in `_dg_propose`).

  ``J(c) = int_{-1/2}^{1/2} exp(-(2 c v + v^2) / (2 tau^2)) dv`` (8-point Gauss-Legendre:
  for tau >= 8 the integrand is entire with |c| / tau^2 <= 0.85, error < 1e-15) and
  ``log M = 1 / (8 tau^2)``, plus ``(tau Z_max + 1) / (2 tau^2)`` with a fine part
  (see `discrete_gaussian` for why ``a <= 1``).
  """
  c = jnp.arange(_C_TABLE, dtype=_F32)[:, None]
  inv = _F32(1.0) / (tau * tau)
  j = jnp.sum(_GL_W * jnp.exp(-(c * _GL_X + 0.5 * _GL_X * _GL_X) * inv), axis=1)
  log_m = 0.125 * inv + jnp.where(fine, (tau * _Z_MAX + 1.0) * 0.5 * inv, 0.0)
  return jnp.exp(-jnp.log(j) - log_m)


def _dg_propose(key: jax.Array, m: int, tau: jax.Array, s: jax.Array,
                accept: jax.Array, fine: bool) -> Tuple[jax.Array, jax.Array]:
  """m i.i.d. (candidate, accepted) of the rejection sampler of `discrete_gaussian`:
  ``C = round(tau Z)`` (Z by Box-Muller, 32 + 24 bits), with ``fine`` a uniform
  ``G`` on s consecutive integers (32 random bits mod s: relative bias < s / 2^32
  <= 2.3e-6), ``Y = s C + G``; accepted with probability
  ``accept[|C|] * exp(-(2 C u + u^2) / (2 tau^2))``, ``u = G / s``."""
  k_normal, k_accept, k_fine = jax.random.split(key, 3)
  half = (m + 1) // 2
  w = jax.random.bits(k_normal, (2, half), jnp.uint32)
  r = jnp.sqrt(-2.0 * jnp.log((w[0].astype(_F32) + 0.5) * _F32(2.0**-32)))
  theta = _F32(2 * np.pi) * _uniform24(w[1])
  z = jnp.clip(jnp.concatenate([r * jnp.cos(theta), r * jnp.sin(theta)])[:m],
               -_Z_MAX, _Z_MAX)
  t = tau * z
  c = jnp.floor(t)
  c = c + (t - c >= 0.5).astype(_F32)   # round half up; t - floor(t) is exact
  ci = c.astype(jnp.int32)
  a = accept[jnp.minimum(jnp.abs(ci), _C_TABLE - 1)]
  if fine:
    g = (jax.random.bits(k_fine, (m,), jnp.uint32) % s.astype(jnp.uint32)).astype(
        jnp.int32) - s // 2
    u = g.astype(_F32) / s.astype(_F32)
    a = a * jnp.exp(-(2.0 * c * u + u * u) * (0.5 / (tau * tau)))
    y = s * ci + g
  else:
    y = ci
  return y, _uniform24(jax.random.bits(k_accept, (m,), jnp.uint32)) < a


def _dg_reject(key: jax.Array, n: int, sigma: jax.Array) -> jax.Array:
  """int32 [n] ~ N_Z(0, sigma^2) for 8 <= sigma <= MAX_SIGMA (rejection)."""
  s = jnp.maximum(jnp.ceil(sigma / _TAU_MAX), 1.0).astype(jnp.int32)
  tau = sigma / s.astype(_F32)
  fine = s > 1
  accept = _dg_accept_table(tau, fine)

  def run(fine_static: bool):
    prop = lambda k, m: _dg_propose(k, m, tau, s, accept, fine_static)
    return lambda: _rejection_fill(key, n, prop)

  return jax.lax.cond(fine, run(True), run(False))


def discrete_gaussian(key: jax.Array, shape: Sequence[int], sigma: Any,
                      branch: Optional[str] = None) -> jax.Array:
  """I.i.d. draws of the discrete Gaussian ``N_Z(0, sigma^2)``:
  ``P(x) = exp(-x^2 / (2 sigma^2)) / sum_{y in Z} exp(-y^2 / (2 sigma^2))``
  (Canonne, Kamath, Steinke, NeurIPS 2020, Def. 1).

  ``sigma < 8``: inversion on the exact tail table (`_dg_table`). ``sigma >= 8``:
  rejection sampling, with ``s = ceil(sigma / 1024)``, ``tau = sigma / s``:
  propose ``C = round(tau Z)``, Z ~ N(0, 1), so ``P(C = c) = I(c) / (tau sqrt(2 pi))``
  with ``I(c) = int_{c-1/2}^{c+1/2} exp(-x^2 / (2 tau^2)) dx``, and (when s > 1)
  ``G`` uniform on ``{-floor(s/2), ..., s - 1 - floor(s/2)}``; ``Y = s C + G``,
  ``u = G / s`` in [-1/2, 1/2). Accept with probability
  ``a(Y) = exp(-(2 C u + u^2) / (2 tau^2)) / (J(C) M)``, where
  ``I(c) = exp(-c^2 / (2 tau^2)) J(c)`` and
  ``J(c) = int_{-1/2}^{1/2} exp(-(2 c v + v^2) / (2 tau^2)) dv``. Then
  ``P(Y) a(Y) ∝ exp(-(C + u)^2 / (2 tau^2)) = exp(-Y^2 / (2 sigma^2))``: the target.

  ``a <= 1``: pairing ``v`` with ``-v``, ``J(c) = int exp(-v^2 / (2 tau^2))
  cosh(c v / tau^2) dv >= exp(-1 / (8 tau^2)) int_{-1/2}^{1/2} 1 dv = exp(-1/(8 tau^2))``
  (``v^2 <= 1/4``, ``cosh >= 1``), and ``-(2 C u + u^2) <= |C|`` for ``|u| <= 1/2``; so
  ``log M = 1 / (8 tau^2)`` when s = 1 (u = 0: the rounding proposal, acceptance
  ``~exp(-1 / (8 sigma^2)) >= 0.998``) and ``1 / (8 tau^2) + (tau Z_max + 1) / (2 tau^2)``
  when s > 1 (``|C| <= tau Z_max + 1/2``; tau > 512, acceptance > 0.99).

  The fine part keeps every float32 value below ~7,000 (a float32 ``sigma Z`` near
  1e5 is rounded to 1/32, and the rounded proposal's pmf would be ~3% lumpy; 3.4%
  more even draws at sigma = 1e6): the sampled pmf is exact up to relative float32
  errors of the order of the spacing of those values, <= 5e-4 (<= 2.5e-4 within
  3 sigma). Z comes from Box-Muller with a 32-bit radius uniform, so
  ``|Z| <= 6.77``: the draws are truncated at 6.77 sigma (removed mass ~1.3e-11), and
  ``|Y| <= 6.77 sigma + s < 2^27`` for sigma <= MAX_SIGMA (int32 never overflows).
  The redraws of rejected entries are described in `_rejection_fill`.

  Args:
    key: a PRNG key.
    shape: static output shape (tuple of ints >= 0).
    sigma: float scalar in [0, MAX_SIGMA] (integer units; may be traced). 0 gives zeros.
    branch: static `BRANCHES` (``"table"``: sigma < 8; ``"rejection"``: sigma >= 8).

  Returns:
    int32 array of ``shape``. A traced invalid sigma gives `INVALID` everywhere.

  Raises:
    FedJaxDpError: naming ``shape`` or ``sigma`` (concrete sigma negative, NaN, not a
      scalar or above MAX_SIGMA).
  """
  shape = _check_shape(shape)
  sigma, valid = _scalar("sigma", sigma, MAX_SIGMA)
  n = math.prod(shape)
  if n == 0:
    return jnp.zeros(shape, jnp.int32)
  valid = valid & _branch_ok(branch, sigma < _TABLE_SIGMA)
  table = lambda: _dg_table(key, n, jnp.minimum(sigma, _TABLE_SIGMA))
  reject = lambda: _dg_reject(key, n, jnp.maximum(sigma, _TABLE_SIGMA))
  if branch is None:
    out = jax.lax.cond(sigma < _TABLE_SIGMA, table, reject)
  else:
    out = table() if branch == "table" else reject()
  return jnp.where(valid, out, INVALID).reshape(shape)


def discrete_gaussian_pmf(values: Any, sigma: float) -> np.ndarray:
  """The exact pmf of ``N_Z(0, sigma^2)`` at integer ``values`` (numpy, on the host).

  ``P(x) = exp(-x^2 / (2 sigma^2)) / Z`` (CKS 2020, Def. 1), with the normaliser
  ``Z = sum_{|y| <= 40 sigma + 10} exp(-y^2 / (2 sigma^2))`` (the terms left out are
  below e^-800) for sigma <= 1e4, and beyond by the Poisson summation formula
  ``Z = sigma sqrt(2 pi) (1 + 2 sum_{k>=1} exp(-2 pi^2 sigma^2 k^2))``, whose
  correction is then below 1e-300 (``Z = sigma sqrt(2 pi)`` to float64 precision).

  Args:
    values: integer-valued array-like (any shape).
    sigma: float >= 0 (integer units); 0 is the point mass at 0.

  Returns:
    float64 array of ``values``' shape.

  Raises:
    FedJaxDpError: naming ``sigma`` (negative or not finite) or ``values`` (not
      integer-valued).
  """
  sigma = check_non_negative("sigma", sigma)
  x = np.asarray(values, dtype=np.float64)
  if not np.all(np.isfinite(x) & (x == np.round(x))):
    raise FedJaxDpError("values must be integers.", option="values")
  if sigma == 0.0:
    return (x == 0).astype(np.float64)
  if sigma <= 1e4:
    r = int(math.ceil(40.0 * sigma + 10.0))
    y = np.arange(-r, r + 1, dtype=np.float64)
    z = float(np.sum(np.exp(-y * y / (2.0 * sigma * sigma))))
  else:
    z = sigma * math.sqrt(2.0 * math.pi)
  return np.exp(-x * x / (2.0 * sigma * sigma)) / z


# ------------------------------------------------------------------ Poisson / Skellam


def _poisson_table(key: jax.Array, n: int, lam: jax.Array) -> jax.Array:
  """int32 [n] ~ Poisson(lam) for 0 <= lam <= 50, by inversion on the exact tail
  ``P(X >= k) = sum_{j=k}^{128} p_j / sum_{j=0}^{128} p_j`` (the mass beyond 128 is
  below e^-42), ``p_j`` by `_poisson_log_pmf`. lam is raised to 1e-30 at least
  (``P(X >= 1) ~ lam`` is then below the uniform's resolution 2^-49: lam = 0 gives
  zeros)."""
  lam = jnp.maximum(lam, _F32(1e-30))
  j = jnp.arange(_TABLE_K + 1, dtype=_F32)
  p = jnp.exp(_poisson_log_pmf(j, (j - lam) / lam, lam))
  tail = jnp.cumsum(p[::-1])[::-1]
  survival = tail[1:] / tail[0]
  words = jax.random.bits(key, (2, n), jnp.uint32)
  return _count_below(_uniform48(words[0], words[1]), survival)


def _bd0_over_lam(delta: jax.Array) -> jax.Array:
  """``h(delta) = (1 + delta) log(1 + delta) - delta`` (float32, delta >= -1), so that
  Loader's ``bd0(k, lam) = k log(k / lam) + lam - k = lam h((k - lam) / lam)``.

  For ``v = delta / (2 + delta)`` in (-0.1, 0.1): ``h = delta v + 2 (1 + delta)
  sum_{i>=1} v^(2i+1) / (2i+1)`` (Loader, "Fast and Accurate Computation of Binomial
  Probabilities", 2000, his bd0 series: ``log((1+v)/(1-v)) = 2 atanh v``), 5 terms
  (relative error < 1e-11); no cancellation. Elsewhere (|delta| > 0.2) the direct formula
  (relative error ~2^-24 / |delta| < 4e-7).
  """
  v = delta / (2.0 + delta)
  v2 = v * v
  acc = jnp.zeros_like(v)
  term = v
  for i in range(1, 6):
    term = term * v2
    acc = acc + term / (2 * i + 1)
  series = delta * v + 2.0 * (1.0 + delta) * acc
  onep = 1.0 + delta
  direct = jnp.where(onep > 0, onep * jnp.log(jnp.maximum(onep, 1e-30)), 0.0) - delta
  return jnp.where(jnp.abs(v) < 0.1, series, direct)


def _poisson_log_pmf(k: jax.Array, delta: jax.Array, lam: jax.Array) -> jax.Array:
  """float32 ``log P(Poisson(lam) = k)`` (k float, integer-valued; ``delta = (k - lam)
  / lam`` passed exactly). Loader 2000 (his dpois): ``log p = -stirlerr(k) - bd0(k, lam)
  - log(2 pi k) / 2`` for k >= 1, with ``stirlerr(k) = log k! - log(sqrt(2 pi k)
  (k/e)^k)`` from a table for k <= 15 and ``1/(12k) - 1/(360k^3) + 1/(1260k^5)``
  beyond (error < 1/(1680 k^7) < 1e-11); ``-lam`` at k = 0, ``-inf`` for k < 0. Every
  term is O(1) (no cancellation of lgamma-sized terms)."""
  kk = jnp.maximum(k, 1.0)
  ik = 1.0 / kk
  series = ik * (1.0 / 12 - ik * ik * (1.0 / 360 - ik * ik / 1260))
  table = jnp.asarray(_STIRLERR)[jnp.clip(k, 0, 15).astype(jnp.int32)]
  stirlerr = jnp.where(k > 15, series, table)
  logp = -stirlerr - lam * _bd0_over_lam(delta) - 0.5 * jnp.log(_F32(2 * np.pi) * kk)
  return jnp.where(k >= 1, logp, jnp.where(k == 0, -lam, -jnp.inf))


def _ptrs_propose(key: jax.Array, m: int, lam: jax.Array) -> Tuple[jax.Array, jax.Array]:
  """m i.i.d. (offset, accepted) of PTRS (Hörmann, "The transformed rejection method
  for generating Poisson random variables", Insurance: Math. and Econ. 12, 1993,
  Alg. PTRS, lam >= 10): ``b = 0.931 + 2.53 sqrt(lam)``, ``a = -0.059 + 0.02483 b``,
  ``alpha = 1.1239 + 1.1328 / (b - 3.4)``, ``v_r = 0.9277 - 3.6224 / (b - 2)``;
  U uniform on (-1/2, 1/2), V on (0, 1), ``us = 1/2 - |U|``,
  ``k = floor((2a / us + b) U + lam + 0.43)``; accept if ``us >= 0.07`` and
  ``V <= v_r``, reject if ``k < 0`` or (``us < 0.013`` and ``V > us``), else accept iff
  ``log(V alpha / (a / us^2 + b)) <= log p(k)``. The candidate is returned as the
  offset ``k - floor(lam)`` (int32), computed as ``floor((2a/us + b) U + frac(lam) +
  0.43)`` so that no float32 value is of the size of lam."""
  b = 0.931 + 2.53 * jnp.sqrt(lam)
  a = -0.059 + 0.02483 * b
  alpha = 1.1239 + 1.1328 / (b - 3.4)
  v_r = 0.9277 - 3.6224 / (b - 2.0)
  base = jnp.floor(lam)
  frac = lam - base
  words = jax.random.bits(key, (2, m), jnp.uint32)
  u = _uniform24(words[0]) - 0.5
  v = _uniform24(words[1])
  us = 0.5 - jnp.abs(u)
  j = jnp.floor((2.0 * a / us + b) * u + frac + 0.43)
  k = base + j
  quick = (us >= 0.07) & (v <= v_r)
  bad = (k < 0) | ((us < 0.013) & (v > us))
  logp = _poisson_log_pmf(k, (j - frac) / lam, lam)
  ok = quick | (~bad & (jnp.log(v * alpha / (a / (us * us) + b)) <= logp))
  return jnp.clip(j, -2.0**29, 2.0**29).astype(jnp.int32), ok


def _poisson_offsets(key: jax.Array, n: int, lam: jax.Array,
                     branch: Optional[str] = None) -> jax.Array:
  """int32 [n]: ``X - m`` for i.i.d. X ~ Poisson(lam), where ``m = floor(lam)`` if
  lam >= 50 and 0 otherwise (the same m for all n). ``branch`` (static): `BRANCHES`."""
  table = lambda: _poisson_table(key, n, jnp.minimum(lam, _TABLE_LAM))
  reject = lambda: _rejection_fill(key, n, lambda k, m: _ptrs_propose(
      k, m, jnp.maximum(lam, _TABLE_LAM)), block=8)
  if branch is not None:
    return table() if branch == "table" else reject()
  return jax.lax.cond(lam < _TABLE_LAM, table, reject)


#: ``branch`` of `discrete_gaussian` and `skellam`: None picks the method from the value
#: of sigma (a ``lax.cond``; under ``vmap`` with a batched sigma both methods run, about
#: four times the cost); ``"table"`` / ``"rejection"`` fix it statically, for callers
#: that know the range of sigma in advance (a value outside the branch's range gives
#: `INVALID`, never a wrong distribution).
BRANCHES = (None, "table", "rejection")


def _branch_ok(branch: Optional[str], small: jax.Array) -> jax.Array:
  """Whether the value fits the static ``branch`` (``small``: below the switch)."""
  if branch not in BRANCHES:
    raise FedJaxDpError(f"branch must be one of {BRANCHES}, got {branch!r}.",
                        option="branch")
  if branch is None:
    return jnp.asarray(True)
  return small if branch == "table" else ~small


def skellam(key: jax.Array, shape: Sequence[int], variance: Any,
            branch: Optional[str] = None) -> jax.Array:
  """I.i.d. draws of the symmetric Skellam ``Sk(lam, lam) = X1 - X2``, X1, X2 i.i.d.
  Poisson(lam), ``lam = variance / 2`` (mean 0, variance ``2 lam``; Agarwal, Kairouz,
  Liu, NeurIPS 2021, Sec. 3).

  Each Poisson: ``lam < 50`` inversion on the exact tail table; ``lam >= 50`` PTRS
  (`_ptrs_propose`) with Loader's log-pmf (`_poisson_log_pmf`), rejected entries
  redrawn as in `_rejection_fill`. The two Poissons share ``floor(lam)``, so the
  difference of their offsets from it is the draw (no int32 overflow however large
  lam). Float32 rounding of the PTRS candidate perturbs the pmf by a relative
  ~1.5e-7 sqrt(lam) (1.5e-3 at variance 2e8); the variance is exact to that precision.
  Cost: ~2-3 PTRS passes of 2 random words per Poisson (2 Poissons per draw).

  Args:
    key: a PRNG key.
    shape: static output shape (tuple of ints >= 0).
    variance: float scalar in [0, MAX_VARIANCE] (integer units squared; may be
      traced). 0 gives zeros.
    branch: static `BRANCHES` (``"table"``: variance < 100; ``"rejection"``: >= 100).

  Returns:
    int32 array of ``shape``. A traced invalid variance gives `INVALID` everywhere.

  Raises:
    FedJaxDpError: naming ``shape`` or ``variance`` (concrete variance negative, NaN,
      not a scalar or above MAX_VARIANCE).
  """
  shape = _check_shape(shape)
  variance, valid = _scalar("variance", variance, MAX_VARIANCE)
  n = math.prod(shape)
  if n == 0:
    return jnp.zeros(shape, jnp.int32)
  valid = valid & _branch_ok(branch, 0.5 * variance < _TABLE_LAM)
  off = _poisson_offsets(key, 2 * n, 0.5 * variance, branch)
  x1, x2 = off[:n], off[n:]
  valid = valid & (x1 != INVALID) & (x2 != INVALID)
  return jnp.where(valid, x1 - x2, INVALID).reshape(shape)
