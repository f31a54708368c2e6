"""The client and server arithmetic of distributed DP with secure aggregation: flat
vectors rotated, rounded to integers and summed modulo ``2^bits``.

A client clips its update (elsewhere), flattens it to P float32 values, pads them to
``d = padded_dim(P)``, scales by ``1 / gamma``, applies `randomized_hadamard` (signs
from `rotation_signs`, public and shared per round), rounds with
`conditional_rounding`, adds integer noise (`fedjax_dp.privacy.discrete_noise`) and
uploads `wrap` of the result. Secure aggregation reveals only `modular_sum`; the
server applies `centre`, `inverse_randomized_hadamard` and ``gamma``.

Sources: Kairouz, Liu, Steinke, "The Distributed Discrete Gaussian Mechanism for
Federated Learning with Secure Aggregation", ICML 2021, arXiv:2102.06387 (Alg. 1;
Sec. 4.1 conditional randomized rounding; Sec. 4.2 flattening by a randomized
Hadamard rotation; Sec. 4.3 modular clipping); Agarwal, Kairouz, Liu, "The Skellam
Mechanism for Differentially Private Federated Learning", NeurIPS 2021,
arXiv:2110.04995 (Alg. 1, the same pipeline with Skellam noise); Ailon & Chazelle,
"The Fast Johnson-Lindenstrauss Transform and Approximate Nearest Neighbors", SIAM J.
Comput. 39(1), 2009 (the randomized Hadamard transform ``H D``).

All functions are pure, shape-static and work under ``jit`` and ``vmap`` (over
clients). Integers are int32 (the rounded and centred vectors) or uint32 (the
uploads and their modular sum); x64 is not needed.
"""

from __future__ import annotations

import math
from typing import Any, Tuple

import jax
import jax.core  # explicit: `jax.core.Tracer` (value checks skip traced arrays)
import jax.numpy as jnp
import numpy as np

# The bound conditional rounding enforces: the accounting's own (one implementation).
from fedjax_dp.privacy.distributed_dp import rounded_l2_bound
from fedjax_dp.validation import FedJaxDpError, check_finite, check_int

__all__ = ["padded_dim", "rotation_signs", "randomized_hadamard",
           "inverse_randomized_hadamard", "conditional_rounding", "rounded_l2_bound",
           "wrap", "modular_sum", "centre", "overflowed"]


def padded_dim(p: int) -> int:
  """The next power of two ``>= p``: the dimension ``d`` a flat vector of length ``p``
  is zero-padded to before the Hadamard rotation (Kairouz et al. 2021, Sec. 4.2).

  Raises:
    FedJaxDpError: naming ``dim`` if ``p`` is not an integer >= 1.
  """
  p = check_int("dim", p, minimum=1)
  return 1 << (p - 1).bit_length()


def rotation_signs(key: jax.Array, d: int) -> jax.Array:
  """float32 ``[d]`` of i.i.d. uniform signs (+1 / -1, Rademacher): the diagonal of
  ``D`` in ``H D`` (Kairouz et al. 2021, Sec. 4.2). Public randomness, drawn once per
  round from a key every client and the server share.

  Raises:
    FedJaxDpError: naming ``d`` if it is not an integer >= 1.
  """
  d = check_int("d", d, minimum=1)
  return jnp.where(jax.random.bernoulli(key, 0.5, (d,)), 1.0, -1.0).astype(jnp.float32)


def _check_rotation(x: jax.Array, signs: jax.Array, name: str) -> int:
  d = x.shape[-1] if x.ndim else 0
  if d < 1 or d & (d - 1):
    raise FedJaxDpError(
        f"{name} must have a last axis whose length is a power of two (pad it to "
        f"padded_dim(length)), got shape {tuple(x.shape)}.", option=name)
  if tuple(signs.shape) != (d,):
    raise FedJaxDpError(f"signs must have shape ({d},) to match {name}, got "
                        f"{tuple(signs.shape)}.", option="signs")
  return d


