"""Canary-audit targets of RDP-PFL: its worlds, observers and deliberate
breaks, collected by `fedjax_dp.algorithms.audit_targets` (``fedjax-dp audit
--algorithm rdp_pfl``). The shared pieces (`Target`, the delta, the common breaks) are
`fedjax_dp.algorithms.audit_common`'s."""

from __future__ import annotations

from typing import Any, Dict, List

import jax
import numpy as np

from fedjax_dp.algorithms.audit_common import (COMMON_BREAKS, DELTA, FEATURES, Target,
    audit_model, declared_observation, schedule, spec_of, zero_params)
from fedjax_dp.auditing import Setup, ledger_claim, population


#: Each target's size (tuned so that a 20,000-repetition audit proves more than the
#: claim when the noise is halved, and less when it is not).
PARAMS: Dict[str, Dict[str, Any]] = {
    "rdp_pfl/support": dict(stage="support", rounds=1, z=2.2, q_query=0.01,
                            q_support=1.0, eta=1e-4, beta=1.0),
    "rdp_pfl/paper": dict(stage="paper_support", rounds=1, z=4.4, q_query=0.01,
                          q_support=1.0, eta=1e-4, beta=1.0),
    "rdp_pfl/query": dict(stage="query", rounds=1, z=2.2, q_query=1.0, q_support=0.01,
                          eta=1.0, beta=1e-4),
}

# ---------------------------------------------------------------------------
# RDP-PFL: the canary is one record of a source client's support (or query) set.
# ---------------------------------------------------------------------------

def _rdp_pfl_setup(brk: str, stage: str, rounds: int, z: float, q_query: float,
                   q_support: float, eta: float, beta: float) -> Setup:
  """One source client whose rows are zero-feature fillers (same gradient in both
  worlds) plus the canary, a record with a large feature (its clipped gradient or
  meta-gradient moves the model), added at the next row: a support row (``stage=
  "support"``: the meta-gradient release, audited through the upload of
  the default ``clip_mode="first_order"``) or a query row (``"query"``: the inner release, whose
  theta~ is the upload's base in ``clip_mode="dp_fedavg"``; in MAML modes the upload
  sees it only through theta~). Add/remove of that record. The other stage's step is
  made tiny (eta or beta), so that the upload is the audited release itself. The claim
  is the larger stage's (a record is in one stage and influences only its release):
  with the other stage's sampling rate small, the audited stage's.
  ``"paper_support"``: ``clip_mode="paper"``, whose support release
  is a clipped batch *mean*: the support filler's gradient is large and the canary's
  points the opposite way three times as hard, so adding it flips the clipped mean (a
  change of 2C, the sensitivity the code charges)."""
  from fedjax_dp.algorithms.rdp_pfl.algorithm import rdp_pfl
  from fedjax_dp.data.federated_data import FederatedData
  model = audit_model()
  n_in = 4 if stage == "query" else 3     # rows 0, 2 support; 1, 3 query
  x = np.zeros((1, n_in, FEATURES), np.float32)
  x[0, -1, 0] = 5.0
  if stage == "paper_support":
    x[0, 0, 0], x[0, -1, 0] = 50.0, -150.0
  fd = FederatedData("audit", x, np.zeros((1, n_in), np.int32), np.array([n_in]), 2)
  mode = {"support": "first_order", "query": "dp_fedavg", "paper_support": "paper"}[stage]
  alg = rdp_pfl(model, fd, clip_norm=1.0, noise_multiplier=z, query_sampling_rate=q_query,
                support_sampling_rate=q_support, inner_learning_rate=eta,
                outer_learning_rate=beta, clip_mode=mode)
  data_in = population(x, counts=np.array([n_in]))
  data_out = population(x, counts=np.array([n_in - 1]))
  hp = alg.hparams
  claim = ledger_claim(lambda: spec_of(alg).make_ledger(DELTA))
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    hp = hp._replace(noise_multiplier=z / 2)
    claim = ledger_claim(lambda: spec_of(alg).make_ledger(DELTA), transform=lambda m: {
        k: (np.asarray(v) * 2.0 if k.endswith("_noise_multiplier") else v)
        for k, v in m.items()})
  state = zero_params(alg.init(jax.random.key(1)))
  return Setup(alg.round_fn, alg.round_fn, data_out, data_in, state, schedule(hp, rounds),
               q_query if stage == "query" else q_support, claim, DELTA,
               description=f"rdp_pfl: one {stage} record added to a source client")


#: ``rdp_pfl/data_size_weights``'s size: with two clients the aggregate halves the
#: canary and adds the other client's noise (it sees z sqrt 2), so the shipped code's
#: audit proves about 0.45 of the claim, and half the noise or the data-size weights
#: about 1.1-1.2 times it (keys 0-4; z = 1.4 .. 0.8 give no wider margins).
RDP_PFL_WEIGHTS: Dict[str, Any] = dict(rounds=1, z=1.0, q_query=0.01, eta=1e-4, beta=1.0)


