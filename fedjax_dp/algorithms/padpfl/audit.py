"""Canary-audit targets of PADPFL: its worlds and deliberate breaks
(``fedjax-dp audit --algorithm padpfl``), returned by `Padpfl.audit_targets` and
collected by `fedjax_dp.algorithms.audit_targets`. The shared pieces (`Target`, the
delta, the common breaks, the replace-one worlds) are
`fedjax_dp.algorithms.audit_common`'s.

Real local training, the canary is one example. The break besides the common ones:
``paper-sensitivity`` (accounted with the paper's assumed sensitivity 2B/m_min, which
unclipped local training does not enforce).
"""

from __future__ import annotations

from typing import Any, Dict, List

import jax
import numpy as np

from fedjax_dp.algorithms import padpfl as pp
from fedjax_dp.algorithms.audit_common import (COMMON_BREAKS, DELTA, Target, audit_model,
                                               declared_observation, paper_worlds, rescale,
                                               spec_of, zero_params)
from fedjax_dp.auditing import Setup, ledger_claim

#: Each target's size (tuned so that a 20,000-repetition audit proves more than the claim
#: when the noise is halved, and less when it is not).
PARAMS: Dict[str, Dict[str, Any]] = {
    "padpfl/paper": dict(epsilon=0.63),
    "padpfl/clipped_gradients": dict(epsilon=2.5),
}


def _padpfl_setup(brk: str, mode: str, epsilon: float) -> Setup:
  model = audit_model()
  data_out, data_in = paper_worlds(n_per_client=4, clients=1)
  extra: Dict[str, Any] = dict(sensitivity_mode=mode)
  if mode == "clipped_gradients":
    extra["grad_clip_norm"] = 0.5

  def build(data):
    return pp.padpfl(model, data, impact_factors=np.ones(1), epsilon=epsilon, delta=DELTA,
                     rounds=1, exposures=1, clip_bound=1.0, learning_rate=1.0,
                     local_steps=1, prox_mu=0.0, observed_client=0, **extra)

  alg_in = build(data_in)  # replace-one: the same population size, constants and round
  cfg = dict(alg_in.config)
  claim = ledger_claim(lambda: spec_of(alg_in).make_ledger(DELTA))
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    cfg = dict(cfg, sigma_c=[s / 2 for s in cfg["sigma_c"]],
               sigma_s=[s / 2 for s in cfg["sigma_s"]])
    claim = ledger_claim(lambda: spec_of(alg_in).make_ledger(DELTA),
                         transform=lambda m: rescale(m, 2.0))
  elif brk == "paper-sensitivity":
    claim = ledger_claim(lambda: spec_of(alg_in).make_ledger(DELTA),
                         transform=lambda m: rescale(
                             m, cfg["sensitivity"] / cfg["sensitivity_paper"]))
  state = zero_params(alg_in.init(jax.random.key(1)))
  return Setup(alg_in.round_fn, alg_in.round_fn, data_out, data_in, state,
               pp.schedule_hparams(cfg), 1.0, claim, DELTA,
               description=f"padpfl ({mode}): one example replaced",
               **declared_observation(spec_of(alg_in)))


def targets() -> List[Target]:
  """PADPFL's audit targets."""
  return [
    Target("padpfl/paper", "padpfl",
           "record-level, replace-one, every client, sensitivity 2B",
           {**COMMON_BREAKS, "paper-sensitivity": "accounted with 2B/m_min (1c)"},
           lambda b: _padpfl_setup(b, "paper", **PARAMS["padpfl/paper"])),
    Target("padpfl/clipped_gradients", "padpfl",
           "record-level, replace-one, every client, sensitivity "
           "clipped_gd_sensitivity", dict(COMMON_BREAKS),
           lambda b: _padpfl_setup(b, "clipped_gradients",
                                   **PARAMS["padpfl/clipped_gradients"])),
  ]
