"""Canary-audit targets of amplitude-varying perturbation: its worlds and
deliberate breaks (``fedjax-dp audit --algorithm amplitude_varying``), returned by
`AmplitudeVarying.audit_targets` and collected by `fedjax_dp.algorithms.audit_targets`.
The shared pieces (`Target`, the delta, the common breaks, the replace-one worlds) are
`fedjax_dp.algorithms.audit_common`'s.

Real local training, the canary is one example. The breaks besides the common ones:
``paper-sensitivity`` (accounted with the paper's assumed sensitivity 2C/|D_k|, which
unclipped local training does not enforce) and ``amplified-claim`` (each
model upload, seen with its sender, accounted with amplification by sampling).
"""

from __future__ import annotations

from typing import Any, Dict, List

import jax
import numpy as np

from fedjax_dp.algorithms import amplitude_varying as av
from fedjax_dp.algorithms.audit_common import (AMPLIFIED_CLAIM, COMMON_BREAKS, DELTA, Target,
                                               amplified_claim, audit_model,
                                               declared_observation, paper_worlds, rescale,
                                               spec_of, zero_params)
from fedjax_dp.auditing import Setup, ledger_claim

#: Each target's size (tuned so that a 20,000-repetition audit proves more than the claim
#: when the noise is halved, and less when it is not).
PARAMS: Dict[str, Dict[str, Any]] = {
    "amplitude_varying/paper": dict(epsilon=0.62, clients=1, k=1),
    "amplitude_varying/clipped_gradients": dict(epsilon=2.5, clients=1, k=1),
    "amplitude_varying/sampled": dict(epsilon=0.4, clients=8, k=1, rounds=1),
}


def _amplitude_varying_setup(brk: str, mode: str, epsilon: float, clients: int,
                             k: int, rounds: int = 1) -> Setup:
  model = audit_model()
  data_out, data_in = paper_worlds(n_per_client=4, clients=clients)
  c, lr = 1.0, 1.0
  extra: Dict[str, Any] = dict(sensitivity_mode=mode)
  if mode == "clipped_gradients":
    extra["grad_clip_norm"] = 0.5

  canary = clients - 1

  def build(data):
    return av.amplitude_varying(model, data, epsilon=epsilon, delta=DELTA, rounds=rounds,
                                clients_per_round=k, local_steps=1, learning_rate=lr,
                                clip_norm=c, observed_client=canary, **extra)

  alg_in = build(data_in)  # replace-one: the same population size, constants and round
  cfg = alg_in.config
  stddevs = np.asarray(cfg["stddevs"])
  claim = ledger_claim(lambda: spec_of(alg_in).make_ledger(DELTA))
  stddevs_sim = stddevs
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    stddevs_sim = stddevs / 2
    claim = ledger_claim(lambda: spec_of(alg_in).make_ledger(DELTA),
                         transform=lambda m: rescale(m, 2.0))
  elif brk == "paper-sensitivity":  # the old claim: z = sigma / Delta_s
    claim = ledger_claim(lambda: spec_of(alg_in).make_ledger(DELTA),
                         transform=lambda m: rescale(
                             m, cfg["sensitivity"] / cfg["sensitivity_paper"]))
  elif brk == "amplified-claim":
    claim = amplified_claim(spec_of(alg_in))
  state = zero_params(alg_in.init(jax.random.key(1)))
  return Setup(alg_in.round_fn, alg_in.round_fn, data_out, data_in, state,
               av.hparams_for(cfg, stddevs_sim), cfg["sampling_rate"], claim, DELTA,
               description=f"amplitude_varying ({mode}): one example replaced",
               **declared_observation(spec_of(alg_in)))


def targets() -> List[Target]:
  """Amplitude-varying perturbation's audit targets."""
  return [
    Target("amplitude_varying/paper", "amplitude_varying",
           "record-level, replace-one, K of U without replacement, sensitivity 2C",
           {**COMMON_BREAKS, "paper-sensitivity": "accounted with Delta_s = 2C/|D_k| "
            "(1c)"},
           lambda b: _amplitude_varying_setup(b, "paper",
                                              **PARAMS["amplitude_varying/paper"])),
    Target("amplitude_varying/clipped_gradients", "amplitude_varying",
           "record-level, replace-one, K of U without replacement, sensitivity "
           "clipped_gd_sensitivity", dict(COMMON_BREAKS),
           lambda b: _amplitude_varying_setup(
               b, "clipped_gradients", **PARAMS["amplitude_varying/clipped_gradients"])),
    Target("amplitude_varying/sampled", "amplitude_varying",
           "record-level, replace-one, K < U clients without replacement, each model "
           "upload seen with its sender (visible participation), sensitivity 2C",
           {**COMMON_BREAKS, "amplified-claim": AMPLIFIED_CLAIM},
           lambda b: _amplitude_varying_setup(b, "paper",
                                              **PARAMS["amplitude_varying/sampled"])),
  ]
