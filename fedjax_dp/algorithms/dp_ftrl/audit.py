"""Canary-audit targets of DP-FTRL (tree aggregation, banded MF, BLT MF): its worlds, observers and deliberate
breaks, collected by `fedjax_dp.algorithms.audit_targets` (``fedjax-dp audit
--algorithm dp_ftrl``). The shared pieces (`Target`, the delta, the common breaks) are
`fedjax_dp.algorithms.audit_common`'s."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms.audit_common import (COMMON_BREAKS, DELTA, FEATURES, Target,
    audit_model, canary_vector, rescale, schedule, spec_of, zero_params)
from fedjax_dp.auditing import Setup, ledger_claim, population, stored_update_client
from fedjax_dp.federated import server

__all__ = ["PARAMS", "targets"]


#: The BLT target's z: its effective noise multiplier z / sqrt(sens^2) is the banded
#: target's, 1.5 / sqrt(2), for the BLT jax-privacy optimises for 4 rounds at
#: min-separation 2 (sens^2 = 3.0975: the canary's rounds 0 and 2, columns of C that
#: overlap; checked in tests/algorithms/dp_ftrl/test_blt.py).
BLT_Z = 1.867

#: Each target's size (tuned so that a 20,000-repetition audit proves more than the
#: claim when the noise is halved, and less when it is not).
PARAMS: Dict[str, Dict[str, Any]] = {
    "dp_ftrl/tree": dict(mechanism="tree", rounds=4, cycle=4, z=1.84),
    "dp_ftrl/banded": dict(mechanism="banded", rounds=4, cycle=2, bands=2, z=1.5),
    "dp_ftrl/blt": dict(mechanism="blt", rounds=4, cycle=2, z=BLT_Z),
}

# ---------------------------------------------------------------------------
# DP-FTRL (tree aggregation, banded MF): correlated noise across rounds.
# ---------------------------------------------------------------------------

def _dp_ftrl_observer(round_fn: Callable, mechanism: str, matrix) -> Callable:
  """DP-FTRL's shipped round as an audited round whose per-round "change" is a fixed
  public transform of the released models, in which the correlated noise is
  (nearly) independent across rounds, so that the audit's per-round scores
  (`fedjax_dp.auditing.canary`, which treat rounds as independent) test the mechanism
  the ledger accounts:

  * tree: the change of round t is ``theta_{t+1} - theta_0``, the noisy prefix sum of
    rounds 0..t divided by the public denominator (FedAvg server, learning rate 1, from a
    zero model). At t + 1 = 1, 2, 4, ... these are the tree nodes [0, t + 1), which hold
    every node a leaf-0 canary is in, each with its own independent noise: the
    observation of the leaf's worst case (the other prefix sums add correlated copies);
  * banded and blt: the change of round t is ``y_t = sum_s C[t, s] Delta_s``: C times
    the released round updates is ``(C x + sigma z) / denominator``, independent noise of
    one standard deviation in every round, and the canary's signal is ``C 1_P`` (its
    columns of C, summed where they overlap, as a BLT's do), whose squared norm is the
    claim's sensitivity^2.

  The inner `ServerState` and the released updates so far ride in ``opt_state``.
  """
  from jax.flatten_util import ravel_pytree
  c = None if matrix is None else jnp.asarray(matrix, jnp.float32)

  def audited(state, data, hp, key):
    inner, history = state.opt_state
    new, metrics = round_fn(inner, data, hp, key)
    before, _ = ravel_pytree(inner.params)
    after, _ = ravel_pytree(new.params)
    if mechanism == "tree":
      obs = after                                     # theta_0 = 0: the prefix sum
    else:
      assert c is not None, mechanism            # banded, blt and independent have a C
      history = history.at[inner.round].set(after - before)
      obs = c[inner.round] @ history                  # y_t = (C Delta)_t
    params = {"observed": state.params["observed"] + obs}
    return server.ServerState(params, (new, history), new.round), metrics

  return audited


def _dp_ftrl_setup(brk: str, mechanism: str, rounds: int, cycle: int, z: float,
                   bands: int = 0) -> Setup:
  """A population of ``cycle`` clients with zero updates, except the canary, whose update
  is 10x the clip norm ("in") or zero ("out": under add/remove an absent client adds
  nothing to the sum; the population, its groups and the public denominator are the
  same in both worlds). The group seed puts the canary in group 0, so it takes part in
  rounds 0, R, 2R, ... (cyclic participation, every member every cycle): tree with
  ``rounds = R = restart_every`` (one tree, the canary its first leaf); banded over n =
  ``rounds`` rounds with R >= b (the canary in ``rounds / R`` rounds, min-separation R).
  The claim: the algorithm's own `CorrelatedNoiseLedger` on the reported noise
  multipliers. The audited change of each round is `_dp_ftrl_observer`'s."""
  from fedjax_dp.algorithms.dp_ftrl.algorithm import banded_noise, blt_noise, dp_ftrl
  from fedjax_dp.algorithms.dp_ftrl.participation import assign_groups
  model = audit_model()
  params = model.init(jax.random.key(0))
  clip = 1.0
  u = canary_vector(clip)
  seed = next(s for s in range(1000) if assign_groups(cycle, cycle, s)[-1] == 0)
  rows_in = np.zeros((cycle, FEATURES * 3), np.float32)
  rows_in[-1, :u.size] = u
  counts_out = np.full(cycle, 1, np.int32)
  counts_out[-1] = 0
  data_in = population(rows_in)
  data_out = population(rows_in, counts=counts_out)   # the canary's update is absent
  extra: Dict[str, Any] = dict(bands=bands) if mechanism == "banded" else {}
  alg = dp_ftrl(model, data_in, mechanism=mechanism, clip_norm=clip, noise_multiplier=z,
                rounds=rounds, cycle_length=cycle, seed=seed, server_optimizer="fedavg",
                server_learning_rate=1.0, client_update=stored_update_client(params),
                **extra)
  hp = alg.hparams
  make_ledger = lambda: spec_of(alg).make_ledger(DELTA)
  claim = ledger_claim(make_ledger)
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    hp = hp._replace(noise_multiplier=z / 2)
    claim = ledger_claim(make_ledger, transform=lambda m: rescale(m, 2.0))
  matrix = (banded_noise(rounds, bands).matrix() if mechanism == "banded" else
            blt_noise(rounds, cycle).matrix(rounds) if mechanism == "blt" else None)
  audited = _dp_ftrl_observer(alg.round_fn, mechanism, matrix)
  inner = zero_params(alg.init(jax.random.key(1)))
  size = u.size
  init = server.ServerState({"observed": jnp.zeros(size, jnp.float32)},
                            (inner, jnp.zeros((rounds, size), jnp.float32)), inner.round)
  return Setup(audited, audited, data_out, data_in, init, schedule(hp, rounds), 1.0, claim,
               DELTA, description=f"dp_ftrl ({mechanism}): one client of {cycle} (group 0 of "
               f"cyclic participation, {rounds} rounds) added")