def _rdp_pfl_weights_setup(brk: str, rounds: int, z: float, q_query: float,
                           eta: float, beta: float) -> Setup:
  """Aggregation weights: two source clients upload every round; the canary is one support
  record of client 0, added/removed. Client 0's support rows (a filler and the canary)
  and client 1's (one record of the other label) have large features, so their clipped
  meta-gradients point in opposite directions; each client's query row is a zero-feature
  filler (same gradient in both worlds; the inner step is made tiny by eta and rare by
  q^Q). Each world runs the code built on its own data, with the public nominal set
  sizes. Uniform weights (shipped): the canary moves the aggregate by its own clipped
  meta-gradient over 2. Data-size weights (eq. 3, the old default, ``"data-size-
  weights"``): adding the canary also moves p_0 from 1/2 to 2/3, shifting the aggregate
  towards client 0's update deterministically, by as much again as the canary itself;
  the claim (the shipped ledger's) does not cover that."""
  from fedjax_dp.algorithms.rdp_pfl.algorithm import rdp_pfl
  from fedjax_dp.data.federated_data import FederatedData
  model = audit_model()
  x = np.zeros((2, 3, FEATURES), np.float32)
  y = np.zeros((2, 3), np.int32)
  x[0, 1, 0] = x[0, 2, 0] = 5.0            # client 0: support filler and the canary
  x[1, 1, 0], y[1, 1] = 5.0, 1             # client 1: support record, the other label
  roles = np.array([[True, False, False], [True, False, False]])   # row 0: query
  counts_in, counts_out = np.array([3, 2]), np.array([2, 2])
  aggregation = "data_size" if brk == "data-size-weights" else "uniform"

  def build(counts, aggregation):
    fd = FederatedData("audit", x, y, counts, 2)
    return rdp_pfl(model, fd, clip_norm=1.0, noise_multiplier=z, query_sampling_rate=q_query,
                   support_sampling_rate=1.0, inner_learning_rate=eta,
                   outer_learning_rate=beta, clip_mode="first_order",
                   aggregation=aggregation, private=aggregation == "uniform",
                   query_rows=roles, nominal_sizes=(1, 2))

  spec = spec_of(build(counts_in, "uniform"))   # the shipped code's claim
  alg_in, alg_out = build(counts_in, aggregation), build(counts_out, aggregation)
  hp = alg_in.hparams
  claim = ledger_claim(lambda: spec.make_ledger(DELTA))
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    hp = hp._replace(noise_multiplier=z / 2)
    claim = ledger_claim(lambda: spec.make_ledger(DELTA), transform=lambda m: {
        k: (np.asarray(v) * 2.0 if k.endswith("_noise_multiplier") else v)
        for k, v in m.items()})
  elif brk == "data-size-weights":  # the old code's round, the shipped claim
    ledger = spec.make_ledger(DELTA)
    ledger.record(spec.planned_report(z, rounds))
    eps = ledger.epsilon(accountant="pld")
    claim = lambda metrics: eps
  state = zero_params(alg_in.init(jax.random.key(1)))
  return Setup(alg_out.round_fn, alg_in.round_fn, population(x, y, counts_out),
               population(x, y, counts_in), state, schedule(hp, rounds), 1.0, claim,
               DELTA, description="rdp_pfl: one support record added to one of two "
               f"source clients ({aggregation} weights)",
               **declared_observation(spec))


def targets() -> List[Target]:
  """RDP-PFL's audit targets."""
  return [
    Target("rdp_pfl/support", "rdp_pfl",
           "record-level, add/remove one record, Poisson records, two releases per "
           "epoch (query, support), each record in one of them (claim: the larger "
           "stage's), sensitivity C; canary in the support set (per-example "
           "meta-gradient)", dict(COMMON_BREAKS),
           lambda b: _rdp_pfl_setup(b, **PARAMS["rdp_pfl/support"])),
    Target("rdp_pfl/paper", "rdp_pfl",
           "record-level, add/remove one record, clip_mode=paper: clipped batch means "
           "(sensitivity 2C; the query release 2 sqrt 2 C); canary in the support set",
           dict(COMMON_BREAKS), lambda b: _rdp_pfl_setup(b, **PARAMS["rdp_pfl/paper"])),
    Target("rdp_pfl/query", "rdp_pfl",
           "record-level, add/remove one record, Poisson records, two releases per "
           "epoch, each record in one of them (claim: the larger stage's), "
           "sensitivity C; canary in the query set (inner step)",
           dict(COMMON_BREAKS), lambda b: _rdp_pfl_setup(b, **PARAMS["rdp_pfl/query"])),
    Target("rdp_pfl/data_size_weights", "rdp_pfl",
           "record-level, add/remove one support record of one of two source clients, "
           "uniform server weights (public); sensitivity C",
           {**COMMON_BREAKS, "data-size-weights": "the server averages with eq. 3's "
            "p_i = |D_i^S| / |D^S| (the old default), claim unchanged (F5)"},
           lambda b: _rdp_pfl_weights_setup(b, **RDP_PFL_WEIGHTS)),
  ]
