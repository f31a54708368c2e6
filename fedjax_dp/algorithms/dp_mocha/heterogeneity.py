"""Systems heterogeneity of paper 002 (Sec. IV-B end, V, VII-A), drawn inside the
compiled round from arrays, so sweeps over tau and the drop probability never recompile.

* Device variability tau in [0, 1]: each device runs n_iter ~ U[(1 - tau) n_min, n_min]
  local SDCA steps, floored to an integer and redrawn every round for every device
  (note 002 Sec. 14.11; tau = 0 gives n_min everywhere, the homogeneous scenario);
  n_min = min_t n_t.
* Node dropping: each device drops in each round independently with probability P
  (theta_t^k = 1: no upload, no progress, no privacy spent).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def local_steps(key: jax.Array, num_devices: int, n_min: int, tau) -> jax.Array:
  """int32 ``[m]``: floor(n_min (1 - tau u)) with u ~ U[0, 1), in
  [floor((1 - tau) n_min), n_min]."""
  u = jax.random.uniform(key, (num_devices,))
  return jnp.floor(n_min * (1.0 - tau * u)).astype(jnp.int32)


def active_devices(key: jax.Array, num_devices: int, drop_probability) -> jax.Array:
  """bool ``[m]``: True for the devices that upload this round (Bernoulli(1 - P))."""
  return jax.random.uniform(key, (num_devices,)) >= drop_probability


def expected_sampling_rate(n_min: int, counts, tau: float):
  """The paper's data sampling rate at the expected step count:
  q_t = (1 - tau / 2) n_min / n_t (note 002 Sec. 14.8), float64 ``[m]`` (numpy)."""
  import numpy as np
  return (1.0 - tau / 2.0) * n_min / np.asarray(counts, np.float64)
