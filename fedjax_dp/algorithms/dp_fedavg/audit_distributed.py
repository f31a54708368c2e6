"""Canary-audit targets of DP-FedAvg with distributed DP (a secure sum of integer uploads,
each noised on its device; `fedjax_dp.algorithms.dp_fedavg.distributed`).

The audit observes what the threat model says the server observes
(`fedjax_dp.algorithms.audit_common.declared_observation` of observation
``"secure_sum"``): the model change, i.e. the decoded secure sum divided by the public
denominator, and nothing of any single upload. Every client of the small population
takes part in every round (q = 1, so participation carries nothing); under zero-out the
canary client is present in both worlds and uploads a zero update ("out") or an update
ten times the clip norm ("in", clipped to C). The real distributed round runs: rotation,
conditional rounding, the clients' discrete Gaussian or Skellam noise, the modular sum.

Breaks besides the common ones (``noise-half``: the round adds half the noise the run
claims): ``one-client-noise``, only the canary client adds its noise while the round
still reports (and the ledger composes) the noise of every survivor, the bug of a
distributed-DP implementation whose accounting counts shares that are not in the sum.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List

import jax
import numpy as np

from fedjax_dp.algorithms.audit_common import (COMMON_BREAKS, DELTA, FEATURES, Target,
                                               audit_model, canary_vector,
                                               declared_observation, planned_claim,
                                               schedule, spec_of, zero_params)
from fedjax_dp.algorithms.dp_fedavg.algorithm import dp_fedavg
from fedjax_dp.algorithms.dp_fedavg.distributed import DistributedDp
from fedjax_dp.auditing import Setup, ledger_claim, population, stored_update_client
from fedjax_dp.federated import server
from fedjax_dp.federated.round import make_round

#: Each target's size: the claim (one round, z = 1.1: epsilon 3.15 at delta 1e-3)
#: stays below what 20,000 repetitions can prove, and half the noise (or one client's
#: noise of four) shows well above it.
PARAMS: Dict[str, Dict[str, Any]] = {
    "dp_fedavg/distributed_dgauss": dict(rounds=1, z=1.1, others=3, mechanism="ddgauss"),
    "dp_fedavg/distributed_skellam": dict(rounds=1, z=1.1, others=3, mechanism="skellam"),
}

ONE_CLIENT_NOISE = ("only the canary client adds its noise; the round still reports "
                    "every survivor's")


def _setup(brk: str, rounds: int, z: float, others: int, mechanism: str) -> Setup:
  model = audit_model()
  params = model.init(jax.random.key(0))
  clip = 1.0
  u = canary_vector(clip)
  rows_out = np.zeros((others + 1, FEATURES * 3), np.float32)
  rows_in = rows_out.copy()
  rows_in[-1, :u.size] = u
  data_out, data_in = population(rows_out), population(rows_in)
  canary = others
  alg = dp_fedavg(model, data_in, clip_norm=clip, noise_multiplier=z, sampling_rate=1.0,
                  client_update=stored_update_client(params),
                  noise_placement="distributed",
                  distributed=DistributedDp(mechanism=mechanism, bits=16))
  spec = spec_of(alg)
  round_fn, hp = alg.round_fn, alg.hparams
  claim = ledger_claim(lambda: spec.make_ledger(DELTA))
  if brk == "noise-half":
    hp = hp._replace(noise_multiplier=np.float32(z * 0.5))
    claim = planned_claim(spec, z, rounds)
  elif brk == "one-client-noise":
    shipped: Any = getattr(alg.round_fn, "__wrapped__")  # the engine round (config)
    config = shipped.config      # the shipped round's, with one client's noise only
    broken = dataclasses.replace(config, secure_aggregation=dataclasses.replace(
        config.secure_aggregation, noisy_client=canary))
    round_fn = make_round(stored_update_client(params), shipped.sampler,
                          server.server_optimizer("fedavg", 1.0), broken)
  return Setup(
      round_out=round_fn, round_in=round_fn, data_out=data_out, data_in=data_in,
      init=zero_params(alg.init(jax.random.key(0))), hparams=schedule(hp, rounds),
      inclusion_prob=1.0, claim=claim, delta=DELTA,
      description=(f"dp_fedavg, distributed {mechanism}: {others + 1} clients, all in "
                   "every round; the canary's update is zero or 10 C (zero-out); the "
                   "server sees the decoded secure sum"),
      **declared_observation(spec))


def _build_targets() -> List[Target]:
  mech = ("user-level, zero-out, every client in every round, a secure sum of {m} "
          "shares (16 bits), sensitivity: the rounded update's L2 bound")
  return [Target(name, "dp_fedavg", mech.format(m=p["mechanism"]),
                 {**COMMON_BREAKS, "one-client-noise": ONE_CLIENT_NOISE},
                 lambda b, p=p: _setup(b, **p)) for name, p in PARAMS.items()]


#: Built once (targets compare by their builders).
_TARGETS: List[Target] = _build_targets()


def targets() -> List[Target]:
  """The distributed-DP targets (one per mechanism)."""
  return list(_TARGETS)
