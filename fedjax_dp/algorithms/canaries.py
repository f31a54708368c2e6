"""Canary clients in a user-level FedAvg-family round (``fedjax-dp run --canaries K``):
the composition `dp_fedavg` uses instead of its own when given a
`fedjax_dp.auditing.one_run.CanaryPlan` (one-run empirical privacy estimation, Andrew
et al., ICLR 2024; the mechanics and what the numbers mean are in
`fedjax_dp.auditing.one_run` and `fedjax_dp.auditing.empirical`).

The same engine round as without canaries, with the client stage wrapped
(`fedjax_dp.auditing.one_run.canary_stage`: inserted canaries upload ``C u_i``), a
population of N + K/2 for the sampler, and the canaries' rows in the per-client state.
DP-FedProx hosts canaries through this (its client stage is wrapped the same way).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import numpy as np

from fedjax_dp.algorithms.base import require_learning_rates
from fedjax_dp.auditing import one_run
from fedjax_dp.auditing.one_run import CanaryPlan
from fedjax_dp.federated import engine, server, sharding, stages
from fedjax_dp.federated.round import RoundConfig, init_mechanism_state
from fedjax_dp.validation import FedJaxDpError

__all__ = ["CanaryPlan", "checked_view", "compose", "composer"]


def checked_view(plan: Any, data, noise_multiplier, weighting: str,
                 observed_client: Optional[int]) -> one_run.PopulationView:
  """The population as `dp_fedavg` builds on it with the plan's inserted canaries
  (``num_clients = N + K/2``; `CanaryPlan.view`).

  Raises:
    FedJaxDpError (option ``canaries``): ``plan`` is not a `CanaryPlan`; per-client
      noise multipliers (one per real client: a canary has none), data-size weighting
      (a canary's weight would be its dummy count's), or ``observed_client`` (two
      audits of one run).
  """
  if not isinstance(plan, CanaryPlan):
    raise FedJaxDpError(f"canaries must be a fedjax_dp.auditing.one_run.CanaryPlan, got "
                        f"{type(plan).__name__}.", option="canaries")
  if np.ndim(noise_multiplier) != 0:
    raise FedJaxDpError("canaries cannot be combined with per-client noise multipliers "
                        "(one per real client; a canary client has none).",
                        option="canaries")
  if weighting != "uniform":
    raise FedJaxDpError(f"canaries need weighting='uniform', got {weighting!r}: with "
                        "data-size weights a canary's weight would be that of the dummy "
                        "data it never trains on.", option="canaries")
  if observed_client is not None:
    raise FedJaxDpError("canaries cannot be combined with observed_client (a canary "
                        "audit of its own).", option="canaries")
  return plan.view(data)


def compose(plan: CanaryPlan, client_update, samp, server_opt, config: RoundConfig, mesh,
            num_clients: int, client_stage=None, server_stage=None):
  """`dp_fedavg`'s ``_compose`` with canaries: the engine round of
  ``canary_stage(client_stage or the stateless FedAvg client)`` and ``server_stage``
  (else the optax server step), run on the population extended by the canaries'
  counts (`fedjax_dp.auditing.one_run.canary_round`).

  Args:
    plan: the `CanaryPlan`.
    num_clients: N + K/2 (the sampler's population; checked against the plan).

  Returns:
    ``(round_fn, init_state)``; ``init_state(params)`` holds ``[N + K/2]`` client states
    ``(row, inner state)``.

  Raises:
    FedJaxDpError: ``num_clients`` is not the plan's N + K/2.
  """
  if num_clients != plan.population_size:
    raise FedJaxDpError(f"canaries: the sampler's population is {num_clients}, the plan's "
                        f"{plan.population_size}.", option="canaries")
  inner = client_stage or stages.stateless_client(client_update)
  server_stage = server_stage or stages.optax_server(server_opt)
  round_fn = engine.make_engine_round(one_run.canary_stage(inner, plan), samp, server_stage,
                                      config, mesh=mesh)

  def init_state(params):
    return sharding.replicate(server.init_server_state(
        params, server_stage, init_mechanism_state(config, params),
        one_run.canary_client_states(inner, params, plan)), mesh)

  return require_learning_rates(one_run.canary_round(round_fn, plan)), init_state


def composer(plan: CanaryPlan) -> Callable:
  """`compose` with ``plan`` bound: a drop-in for `dp_fedavg`'s ``_compose``."""
  return functools.partial(compose, plan)
