"""Server state and update: an optax transform applied to the aggregated delta.

The aggregated client delta ``Delta`` is turned into a pseudo-gradient ``-Delta``
(Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Alg. 2), so
``optax.sgd(1.0)`` is plain FedAvg (``w <- w + Delta``), ``optax.sgd(lr, momentum)`` is
FedAvgM, and ``optax.adam(lr, b1, b2, eps=tau)`` is FedAdam.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_dp.validation import check_choice, check_positive

PyTree = Any

SERVER_OPTIMIZERS = ("fedavg", "fedavgm", "fedadam", "fedyogi")


class ServerState(NamedTuple):
  """Global model parameters, server optimiser state, the round counter (int32) and
  the state of the round's privacy mechanism.

  ``round`` counts the rounds completed (0 before the first): the round that starts
  from a state numbers itself ``state.round + 1`` (`RoundMetrics.round`, 1-based, as
  records, metrics.jsonl and TensorBoard). PRNG keys are folded with ``state.round``.

  ``mechanism`` is ``()`` for a round whose clip norm and noise are memoryless; a dict
  otherwise, with ``"clip"`` (the adaptive clip norm's state,
  `fedjax_dp.privacy.adaptive_clipping.ClipState`) and/or ``"noise"`` (a correlated
  noise generator's state, `fedjax_dp.federated.round.RoundConfig.central_noise`),
  made by `fedjax_dp.federated.round.init_mechanism_state`. It is carried through
  ``lax.scan`` and checkpoints like the parameters.

  ``clients`` is ``()``, or the persistent state of every client of the population
  (leaves ``[num_clients, ...]``, e.g. DP-SCAFFOLD's client control variates) that the
  engine gathers for a cohort and scatters back
  (`fedjax_dp.federated.stages.ClientStage`). It is each client's own data: the server
  of the threat model never observes it (the engine only simulates the clients' memory).
  """
  params: PyTree
  opt_state: PyTree
  round: jax.Array
  mechanism: PyTree = ()
  clients: PyTree = ()


def server_optimizer(name: str = "fedavg", learning_rate: float = 1.0,
                     momentum: float = 0.9, b1: float = 0.9, b2: float = 0.99,
                     tau: float = 1e-3) -> optax.GradientTransformation:
  """Named server optimisers (Reddi et al. 2021): ``fedavg`` = sgd(lr) (lr 1 is FedAvg),
  ``fedavgm`` = sgd with momentum, ``fedadam`` = adam(lr, b1, b2, eps=tau),
  ``fedyogi`` = yogi(lr, b1, b2, eps=tau).

  Raises:
    FedJaxDpError: unknown name or non-positive learning rate.
  """
  check_choice("server_optimizer", name, SERVER_OPTIMIZERS)
  lr = check_positive("server_learning_rate", learning_rate)
  if name == "fedavg":
    return optax.sgd(lr)
  if name == "fedavgm":
    return optax.sgd(lr, momentum=momentum)
  if name == "fedadam":
    return optax.adam(lr, b1=b1, b2=b2, eps=tau)
  return optax.yogi(lr, b1=b1, b2=b2, eps=tau)


def init_server_state(params: PyTree, optimizer: Any, mechanism: PyTree = (),
                      clients: PyTree = ()) -> ServerState:
  """Round 0 server state (``mechanism``, ``clients``: see `ServerState`).

  ``optimizer`` is an optax ``GradientTransformation`` or anything with
  ``init(params)`` (a `fedjax_dp.federated.stages.ServerStage`)."""
  return ServerState(params, optimizer.init(params), jnp.zeros((), jnp.int32), mechanism,
                     clients)


def server_update(state: ServerState, delta: PyTree,
                  optimizer: optax.GradientTransformation,
                  learning_rate: Any = 1.0) -> ServerState:
  """Applies the aggregated delta through ``optimizer`` with pseudo-gradient ``-delta``.

  Args:
    state: the current `ServerState`.
    delta: aggregated client delta, same structure as ``state.params``.
    optimizer: optax transform.
    learning_rate: float32 scalar (may be traced) multiplying the optimiser's step.
      For optax's sgd (with or without momentum), adam and yogi, ``opt(lr)`` equals
      ``opt(1.0)`` followed by a ``lr`` scaling, so building the optimiser with
      learning rate 1 and passing ``learning_rate`` here gives the same iterates while
      a learning-rate sweep never recompiles.
  """
  pseudo_grad = jax.tree_util.tree_map(jnp.negative, delta)
  updates, opt_state = optimizer.update(pseudo_grad, state.opt_state, state.params)
  lr = jnp.asarray(learning_rate, jnp.float32)
  updates = jax.tree_util.tree_map(lambda u: (u * lr).astype(u.dtype), updates)
  return state._replace(params=optax.apply_updates(state.params, updates),
                        opt_state=opt_state, round=state.round + 1)
