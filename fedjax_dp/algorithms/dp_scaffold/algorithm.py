"""DP-SCAFFOLD: SCAFFOLD's control variates under user-level DP with central noise.

SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, "SCAFFOLD: Stochastic
Controlled Averaging for Federated Learning", ICML 2020, Algorithm 1) corrects client
drift with control variates: the server holds c, client i holds c_i, and

  * every local step uses the corrected gradient ``g_i(y) - c_i + c`` (line 10);
  * after K local steps with learning rate eta_l the client's new control variate is
    option II, ``c_i+ = c_i - c + (x - y_i) / (K eta_l)`` (line 12);
  * it uploads ``(Delta y_i, Delta c_i) = (y_i - x, c_i+ - c_i)`` (line 13);
  * the server steps ``x <- x + eta_g mean_S Delta y_i`` and
    ``c <- c + (1/N) sum_S Delta c_i`` (lines 16-17).

Privacy (our user-level variant). Noble, Bellet and Dieuleveut (DP-SCAFFOLD, AISTATS
2022, Algorithm 1) privatise SCAFFOLD at record level, with per-example clipping and
Gaussian noise in each local step. This package gives the user-level DP version the
engine's pipeline provides: the upload ``(Delta y_i, Delta c_i)`` is one pytree,
clipped *jointly* to L2 norm S (so one user moves the cohort's sum by at most S under
add/remove), the sum gets one Gaussian draw of std z S on both parts, and the server's
model and control variate are post-processing of that release. The event is DP-FedAvg's
(one Poisson-subsampled Gaussian per round, z; `fedjax_dp.privacy.events`). Each c_i is
the client's own memory (the engine keeps it in ``ServerState.clients``, gathered for
the cohort and scattered back); the server never observes it.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import optax

from fedjax_dp.algorithms.base import Algorithm
from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
from fedjax_dp.federated import server as server_lib
from fedjax_dp.federated.stages import ClientStage, ServerStage
from fedjax_dp.privacy import clipping
from fedjax_dp.validation import FedJaxDpError

__all__ = ["dp_scaffold", "scaffold_client", "scaffold_server", "control_correction"]


def control_correction(grads, params, params0, correction):
  """SCAFFOLD's corrected gradient ``g - c_i + c`` (Alg. 1, line 10); ``correction``
  is ``c - c_i`` (a pytree like ``grads``)."""
  del params, params0
  return jax.tree_util.tree_map(lambda g, d: (g + d).astype(g.dtype), grads, correction)


def scaffold_client(trainer: Callable) -> ClientStage:
  """SCAFFOLD's `ClientStage`: receives ``(x, c)``, keeps c_i as its state, uploads
  ``{"model": Delta y_i, "control": Delta c_i}`` (Alg. 1, lines 9-13, option II).

  A client without examples takes no step: it uploads zeros and keeps its c_i.

  Args:
    trainer: ``trainer(grad_correction) -> client_update``
      (`fedjax_dp.federated.client.make_client_update` with the run's local work and
      plain SGD, so that option II's ``(x - y_i) / (K eta_l)`` is the mean corrected
      gradient).
  """
  train = trainer(grad_correction=control_correction)

  def update(broadcast, x, y, count, key, hp, c_i):
    params, c = broadcast
    diff = jax.tree_util.tree_map(jnp.subtract, c, c_i)
    delta_y, metrics = train(params, x, y, count, key, hp.client, diff)
    lr = jnp.asarray(1.0 if hp.client.learning_rate is None else hp.client.learning_rate,
                     jnp.float32)
    steps = jnp.maximum(metrics.num_steps, 1).astype(jnp.float32)
    took_part = metrics.num_steps > 0
    # c_i+ - c_i = -c + (x - y_i) / (K eta_l) = -c - Delta y_i / (K eta_l)
    delta_c = jax.tree_util.tree_map(
        lambda cs, dy: jnp.where(took_part, -cs - dy / (steps * lr), 0.0).astype(cs.dtype),
        c, delta_y)
    # The client clips its joint upload itself and keeps c_i + (clipped Delta c_i), so
    # that sum_i c_i / N stays the server's c (up to noise). The engine's clipping to the
    # same C then leaves it unchanged and is what the guarantee rests on.
    upload, _, _ = clipping.clip_by_global_norm({"model": delta_y, "control": delta_c},
                                                jnp.asarray(hp.clip_norm, jnp.float32))
    new_c_i = jax.tree_util.tree_map(jnp.add, c_i, upload["control"])
    return upload, new_c_i, metrics

  return ClientStage(update=update,
                     init_state=lambda params: jax.tree_util.tree_map(jnp.zeros_like, params))


def scaffold_server(optimizer: optax.GradientTransformation) -> ServerStage:
  """SCAFFOLD's `ServerStage`: the model steps through the optax server optimiser with
  the aggregated ``Delta y`` (eta_g = ``hp.server_learning_rate``), and
  ``c <- c + q * A_c`` where ``A_c = sum_S Delta c_i / (q N)`` is the engine's
  normalised aggregate, i.e. ``c + (1/N) sum_S Delta c_i`` (Alg. 1, line 17).
  ``ServerState.opt_state`` is ``{"optimizer": ..., "control": c}``; clients receive
  ``(x, c)``."""
  def init(params):
    return {"optimizer": optimizer.init(params),
            "control": jax.tree_util.tree_map(jnp.zeros_like, params)}

  def apply(state, aggregate, hp):
    lr = 1.0 if hp.server_learning_rate is None else hp.server_learning_rate
    inner = server_lib.server_update(state._replace(opt_state=state.opt_state["optimizer"]),
                                     aggregate["model"], optimizer, lr)
    q = jnp.asarray(hp.sampling_rate, jnp.float32)
    control = jax.tree_util.tree_map(lambda c, a: (c + q * a).astype(c.dtype),
                                     state.opt_state["control"], aggregate["control"])
    return inner._replace(opt_state={"optimizer": inner.opt_state, "control": control})

  return ServerStage(init=init, apply=apply,
                     broadcast=lambda state: (state.params, state.opt_state["control"]))


def dp_scaffold(model, data, *, client_optimizer: str = "sgd", **kwargs) -> Algorithm:
  """User-level DP-SCAFFOLD: `dp_fedavg`'s privacy pipeline (joint clipping of the
  model and control-variate deltas to S, Gaussian noise z S on their sum) with
  SCAFFOLD's client and server stages.

  Args:
    model, data: as in `dp_fedavg`.
    client_optimizer: must be ``"sgd"`` (option II's control variate is the mean
      corrected gradient only for plain SGD steps).
    **kwargs: every other argument of `dp_fedavg` except ``client_update``,
      ``client_stage``, ``server_stage`` and ``fedsgd``. ``weighting`` must stay
      ``"uniform"`` and the denominator is ``q N`` (SCAFFOLD's 1/N for c).

  Returns:
    An `Algorithm` named ``"dp_scaffold"``; its state's ``clients`` holds every
    client's control variate ``[N, ...]`` and ``opt_state["control"]`` the server's.

  Raises:
    FedJaxDpError: a client optimiser other than sgd, non-uniform weighting, or
      `dp_fedavg`'s errors.
  """
  if client_optimizer != "sgd":
    raise FedJaxDpError(f"client_optimizer must be 'sgd' for DP-SCAFFOLD (option II's "
                        f"control variate assumes plain SGD steps), got "
                        f"{client_optimizer!r}.", option="client_optimizer")
  if kwargs.get("weighting", "uniform") != "uniform":
    raise FedJaxDpError(f"weighting must be 'uniform' for DP-SCAFFOLD (its server control "
                        f"variate averages over all N clients), got {kwargs['weighting']!r}.",
                        option="weighting")
  alg = dp_fedavg(model, data, client_optimizer="sgd", client_stage=scaffold_client,
                  server_stage=scaffold_server, **kwargs)
  return dataclasses.replace(alg, name="dp_scaffold", config={
      **alg.config, "control_variates": "option II (Karimireddy et al. 2020)",
      "clipping": "joint: (model delta, control-variate delta)"})
