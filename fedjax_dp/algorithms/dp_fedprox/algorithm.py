"""DP-FedProx: DP-FedAvg whose clients minimise the FedProx local objective.

FedProx (Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in
Heterogeneous Networks", MLSys 2020, eq. 2): client k approximately minimises

    h_k(w; w^t) = F_k(w) + (mu / 2) ||w - w^t||^2

from the received global model w^t, so every local step's gradient gains
``mu (w - w^t)``. The proximal term reads only the broadcast model (public: the server
released it), so the privacy of DP-FedAvg is unchanged: each client's model delta is
clipped to S, the cohort's sum gets Gaussian noise z S (McMahan et al., ICLR 2018,
Alg. 1), user-level DP under the round's relation.

The algorithm is a composition of engine stages: DP-FedAvg's privacy pipeline
(`fedjax_dp.algorithms.dp_fedavg.dp_fedavg`) with this package's client stage
(`prox_client`); ``mu`` is a per-round hyper-parameter (``RoundHParams.algorithm
["prox_mu"]``), so a sweep over mu is one compiled program.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms.base import Algorithm
from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
from fedjax_dp.federated.stages import ClientStage
from fedjax_dp.validation import check_non_negative

__all__ = ["dp_fedprox", "prox_client", "prox_correction"]


def prox_correction(grads, params, params0, mu):
  """The gradient of the local objective h_k: ``grads + mu (w - w0)`` (FedProx, eq. 2).

  Args:
    grads: the local loss's gradient at ``params`` (pytree of float leaves).
    params: the client's current model w.
    params0: the received global model w^t.
    mu: float32 scalar >= 0.

  Returns:
    A pytree like ``grads`` (same dtypes).
  """
  mu = jnp.asarray(mu, jnp.float32)
  return jax.tree_util.tree_map(lambda g, w, w0: (g + mu * (w - w0)).astype(g.dtype),
                                grads, params, params0)


def prox_client(trainer: Callable) -> ClientStage:
  """FedProx's `ClientStage`: local training with `prox_correction`, mu read from
  ``hp.algorithm["prox_mu"]``; uploads the model delta; stateless.

  Args:
    trainer: ``trainer(grad_correction) -> client_update``, the local training of
      DP-FedAvg's options (`fedjax_dp.federated.client.make_client_update`).
  """
  train = trainer(grad_correction=prox_correction)

  def update(params, x, y, count, key, hp, client_state):
    upload, metrics = train(params, x, y, count, key, hp.client, hp.algorithm["prox_mu"])
    return upload, client_state, metrics

  return ClientStage(update=update)


def dp_fedprox(model, data, *, prox_mu: float = 0.01, **kwargs) -> Algorithm:
  """User-level DP-FedProx: `dp_fedavg` with FedProx's local objective.

  Args:
    model, data: as in `dp_fedavg`.
    prox_mu: mu >= 0, the proximal coefficient (Li et al. 2020, eq. 2; their
      experiments use mu in {0.001, 0.01, 0.1, 1}; 0 is DP-FedAvg exactly).
    **kwargs: every other argument of `dp_fedavg` (clipping, noise, sampling, local
      work, optimisers, adaptive clipping, mesh); not ``client_update``,
      ``client_stage`` or ``fedsgd`` (one full-batch step has no proximal effect).

  Returns:
    An `Algorithm` named ``"dp_fedprox"`` whose ``hparams.algorithm`` is
    ``{"prox_mu": float32}`` and whose ``config`` adds ``prox_mu``.

  Raises:
    FedJaxDpError: ``prox_mu < 0`` (option ``prox_mu``), or `dp_fedavg`'s errors.
  """
  mu = check_non_negative("prox_mu", prox_mu)
  alg = dp_fedavg(model, data, client_stage=prox_client,
                  algorithm_hparams={"prox_mu": np.float32(mu)}, **kwargs)
  return dataclasses.replace(alg, name="dp_fedprox", config={**alg.config, "prox_mu": mu})
