"""A run's privacy around the algorithm's `PrivacySpec`: the noise multiplier
(calibrated to a target epsilon through the algorithm's own DpEvent), the budget guard,
the ledger of a resumed run, and the guarantee's fields of summary.json.

A spec with several releases per round (``spec.releases``) is handled throughout: its
round event is the composition of the releases' (`PrivacySpec.round_event`), its
ledger a `fedjax_dp.privacy.multi_release.MultiReleaseLedger`, and its records carry
each release's fields (``{name}_noise_multiplier``, ...)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from fedjax_dp.privacy import accountants, calibration
from fedjax_dp.privacy.multi_release import RELEASE_TRUNCATION_FIELDS, release_field
from fedjax_dp.validation import FedJaxDpError


def _is_multi(spec) -> bool:
  return getattr(spec, "releases", None) is not None


def _release_columns(spec, records: List[Dict[str, Any]]):
  """The per-release ``(noise_multipliers, sampling_rates, dp_steps)`` dicts of
  ``records`` (`MultiReleaseLedger.record_many`'s arguments).

  Raises:
    FedJaxDpError: a record without a release's fields.
  """
  out = []
  for metric in ("noise_multiplier", "sampling_rate", "dp_steps"):
    cols = {}
    for rel in spec.releases:
      field = release_field(rel.name, metric)
      missing = [i for i, r in enumerate(records) if field not in r]
      if missing:
        raise FedJaxDpError(f"records[{missing[0]}] has no field {field!r}: the records "
                            "do not come from a run of this algorithm's releases "
                            f"{list(spec.release_names)}.")
      cols[rel.name] = [r[field] for r in records]
    out.append(cols)
  return out


def calibrate_noise_multiplier(spec, rounds: int, target_epsilon: float, delta: float,
                               accountant: str) -> float:
  """z such that ``rounds`` rounds of ``spec.round_event(z)`` spend ``target_epsilon``
  at ``delta`` (`fedjax_dp.privacy.calibration.calibrate`): calibration inverts the
  algorithm's own accounting. With ``spec.releases`` the round event is the
  composition of every release's (each with noise multiplier ``z * event_scale``), so
  the one z is calibrated for all of them together.

  Raises:
    FedJaxDpError: per-client noise multipliers (each client has its own), or no z
      reaches the target.
  """
  if spec.per_client:
    raise FedJaxDpError("target_epsilon calibration is not available with "
                        "client_noise_multipliers (each client has its own); give the "
                        "noise multipliers, and target_epsilon only as a budget guard.",
                        option="target_epsilon")
  # The run's epsilon is the largest over `PrivacySpec.calibration_events` (one event,
  # or one per group of releases a record can influence): the smallest z meeting the
  # target is the largest of the z that calibrate each alone.
  count = len(spec.calibration_events(1.0, rounds))
  return max(calibration.calibrate(lambda z, i=i: spec.calibration_events(z, rounds)[i],
                                   target_epsilon, delta, accountant)
             for i in range(count))


def budget_rounds(spec, z, rounds: int, target_epsilon: float, delta: float) -> int:
  """Budget guard: how many of ``rounds`` rounds fit in ``target_epsilon``.

  A fresh ledger like the run's (``spec.make_ledger``) records the planned rounds'
  events (the noise-multiplier hyper-parameter ``z``, a float or a per-client ``[N]``
  vector, through the algorithm's `PrivacySpec`; with releases, each release's
  ``z * event_scale``, rate and steps); training stops before the first round
  after which its epsilon (RDP, at ``delta``; the worst client's with per-client noise)
  would exceed the target. RDP is never below PLD, so the guard is conservative for
  either accountant.

  Raises:
    FedJaxDpError: even the first round would exceed the target.
  """
  trial = spec.make_ledger(delta)
  if _is_multi(spec):
    z0 = float(np.asarray(z, np.float64))
    eps = trial.record_many({r.name: np.full(rounds, z0 * r.event_scale)
                             for r in spec.releases},
                            {r.name: np.full(rounds, r.sampling_rate) for r in spec.releases},
                            {r.name: np.full(rounds, r.steps) for r in spec.releases})
  else:
    z_event = np.asarray(z, np.float64) * spec.event_scale
    zs = np.broadcast_to(z_event, (rounds,) + z_event.shape)
    eps = trial.record_many(zs, np.full(rounds, spec.sampling_rate),
                            np.full(rounds, spec.steps))
  allowed = int(np.sum(eps <= target_epsilon))  # eps grows with every round
  if allowed == 0:
    raise FedJaxDpError(
        f"target_epsilon={target_epsilon} is below the epsilon of a single round "
        f"({eps[0]:.4g} at delta={delta:g} with noise_multiplier "
        f"{np.min(np.asarray(z)):g}); raise it or the noise multiplier.",
        option="target_epsilon")
  return allowed


def accounting_fields(spec, delta: float) -> Dict[str, Any]:
  """What fixes the DpEvent besides each round's (z, q, dp_steps): with these in every
  record of metrics.jsonl a reader can recompute epsilon from that file alone
  (``observation``: what the server sees, which decides whether q amplifies). With
  releases: ``releases`` (their names) and, for each release with a truncation model,
  ``{name}_truncation_population_size``, ``{name}_truncation_cap`` and
  ``{name}_truncation_draws_per_step`` (labelled by
  `fedjax_dp.privacy.disclosure.release_labels`)."""
  out = {"delta": delta, "sampler": spec.sampler, "neighboring_relation": spec.relation,
         "observation": spec.observation, "privacy_unit": spec.unit,
         "population_size": spec.population_size, "cohort_size": spec.cohort_size}
  if spec.truncation is not None:
    out.update(truncation_population_size=spec.truncation.population_size,
               truncation_cap=spec.truncation.cap,
               truncation_draws_per_step=spec.truncation.draws_per_step)
  if _is_multi(spec):
    out["releases"] = list(spec.release_names)
    for rel in spec.releases:
      if rel.truncation is not None:
        for f in RELEASE_TRUNCATION_FIELDS:
          out[release_field(rel.name, "truncation_" + f)] = getattr(rel.truncation, f)
  return out


def restored_ledger(spec, delta: float, records: List[Dict[str, Any]],
                    per_client: Optional[Dict[str, Any]]):
  """A fresh ledger holding the events of ``records`` (the rounds of a checkpoint), so
  that epsilon continues exactly: from the records (what metrics.jsonl holds), or for
  per-client accounting the saved per-client ledger ``per_client`` (its ``to_dict``).
  With releases, from each release's fields of the records.

  Raises:
    FedJaxDpError: with releases, a record without a release's fields.
  """
  if spec.per_client:
    return type(spec.make_ledger(delta)).from_dict(per_client)
  ledger = spec.make_ledger(delta)
  if records and _is_multi(spec):
    ledger.record_many(*_release_columns(spec, records))
  elif records:
    ledger.record_many([r["noise_multiplier"] for r in records],
                       [r["sampling_rate"] for r in records],
                       [r["dp_steps"] for r in records])
  return ledger


def ledger_epsilon(ledger, accountant: str) -> Optional[float]:
  """The run's epsilon (the worst client's with per-client accounting); inf without a
  ledger (non-private), None where dp-accounting has no PLD for the events."""
  if ledger is None:
    return float("inf")
  try:
    if hasattr(ledger, "worst_epsilon"):
      return ledger.worst_epsilon(accountant=accountant)
    return ledger.epsilon(accountant=accountant)
  except accountants.UnsupportedAccountingError:
    return None


def privacy_summary(ledger, spec, accountant: str, delta: float) -> Dict[str, Any]:
  """The guarantee's fields of summary.json: the relation, the truncation probability
  and the delta it adds (``delta_total``), with per-client accounting the worst
  client and every client's epsilon (when they differ), and with several releases per
  round ``release_epsilons_rdp`` (``{name: epsilon of that release alone}``, how the
  budget splits; the guarantee is that of all of them composed, the truncation
  probability the sum of theirs)."""
  if ledger is None:
    return {"relation": None, "observation": None, "observed_by_server": None,
            "truncation_probability": 0.0, "delta_total": None,
            "guarantee": "none (non-private)"}
  acc = accountant if spec.supports(accountant) else "rdp"
  single = ledger.worst_ledger(accountant=acc) if spec.per_client else ledger
  eps = single.epsilon(accountant=acc)
  p = single.truncation_probability()
  delta_total = single.delta_total(accountant=acc)
  out = {"relation": spec.relation, "observation": spec.observation,
         "observed_by_server": spec.observed, "truncation_probability": p,
         "delta_total": delta_total,
         "guarantee": (f"({eps:.4g}, {delta_total:.4g})-DP, {spec.unit}, "
                       f"{spec.neighboring}; the server observes {spec.observed}; "
                       f"{acc.upper()} accountant"
                       + (f"; delta includes {delta_total - delta:.3g} for the "
                          f"probability {p:.3g} that a padded Poisson draw was truncated"
                          if p > 0 else ""))}
  if _is_multi(spec):
    groups = getattr(ledger, "groups", None)
    if groups is not None and len(groups) > 1:
      out["guarantee"] += ("; a record influences only one group of the releases ("
                           + "; ".join(", ".join(g) for g in groups)
                           + "), each composed over every round: epsilon is the largest "
                           "group's")
    else:
      out["guarantee"] += (f"; every round composes the releases "
                           f"{', '.join(spec.release_names)}")
    out["release_epsilons_rdp"] = ledger.release_epsilons(accountant="rdp")
  if spec.per_client:
    eps_clients = ledger.epsilons(accountant="rdp")
    out["worst_client"] = ledger.worst_client()
    out["per_client_epsilon_rdp"] = (eps_clients.tolist()
                                     if np.unique(eps_clients).size > 1 else None)
  return out


def run_ledger(spec, accountant: str, delta: float):
  """The ledger of one run and the accounting fields every metrics record carries.

  Args:
    spec: the algorithm's `PrivacySpec`, or None for a non-private run.
    accountant: ``"rdp"`` or ``"pld"`` (the run's reported epsilon).
    delta: the run's delta.

  Returns:
    ``(ledger, accounting)``: ``spec.make_ledger(delta)`` and `accounting_fields`, or
    ``(None, {})`` without ``spec``.

  Raises:
    FedJaxDpError: ``accountant`` is one the mechanism's ledger does not support,
      option ``accountant``.
  """
  if spec is None:
    return None, {}
  if not spec.supports(accountant):
    raise FedJaxDpError(f"accountant {accountant!r} cannot account for this run's "
                        "events; use 'rdp'.", option="accountant")
  return spec.make_ledger(delta), accounting_fields(spec, delta)
