"""Adaptive clipping: a clip norm that tracks a quantile of the client update norms.

Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with Adaptive
Clipping", NeurIPS 2021 (arXiv:1905.03871), Algorithm 1 and Sec. 3:

  round t, clip norm C_t, cohort of expected size m:
    b_i   = 1[ ||Delta_i|| <= C_t ]                     (client i's unclipped bit)
    b~_t  = ( sum_i (b_i - 1/2) + N(0, sigma_b^2) ) / m + 1/2
                                                        (noisy unclipped fraction; the
                                                         centred bits have sensitivity
                                                         1/2 under add/remove)
    C_t+1 = C_t * exp(-eta_C (b~_t - gamma))            (geometric update, eq. of Sec. 2)
         or C_t - eta_C (b~_t - gamma)                  (linear update)

The update sum (clipped to C_t, noise std sigma_Delta C_t) and the noisy count are two
Gaussian releases of the same cohort; rescaled, they are one Gaussian mechanism whose
noise multiplier is

    z = ( z_Delta^-2 + z_b^-2 )^-1/2,   z_b = sigma_b / Delta_b,          (Sec. 3.1)

with Delta_b the count's sensitivity (1/2 for add/remove of one user: the centred bit
disappears; 1 for replace-one: it flips). The paper fixes the *effective* z and
derives ``z_Delta = (z^-2 - z_b^-2)^-1/2`` (requires z < z_b); so does this module: the
noise multiplier a run states and accounts is that of the combined release.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_dp.validation import (FedJaxDpError, check_choice, check_non_negative,
                                  check_positive)

#: The clip-norm update rules of Andrew et al. 2021 (Sec. 2): geometric (the paper's
#: recommendation) and linear.
UPDATE_RULES = ("geometric", "linear")


@dataclasses.dataclass(frozen=True)
class AdaptiveClipping:
  """Static configuration of quantile-based adaptive clipping (Andrew et al. 2021).

  Attributes:
    target_quantile: gamma in (0, 1), the fraction of client updates meant to be left
      unclipped (the paper's default 0.5: the median norm).
    learning_rate: eta_C > 0, the clip norm's learning rate (the paper's 0.2).
    initial_clip_norm: C_0 > 0, parameter units (the paper starts at 0.1).
    count_stddev: sigma_b >= 0, the standard deviation of the Gaussian noise on the sum
      of centred unclipped bits (the paper's ``m / 20``); 0 only without update noise
      (a non-private run), since the count is a release too.
    expected_cohort_size: m > 0, the public denominator of the fraction (q N for
      Poisson cohorts, the cohort size for fixed-size ones).
    update_rule: ``"geometric"`` (default) or ``"linear"``.

  Raises:
    FedJaxDpError: on construction, for a value out of range (naming the field).
  """
  target_quantile: float = 0.5
  learning_rate: float = 0.2
  initial_clip_norm: float = 0.1
  count_stddev: float = 1.0
  expected_cohort_size: float = 1.0
  update_rule: str = "geometric"

  def __post_init__(self):
    gamma = float(self.target_quantile)
    if not 0.0 < gamma < 1.0:
      raise FedJaxDpError(f"target_quantile must be in (0, 1), got {self.target_quantile!r}.",
                          option="target_quantile")
    check_positive("clip_learning_rate", self.learning_rate)
    check_positive("initial_clip_norm", self.initial_clip_norm)
    check_non_negative("clipped_count_stddev", self.count_stddev)
    check_positive("expected_cohort_size", self.expected_cohort_size)
    check_choice("clip_update_rule", self.update_rule, UPDATE_RULES)


class ClipState(NamedTuple):
  """The adaptive clip norm carried between rounds (`ServerState.mechanism["clip"]`).

  Attributes:
    clip_norm: float32 scalar C_t > 0, the clip norm of the next round.
  """
  clip_norm: jax.Array


def init_clip_state(config: AdaptiveClipping) -> ClipState:
  """The state before round 1: ``C_0 = config.initial_clip_norm``."""
  return ClipState(jnp.asarray(config.initial_clip_norm, jnp.float32))


def count_sensitivity(relation: str) -> float:
  """L2 sensitivity of the sum of centred bits ``b_i - 1/2`` under ``relation``:
  1/2 for add/remove of one user (its bit leaves the sum), 1 for replace-one (the bit
  flips from -1/2 to 1/2).

  Raises:
    FedJaxDpError: zero-out (a user whose update is nulled still contributes a bit,
      which a Gaussian on the sum does not cover with these constants; adaptive
      clipping is offered with central noise only) or an unknown relation.
  """
  check_choice("relation", relation, ("add_remove", "replace_one"))
  return 0.5 if relation == "add_remove" else 1.0


def update_noise_multiplier(noise_multiplier, count_noise_multiplier):
  """z_Delta = (z^-2 - z_b^-2)^-1/2: the noise multiplier of the update sum such that
  the update sum and the count together are a Gaussian release with noise multiplier
  ``z`` (Andrew et al. 2021, Sec. 3.1). Works on floats and (traced) float32 arrays.

  Args:
    noise_multiplier: z >= 0, the combined release's (event) noise multiplier.
    count_noise_multiplier: z_b > 0, ``count_stddev / count_sensitivity``.

  Returns:
    z_Delta (0 when z is 0; NaN when z >= z_b, where no update noise can reach z:
    `check_noise_split` refuses that on the host).
  """
  z = jnp.asarray(noise_multiplier, jnp.float32)
  zb = jnp.asarray(count_noise_multiplier, jnp.float32)
  inv = 1.0 / jnp.square(jnp.where(z > 0, z, 1.0)) - 1.0 / jnp.square(zb)
  return jnp.where(z > 0, jnp.where(inv > 0, jax.lax.rsqrt(jnp.where(inv > 0, inv, 1.0)),
                                    jnp.nan), 0.0)


def check_noise_split(noise_multiplier: float, count_noise_multiplier: float,
                      option: str = "noise_multiplier") -> float:
  """Host check that a combined z can be split (`update_noise_multiplier`).

  Returns:
    z_Delta as a float.

  Raises:
    FedJaxDpError: ``noise_multiplier >= count_noise_multiplier`` (the count alone
      already leaks more than the budget allows), naming ``option``.
  """
  z, zb = float(noise_multiplier), float(count_noise_multiplier)
  if z == 0.0:
    return 0.0
  if not zb > z:
    raise FedJaxDpError(
        f"{option}={z:g} must be below the clipped count's noise multiplier z_b = "
        f"count_stddev / count_sensitivity = {zb:g} (Andrew et al. 2021, Sec. 3.1: the "
        "update noise is z_Delta = (z^-2 - z_b^-2)^-1/2); raise --clipped-count-stddev "
        "or lower the noise multiplier.", option=option)
  return (z ** -2 - zb ** -2) ** -0.5


def noisy_unclipped_fraction(key: jax.Array, num_unclipped, num_participants,
                             config: AdaptiveClipping) -> jax.Array:
  """b~ = (sum_i (b_i - 1/2) + N(0, sigma_b^2)) / m + 1/2 (Andrew et al. 2021, Alg. 1).

  Args:
    key: PRNG key of the count's noise.
    num_unclipped: float32 scalar, sum_i b_i over the cohort's participants.
    num_participants: float32 scalar, the cohort's participants (the centring term; it
      enters only through the centred sum, whose sensitivity is that of one bit).
    config: `AdaptiveClipping`.

  Returns:
    float32 scalar, the noisy fraction of unclipped updates (may leave [0, 1]).
  """
  centred = (jnp.asarray(num_unclipped, jnp.float32)
             - 0.5 * jnp.asarray(num_participants, jnp.float32))
  noisy = centred + config.count_stddev * jax.random.normal(key, (), jnp.float32)
  return noisy / config.expected_cohort_size + 0.5


def next_clip_norm(clip_norm, unclipped_fraction, config: AdaptiveClipping) -> jax.Array:
  """C_t+1 from C_t and the noisy unclipped fraction b~_t (Andrew et al. 2021, Sec. 2):
  geometric ``C exp(-eta_C (b~ - gamma))`` or linear ``C - eta_C (b~ - gamma)``
  (floored at 1e-6 of C_0 so that it stays a valid clip norm).

  Returns:
    float32 scalar > 0.
  """
  c = jnp.asarray(clip_norm, jnp.float32)
  step = config.learning_rate * (jnp.asarray(unclipped_fraction, jnp.float32)
                                 - config.target_quantile)
  if config.update_rule == "geometric":
    return c * jnp.exp(-step)
  return jnp.maximum(c - step, 1e-6 * config.initial_clip_norm)
