"""Systems heterogeneity of DP-MOCHA (Hu et al. 2020, Sec. IV-B end, V, VII-A), drawn
inside the compiled round from arrays, so sweeps over tau and the drop probability
never recompile.

* Device variability tau in [0, 1]: each device runs n_iter ~ U[(1 - tau) n_min, n_min]
  local SDCA steps, uniform on the integers of that range and redrawn every round for
  every device (our reading of Sec. VII-A; tau = 0 gives n_min everywhere, the
  homogeneous scenario); n_min = min_t n_t.
* Node dropping: each device drops in each round independently with probability P
  (theta_t^k = 1: no upload, no progress, no privacy spent).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def steps_from_uniform(u: jax.Array, n_min: int, tau) -> jax.Array:
  """The step counts of uniforms ``u`` in [0, 1): uniform on the integers
  lo..n_min with lo = ceil((1 - tau) n_min), i.e. lo + floor(u (n_min - lo + 1)), so
  the mean is (lo + n_min) / 2 ~ (1 - tau / 2) n_min (the paper's U[(1 - tau) n_min,
  n_min] on integers; tau = 0 gives n_min). int32, shaped like ``u``."""
  lo = jnp.ceil((1.0 - tau) * n_min - 1e-6)
  steps = lo + jnp.floor(u * (n_min - lo + 1.0))
  return jnp.clip(steps, 0, n_min).astype(jnp.int32)


def local_steps(key: jax.Array, num_devices: int, n_min: int, tau) -> jax.Array:
  """int32 ``[m]``: every device's local SDCA steps this round (`steps_from_uniform`)."""
  return steps_from_uniform(jax.random.uniform(key, (num_devices,)), n_min, tau)


def active_devices(key: jax.Array, num_devices: int, drop_probability) -> jax.Array:
  """bool ``[m]``: True for the devices that upload this round (Bernoulli(1 - P))."""
  return jax.random.uniform(key, (num_devices,)) >= drop_probability


def expected_sampling_rate(n_min: int, counts, tau: float):
  """The paper's data sampling rate at the expected step count:
  q_t = (1 - tau / 2) n_min / n_t (our choice: the paper does not say which step
  count q uses; the integer draws' mean is within half a step of it),
  float64 ``[m]`` (numpy)."""
  import numpy as np
  return (1.0 - tau / 2.0) * n_min / np.asarray(counts, np.float64)
