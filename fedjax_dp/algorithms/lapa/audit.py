"""Canary-audit targets of LAPA: its worlds, observers and deliberate
breaks, collected by `fedjax_dp.algorithms.audit_targets` (``fedjax-dp audit
--algorithm lapa``). The shared pieces (`Target`, the delta, the common breaks) are
`fedjax_dp.algorithms.audit_common`'s."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms.audit_common import (CLASSES, COMMON_BREAKS, DELTA, FEATURES,
    Target, audit_model, schedule, spec_of, zero_params)
from fedjax_dp.auditing import Setup, ledger_claim, params_change, population
from fedjax_dp.federated import server


#: Each target's size (tuned so that a 20,000-repetition audit proves more than the
#: claim when the noise is halved, and less when it is not).
PARAMS: Dict[str, Dict[str, Any]] = {
    "lapa/per_example": dict(clipping="per_example", rounds=2, epsilon_total=3.8),
    "lapa/aggregate": dict(clipping="aggregate", rounds=2, epsilon_total=1.27),
    "lapa/label_statistics": dict(rounds=1, epsilon_total=1.5,
                                  label_noise_multiplier=1.5),
}

# ---------------------------------------------------------------------------
# LAPA: the canary is one record of the one device.
# ---------------------------------------------------------------------------

#: LAPA's audited device: the canary record (feature ``_LAPA_X`` on the first axis) and two
#: zero-feature fillers labelled 0 and 1; its minibatch is all of them (B = |D_i| = 3).
_LAPA_X, _LAPA_B = 10.0, 3


def _lapa_worlds():
  """Replace-one worlds of one device: the canary (x, 0) ("in") or (x, 1) ("out"). A
  linear softmax model's gradient on (x, y) is [x; 1] (x) (p - e_y): p_1 v for y = 0 and
  -p_0 v for y = 1, with v = [x; 1] (x) (-1, 1), whatever the parameters; both are longer
  than C (|v| p > C while the logits differ by less than about 2.6), so the clipped
  canary gradients are +-C v / |v| in every round, and the canary moves the per-example
  clipped mean by exactly the enforced 2C/B (or the clipped minibatch mean, eq. 17, by
  2C). The fillers' gradients are the same function of the model in both worlds."""
  x = np.zeros((1, _LAPA_B, FEATURES), np.float32)
  x[0, 0, 0] = _LAPA_X
  y_in = np.array([[0, 0, 1]], np.int32)
  y_out = np.array([[1, 0, 1]], np.int32)
  return x, population(x, labels=y_out), population(x, labels=y_in)


