"""DP-MOCHA's two Gaussian mechanisms (Hu et al. 2020, Algorithm 1 lines 6-7,
Corollaries 2-3) and what each provably bounds.

Every round, each active device t

  line 6: dalpha~_t = dalpha_t + b_t,            b_t ~ N(0, (s1 sigma1)^2 I_{n_t})
  line 7: du_t = xi X_t dalpha~_t + p_t,         p_t ~ N(0, (s2 sigma2)^2 I_d)

with the paper's sensitivities s1 = (8 lam + beta) / (beta n_t) (Corollary 2, of the
exact minimiser of eq. 7) and s2 = 2 xi ||dalpha_t||_2 (Corollary 3, "when dalpha_t is
known"). Only du_t leaves the device; accounting treats dalpha~_t as released too
(conservative), so line 7 is a Gaussian mechanism *given* line 6's output.

Privacy unit: one sample of one device (record-level DP on each device's data, each
device accounted separately; our reading: the paper does not state its unit),
replace-one neighbours with ||x|| <= 1.

``s2_mode`` (Corollary 3's s2 depends on the data, so it is not a DP sensitivity as
stated; our three readings):
  * ``noisy_l2`` (default, the paper read literally): s2 = 2 xi ||dalpha~_t||_2 from the
    noisy dual step, a function of line 6's output. Given dalpha~, replacing sample i
    moves xi X_t dalpha~ by xi |dalpha~_i| ||x_i - x_i'|| <= 2 xi ||dalpha~||_inf
    <= s2, so line 7's noise multiplier is at least sigma2: valid.
  * ``const``: s2 = 2 xi, with dalpha~ clamped to the dual box [-1, 1] before line 7
    (post-processing of line 6; ours: without the clamp 2 xi bounds nothing, because the
    noisy dalpha~ is unbounded). Valid with multiplier sigma2.
  * ``clean_l2``: s2 = 2 xi ||dalpha_t||_2 from the NOISE-FREE step. The noise scale then
    depends on the private data: not DP (test-only; the ledger records epsilon = inf).

What the code provably enforces (the ledger's multipliers, `ledger_multipliers`):
Corollary 2 bounds the exact minimiser of eq. (7) at fixed (w_t, alpha_t). The devices
run a few SDCA steps from 0 on a state (alpha_t, and w_t through earlier uploads) that
itself depends on every sample, and the hinge conjugate's box lets one replaced sample
move its own dual coordinate by up to 1 (our exact-solve test finds ||dalpha - dalpha'||
up to ~26 s1 on small problems). What does hold, whatever the solver and the state: a
coordinate that no step touched is 0 in both worlds and a touched one moves by at most 2
(y alpha and y (alpha + dalpha) both lie in [0, 1]), so the L2 sensitivity of dalpha_t
under replace-one is at most 2 sqrt(min(steps_t, n_t)). The ledger divides line 6's
noise by that bound; `dual_sensitivity_paper` (s1) is what the paper's calibration uses.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Tuple, get_args

import jax
import jax.numpy as jnp

__all__ = ["S2Mode", "S2_MODES", "dual_sensitivity_paper", "dual_sensitivity_provable",
           "Noised", "perturb", "ledger_multipliers"]

S2Mode = Literal["noisy_l2", "const", "clean_l2"]
S2_MODES: Tuple[str, ...] = get_args(S2Mode)


def dual_sensitivity_paper(lam, beta, n) -> jax.Array:
  """s1 = (8 lam + beta) / (beta n_t): Corollary 2's L2 sensitivity of the minimiser of
  eq. (7) (the paper's; not a bound on what SDCA returns, see the module docstring).
  ``n`` int or float ``[m]``; returns float32 like ``n``."""
  return (8.0 * lam + beta) / (beta * jnp.asarray(n, jnp.float32))


def dual_sensitivity_provable(steps, n) -> jax.Array:
  """2 sqrt(min(steps_t, n_t)): a replace-one L2 sensitivity of the SDCA dual step that
  holds whatever the state and the solver's progress (module docstring). float32."""
  touched = jnp.minimum(jnp.asarray(steps, jnp.float32), jnp.asarray(n, jnp.float32))
  return 2.0 * jnp.sqrt(touched)


class Noised(NamedTuple):
  """One round's noisy outputs of every device (leading axis ``[m]``).

  Attributes:
    dalpha_noisy: float32 ``[m, n_max]`` dalpha~ (line 6), 0 on padding rows.
    du: float32 ``[m, d]`` the uploads xi X_t dalpha~_t + p_t (line 7); zero rows for
      inactive devices.
    dual_noise_std: float32 ``[m]`` s1 sigma1 (std of each entry of b_t).
    primal_noise_std: float32 ``[m]`` s2 sigma2 (std of each entry of p_t).
    s2: float32 ``[m]`` the sensitivity s2 used (per ``s2_mode``).
  """
  dalpha_noisy: jax.Array
  du: jax.Array
  dual_noise_std: jax.Array
  primal_noise_std: jax.Array
  s2: jax.Array


def perturb(key_b: jax.Array, key_p: jax.Array, dalpha: jax.Array, x: jax.Array,
            mask: jax.Array, active: jax.Array, xi, s1: jax.Array, sigma1: jax.Array,
            sigma2: jax.Array, s2_mode: str) -> Noised:
  """Lines 6-7 of Algorithm 1 for every device.

  Args:
    key_b, key_p: ``[m]`` PRNG keys (per device) of b_t and p_t.
    dalpha: float32 ``[m, n_max]`` the noise-free SDCA steps.
    x: float32 ``[m, n_max, d]`` rows with ||x|| <= 1; mask float32 ``[m, n_max]``.
    active: bool ``[m]``: the devices that upload this round (others: du_t = 0).
    xi: aggregation parameter in (0, 1].
    s1: float32 ``[m]`` dual sensitivities (Corollary 2).
    sigma1, sigma2: float32 ``[m]`` noise multipliers (0 = no noise, the non-private
      baseline).
    s2_mode: one of `S2_MODES` (static).

  Returns:
    `Noised`.
  """
  std1 = s1 * sigma1
  b = jax.vmap(lambda k, n: jax.random.normal(k, n.shape))(key_b, dalpha) * std1[:, None]
  noisy = (dalpha + b) * mask
  if s2_mode == "noisy_l2":
    s2 = 2.0 * xi * jnp.linalg.norm(noisy, axis=1)
    upload = noisy
  elif s2_mode == "const":
    s2 = jnp.full(dalpha.shape[:1], 2.0 * xi, jnp.float32)
    upload = jnp.clip(noisy, -1.0, 1.0)
  elif s2_mode == "clean_l2":
    s2 = 2.0 * xi * jnp.linalg.norm(dalpha * mask, axis=1)
    upload = noisy
  else:
    raise ValueError(f"s2_mode must be one of {S2_MODES}, got {s2_mode!r}")
  std2 = s2 * sigma2
  d = x.shape[-1]
  p = jax.vmap(lambda k: jax.random.normal(k, (d,)))(key_p) * std2[:, None]
  du = xi * jnp.einsum("tn,tnd->td", upload, x) + p
  du = jnp.where(active[:, None], du, 0.0)
  return Noised(noisy, du, std1, std2, s2)


def ledger_multipliers(noised: Noised, steps: jax.Array, counts: jax.Array,
                       s2_mode: str):
  """The noise multipliers (noise std / provable replace-one sensitivity) of lines 6 and
  7 for every device: float32 ``([m], [m])`` (module docstring).

  Line 6: ``dual_noise_std / dual_sensitivity_provable(steps, n)``. Line 7: noisy_l2:
  ``primal_noise_std / s2 = sigma2`` (a lower bound of std / (2 xi ||dalpha~||_inf));
  const: ``primal_noise_std / (2 xi)``; clean_l2: 0 (not DP).
  """
  z1 = noised.dual_noise_std / dual_sensitivity_provable(steps, counts)
  if s2_mode == "clean_l2":
    z2 = jnp.zeros_like(z1)
  else:
    z2 = jnp.where(noised.s2 > 0, noised.primal_noise_std / jnp.maximum(noised.s2, 1e-30),
                   0.0)
  return z1, z2
