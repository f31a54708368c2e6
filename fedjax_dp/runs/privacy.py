"""A run's privacy around the algorithm's `PrivacySpec`: the noise multiplier
(calibrated to a target epsilon through the algorithm's own DpEvent), the budget guard,
the ledger of a resumed run, and the guarantee's fields of summary.json.

Ledgers are used through `fedjax_dp.privacy.ledger_protocol.Ledger` only, and specs
through the methods every `fedjax_dp.algorithms.privacy_spec.PrivacyStatement` variant
has (``make_ledger``, ``calibration_events``, ``planned_report``,
``accounting_fields``, ``summary_fields``): nothing here dispatches on the kind of
statement. A spec with several releases per round (``MultiReleaseSpec``) is handled
throughout: its round event is the composition of the releases', its ledger a
`fedjax_dp.privacy.multi_release.MultiReleaseLedger`, and its records carry each
release's fields (``{name}_noise_multiplier``, ...)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from fedjax_dp.algorithms.base import PrivacyStatement
from fedjax_dp.privacy import accountants, calibration, zcdp
from fedjax_dp.privacy.ledger_protocol import Ledger, PrivacyReport
from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "calibrate_noise_multiplier", "budget_rounds", "accounting_fields",
    "restored_ledger", "ledger_epsilon", "privacy_summary", "run_ledger",
]


def calibrate_noise_multiplier(spec: PrivacyStatement, rounds: int, target_epsilon: float, delta: float,
                               accountant: str) -> float:
  """z such that ``rounds`` rounds of ``spec.round_event(z)`` spend ``target_epsilon``
  at ``delta`` (`fedjax_dp.privacy.calibration.calibrate`): calibration inverts the
  algorithm's own accounting. With ``spec.releases`` the round event is the
  composition of every release's (each with noise multiplier ``z * event_scale``), so
  the one z is calibrated for all of them together.

  Raises:
    FedJaxDpError: per-client noise multipliers (each client has its own:
      ``PerClientPrivacySpec.calibration_events`` refuses), or no z reaches the target.
  """
  own: Any = getattr(spec, "calibrate_noise_multiplier", None)
  if callable(own):  # a statement with its own accountant (Monte Carlo)
    z_own = own(rounds, target_epsilon, delta, accountant)
    if z_own is not None:
      return float(z_own)  # type: ignore[arg-type]
  # The run's epsilon is the largest over `calibration_events` (one event,
  # or one per group of releases a record can influence): the smallest z meeting the
  # target is the largest of the z that calibrate each alone.
  count = len(spec.calibration_events(1.0, rounds))
  return max(calibration.calibrate(lambda z, i=i: spec.calibration_events(z, rounds)[i],
                                   target_epsilon, delta, accountant)
             for i in range(count))


def budget_rounds(spec: PrivacyStatement, z: Any, rounds: int, target_epsilon: float,
                  delta: float) -> int:
  """Budget guard: how many of ``rounds`` rounds fit in ``target_epsilon``.

  A fresh ledger like the run's (``spec.make_ledger``) records the planned rounds'
  report (``spec.planned_report(z, rounds)``: the noise-multiplier hyper-parameter
  ``z``, a float or a per-client ``[N]`` vector, through the algorithm's `PrivacySpec`;
  with releases, each release's ``z * event_scale``, rate and steps) through the
  `Ledger` protocol; training stops before the first round
  after which its epsilon (RDP, at ``delta``; the worst client's with per-client noise)
  would exceed the target. RDP is never below PLD, so the guard is conservative for
  either accountant.

  Raises:
    FedJaxDpError: even the first round would exceed the target.
  """
  eps = spec.make_ledger(delta).record(spec.planned_report(z, rounds))
  allowed = int(np.sum(eps <= target_epsilon))  # eps grows with every round
  if allowed == 0:
    raise FedJaxDpError(
        f"target_epsilon={target_epsilon} is below the epsilon of a single round "
        f"({eps[0]:.4g} at delta={delta:g} with noise_multiplier "
        f"{np.min(np.asarray(z)):g}); raise it or the noise multiplier.",
        option="target_epsilon")
  return allowed


def accounting_fields(spec: PrivacyStatement, delta: float) -> Dict[str, Any]:
  """What fixes the DpEvent besides each round's (z, q, dp_steps): with these in every
  record of metrics.jsonl a reader can recompute epsilon from that file alone
  (``observation``: what the server sees, which decides whether q amplifies). With
  releases: ``releases`` (their names) and, for each release with a truncation model,
  ``{name}_truncation_population_size``, ``{name}_truncation_cap`` and
  ``{name}_truncation_draws_per_step`` (labelled by
  `fedjax_dp.privacy.disclosure.release_labels`): the spec's ``accounting_fields``."""
  return spec.accounting_fields(delta)


def restored_ledger(spec: PrivacyStatement, delta: float, records: List[Dict[str, Any]],
                    per_client: Optional[Dict[str, Any]]) -> Ledger:
  """A fresh ledger (``spec.make_ledger(delta)``) holding the events of ``records`` (the
  rounds of a checkpoint), so that epsilon continues exactly: the saved ledger
  ``per_client`` (its `Ledger.to_dict`) where the run kept one (per-client accounting:
  the records do not hold every client's noise multiplier), else
  ``record(PrivacyReport.from_records(records, spec.release_names))`` (what
  metrics.jsonl holds; with releases, each release's fields).

  Raises:
    FedJaxDpError: a record without a field the ledger composes, or records of a
      per-unit ledger (`Ledger.unit_epsilons`) without its saved state.
  """
  ledger = spec.make_ledger(delta)
  if per_client is not None:
    return type(ledger).from_dict(per_client)
  if records:
    if ledger.unit_epsilons() is not None:
      raise FedJaxDpError(f"a {type(ledger).__name__} cannot be rebuilt from "
                          "metrics.jsonl (its records do not hold every client's noise "
                          "multipliers): the checkpoint must hold the saved ledger.")
    ledger.record(PrivacyReport.from_records(records, spec.release_names))
  return ledger


def ledger_epsilon(ledger: Optional[Ledger], accountant: str) -> Optional[float]:
  """The run's epsilon (`Ledger.epsilon`: the worst client's with per-client
  accounting); inf without a ledger (non-private), None where dp-accounting has no PLD
  for the events."""
  if ledger is None:
    return float("inf")
  try:
    return ledger.epsilon(accountant=accountant)
  except accountants.UnsupportedAccountingError:
    return None


def privacy_summary(ledger: Optional[Ledger], spec: Optional[PrivacyStatement],
                    accountant: str, delta: float) -> Dict[str, Any]:
  """The guarantee's fields of summary.json: the relation, the truncation probability
  and the delta it adds (``delta_total``), with per-client accounting the worst
  client and every client's epsilon (when they differ), and with several releases per
  round ``release_epsilons_rdp`` (``{name: epsilon of that release alone}``, how the
  budget splits; the guarantee is that of all of them composed, the truncation
  probability the sum of theirs): the spec's ``summary_fields``; and, for every run,
  the zCDP fields ``rho_zcdp``, ``rho_zcdp_exact``, ``rho_zcdp_note`` and
  ``epsilon_from_rho`` of the guarantee ledger
  (`fedjax_dp.privacy.zcdp.zcdp_summary_fields`)."""
  if ledger is None or spec is None:  # non-private (the one has the other)
    return {"relation": None, "observation": None, "observed_by_server": None,
            "truncation_probability": 0.0, "delta_total": None,
            "guarantee": "none (non-private)", **zcdp.zcdp_summary_fields(None, delta)}
  return {**spec.summary_fields(ledger, accountant, delta),
          **zcdp.zcdp_summary_fields(spec.guarantee_ledger(ledger, "rdp"), delta)}


def run_ledger(spec: Optional[PrivacyStatement], accountant: str, delta: float
               ) -> Tuple[Optional[Ledger], Dict[str, Any]]:
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
