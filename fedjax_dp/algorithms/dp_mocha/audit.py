"""Canary-audit targets of DP-MOCHA (Hu et al. 2020): its worlds, observers and deliberate
breaks, collected by `fedjax_dp.algorithms.audit_targets` (``fedjax-dp audit
--algorithm dp_mocha``). The shared pieces (`Target`, the delta, the common breaks) are
`fedjax_dp.algorithms.audit_common`'s."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms.audit_common import COMMON_BREAKS, DELTA, Target, schedule, spec_of
from fedjax_dp.auditing import Setup, ledger_claim, params_change, population
from fedjax_dp.federated import server


#: Each target's size (tuned so that a 20,000-repetition audit proves more than the
#: claim when the noise is halved, and less when it is not).
PARAMS: Dict[str, Dict[str, Any]] = {
    "dp_mocha": dict(devices=32, lam=0.75, xi=1.0, sigma1=2.4, sigma2=6.0),
}

# ---------------------------------------------------------------------------
# DP-MOCHA: the canary is the single record of one device.
# ---------------------------------------------------------------------------

def _dp_mocha_observer(round_fn: Callable, canary: int, direction: np.ndarray) -> Callable:
  """DP-MOCHA's shipped round as an audited round whose model is the running sum of the
  canary device's two releases, whitened (the round's own state rides in
  ``opt_state``):

    o = ( dalpha~_c / std_b ,  sign(dalpha~_c) <e, du_c> / std_p )

  with ``std_b``, ``std_p`` the round's noise scales (lines 6, 7 of Algorithm 1) and
  ``e`` the unit ``direction`` in which the canary's features differ. For the worlds of
  `_dp_mocha_setup` (the canary's single record (x, +1) or (-x, -1), its dual step +1 or
  -1) o is Gaussian with identity covariance and mean +-(1 / z1, 1 / z2) / 2 (z1 = std_b
  / 2, z2 = std_p / (2 xi |dalpha~_c|)), and the log-likelihood ratio of the released
  (dalpha~_c, du_c) is linear in o: the audit's Gaussian score is the optimal test of
  exactly the mechanism the ledger composes. The round is built with
  ``expose_releases=True``, so its own dalpha~ and du come in ``extras["releases"]``
  (nothing is re-derived); they are removed before the metrics go on.
  """
  unit = jnp.asarray(direction / np.linalg.norm(direction), jnp.float32)

  def audited(state, data, hp, key):
    inner, metrics = round_fn(state.opt_state, data, hp, key)
    extras = dict(metrics.extras)
    noised = extras.pop("releases")
    metrics = metrics._replace(extras=extras)
    a = noised.dalpha_noisy[canary, 0]
    obs = jnp.stack([a / noised.dual_noise_std[canary],
                     jnp.sign(a) * jnp.dot(unit, noised.du[canary])
                     / noised.primal_noise_std[canary]])
    params = {"releases": state.params["releases"] + obs}
    return server.ServerState(params, inner, inner.round), metrics

  return audited


def _dp_mocha_setup(brk: str, devices: int, lam: float, xi: float, sigma1: float,
                    sigma2: float) -> Setup:
  """``devices`` devices of one record each, d = 1 (x = 1, label +1); the canary is
  device 0's record, (x, +1) ("in") or (-x, -1) ("out"): replace-one. One round, tau = 0
  and n_t = 1, so the one SDCA step (from alpha = 0, w = 0, Omega = I / m with c =
  xi / (2 lam) <= 1) lands on the box corner: dalpha = +1 or -1, the provable dual
  sensitivity 2 sqrt(min(steps, n_t)) = 2; and given dalpha~, the upload xi x dalpha~
  moves by 2 xi |dalpha~|, line 7's sensitivity. So both releases are at their worst
  case and the observation (`_dp_mocha_observer`) is the composed Gaussian mechanism
  the ledger claims, exactly. The other devices only make beta = xi m large, so that
  Corollary 2's s1 = (8 lam + beta) / (beta n_t) is below 2 (``paper-sensitivity``).
  The claim: the algorithm's `DeviceLedger` on the reported per-device multipliers."""
  from fedjax_dp.algorithms.dp_mocha import mechanism
  from fedjax_dp.algorithms.dp_mocha.algorithm import dp_mocha
  x_in = np.ones((devices, 1, 1), np.float32)
  x_out = x_in.copy()
  x_out[0, 0, 0] = -1.0
  y_in = np.ones((devices, 1), np.int32)
  y_out = y_in.copy()
  y_out[0, 0] = 0                                  # label 0 -> y = -1
  data_out, data_in = population(x_out, y_out), population(x_in, y_in)
  alg = dp_mocha(None, data_in, lam=lam, xi=xi, sigma1=sigma1, sigma2=sigma2,
                 update_omega=False,   # replace-one: one round function for both worlds
                 expose_releases=True)
  hp = alg.hparams
  make_ledger = lambda: spec_of(alg).make_ledger(DELTA)
  claim = ledger_claim(make_ledger)
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    hp = hp._replace(sigma1=hp.sigma1 / 2, sigma2=hp.sigma2 / 2)
    claim = ledger_claim(make_ledger, transform=lambda m: dict(
        m, client_noise_multipliers=2.0 * np.asarray(m["client_noise_multipliers"],
                                                     np.float64)))
  elif brk == "paper-sensitivity":  # line 6 accounted as std_b / s1 = sigma1
    # Every device: n_t = 1, one step, so each reports z1 = s1 sigma1 / 2 for line 6.
    s1 = float(mechanism.dual_sensitivity_paper(lam, alg.config["beta"], 1))
    z1 = s1 * sigma1 / float(mechanism.dual_sensitivity_provable(1, 1))

    def paper(m):  # rho = z^-2 - z1^-2 + sigma1^-2 (inf: no release, rho = 0)
      z = np.asarray(m["client_noise_multipliers"], np.float64)
      with np.errstate(divide="ignore"):
        rho = np.where(np.isinf(z), 0.0, z ** -2.0 - z1 ** -2.0 + sigma1 ** -2.0)
        return dict(m, client_noise_multipliers=rho ** -0.5)

    claim = ledger_claim(make_ledger, transform=paper)
  audited = _dp_mocha_observer(alg.round_fn, canary=0, direction=np.ones(1))
  state = alg.init(jax.random.key(1))
  init = server.ServerState({"releases": jnp.zeros(2, jnp.float32)}, state, state.round)
  return Setup(audited, audited, data_out, data_in, init, schedule(hp, 1), 1.0, claim,
               DELTA, description="dp_mocha: one device's single record (x, +1) replaced "
               "by (-x, -1)", observation=spec_of(alg).observation,
               # The audited round's "model" accumulates the canary device's own two
               # releases (`_dp_mocha_observer`): its change is that sender's upload.
               observe=params_change)


def targets() -> List[Target]:
  """DP-MOCHA's audit targets."""
  return [
    Target("dp_mocha", "dp_mocha",
           "record-level, replace-one record of one device, every device every round, "
           "two Gaussian releases: dalpha~ (sensitivity 2 sqrt(min(steps, n_t))) and "
           "du given dalpha~ (2 xi ||dalpha~||)",
           {**COMMON_BREAKS, "paper-sensitivity": "dalpha~ accounted with Corollary "
            "2's s1 = (8 lam + beta) / (beta n_t)"},
           lambda b: _dp_mocha_setup(b, **PARAMS["dp_mocha"])),
  ]
