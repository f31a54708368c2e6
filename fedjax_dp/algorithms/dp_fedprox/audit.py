"""Canary-audit target of DP-FedProx (``fedjax-dp audit --algorithm dp_fedprox``): the
real DP-FedProx round (its client stage, DP-FedAvg's clipping and central noise) with a
canary user whose crafted upload replaces local training, Poisson cohorts, add/remove of
the canary; the audit observes the model change (the aggregate)."""

from __future__ import annotations

from typing import List

from fedjax_dp.algorithms.audit_common import (COMMON_BREAKS, Target, audit_model,
                                               poisson_canary_setup)
from fedjax_dp.algorithms.dp_fedprox.algorithm import dp_fedprox

__all__ = ["targets"]

#: Sized like DP-FedAvg's Poisson target (20,000 repetitions catch half the noise):
#: rounds, sampling rate, noise multiplier, users besides the canary, mu.
ROUNDS, Q, Z, OTHERS, PROX_MU = 3, 0.8, 2.6, 3, 0.1


def _setup(brk: str):
  def build(data, client, **extra):
    return dp_fedprox(audit_model(), data, prox_mu=PROX_MU, clip_norm=1.0,
                      noise_multiplier=Z, sampling_rate=Q, client_update=client, **extra)

  return poisson_canary_setup(build, brk, ROUNDS, Z, Q, OTHERS,
                              "dp_fedprox, Poisson cohorts, central noise")


def targets() -> List[Target]:
  """DP-FedProx's audit targets."""
  return [Target("dp_fedprox/poisson", "dp_fedprox",
                 "user-level, add/remove, Poisson, central Gaussian on the clipped sum",
                 dict(COMMON_BREAKS), _setup)]
