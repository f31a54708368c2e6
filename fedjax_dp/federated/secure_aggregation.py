"""Distributed DP with secure aggregation: the engine's encode / secure-sum / decode stage.

A round with ``RoundConfig(noise="distributed", secure_aggregation=sa)`` runs, per
sampled client k that does not drop out (Kairouz, Liu, Steinke, "The Distributed
Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation", ICML 2021,
arXiv:2102.06387, Alg. 1 and 2; Agarwal, Kairouz, Liu, "The Skellam Mechanism for
Differentially Private Federated Learning", NeurIPS 2021, arXiv:2110.04995, Alg. 1):

1. ``x_k``: the clipped upload (``||x_k|| <= C``) flattened to ``[P]`` and padded with
   zeros to ``d = 2^ceil(log2 P)``;
2. ``y_k = H D x_k / (sqrt(d) gamma)``: the randomized Hadamard rotation (signs ``D``
   drawn from the round's public key, the same for every client) flattens the vector so
   that no coordinate carries much of its norm, and ``1 / gamma`` scales it to the
   integer grid (``gamma``: model units per integer step);
3. ``r_k``: conditional randomized rounding of ``y_k`` to ``Z^d``, redrawn until
   ``||r_k|| <= Delta2`` (the bound the accounting uses; Kairouz et al., Sec. 4.1);
4. ``u_k = (r_k + xi_k) mod 2^b`` with ``xi_k`` the client's integer noise: discrete
   Gaussian ``N_Z(0, sigma^2)`` (``"ddgauss"``) or symmetric Skellam of variance
   ``sigma^2`` (``"skellam"``), ``sigma = z C / (gamma sqrt(n))`` so that ``n`` surviving
   clients' noise sums to standard deviation ``z C`` in model units;
5. the server receives only ``s = sum_k u_k mod 2^b`` (secure aggregation simulated as
   an exact modular sum: uint32 wrap-around, then mod ``2^b``; no individual upload is
   ever read by the server code), centres it to ``[-2^(b-1), 2^(b-1))``, multiplies by
   gamma and undoes the rotation: ``D H^T s gamma / sqrt(d)``, truncated to ``P``.

Clients that drop out after being sampled (probability ``dropout_rate``, independent of
the data) send nothing: their update and their noise are missing from the sum. The round
reports the noise that is actually in the sum (``survivors * sigma^2``) and its zCDP
bound (`round_rho`), which the ledger composes as the Gaussian-equivalent noise
multiplier ``1 / sqrt(2 rho)`` under visible participation (observation
``"secure_sum"``, `fedjax_dp.privacy.events`).

The failure modes are outputs of the round (`diagnostics`): the fraction of coordinates
whose true integer sum left ``[-2^(b-1), 2^(b-1))`` (modular overflow), the rounding
error and its bias along the signal. They are computed from the unwrapped integer sum,
which the server never sees: simulation diagnostics.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp

from fedjax_dp.federated import keys as keylib
from fedjax_dp.federated import secure_sum
from fedjax_dp.privacy import discrete_noise, distributed_dp
from fedjax_dp.validation import FedJaxDpError, check_choice, check_int, check_positive

__all__ = ["MECHANISMS", "SecureAggregation", "EncodedSum", "local_stddev", "survivors",
           "encode_chunk", "zero_sum", "decode", "round_rho", "diagnostics"]

#: The integer noise each client adds (the accounting's names).
MECHANISMS = distributed_dp.MECHANISMS


@dataclasses.dataclass(frozen=True)
class SecureAggregation:
  """The static plan of a distributed-DP round (every field is public).

  Attributes:
    mechanism: ``"ddgauss"`` (distributed discrete Gaussian) or ``"skellam"``.
    bits: b in [2, 32], the modulus ``2^b`` of each coordinate of the secure sum.
    dim: d, the padded dimension (a power of two >= the upload's size P).
    granularity: gamma > 0, model units per integer step (the scale is ``1 / gamma``).
    l2_bound: Delta2 > 0, the L2 bound conditional rounding enforces on each client's
      integer vector (integer units).
    l1_bound: Delta1 > 0, its L1 bound (integer units).
    planned_survivors: n > 0, the clients whose noise is planned to sum to std ``z C``
      (per-client ``sigma = z C / (gamma sqrt(n))``).
    max_survivors: an upper bound on a round's survivors (the padded cohort size), the
      length of the static sum in the discrete Gaussian's tau (`round_rho`).
    dropout_rate: p in [0, 1), the probability that a sampled client drops out before
      uploading (independent of the data).
    sensitivity_factor: 1 under zero-out (one user's vector is removed), 2 under
      replace-one (fixed-size cohorts: one vector replaced by another).
    noise_branch: the noise sampler's static method (`fedjax_dp.privacy.discrete_noise
      .BRANCHES`), chosen from the planned sigma so that a batched sigma (sweeps) does
      not run both methods; None: chosen per value. A sigma outside the branch's range
      makes the round's rho infinite (the noise is then `INVALID`).
    noisy_client: None (every client adds its noise), or a population id: a deliberate
      break for canary audits only, in which that client alone adds noise while the
      round still reports every survivor's (`fedjax_dp.algorithms.dp_fedavg.audit_distributed`).

  Raises:
    FedJaxDpError: a value out of range (naming the field).
  """
  mechanism: str
  bits: int
  dim: int
  granularity: float
  l2_bound: float
  l1_bound: float
  planned_survivors: float
  max_survivors: int
  dropout_rate: float = 0.0
  sensitivity_factor: float = 1.0
  noise_branch: Optional[str] = None
  noisy_client: Optional[int] = None

  def __post_init__(self):
    check_choice("mechanism", self.mechanism, MECHANISMS)
    check_int("bits", self.bits, minimum=2, maximum=32)
    d = check_int("dim", self.dim, minimum=1)
    if d & (d - 1):
      raise FedJaxDpError(f"dim must be a power of two (the Hadamard rotation's), got {d}.",
                          option="dim")
    for name in ("granularity", "l2_bound", "l1_bound", "planned_survivors"):
      check_positive(name, getattr(self, name))
    check_int("max_survivors", self.max_survivors, minimum=1)
    if not 0.0 <= float(self.dropout_rate) < 1.0:
      raise FedJaxDpError(f"dropout_rate must be in [0, 1), got {self.dropout_rate!r}.",
                          option="dropout_rate")
    if self.sensitivity_factor not in (1.0, 2.0):
      raise FedJaxDpError("sensitivity_factor must be 1 (zero-out) or 2 (replace-one), "
                          f"got {self.sensitivity_factor!r}.", option="sensitivity_factor")


class EncodedSum(NamedTuple):
  """A chunk's (then the cohort's) running sums of a distributed-DP round.

  ``total`` is what the secure aggregation delivers (uint32 ``[d]``, the sum of the
  surviving uploads mod 2^32, hence mod 2^b); the other fields are simulation
  diagnostics the server never sees: ``unwrapped`` float32 ``[d]`` the true integer sum
  (rounded vectors plus noise), ``rounding`` float32 ``[d]`` the sum of the rounding
  errors ``r_k - y_k``, ``signal`` float32 ``[d]`` the sum of the scaled rotated
  vectors ``y_k``, ``survivors`` float32 (clients in the sum), ``retries`` float32 (extra
  rounding draws, summed over clients).
  """
  total: jax.Array
  unwrapped: jax.Array
  rounding: jax.Array
  signal: jax.Array
  survivors: jax.Array
  retries: jax.Array


def zero_sum(sa: SecureAggregation) -> EncodedSum:
  """The running sums before the first chunk."""
  f = jnp.zeros((sa.dim,), jnp.float32)
  return EncodedSum(jnp.zeros((sa.dim,), jnp.uint32), f, f, f, jnp.zeros((), jnp.float32),
                    jnp.zeros((), jnp.float32))


def local_stddev(sa: SecureAggregation, noise_multiplier, clip_norm) -> jax.Array:
  """Each client's noise std in integer units, ``z C / (gamma sqrt(n))`` (float32)."""
  z = jnp.asarray(noise_multiplier, jnp.float32)
  c = jnp.asarray(clip_norm, jnp.float32)
  return z * c / (sa.granularity * math.sqrt(sa.planned_survivors))


def survivors(sa: SecureAggregation, rkey: jax.Array, client_ids: jax.Array,
              mask: jax.Array) -> jax.Array:
  """bool ``[C]``: the sampled clients (``mask``) that do not drop out, each with
  probability ``1 - dropout_rate`` from its own key (population id ``client_ids``)."""
  if sa.dropout_rate == 0.0:
    return mask
  ks = keylib.client_keys(keylib.stream(rkey, keylib.DROPOUT), client_ids)
  u = jax.vmap(lambda k: jax.random.uniform(k))(ks)
  return mask & (u >= sa.dropout_rate)


def _noise(sa: SecureAggregation, key: jax.Array, sigma: jax.Array) -> jax.Array:
  """One client's integer noise ``[d]`` (int32)."""
  if sa.mechanism == "ddgauss":
    return discrete_noise.discrete_gaussian(key, (sa.dim,), sigma, sa.noise_branch)
  return discrete_noise.skellam(key, (sa.dim,), sigma * sigma, sa.noise_branch)


def _sampler_ok(sa: SecureAggregation, sigma: jax.Array) -> jax.Array:
  """Whether the noise sampler draws exactly at this sigma (its range and the static
  branch's); otherwise it returns `INVALID` and the round claims nothing."""
  if sa.mechanism == "ddgauss":
    value, limit, switch = sigma, discrete_noise.MAX_SIGMA, 8.0
  else:
    value, limit, switch = sigma * sigma, discrete_noise.MAX_VARIANCE, 100.0
  ok = value <= limit
  if sa.noise_branch == "table":
    ok = ok & (value < switch)
  elif sa.noise_branch == "rejection":
    ok = ok & (value >= switch)
  return ok


def encode_chunk(sa: SecureAggregation, flat: jax.Array, rkey: jax.Array,
                 client_ids: jax.Array, alive: jax.Array, sigma: jax.Array) -> EncodedSum:
  """Steps 1-5 for a chunk of clients: each encodes its clipped upload, and the chunk's
  surviving uploads are added mod 2^32.

  Args:
    sa: the plan.
    flat: float32 ``[C, P]``, the clipped uploads flattened (``P <= sa.dim``).
    rkey: the round key (its public rotation stream and the clients' private streams).
    client_ids: int32 ``[C]`` population ids (per-client keys).
    alive: bool ``[C]``, the clients whose upload enters the sum (sampled, not dropped).
    sigma: float32 scalar, each client's noise std in integer units (`local_stddev`).

  Returns:
    The chunk's `EncodedSum`.
  """
  c, p = flat.shape
  x = jnp.pad(flat.astype(jnp.float32), ((0, 0), (0, sa.dim - p)))
  signs = secure_sum.rotation_signs(keylib.stream(rkey, keylib.SECAGG_ROTATION), sa.dim)
  y = jax.vmap(lambda v: secure_sum.randomized_hadamard(v, signs))(x) / sa.granularity
  rkeys = keylib.client_keys(keylib.stream(rkey, keylib.SECAGG_ROUNDING), client_ids)
  r, tries = jax.vmap(lambda k, v: secure_sum.conditional_rounding(k, v, sa.l2_bound))(
      rkeys, y)
  nkeys = keylib.client_keys(keylib.stream(rkey, keylib.SECAGG_NOISE), client_ids)
  if sa.noisy_client is None:  # one sigma for all (unbatched: one sampler branch)
    noise = jax.vmap(lambda k: _noise(sa, k, sigma))(nkeys)
  else:  # the audits' deliberate break
    sigmas = jnp.where(client_ids == sa.noisy_client, jnp.asarray(sigma, jnp.float32), 0.0)
    noise = jax.vmap(lambda k, s: _noise(sa, k, s))(nkeys, sigmas)
  noised = r + noise
  live = alive[:, None]
  wrapped = jnp.where(live, secure_sum.wrap(noised, sa.bits), jnp.uint32(0))
  a = alive.astype(jnp.float32)
  return EncodedSum(
      total=jnp.sum(wrapped, axis=0, dtype=jnp.uint32),
      unwrapped=jnp.sum(jnp.where(live, noised.astype(jnp.float32), 0.0), axis=0),
      rounding=jnp.sum(jnp.where(live, r.astype(jnp.float32) - y, 0.0), axis=0),
      signal=jnp.sum(jnp.where(live, y, 0.0), axis=0),
      survivors=jnp.sum(a),
      retries=jnp.sum((tries.astype(jnp.float32) - 1.0) * a))


def decode(sa: SecureAggregation, total: jax.Array, rkey: jax.Array, size: int
           ) -> jax.Array:
  """The server's step: the secure sum ``total`` (uint32 ``[d]``) mod 2^b, centred,
  rescaled and un-rotated with the round's public signs (round key ``rkey``): float32
  ``[size]`` in model units, the noisy sum of the surviving clipped uploads."""
  centred = secure_sum.centre(total, sa.bits).astype(jnp.float32)
  signs = secure_sum.rotation_signs(keylib.stream(rkey, keylib.SECAGG_ROTATION), sa.dim)
  return secure_sum.inverse_randomized_hadamard(centred * sa.granularity, signs)[:size]


def round_rho(sa: SecureAggregation, sigma: jax.Array, survivors_: jax.Array) -> jax.Array:
  """The zCDP rho of the round's secure sum for one user (float32; ``+inf`` without
  survivors): the sum of ``n`` clients' noise shifted by one user's integer vector v,
  ``||v||_2 <= f Delta2`` and ``||v||_1 <= f Delta1`` (``f = sensitivity_factor``).

  * ``"ddgauss"`` (Kairouz, Liu, Steinke 2021, Prop. 14 / Eq. 17; ``S = sqrt(n) sigma``,
    ``tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k / (k + 1))``): the RDP is the
    minimum of ``alpha/2 (D2/S)^2 + tau d``, ``alpha/2 ((D2/S)^2 + 2 (D1/S) tau +
    tau^2 d)`` and ``alpha/2 (D2/S + sqrt(d) tau)^2``; for alpha >= 1 the first is at
    most ``alpha ((D2/S)^2 / 2 + tau d)``, so rho is the smallest of the three
    coefficients.
    It needs ``sigma >= 1/2`` (the theorem's hypothesis): below, rho is ``+inf``.
  * ``"skellam"`` (Agarwal, Kairouz, Liu 2021, Thm. 3.5 in integer units, total
    variance ``mu = n sigma^2``): ``alpha D2^2/(2 mu) + min(((2 alpha - 1) D2^2 +
    6 D1)/(4 mu^2), 3 D1/(2 mu))``; rho is the supremum over alpha >= 1 of that
    divided by alpha (`_skellam_rho`).

  An independent host implementation is `fedjax_dp.privacy.distributed_dp`; the tests
  check the two agree.
  """
  n = jnp.asarray(survivors_, jnp.float32)
  sigma = jnp.asarray(sigma, jnp.float32)
  d2 = sa.sensitivity_factor * sa.l2_bound
  d1 = sa.sensitivity_factor * sa.l1_bound
  var = jnp.maximum(n * sigma * sigma, 1e-30)
  valid = (n >= 1.0) & (sigma > 0.0) & _sampler_ok(sa, sigma)
  if sa.mechanism == "ddgauss":
    k = jnp.arange(1, sa.max_survivors, dtype=jnp.float32)
    terms = jnp.exp(-2.0 * math.pi ** 2 * sigma * sigma * k / (k + 1.0))
    tau = 10.0 * jnp.sum(jnp.where(k < n, terms, 0.0))
    s = jnp.sqrt(var)
    a = (d2 / s) ** 2
    rho = jnp.minimum(jnp.minimum(a / 2.0 + tau * sa.dim,
                                  (a + 2.0 * (d1 / s) * tau + tau * tau * sa.dim) / 2.0),
                      (d2 / s + math.sqrt(sa.dim) * tau) ** 2 / 2.0)
    valid = valid & (sigma >= 0.5)  # the bound's hypothesis
  else:
    rho = _skellam_rho(d2, d1, var)
  return jnp.where(valid, rho, jnp.inf)


def _skellam_rho(d2: float, d1: float, var: jax.Array) -> jax.Array:
  """``sup_{alpha >= 1} min(A + C / alpha, B + E / alpha)`` of the Skellam bound's two
  branches divided by alpha (``A = D2^2/(2 mu) + D2^2/(2 mu^2)``, ``C = (6 D1 - D2^2) /
  (4 mu^2)``, ``B = D2^2 / (2 mu)``, ``E = 3 D1 / (2 mu)``): each branch is monotone in
  alpha, so the supremum is at alpha = 1, at the branches' crossing or at infinity
  (``B``)."""
  big_a = d2 * d2 / (2.0 * var) + d2 * d2 / (2.0 * var * var)
  big_c = (6.0 * d1 - d2 * d2) / (4.0 * var * var)
  big_b = d2 * d2 / (2.0 * var)
  big_e = 3.0 * d1 / (2.0 * var)
  lower = lambda a: jnp.minimum(big_a + big_c / a, big_b + big_e / a)
  cross = (big_e - big_c) / jnp.maximum(big_a - big_b, 1e-30)
  at_cross = jnp.where((big_a > big_b) & (cross > 1.0), lower(jnp.maximum(cross, 1.0)),
                       0.0)
  return jnp.maximum(jnp.maximum(lower(1.0), big_b), at_cross)


def diagnostics(sa: SecureAggregation, enc: EncodedSum, sigma: jax.Array,
                rho: jax.Array) -> Dict[str, jax.Array]:
  """The round's distributed-DP metrics (float32 scalars): the privacy facts (public:
  ``secagg_survivors``, ``secagg_local_stddev``, ``secagg_noise_variance`` in integer
  units, ``secagg_rho``) and the simulation diagnostics computed from the unwrapped sum
  (``secagg_overflow_rate``: fraction of the d coordinates whose true sum left
  ``[-2^(b-1), 2^(b-1))``; ``secagg_rounding_error``: ``gamma ||sum_k (r_k - y_k)||``
  in model units; ``secagg_rounding_bias``: ``<sum (r - y), sum y> / ||sum y||^2``, the
  relative change of the sum along its own direction; ``secagg_rounding_retries``: mean
  extra rounding draws per surviving client)."""
  over = secure_sum.overflowed(enc.unwrapped, sa.bits).astype(jnp.float32)
  sig2 = jnp.sum(enc.signal * enc.signal)
  n = enc.survivors
  return {"secagg_survivors": n, "secagg_local_stddev": sigma,
          "secagg_noise_variance": n * sigma * sigma, "secagg_rho": rho,
          "secagg_overflow_rate": jnp.mean(over),
          "secagg_rounding_error": sa.granularity * jnp.sqrt(jnp.sum(enc.rounding ** 2)),
          "secagg_rounding_bias": jnp.where(sig2 > 0, jnp.sum(enc.rounding * enc.signal)
                                            / jnp.maximum(sig2, 1e-30), 0.0),
          "secagg_rounding_retries": enc.retries / jnp.maximum(n, 1.0)}
