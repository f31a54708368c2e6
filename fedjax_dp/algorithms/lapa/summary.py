"""What a LAPA run adds to summary.json and prints: the guarantee (the
privacy filter's bound on the artificial noise and the noisy label histograms) beside
the realised composition, the paper's channel-noise assumption, its conditional
sensitivity and its basic-composition budget, each labelled as what it is
(`fedjax_dp.algorithms.lapa.plugin.Lapa.summary_fields` and ``describe``)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from fedjax_dp.algorithms.lapa import aggregation
from fedjax_dp.privacy import device_ledger
from fedjax_dp.privacy.ledger_protocol import PrivacyReport

__all__ = ["summary_fields", "describe"]

Record = Dict[str, Any]


def summary_fields(alg, setup, records: Sequence[Record]) -> Dict[str, Any]:
  """The summary.json fields of the LAPA `Algorithm` ``alg`` run on ``setup`` (its
  `fedjax_dp.algorithms.interface.Setup`) from the records of its rounds."""
  c, run = alg.config, setup.run
  out = _configuration_fields(c, setup.data)
  if not records:
    return out
  out.update(_label_fields(c, records, run.dp_metrics_only))
  out["switch_round"] = _switch_round(records)
  out.update(_paper_budget_fields(c, records))
  if np.any(np.asarray(c["channel_std"]) > 0) and any(
      "device_noise_multiplier_channel_assumption" in r for r in records):
    out.update(_channel_assumption_fields(records, run.delta))
  if alg.privacy is None:
    out["guarantee_note"] = (
        "none: no artificial noise is ever added (allocator none); the channel noise is "
        "not DP noise, so nothing protects the uploads (epsilon inf)")
    return out
  realised, rho_real = _realised_fields(records, run.delta)
  out.update(realised)
  out["privacy_filter"] = _privacy_filter(c, records, rho_real)
  out["guarantee_note"] = _guarantee_note(c, out["switch_round"], len(records),
                                          out["privacy_filter"])
  return out


def _configuration_fields(c: Dict[str, Any], data) -> Dict[str, Any]:
  """The run's configuration: allocator, aggregator, channel and the devices' uplink
  (public), and the label statistics' and filter's options."""
  return {
      "ddpg": c.get("ddpg"), "allocator": c["allocator"], "aggregator": c["aggregator"],
      "channel": c["channel"], "selected_devices": c["selected"],
      "device_counts": np.asarray(data.counts).astype(int).tolist(),
      "snr_db": c["snr_db"], "ser": c["ser"],
      "powers_w": c["powers_w"], "channel_std": c["channel_std"],
      "partition": data.partition,
      "label_statistics": c["label_statistics"],
      "label_noise_multiplier": c["label_noise_multiplier"],
      "filter_budget": c["filter_budget"],
  }


def _label_fields(c: Dict[str, Any], records: Sequence[Record], dp_metrics_only: bool
                  ) -> Dict[str, Any]:
  """The Wasserstein weights' label distances and weights from round 1's release
  (noisy); with exact label statistics, as diagnostics unless ``dp_metrics_only``."""
  sel = np.asarray(c["selected"], bool)
  uses_labels = c["aggregator"] == "wasserstein"
  exact = uses_labels and c["label_statistics"] == "exact"
  if uses_labels and not exact:
    dist = np.asarray(records[0]["label_distances"], np.float64)
    weights = aggregation.wasserstein_weights(dist, sel)
    return {"label_distances": dist.tolist(),
            "label_weights": np.asarray(weights).tolist()}
  if exact and not dp_metrics_only:
    dist = np.asarray(records[0]["label_distances_exact"], np.float64)
    return {"diagnostics": {
        "label_distances_exact": dist.tolist(),
        "label_weights_exact": np.asarray(
            aggregation.wasserstein_weights(dist, sel)).tolist(),
        "note": "the paper's exact label statistics: computed from the devices' labels "
                "without noise, not covered by any epsilon (the run has no guarantee); "
                "left out with --dp-metrics-only"}}
  return {}


def _switch_round(records: Sequence[Record]) -> Optional[int]:
  """T_th, the 1-based round from which the paper's switch-off stopped the artificial
  noise, or None."""
  switched = [r["switch_round"] for r in records if r.get("switch_round")]
  return int(switched[-1]) if switched else (
      int(records[-1]["round"]) if records[-1].get("switched") else None)


def _paper_budget_fields(c: Dict[str, Any], records: Sequence[Record]) -> Dict[str, Any]:
  """The paper's own accounting (basic composition of the budgets eps_i[t]), labelled
  as not a guarantee, and the switch's violations of its claim."""
  eps_dev = np.array([r["epsilon_devices"] for r in records], np.float64)
  spent = eps_dev.sum(axis=0)
  return {
      "epsilon_paper_per_device": spent.tolist(),
      "epsilon_paper": float(spent.max()),
      "delta_paper": float(min(1.0, c["delta"] * len(records))),
      "epsilon_paper_note": (
          "the paper's accounting: basic composition of the per-round budgets eps_i[t] "
          "of the classical Gaussian mechanism sigma = c Delta_s / eps (eqs. 12-19), "
          "summed over the rounds before the switch and, after it, the budgets the "
          "channel noise is claimed to meet (eq. 23); delta composes to T delta; valid "
          "only while every eps_i[t] < 1, with the paper's sensitivity Delta_s = "
          "2C/|D_i| and if the channel noise were DP noise; not a guarantee"),
      "classical_condition_holds": bool(np.all(eps_dev < 1.0)),
      "switch_violations": int(sum(r.get("switch_violations", 0) for r in records)),
  }