def _lapa_setup(brk: str, clipping: str, rounds: int, epsilon_total: float) -> Setup:
  """LAPA (`fedjax_dp.algorithms.lapa.algorithm.lapa`) on one device holding
  the canary and two fillers (`_lapa_worlds`), its minibatch its whole data (the canary
  is in every upload: no sampling, as the ledger claims). The uniform allocator gives
  eps_T / T every round, so the artificial noise is sigma = c Delta_s T / eps_T (eqs.
  18-19) in every round; an ideal channel (the channel's noise is not counted, so it
  would only hide the release from the audit) and FedAvg's weights (one device: weight
  1; no label release). The model's change is -eta times the device's upload: the audit
  observes exactly the release the ledger accounts. eta is small so that the model, and
  the fillers' gradients, barely move. The claim: the algorithm's own `DeviceLedger`, a
  privacy filter whose budget is the uniform schedule's spend (+0.1%), on the reported
  per-device noise multipliers. ``noise-half`` halves the noise (and lets the filter pass
  the halved noise's spend, as code that claims twice its noise would); ``paper-
  sensitivity`` (``clipping="aggregate"`` only: with per-example clipping and B =
  |D_i| the paper's 2C/|D_i| is the enforced 2C/B) accounts the same releases, and sizes
  the filter, with the paper's Delta_s = 2C/|D_i| instead of the enforced 2C."""
  from fedjax_dp.algorithms.lapa import allocators
  from fedjax_dp.algorithms.lapa.algorithm import lapa
  from fedjax_dp.data.federated_data import FederatedData
  from fedjax_dp.privacy.device_ledger import DeviceLedger
  x, data_out, data_in = _lapa_worlds()
  acfg = allocators.AllocatorConfig(kind="uniform", epsilon_total=epsilon_total,
                                    rounds=rounds)
  fd = FederatedData("audit", x, np.asarray(data_in.y), np.array([_LAPA_B]), CLASSES)
  alg = lapa(audit_model(), fd, allocator=acfg, aggregator="fedavg", clipping=clipping,
             batch_size=_LAPA_B, learning_rate=1e-4, clip_norm=1.0, delta=DELTA)
  hp = alg.hparams
  make_ledger = lambda: spec_of(alg).make_ledger(DELTA)
  claim = ledger_claim(make_ledger)
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    hp = hp._replace(paper_sensitivity=hp.paper_sensitivity / 2,
                     rho_budget=hp.rho_budget * 4)
    claim = ledger_claim(make_ledger, transform=lambda m: dict(
        m, client_noise_multipliers=2.0 * np.asarray(m["client_noise_multipliers"],
                                                     np.float64)))
  elif brk == "paper-sensitivity":  # z = SD / (2C/|D_i|), not SD / (2C)
    ratio = alg.config["sensitivity"] / alg.config["paper_sensitivity"][0]
    budgets = np.asarray(alg.config["rho_budget_total"]) / ratio ** 2
    claim = ledger_claim(lambda: DeviceLedger(1, DELTA, _LAPA_B, budgets=budgets),
                         transform=lambda m: dict(
                             m, client_noise_multipliers=ratio * np.asarray(
                                 m["client_noise_multipliers"], np.float64)))
  state = zero_params(alg.init(jax.random.key(1)))
  return Setup(alg.round_fn, alg.round_fn, data_out, data_in, state, schedule(hp, rounds),
               1.0, claim, DELTA,
               description=f"lapa ({clipping} clipping): one record of the one device "
               "replaced",
               # One device: the model change is that sender's (weighted) upload.
               observation=spec_of(alg).observation, observe=params_change)


#: The label-statistics audit: device 0 holds the canary and two fillers (labels 0, 1),
#: device 1 four records (labels 0, 0, 0, 1).
_LAPA_LABEL_COUNTS = (_LAPA_B, 4)


def _lapa_label_worlds():
  """Replace-one worlds of two devices differing in the label of device 0's first
  record (the canary of `_lapa_worlds`: (x, 0) "in", (x, 1) "out"): its label histogram
  moves by (+1, -1), and with exact label statistics the W1 distances and the
  Wasserstein weights of both devices move deterministically."""
  x = np.zeros((2, max(_LAPA_LABEL_COUNTS), FEATURES), np.float32)
  x[0, 0, 0] = _LAPA_X
  y_in = np.array([[0, 0, 1, 0], [0, 0, 0, 1]], np.int32)
  y_out = y_in.copy()
  y_out[0, 0] = 1
  counts = np.array(_LAPA_LABEL_COUNTS)
  return (x, population(x, labels=y_out, counts=counts),
          population(x, labels=y_in, counts=counts))


def _lapa_label_observer(round_fn: Callable, device: int, scale: float) -> Callable:
  """LAPA's shipped round as an audited round whose model is the label histogram of
  ``device`` as the BS received it (``LapaState.label_hist``, the release of round 1
  that the Wasserstein weights are computed from), divided by ``scale`` (the configured
  noise SD sigma_h: a fixed constant, so the observation is N(h / sigma_h, I) in the
  shipped code and the Gaussian score is the optimal test of the release the ledger
  composes); the round's own state rides in ``opt_state``."""

  def audited(state, data, hp, key):
    inner, metrics = round_fn(state.opt_state, data, hp, key)
    params = {"labels": inner.opt_state.label_hist[device] / scale}
    return server.ServerState(params, inner, inner.round), metrics

  return audited


