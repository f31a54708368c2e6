"""The stages a round is composed of: what an algorithm supplies to the engine.

A round (`fedjax_dp.federated.engine.make_engine_round`) is

  cohort sampling -> [client stage, per client] -> clip -> local noise -> weighted sum
  -> (one cross-device reduction) -> central noise -> normalise -> [server stage]

The engine owns every step outside the brackets: cohort sampling, chunking the cohort
over devices and over ``lax.scan`` chunks, the single reduction, non-finite handling,
the clipping and noise that the round's privacy statement covers (`RoundConfig`), and
the metrics' defaults. An algorithm supplies the bracketed stages (in the manner of
FedJAX's ``for_each_client(client_init, client_step, client_final)`` and optax's
``GradientTransformation(init, update)``):

* `ClientStage`: local work of one client, ``update(broadcast, x, y, count, key, hp,
  client_state) -> (upload, client_state, ClientMetrics)``. The upload may be any
  pytree (DP-SCAFFOLD uploads the model delta and the control-variate delta, clipped
  jointly); ``init_state`` gives one client's persistent state, which the engine keeps
  as ``[num_clients, ...]`` in `ServerState.clients`, gathers for the cohort and
  scatters back for the clients that took part (padding slots never write).
* `ServerStage`: ``init(params) -> opt_state``, ``apply(state, aggregate, hp) ->
  ServerState`` and ``broadcast(state)``, what each client receives (the model, or
  the model and the server's control variate).

Both see the round's `RoundHParams` ``hp``; an algorithm's own per-round
hyper-parameters ride in ``hp.algorithm`` (a dict of float32 arrays, scheduled and
swept like the engine's, never recompiling).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from fedjax_dp.federated import server as server_lib

PyTree = Any

__all__ = ["ClientStage", "ServerStage", "stateless_client", "optax_server",
           "init_client_states"]


class ClientStage(NamedTuple):
  """One client's local work, vmapped by the engine over a chunk of the cohort.

  Attributes:
    update: ``update(broadcast, x, y, count, key, hp, client_state) -> (upload,
      client_state, ClientMetrics)`` for one client: ``broadcast`` is
      `ServerStage.broadcast` of the server state, ``x [max_examples, ...]``,
      ``y [max_examples]``, ``count`` int32 (0 for padding slots and clients without
      examples, which must upload exactly zeros), ``key`` the client's training key,
      ``hp`` the round's `RoundHParams`, ``client_state`` this client's slice of
      `ServerState.clients` (``()`` without state). The upload is any pytree of float
      leaves with the same structure for every client.
    init_state: ``init_state(params) -> state`` of one client before its first round,
      or None for a stateless client. The engine stacks it to ``[num_clients, ...]``.
    fallback: ``fallback(broadcast, hp) -> upload`` replacing a non-finite upload when
      the round does not clip (a clipped round zeroes it), or None for zeros.
  """
  update: Callable
  init_state: Optional[Callable] = None
  fallback: Optional[Callable] = None


class ServerStage(NamedTuple):
  """The server's step from the normalised, noised aggregate.

  Attributes:
    init: ``init(params) -> opt_state`` (`ServerState.opt_state`: the optimiser's
      state and anything else the server carries, e.g. a control variate).
    apply: ``apply(state, aggregate, hp) -> ServerState`` with ``round + 1``;
      ``aggregate`` has the uploads' structure (float leaves in the uploads' dtypes).
    broadcast: ``broadcast(state) -> pytree`` sent to every client of the round.
  """
  init: Callable
  apply: Callable
  broadcast: Callable


def stateless_client(client_update: Callable, fallback: Optional[Callable] = None
                     ) -> ClientStage:
  """A `ClientStage` from a FedAvg-style ``client_update(params, x, y, count, key,
  client_hp) -> (update, ClientMetrics)``
  (`fedjax_dp.federated.client.make_client_update`), which receives ``hp.client``.

  Args:
    client_update: the local-training function.
    fallback: see `ClientStage.fallback`; receives ``(params, hp)``.
  """
  def update(params, x, y, count, key, hp, client_state):
    upload, metrics = client_update(params, x, y, count, key, hp.client)
    return upload, client_state, metrics

  return ClientStage(update=update, fallback=fallback)


def optax_server(optimizer: optax.GradientTransformation) -> ServerStage:
  """The `ServerStage` of FedAvg/FedOpt: the aggregate is the model delta, applied
  through ``optimizer`` as the pseudo-gradient ``-delta`` scaled by
  ``hp.server_learning_rate`` (Reddi et al., ICLR 2021, Alg. 2;
  `fedjax_dp.federated.server.server_update`); clients receive the model."""
  def apply(state, aggregate, hp):
    lr = 1.0 if hp.server_learning_rate is None else hp.server_learning_rate
    return server_lib.server_update(state, aggregate, optimizer, lr)

  return ServerStage(init=optimizer.init, apply=apply, broadcast=lambda state: state.params)


def init_client_states(client: ClientStage, params: PyTree, num_clients: int) -> PyTree:
  """`ServerState.clients` before round 1: ``client.init_state(params)`` stacked to
  ``[num_clients, ...]`` per leaf, or ``()`` for a stateless client."""
  if client.init_state is None:
    return ()
  one = client.init_state(params)
  return jax.tree_util.tree_map(
      lambda l: jnp.broadcast_to(jnp.asarray(l)[None], (num_clients,) + jnp.shape(l)), one)