def targets() -> List[Target]:
  """DP-FTRL (tree aggregation, banded MF, BLT MF)'s audit targets."""
  return [
    Target("dp_ftrl/tree", "dp_ftrl",
           "user-level, add/remove one client, cyclic participation (one tree of R = 4 "
           "rounds, the canary its first leaf), tree aggregation: sensitivity sqrt(3) C "
           "over the tree's nodes; observed through the prefix sums", dict(COMMON_BREAKS),
           lambda b: _dp_ftrl_setup(b, **PARAMS["dp_ftrl/tree"])),
    Target("dp_ftrl/banded", "dp_ftrl",
           "user-level, add/remove one client, cyclic participation (R = 2, the canary in "
           "rounds 0 and 2 of 4), banded MF with b = 2 bands: sensitivity sqrt(2) C (its "
           "two unit columns of C); observed through C times the round updates",
           dict(COMMON_BREAKS), lambda b: _dp_ftrl_setup(b, **PARAMS["dp_ftrl/banded"])),
    Target("dp_ftrl/blt", "dp_ftrl",
           "user-level, add/remove one client, cyclic participation (R = 2, the canary in "
           "rounds 0 and 2 of 4), BLT MF optimised by jax-privacy for 4 rounds at "
           "min-separation 2: sensitivity ||C (e_0 + e_2)|| C (overlapping columns); "
           "observed through C times the round updates",
           dict(COMMON_BREAKS), lambda b: _dp_ftrl_setup(b, **PARAMS["dp_ftrl/blt"])),
  ]