def _lapa_label_setup(brk: str, rounds: int, epsilon_total: float,
                      label_noise_multiplier: float) -> Setup:
  """LAPA's Wasserstein aggregator on two devices (`_lapa_label_worlds`), the
  canary's label changing device 0's label histogram; the audit observes that release
  (`_lapa_label_observer`). The claim is the algorithm's own `DeviceLedger` (the filter's
  bound: the label release's 1 / z_h^2 plus the uploads' budget, kept small here,
  eps_T = 1.5 in one round at the provable calibration, so that the label release is
  most of it). ``noise-half``: the histograms get half their noise, the claim is for
  the configured noise; ``exact-label-statistics``: the paper's exact histograms (the
  old code), claimed as if the label release were covered."""
  from fedjax_dp.algorithms.lapa import allocators
  from fedjax_dp.algorithms.lapa.algorithm import lapa
  from fedjax_dp.data.federated_data import FederatedData
  x, data_out, data_in = _lapa_label_worlds()
  acfg = allocators.AllocatorConfig(kind="uniform", epsilon_total=epsilon_total,
                                    rounds=rounds)
  fd = FederatedData("audit", x, np.asarray(data_in.y), np.array(_LAPA_LABEL_COUNTS),
                     CLASSES)

  def build(statistics):
    return lapa(audit_model(), fd, allocator=acfg, aggregator="wasserstein",
                batch_size=_LAPA_B, learning_rate=1e-4, clip_norm=1.0, delta=DELTA,
                calibration_sensitivity="provable", label_statistics=statistics,
                label_noise_multiplier=label_noise_multiplier)

  shipped = build("dp")
  alg = build("exact") if brk == "exact-label-statistics" else shipped
  hp = alg.hparams
  make_ledger = lambda: spec_of(shipped).make_ledger(DELTA)
  claim = ledger_claim(make_ledger)
  configured = ledger_claim(make_ledger, transform=lambda m: dict(
      m, client_noise_multipliers=np.full_like(np.asarray(
          m["client_noise_multipliers"], np.float64), np.inf)))  # the filter's bound
  if brk == "noise-half":  # half the label noise; the claim is for the configured noise
    hp = hp._replace(label_noise_std=hp.label_noise_std / 2)
    claim = configured
  elif brk == "exact-label-statistics":  # no label noise, claimed as covered
    claim = configured
  sigma_h = float(shipped.config["label_noise_std"])
  audited = _lapa_label_observer(alg.round_fn, device=0, scale=sigma_h)
  state = zero_params(alg.init(jax.random.key(1)))
  init = server.ServerState({"labels": jnp.zeros(CLASSES, jnp.float32)}, state,
                            state.round)
  return Setup(audited, audited, data_out, data_in, init, schedule(hp, rounds), 1.0,
               claim, DELTA, description="lapa (Wasserstein weights): the label of one "
               "record of device 0 replaced; observed: the label histogram released",
               # The audited round's "model" is device 0's released histogram.
               observation=spec_of(alg).observation, observe=params_change)


def targets() -> List[Target]:
  """LAPA's audit targets."""
  return [
    Target("lapa/per_example", "lapa",
           "record-level, replace-one record of one device, every upload Gaussian (the "
           "artificial noise; the channel's is not counted), no sampling, a privacy "
           "filter's bound, per-example clipping: sensitivity 2C/B", dict(COMMON_BREAKS),
           lambda b: _lapa_setup(b, **PARAMS["lapa/per_example"])),
    Target("lapa/aggregate", "lapa",
           "record-level, replace-one record of one device, every upload Gaussian (the "
           "artificial noise; the channel's is not counted), no sampling, a privacy "
           "filter's bound, eq. 17's clipping of the minibatch mean: sensitivity 2C",
           {**COMMON_BREAKS, "paper-sensitivity": "accounted with the paper's Delta_s = "
            "2C/|D_i| (eq. 18)"},
           lambda b: _lapa_setup(b, **PARAMS["lapa/aggregate"])),
    Target("lapa/label_statistics", "lapa",
           "record-level, replace-one label of one record of device 0 of 2: the "
           "Wasserstein weights' label histogram, released once with Gaussian noise "
           "(sensitivity sqrt 2), composed into the device's filter; observed: the "
           "histogram the BS received",
           {**COMMON_BREAKS, "exact-label-statistics": "the paper's exact label "
            "histograms, claimed as covered (the old code)"},
           lambda b: _lapa_label_setup(b, **PARAMS["lapa/label_statistics"])),
  ]
