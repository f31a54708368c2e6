"""Building blocks of canary worlds: crafted clients and tiny populations.

A user-level audit needs a canary whose update is known: `stored_update_client` is a
client update (the signature of `fedjax_dp.federated.client.make_client_update`'s) that
returns the vector stored in the client's first data row, so the canary's update is
exactly what the audit puts there, and everything after local training (clipping,
sampling, noise, aggregation, the server step, what the round reports) is the
algorithm's own code. Record-level audits use real local training instead.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np

from fedjax_dp.federated.client import ClientMetrics
from fedjax_dp.federated.population import PopulationData
from fedjax_dp.privacy import clipping

__all__ = [
    "stored_update_client", "population", "gaussian_sum_mechanism",
]


def stored_update_client(params_template: Any):
  """``client_update(params, x, y, count, key, hparams)`` returning, as the update, the
  client's first data row flattened (its first P entries, P = the parameter count) and
  zero for a client without examples.

  Args:
    params_template: a parameter pytree (only its structure and sizes are used).
  """
  flat, unravel = jax.flatten_util.ravel_pytree(params_template)
  size = flat.shape[0]

  def client_update(params, x, y, count, key, hparams):
    del params, y, key, hparams
    u = jnp.where(count > 0, x[0].reshape(-1)[:size], 0.0).astype(flat.dtype)
    update = unravel(u)
    z = jnp.zeros((), jnp.float32)
    metrics = ClientMetrics(loss=z, num_examples=count.astype(jnp.int32),
                            num_steps=jnp.asarray(1, jnp.int32),
                            update_norm=clipping.global_norm(update),
                            example_clip_fraction=z, batch_truncated=jnp.int32(0),
                            nonfinite_grads=jnp.int32(0))
    return update, metrics

  return client_update


def population(rows: np.ndarray, labels: Optional[np.ndarray] = None,
               counts: Optional[np.ndarray] = None) -> PopulationData:
  """A `PopulationData` (on the default device) from per-client example rows.

  Args:
    rows: float ``[N, max_examples, D]`` features (or ``[N, D]``: one example each).
    labels: int ``[N, max_examples]`` (default zeros).
    counts: int ``[N]`` real examples per client (default all rows).
  """
  x = np.asarray(rows, np.float32)
  if x.ndim == 2:
    x = x[:, None, :]
  n, m = x.shape[:2]
  y = np.zeros((n, m), np.int32) if labels is None else np.asarray(labels, np.int32)
  c = np.full(n, m, np.int32) if counts is None else np.asarray(counts, np.int32)
  return PopulationData(jnp.asarray(x), jnp.asarray(y), jnp.asarray(c))


def gaussian_sum_mechanism(clip_norm: float, noise_multiplier: float):
  """DP-FedAvg's aggregation primitive as a ``mechanism(updates [K, P], key)`` for
  `fedjax_dp.privacy.audit.audit_mechanism`: clip -> sum -> Gaussian noise
  (`fedjax_dp.federated.aggregation.dp_aggregate`, uniform weights)."""
  from fedjax_dp.federated import aggregation

  def mechanism(updates, key):
    w = jnp.ones(updates.shape[0], jnp.float32)
    return aggregation.dp_aggregate(updates, w, clip_norm, noise_multiplier * clip_norm,
                                    key)

  return mechanism
