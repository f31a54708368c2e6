"""Canary-audit target of DP-SCAFFOLD (``fedjax-dp audit --algorithm dp_scaffold``): the
real DP-SCAFFOLD round (control variates as per-client state, the model and control
deltas clipped jointly, central noise) with a canary user whose crafted model delta
replaces local training, Poisson cohorts, add/remove of the canary. The server releases
both halves of the noisy aggregate (the model and its control variate c), so the audit
observes both: the model change and the control variate's change divided by q (the
normalised aggregate, equal noise in every coordinate)."""

from __future__ import annotations

from typing import List

import jax
import jax.flatten_util
import jax.numpy as jnp

from fedjax_dp.algorithms.audit_common import (COMMON_BREAKS, Target, audit_model,
                                               poisson_canary_setup)
from fedjax_dp.algorithms.dp_scaffold.algorithm import dp_scaffold

__all__ = ["targets", "observe_aggregate"]

#: Rounds, sampling rate, noise multiplier, users besides the canary (as DP-FedAvg's).
ROUNDS, Q, Z, OTHERS = 3, 0.8, 2.6, 3


def observe_aggregate(before, after, metrics):
  """The round's released aggregate: ``[Delta params, Delta c / q]`` (float32 [2P])."""
  flat = lambda t: jax.flatten_util.ravel_pytree(t)[0]
  model = flat(after.params) - flat(before.params)
  control = (flat(after.opt_state["control"]) - flat(before.opt_state["control"]))
  return jnp.concatenate([model, control / jnp.asarray(metrics.sampling_rate, jnp.float32)])


def _setup(brk: str):
  def build(data, client, **extra):
    return dp_scaffold(audit_model(), data, clip_norm=1.0, noise_multiplier=Z,
                       sampling_rate=Q, client_update=client, **extra)

  return poisson_canary_setup(build, brk, ROUNDS, Z, Q, OTHERS,
                              "dp_scaffold, Poisson cohorts, central noise, model and "
                              "control variate observed", observe=observe_aggregate)


def targets() -> List[Target]:
  """DP-SCAFFOLD's audit targets."""
  return [Target("dp_scaffold/poisson", "dp_scaffold",
                 "user-level, add/remove, Poisson, central Gaussian on the jointly "
                 "clipped (model delta, control delta) sum", dict(COMMON_BREAKS), _setup)]