def _walsh_hadamard(x: jax.Array) -> jax.Array:
  """``H x`` along the last axis (unnormalised Sylvester Hadamard matrix, ``H H = d I``)
  by the fast Walsh-Hadamard transform: log2(d) butterfly stages, each pairing the
  entries ``h`` apart (``(a, b) -> (a + b, a - b)``), O(d log d)."""
  lead, d = x.shape[:-1], x.shape[-1]
  h = 1
  while h < d:
    y = x.reshape(lead + (d // (2 * h), 2, h))
    a, b = y[..., 0, :], y[..., 1, :]
    x = jnp.stack([a + b, a - b], axis=-2).reshape(lead + (d,))
    h *= 2
  return x


def randomized_hadamard(x: jax.Array, signs: jax.Array) -> jax.Array:
  """The randomized Hadamard rotation ``H D x / sqrt(d)`` (Ailon & Chazelle 2009;
  Kairouz et al. 2021, Sec. 4.2): orthonormal (``H D / sqrt(d)`` is an orthogonal
  matrix, so L2 norms are kept), and it spreads a vector's mass over all coordinates
  (a one-hot vector becomes ``+-1 / sqrt(d)`` everywhere).

  Args:
    x: float32 ``[..., d]``, d a power of two (`padded_dim`).
    signs: float32 ``[d]`` of +-1 (`rotation_signs`).

  Returns:
    float32 ``[..., d]``; float32 rounding adds a relative error of ~log2(d) 2^-24.

  Raises:
    FedJaxDpError: naming ``x`` (last axis not a power of two) or ``signs`` (shape).
  """
  x, signs = jnp.asarray(x, jnp.float32), jnp.asarray(signs, jnp.float32)
  d = _check_rotation(x, signs, "x")
  return _walsh_hadamard(x * signs) * np.float32(1.0 / math.sqrt(d))


def inverse_randomized_hadamard(y: jax.Array, signs: jax.Array) -> jax.Array:
  """The inverse rotation ``D H y / sqrt(d)`` (``H`` symmetric with ``H H = d I``,
  ``D D = I``); see `randomized_hadamard` for the shapes and errors (``y`` in place of
  ``x``)."""
  y, signs = jnp.asarray(y, jnp.float32), jnp.asarray(signs, jnp.float32)
  d = _check_rotation(y, signs, "y")
  return _walsh_hadamard(y) * (signs * np.float32(1.0 / math.sqrt(d)))


def _pairwise_sum_of_squares(r: jax.Array) -> jax.Array:
  """float32 ``sum r_i^2`` of an int32 ``[d]`` vector by pairwise summation (an explicit
  tree of ``ceil(log2 d)`` levels of elementwise adds, so that the rounding bound of
  `conditional_rounding` holds whatever order XLA would reduce in)."""
  sq = jnp.square(r.astype(jnp.float32))
  d = sq.shape[0]
  size = 1 << max(d - 1, 0).bit_length()
  sq = jnp.pad(sq, (0, size - d))
  while sq.shape[0] > 1:
    sq = sq[0::2] + sq[1::2]
  return sq[0]


def conditional_rounding(key: jax.Array, x: jax.Array, l2_bound: Any, *,
                         max_tries: int = 64) -> Tuple[jax.Array, jax.Array]:
  """Conditional randomized rounding (Kairouz et al. 2021, Sec. 4.1, Prop. 22; Alg. 1
  line 6): round each coordinate of ``x`` to ``floor(x_i)`` or ``floor(x_i) + 1``, up
  with probability ``x_i - floor(x_i)`` (unbiased), independently, and repeat (a
  ``lax.while_loop``, fresh randomness ``fold_in(key, try)`` each time) until the
  rounded vector's L2 norm is at most ``l2_bound`` (`rounded_l2_bound`).

  After ``max_tries`` failures it falls back to rounding toward zero,
  ``trunc(x)``: ``|trunc(x_i)| <= |x_i|``, so its norm is <= ``||x||`` <= l2_bound
  whenever the clipped input meets the bound (always, for ``l2_bound >=
  rounded_l2_bound(c, d, beta)`` and ``||x|| <= c``); if even ``trunc(x)`` fails the
  check (an input that was not clipped), the zero vector is returned. So the
  returned vector always meets the bound: the sensitivity bound the accountant uses
  holds unconditionally (the fallback only biases the rare failed rounding).

  The norm test is ``sum r_i^2 <= l2_bound^2 (1 - (2 ceil(log2 d) + 8) 2^-24)`` in
  float32, the sum by pairwise summation: each square and add has a relative error
  <= 2^-24 and a pairwise sum of n nonnegative terms one <= ceil(log2 n) 2^-24 (1 +
  O(2^-24)) (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed. 2002,
  Sec. 4.2), so an accepted vector's exact norm never exceeds ``l2_bound`` (as the
  float32 it is passed as); the margin rejects only vectors within a relative
  ~(log2(d) + 4) 2^-24 of the bound.

  Args:
    key: a PRNG key.
    x: float32 ``[d]``, the scaled and rotated vector (integer units).
    l2_bound: float scalar > 0 (may be traced; a concrete one is checked).
    max_tries: static int >= 1, the randomized tries before the fallback.

  Returns:
    ``(rounded, tries)``: int32 ``[d]`` and int32 scalar, the number of randomized
    tries made (1..max_tries), or ``max_tries + 1`` when the fallback was used.

  Raises:
    FedJaxDpError: naming ``x`` (not 1-D), ``max_tries`` (not an int >= 1) or
      ``l2_bound`` (concrete and not > 0 and finite).
  """
  x = jnp.asarray(x, jnp.float32)
  if x.ndim != 1:
    raise FedJaxDpError(f"x must be a 1-D vector [d] (vmap over clients), got shape "
                        f"{tuple(x.shape)}.", option="x")
  max_tries = check_int("max_tries", max_tries, minimum=1)
  if not isinstance(l2_bound, jax.core.Tracer):
    bound = check_finite("l2_bound", np.asarray(l2_bound).item()
                         if np.ndim(l2_bound) == 0 else l2_bound, "> 0")
    if bound <= 0:
      raise FedJaxDpError(f"l2_bound must be > 0, got {l2_bound!r}.", option="l2_bound")
  levels = max(x.shape[0] - 1, 0).bit_length()
  margin = np.float32(1.0 - (2 * levels + 8) * 2.0**-24)
  b = jnp.asarray(l2_bound, jnp.float32)
  limit = b * b * margin
  meets = lambda r: _pairwise_sum_of_squares(r) <= limit
  low = jnp.floor(x)
  frac = x - low

  def draw(i):
    u = jax.random.uniform(jax.random.fold_in(key, i), x.shape, jnp.float32)
    return (low + (u < frac).astype(jnp.float32)).astype(jnp.int32)

  def cond(state):
    i, _, ok = state
    return jnp.logical_not(ok) & (i < max_tries)

  def body(state):
    i, _, _ = state
    r = draw(i)
    return i + 1, r, meets(r)

  init = (jnp.int32(0), jnp.zeros(x.shape, jnp.int32), jnp.array(False))
  tries, r, ok = jax.lax.while_loop(cond, body, init)
  fallback = jnp.trunc(x).astype(jnp.int32)
  fallback = jnp.where(meets(fallback), fallback, 0)
  return jnp.where(ok, r, fallback), jnp.where(ok, tries, max_tries + 1)


def _check_bits(bits: Any) -> int:
  return check_int("bits", bits, minimum=2, maximum=32)


def _low_mask(bits: int) -> np.uint32:
  return np.uint32((1 << bits) - 1)


def wrap(v: jax.Array, bits: int) -> jax.Array:
  """``v mod 2^bits`` as uint32 in ``[0, 2^bits)``: the value a client uploads to secure
  aggregation (Kairouz et al. 2021, Alg. 1: arithmetic in ``Z_m``, ``m = 2^bits``).
  Two's complement makes the int32 bit pattern ``v mod 2^32``; masking the low
  ``bits`` bits reduces it further.

  Args:
    v: int32 array (any shape).
    bits: static int in [2, 32], the field size's log2.

  Returns:
    uint32 array of ``v``'s shape.

  Raises:
    FedJaxDpError: naming ``bits`` (not an int in [2, 32]) or ``v`` (not int32).
  """
  bits = _check_bits(bits)
  v = jnp.asarray(v)
  if v.dtype != jnp.int32:
    raise FedJaxDpError(f"v must be int32, got {v.dtype}.", option="v")
  return jax.lax.bitcast_convert_type(v, jnp.uint32) & _low_mask(bits)


def modular_sum(uploads: jax.Array, mask: jax.Array, bits: int) -> jax.Array:
  """What secure aggregation reveals: ``sum_k mask_k uploads_k mod 2^bits`` (Kairouz
  et al. 2021, Alg. 1, the server's step). The uint32 sum wraps modulo 2^32, a
  multiple of 2^bits, so reducing it at the end gives the exact modular sum.

  Args:
    uploads: uint32 ``[K, d]`` (`wrap` of each client's vector).
    mask: bool ``[K]``, the clients that take part (padding rows are False).
    bits: static int in [2, 32].

  Returns:
    uint32 ``[d]`` in ``[0, 2^bits)``.

  Raises:
    FedJaxDpError: naming ``uploads`` (not uint32 ``[K, d]``), ``mask`` (not ``[K]``)
      or ``bits``.
  """
  bits = _check_bits(bits)
  uploads = jnp.asarray(uploads)
  if uploads.dtype != jnp.uint32 or uploads.ndim != 2:
    raise FedJaxDpError(f"uploads must be uint32 [K, d], got {uploads.dtype} "
                        f"{tuple(uploads.shape)}.", option="uploads")
  mask = jnp.asarray(mask)
  if tuple(mask.shape) != uploads.shape[:1]:
    raise FedJaxDpError(f"mask must have shape ({uploads.shape[0]},), got "
                        f"{tuple(mask.shape)}.", option="mask")
  kept = jnp.where(mask.astype(bool)[:, None], uploads, np.uint32(0))
  return jnp.sum(kept, axis=0, dtype=jnp.uint32) & _low_mask(bits)


def centre(u: jax.Array, bits: int) -> jax.Array:
  """The centred representative in ``[-2^(bits-1), 2^(bits-1))`` of ``u mod 2^bits``
  (Kairouz et al. 2021, Alg. 1: the server maps ``Z_m`` back to integers): the low
  ``bits`` bits sign-extended, by a left shift of ``32 - bits``, a bitcast to int32
  and an arithmetic right shift (bits = 32 is the bitcast alone). Bits of ``u`` above
  ``bits`` are ignored.

  Args:
    u: uint32 array (any shape), e.g. `modular_sum`'s.
    bits: static int in [2, 32].

  Returns:
    int32 array of ``u``'s shape.

  Raises:
    FedJaxDpError: naming ``bits`` or ``u`` (not uint32).
  """
  bits = _check_bits(bits)
  u = jnp.asarray(u)
  if u.dtype != jnp.uint32:
    raise FedJaxDpError(f"u must be uint32, got {u.dtype}.", option="u")
  shift = 32 - bits
  s = jax.lax.bitcast_convert_type(u << np.uint32(shift), jnp.int32)
  return s >> np.int32(shift) if shift else s


def overflowed(unwrapped: jax.Array, bits: int) -> jax.Array:
  """Which coordinates the modular wrap corrupted: the true integer sum (computed
  outside secure aggregation, e.g. in a simulation) outside ``[-2^(bits-1),
  2^(bits-1))``, where `centre` of the modular sum differs from it by a multiple of
  2^bits (Kairouz et al. 2021, Sec. 4.3, modular clipping).

  Args:
    unwrapped: float32 array, the exact integer sums (float32 holds every integer up
      to 2^24 exactly, and the bounds ``+-2^(bits-1)`` for every bits <= 32).
    bits: static int in [2, 32].

  Returns:
    bool array of ``unwrapped``'s shape (True for NaN).

  Raises:
    FedJaxDpError: naming ``bits``.
  """
  bits = _check_bits(bits)
  x = jnp.asarray(unwrapped, jnp.float32)
  half = np.float32(2.0 ** (bits - 1))
  return jnp.logical_not((x >= -half) & (x < half))