def _inf(v) -> float:
  """A metrics value as a float, None (JSON's inf) as +inf."""
  return math.inf if v is None else float(v)


def _device_ledger(records: Sequence[Record], field: str, delta: float,
                   compose_label: bool = False) -> device_ledger.DeviceLedger:
  """A `DeviceLedger` of every round's per-device noise multipliers ``records[t][field]``;
  with ``compose_label`` composed with round 1's label release (the fields that do not
  already hold it)."""
  z = np.array([[_inf(v) for v in r[field]] for r in records], np.float64)
  if compose_label:
    z_label = np.array([_inf(r.get("label_noise_multiplier")) for r in records])
    with np.errstate(divide="ignore"):
      rho = np.where(np.isinf(z), 0.0, np.where(z == 0, np.inf, z ** -2.0))
      rho_l = np.where(np.isinf(z_label), 0.0,
                       np.where(z_label == 0, np.inf, z_label ** -2.0))
      z = (rho + rho_l[:, None]) ** -0.5
  led = device_ledger.DeviceLedger(z.shape[1], delta)
  led.record(PrivacyReport(z.min(axis=1), 1.0, 1, client_noise_multipliers=z))
  return led


def _channel_assumption_fields(records: Sequence[Record], delta: float
                               ) -> Dict[str, Any]:
  """The epsilons with the decoded channel noise counted as DP noise: the paper's
  assumption, not a guarantee."""
  led = _device_ledger(records, "device_noise_multiplier_channel_assumption", delta)
  return {
      "epsilon_with_channel_noise_assumption_per_device": led.epsilons().tolist(),
      "epsilon_with_channel_noise_assumption": led.worst_epsilon(),
      "epsilon_with_channel_noise_assumption_note": (
          "the paper's assumption, NOT a guarantee: the RDP accountant on the realised "
          "noise with the decoded channel noise counted as Gaussian DP noise (artificial "
          "plus channel SD over the enforced sensitivity, and the label release). It "
          "would hold only for analog (uncoded) transmission with a receiver no better "
          "than assumed and budgets fixed in advance; the paper's link is digital (BPSK/"
          "QPSK): a demodulated coordinate arrives exactly or with bit errors"),
  }


def _realised_fields(records: Sequence[Record], delta: float
                     ) -> Tuple[Dict[str, Any], np.ndarray]:
  """The realised composition and the paper's conditional epsilons (neither a
  guarantee under adaptive budgets), and each device's realised sum of z^-2."""
  led = _device_ledger(records, "device_noise_multiplier", delta)
  cond = _device_ledger(records, "device_noise_multiplier_conditional", delta,
                        compose_label=True)
  return {
      "epsilon_realised_per_device": led.epsilons().tolist(),
      "epsilon_realised": led.worst_epsilon(),
      "epsilon_realised_note": (
          "NOT a guarantee: the RDP accountant on the noise each device's releases "
          "actually carried (artificial noise and the label release), as if it had been "
          "fixed in advance; the budgets were chosen adaptively from earlier noisy "
          "releases, so only the filter's bound (epsilon) holds"),
      "epsilon_conditional_per_device": cond.epsilons().tolist(),
      "epsilon_conditional": cond.worst_epsilon(),
      "epsilon_conditional_note": (
          "NOT a guarantee: the accountant (RDP) on the realised noise, artificial plus "
          "channel, IF the paper's sensitivity 2C/|D_i| held and the channel noise were "
          "DP noise (the paper's assumptions; budgets taken as fixed in advance)"),
  }, led.rho


