"""The canary fields of a run with ``--canaries K`` (one-run empirical privacy
estimation, Andrew et al., ICLR 2024): summary.json's fields and their disclosure
labels, the printed lines, and ``canaries.png`` (the histogram of the inserted and
held-out canaries' cosines with the fitted Gaussians).

The numbers are computed by the algorithm's own canary plan
(``Algorithm.canaries.report``, `fedjax_dp.auditing.one_run.CanaryPlan`); this module
names no algorithm and imports nothing of the auditing package. All of them are
*simulation diagnostics of the auditor*, not releases: ``--dp-metrics-only`` leaves
them (and the plot) out, as it leaves out every diagnostic.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

import jax
import numpy as np

from fedjax_dp.privacy import disclosure

__all__ = ["LABELS", "ATTRIBUTABLE_LIMITATION", "SECURE_SUM_LIMITATION", "fields", "describe", "plot_canaries"]

_WHY = ("simulation diagnostic of the canary auditor (Andrew et al. 2024): simulated "
        "canary clients scored against the final model; not a release, not a guarantee")

#: summary.json's canary fields and their disclosure labels.
LABELS: Dict[str, Tuple[str, str]] = {
    "canary_audit": (disclosure.DIAGNOSTIC, _WHY),
    "empirical_epsilon": (disclosure.DIAGNOSTIC, _WHY),
    "one_run_lower_bound": (disclosure.DIAGNOSTIC, _WHY),
    "one_run_lower_bound_gdp": (disclosure.DIAGNOSTIC, _WHY),
}


def fields(alg, root_key, state, delta: float, accountant_epsilon: Optional[float]
           ) -> Dict[str, Any]:
  """The canary fields of a finished run (``{}`` without canaries).

  Args:
    alg: the run's `fedjax_dp.algorithms.base.Algorithm` (``alg.canaries``: its plan).
    root_key: the run's root key; theta_0 is ``alg.init(fold_in(root_key, 2^20))``'s
      parameters, as `fedjax_dp.runs.member.start_member` made them.
    state: the final `ServerState` (theta_T is its ``params``).
    delta: the run's delta.
    accountant_epsilon: the run's epsilon, for the comparison (or None).
  """
  plan = getattr(alg, "canaries", None)
  if plan is None:
    return {}
  theta0 = alg.init(jax.random.fold_in(root_key, 1 << 20)).params
  out = plan.report(theta0, state.params, delta, accountant_epsilon)
  observation = getattr(alg.privacy, "observation", None)
  if observation == "attributable":
    out["canary_audit"]["limitation"] = ATTRIBUTABLE_LIMITATION
  elif observation == "secure_sum":
    out["canary_audit"]["limitation"] = SECURE_SUM_LIMITATION
  return out


#: The caveat of a run whose server sees a secure sum and who took part (distributed DP).
SECURE_SUM_LIMITATION = (
    "the guarantee's observer sees every round's secure sum and who took part in it; the "
    "canaries are scored against the final model only, whatever their participation: "
    "the estimate is for a weaker observer than the one the accountant's epsilon covers")


#: The caveat of a run whose server sees each upload with its sender (local noise).
ATTRIBUTABLE_LIMITATION = (
    "the guarantee's observer sees each noisy upload with its sender, but the canaries "
    "are scored against the final model only (each canary's own noisy uploads are not "
    "returned by the engine): the estimate is for a weaker observer than the one the "
    "accountant's epsilon covers, so it understates what that observer could learn")


def _eps(v: Any) -> str:
  return "inf" if v is None or not math.isfinite(v) else f"{v:.3f}"


def describe(s: Mapping[str, Any]) -> List[str]:
  """The printed lines of summary.json ``s``'s canary fields (none without them)."""
  audit = s.get("canary_audit")
  if not audit:
    return []
  est, lb = s["empirical_epsilon"], s["one_run_lower_bound"]
  gdp = s.get("one_run_lower_bound_gdp") or {}
  conf = f"{100 * lb['confidence']:.0f}%"
  return [
      f"canaries (simulation diagnostics, not releases): {audit['inserted']} inserted, "
      f"{audit['held_out']} held out; population {audit['real_clients']} real clients + "
      f"{audit['inserted']} canaries (the epsilon above is for that population)",
      f"  empirical epsilon {_eps(est['epsilon'])} (Andrew et al. 2024, final-model "
      f"observer; equal-variance fit {_eps(est.get('epsilon_equal_variance'))}): an "
      f"estimate from the canaries' cosines, not a bound and not a guarantee",
      f"  one-run lower bound {_eps(lb['epsilon'])} at {conf} confidence (Steinke et al. "
      f"2023; f-DP variant {_eps(gdp.get('epsilon'))}): the run's true epsilon is at "
      f"least this, unless the test failed (probability <= {1 - lb['confidence']:.0%})",
      f"  {est.get('reliability', '')}",
  ] + ([f"  limitation: {audit['limitation']}"] if audit.get("limitation") else [])


def _normal_pdf(x: np.ndarray, mu: float, sd: float) -> np.ndarray:
  return np.exp(-0.5 * ((x - mu) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))


def plot_canaries(summary: Mapping[str, Any], path: str) -> Optional[str]:
  """``canaries.png``: histograms (densities) of the inserted and held-out canaries'
  cosines with the fitted Gaussians N(mu_1, s_1^2) and N(mu_0, s_0^2), the estimate and
  the lower bound in the title. Returns ``path``, or None without canary fields."""
  audit = summary.get("canary_audit")
  if not audit or not audit.get("scores"):
    return None
  from fedjax_dp.runs.plots import _pyplot, _save
  plt = _pyplot()
  ins = np.asarray(audit["scores"]["inserted"], np.float64)
  out = np.asarray(audit["scores"]["held_out"], np.float64)
  fig, ax = plt.subplots(figsize=(7, 4.5))
  lo, hi = float(min(ins.min(), out.min())), float(max(ins.max(), out.max()))
  bins: Any = np.linspace(lo, hi, 41).tolist() if hi > lo else 10
  ax.hist(out, bins=bins, density=True, alpha=0.5, label="held-out canaries")
  ax.hist(ins, bins=bins, density=True, alpha=0.5, label="inserted canaries")
  xs = np.linspace(lo, hi, 400)
  for mu, sd, name in ((audit["held_out_cosine_mean"], audit["held_out_cosine_std"],
                        "N(mu_0, s_0^2)"),
                       (audit["inserted_cosine_mean"], audit["inserted_cosine_std"],
                        "N(mu_1, s_1^2)")):
    if sd > 0:
      ax.plot(xs, _normal_pdf(xs, mu, sd), label=f"fit {name}")
  ax.set_xlabel("cosine(final model delta, canary direction)")
  ax.set_ylabel("density")
  ax.legend(fontsize=8)
  est, lb = summary["empirical_epsilon"], summary["one_run_lower_bound"]
  ax.set_title(f"canaries (diagnostic): estimate eps {_eps(est['epsilon'])}, "
               f"{100 * lb['confidence']:.0f}% lower bound {_eps(lb['epsilon'])}, "
               f"accountant {_eps(audit.get('accountant_epsilon'))}", fontsize=9)
  fig.tight_layout()
  return _save(fig, path, dpi=110)