def _privacy_filter(c: Dict[str, Any], records: Sequence[Record], rho_real: np.ndarray
                    ) -> Dict[str, Any]:
  """The privacy filter's budgets, each device's realised spend against them, the
  rounds it capped and the mu-GDP bound (the guarantee)."""
  budget_total = np.asarray(c["rho_budget_total"], np.float64)
  within = rho_real <= budget_total * (1.0 + device_ledger.FILTER_TOLERANCE)
  capped = np.sum([r.get("filter_capped", [0] * len(c["selected"])) for r in records],
                  axis=0)
  return {
      "budget": c["filter_budget"], "rho_budget_per_device": c["rho_budget"],
      "rho_label_release": c["label_rho"], "rho_budget_total_per_device":
      budget_total.tolist(), "rho_realised_per_device": [
          None if math.isinf(v) else float(v) for v in rho_real],
      "within_budget": bool(np.all(within)),
      "rounds_capped_per_device": np.asarray(capped, int).tolist(),
      "mu_gdp": math.sqrt(float(np.max(np.where(within, np.maximum(budget_total,
                                                                    rho_real), np.inf)))),
      "note": ("each device's sum of z^-2 over its releases (the label histogram and the "
               "uploads' artificial noise) is capped at a budget fixed from the "
               "configuration before training, the round raising the noise of an upload "
               "that would exceed it to spend exactly what is left (none left: no "
               "upload); Gaussian mechanisms chosen adaptively under such a cap are "
               "mu-GDP with mu^2 = the budget (Smith and Thakurta, arXiv 2203.05481): "
               "epsilon is that bound")}


def _guarantee_note(c: Dict[str, Any], switch_round: Optional[int], rounds: int,
                    privacy_filter: Dict[str, Any]) -> str:
  """What the run's epsilon is: none with exact label statistics, after the switch-off
  or past the filter's budget; else the filter's mu-GDP bound."""
  if c["aggregator"] == "wasserstein" and c["label_statistics"] == "exact":
    return ("none (epsilon inf): the Wasserstein weights use each device's exact label "
            "histogram (--label-statistics exact, the paper's), released without noise; "
            "use --label-statistics dp for a guarantee")
  if switch_round is not None and switch_round <= rounds:
    return (f"none (epsilon inf): the paper's switch-off (eq. 23) stopped the artificial "
            f"noise from round {switch_round}; the uploads after it carry only channel "
            "noise, which is no DP noise on a digital link; rerun with --no-switch to "
            "keep the artificial noise (and a finite guarantee)")
  if not privacy_filter["within_budget"]:
    return "none (epsilon inf): a device's releases exceeded its filter budget"
  return ("the privacy filter's bound: every device's releases (its label histogram and "
          "the artificial noise of its uploads) stay within a budget fixed before "
          f"training ({c['filter_budget']!r}), so each device is mu-GDP with mu = "
          f"{privacy_filter['mu_gdp']:.4g} at worst, whatever the adaptive budgets; the "
          "channel noise is not counted")


def describe(s: Dict[str, Any]) -> List[str]:
  """The lines ``fedjax-dp run`` prints under a LAPA run's result (from its
  summary.json ``s``): the guarantee, the other epsilons (none a guarantee), the
  paper's own budget and the switch-off round."""
  lines = []
  if s.get("guarantee_note"):
    lines.append(f"guarantee: {s['guarantee_note']}")
  extra = []
  if s.get("epsilon_realised") is not None:
    extra.append(f"realised composition {s['epsilon_realised']:.4g} (not a guarantee "
                 "under adaptive budgets)")
  if s.get("epsilon_with_channel_noise_assumption") is not None:
    extra.append(f"with the paper's channel-noise assumption "
                 f"{s['epsilon_with_channel_noise_assumption']:.4g} (conditional)")
  if s.get("epsilon_conditional") is not None:
    extra.append(f"with the paper's sensitivity and channel assumption "
                 f"{s['epsilon_conditional']:.4g} (conditional)")
  if extra:
    lines.append("other epsilons, none a guarantee: " + "; ".join(extra))
  if s.get("epsilon_paper") is not None:
    sw = s.get("switch_round")
    lines.append(
        f"the paper's own budget (basic composition): {s['epsilon_paper']:.3g} "
        f"(delta {s['delta_paper']:.2g}); switch-off round T_th: "
        f"{sw if sw else 'none'}")
  return lines
