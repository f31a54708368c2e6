"""summary.json: the fields common to every run (`common_summary`), its disclosure labels
(`label_summary`, `published_summary`), and the pieces of the privacy statement they
use: what delta is measured against (`delta_bound`, `delta_meaning`), the accounting
warnings and the timing note. Used by the run loop (`fedjax_dp.runs.loop`) and the
sweep (`fedjax_dp.runs.sweep`), which write one summary per configuration.

Conventions of summary.json (strict JSON: no inf or NaN):

* ``private``: whether the run claims a DP guarantee. A non-private run (``"private":
  false``, e.g. fedavg) has no finite epsilon: ``epsilon``, ``epsilon_rdp`` and
  ``epsilon_pld`` are ``null`` there, meaning epsilon = inf (no guarantee). A private
  run's ``epsilon`` is a number (0 when no round ran); ``null`` only where an
  accountant cannot say (``epsilon_pld`` of a ledger without PLD:
  ``epsilon_pld_note``).
* ``sampler``: ``"poisson"`` or ``"fixed_size"`` (the sampling the accounting assumes),
  null when non-private.
* ``diverged``: null, or how the run diverged (`fedjax_dp.runs.divergence`).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

import jax
import numpy as np

from fedjax_dp.algorithms.base import Algorithm, PrivacyStatement
from fedjax_dp.algorithms.interface import FederatedAlgorithm, Setup
from fedjax_dp.federated import sharding
from fedjax_dp.interrupts import RunInterrupted
from fedjax_dp.privacy import accountants, disclosure
from fedjax_dp.privacy.ledger_protocol import Ledger
from fedjax_dp.runs import canary_report, outputs
from fedjax_dp.runs import privacy as run_privacy
from fedjax_dp.runs.config import RunConfig
from fedjax_dp.validation import FedJaxDpError

if TYPE_CHECKING:  # annotations only (no import at run time)
  from fedjax_dp.data import FederatedData

__all__ = [
    "delta_bound", "check_delta_bound", "delta_meaning", "block_rounds",
    "wall_time_note", "accounting_warnings", "RUN_LABELS", "label_summary",
    "published_summary", "common_summary",
]


def delta_bound(spec: Optional[PrivacyStatement], setup: Setup) -> Optional[Dict[str, Any]]:
  """What a run's delta is measured against: the population of its privacy unit.

  (epsilon, delta)-DP with delta >= 1/n over n protected units is met by a mechanism
  that publishes a randomly chosen unit outright, so delta must lie below 1/n (Dwork
  and Roth 2014, "The Algorithmic Foundations of Differential Privacy", Sec. 2.3:
  deltas of the order of 1/n "permit preserving privacy by publishing the complete
  records of a small number of database participants").

  * user-level (``spec.unit``): n = the number of clients.
  * record-level (every record-level algorithm, per-device accounting included):
    n = the fewest training records a client holds (over the run's data phases). A
    mechanism that publishes one random record of *every* client is (0, 1/n)-DP at
    record level, so delta >= 1/n allows it. The stricter usual advice, delta well
    below one over all training records (``records_total``), is reported, not
    enforced (the papers' settings reproduced here use larger deltas).

  Args:
    spec: the algorithm's `fedjax_dp.algorithms.base.PrivacySpec`, or None.
    setup: the run's `Setup` (its data: ``num_clients``, int ``counts [N]``).

  Returns:
    None for a non-private run (``spec`` None), else ``{"unit", "n", "limit" (1/n),
    "population" (what n counts, in words), "records_total"}``.
  """
  if spec is None:
    return None
  data: FederatedData = setup.data
  counts = np.asarray(data.counts)
  total = int(counts.sum())
  if spec.unit == "user-level":
    n = int(data.num_clients)
    population = f"the {n} clients"
  else:
    phases = [np.asarray(p.counts) for _, p in (setup.phases or ())]
    held = np.concatenate([c[c > 0] for c in [counts] + phases])
    n = int(held.min()) if held.size else 1
    population = f"{n}, the fewest training records a client holds"
  return {"unit": spec.unit, "n": n, "limit": 1.0 / n, "population": population,
          "records_total": total}


def check_delta_bound(delta: float, bound: Optional[Dict[str, Any]]) -> None:
  """Refuses ``delta >= 1/n`` (`delta_bound`; nothing to check when ``bound`` is None).

  Raises:
    FedJaxDpError: naming ``delta``, its value, the bound and the population (option
      ``delta``).
  """
  if bound is None or delta < bound["limit"]:
    return
  n = bound["n"]
  if bound["unit"] == "user-level":
    why = (f"n = {n}, the number of clients: with delta >= 1/n the guarantee allows "
           "publishing a randomly chosen client's whole data")
  else:
    why = (f"n = {n}, the fewest training records a client holds: with delta >= 1/n "
           "the guarantee allows publishing one record of every client; the usual "
           f"advice is delta well below 1/{bound['records_total']}, one over all "
           "training records")
  raise FedJaxDpError(
      f"delta must be below 1/n = 1/{n} = {bound['limit']:.3g} for this "
      f"{bound['unit']} run ({why}); got delta={delta!r}.", option="delta")


def delta_meaning(bound: Optional[Dict[str, Any]], delta: Optional[float] = None) -> str:
  """summary.json's ``delta_meaning``: what delta bounds in this run, in words (with a
  warning when ``delta`` >= 1/n was accepted through ``allow_large_delta``)."""
  if bound is None:
    return "none: a non-private run has no (epsilon, delta) guarantee"
  if delta is not None and delta >= bound["limit"]:
    return (f"WEAK: delta = {delta:g} >= 1/n = 1/{bound['n']} (n: {bound['population']}) "
            "was accepted with allow_large_delta (e.g. a paper's setting): an (epsilon, "
            "delta) guarantee with such a delta allows publishing a "
            + ("randomly chosen client's whole data" if bound["unit"] == "user-level"
               else "record of every client") + " outright. "
            + delta_meaning(bound))
  n, lim = bound["n"], bound["limit"]
  if bound["unit"] == "user-level":
    return (f"probability bound of the (epsilon, delta) guarantee for one user (a "
            f"client's whole data); 1/n = 1/{n} = {lim:.3g} for {bound['population']}: "
            "delta must be below it, and is usually chosen far below")
  total = bound["records_total"]
  return (f"probability bound of the (epsilon, delta) guarantee for one training record; "
          f"1/n = 1/{n} = {lim:.3g} for n = {bound['population']} (delta must be below "
          f"it), and 1/{total} = {1.0 / total:.3g} for all {total} training records (the "
          "usual advice: delta well below that)")


def block_rounds(records: List[Dict[str, Any]]) -> List[int]:
  """The rounds of each compiled block, in order, from records' ``wall_time_s``.

  ``wall_time_s`` of metrics.jsonl (`fedjax_dp.federated.driver.run_rounds`) is the time
  (seconds since training started in the session) at which the compiled block that
  ran the round finished: every round of a block has the block's value, because a
  round's own time is not observable inside the compiled ``lax.scan`` without a host
  callback in every round. A block is therefore a maximal run of consecutive records
  with the same ``wall_time_s``.
  """
  sizes: List[int] = []
  for i, r in enumerate(records):
    if i and r.get("wall_time_s") == records[i - 1].get("wall_time_s"):
      sizes[-1] += 1
    else:
      sizes.append(1)
  return sizes


def wall_time_note(records: List[Dict[str, Any]]) -> str:
  """summary.json's ``wall_time_note``: what metrics.jsonl's ``wall_time_s`` means in
  this run (per compiled block, `block_rounds`), with the run's block sizes."""
  sizes = block_rounds(records)
  distinct = list(dict.fromkeys(sizes))
  return ("wall_time_s in metrics.jsonl is per compiled block, not per round: the "
          "seconds since training started at which the block that ran the round "
          f"finished, shared by its rounds ({len(sizes)} block(s) of "
          f"{' or '.join(str(k) for k in distinct) or 0} rounds here); a block's time is "
          "the difference from the previous block's value, its time per round that "
          "divided by its rounds")


def accounting_warnings(ledger: Optional[Ledger], spec: Optional[PrivacyStatement],
                        delta: float) -> List[str]:
  """summary.json's ``accounting_warnings``: plain sentences on what could change the
  run's RDP epsilon (the worst client's with per-client accounting), e.g. RDP orders
  dp-accounting had to exclude next to the order attaining it
  (`fedjax_dp.privacy.accountants.excluded_orders_note`); [] when nothing does (and
  for a non-private run). The command line prints them once, after the run. The ledger
  read is the spec's ``guarantee_ledger`` (the worst client's for a per-client spec)."""
  if ledger is None or spec is None:
    return []
  single = spec.guarantee_ledger(ledger, accountant="rdp")
  if not getattr(single, "num_rounds", 0):
    return []
  note = accountants.excluded_orders_note(single.orders, single.rdp(), delta)
  return [note] if note else []


#: Labels of the summary fields the session adds (`fedjax_dp.runs.session.finish`).
RUN_LABELS: Dict[str, Tuple[str, str]] = {
    "private": (disclosure.PUBLIC, "configuration: whether a DP guarantee is claimed"),
    "sampler": (disclosure.PUBLIC, "configuration: the sampling the accounting assumes"),
    "diverged": (disclosure.DIAGNOSTIC, "detected from non-finite client updates and the "
                 "losses (fedjax_dp.runs.divergence): computed from the clients' data, "
                 "not covered by epsilon"),
}


def label_summary(summary: Dict[str, Any], plugin: FederatedAlgorithm, data: FederatedData,
                  final: Dict[str, float]) -> Dict[str, Any]:
  """The summary with its ``summary_disclosure`` table (every field's kind:
  `fedjax_dp.privacy.disclosure.summary_labels_for_run` with the algorithm's
  ``summary_labels``). An unlabelled field is labelled a diagnostic, with a warning (a
  run never loses results over a missing label; the tests require every label)."""
  client_test = data.test_x is None or data.client_test_x is not None
  labels = disclosure.summary_labels_for_run(
      client_test, plugin.summary_labels,
      [f"final_test_{k}" for k in final if k not in ("loss", "accuracy")])
  labels.update(RUN_LABELS)
  labels.update(canary_report.LABELS)  # --canaries: simulation diagnostics
  table, missing = disclosure.summary_table(
      dict(summary, summary_disclosure=None), labels)
  if missing:
    warnings.warn(f"summary.json fields without a disclosure label (treated as "
                  f"diagnostics): {', '.join(missing)}", RuntimeWarning, stacklevel=2)
  return dict(summary, summary_disclosure=table)


def published_summary(summary: Dict[str, Any], cfg: RunConfig) -> Dict[str, Any]:
  """What summary.json and the trackers get: the labelled summary, without its
  diagnostic fields under ``--dp-metrics-only`` (the returned `RunResult` keeps them)."""
  if not cfg.dp_metrics_only:
    return summary
  return disclosure.released_summary(summary, summary["summary_disclosure"])


def common_summary(cfg: RunConfig, setup: Setup, alg: Algorithm,
                   z: Optional[Union[float, np.ndarray]], ledger: Optional[Ledger],
                   records: List[Dict[str, Any]], written: List[Dict[str, Any]],
                   final: Dict[str, float], labels: Dict[str, Tuple[str, str]], planned: int,
                   guarded: bool, interrupted: Optional[RunInterrupted], wall: float
                   ) -> Dict[str, Any]:
  """summary.json's fields common to every algorithm: of the run ``cfg`` (its
  ``setup``, algorithm ``alg``, noise multiplier ``z`` and ``ledger``), its records
  (1-based ``round``) and ``written`` (what checkpoints keep), the ``final``
  evaluation, the records' disclosure ``labels``, the rounds ``planned`` (the budget
  guard's, ``guarded``), the signal that ``interrupted`` it and its ``wall`` time (s)."""
  data: FederatedData = setup.data
  spec = alg.privacy
  eps_rdp = run_privacy.ledger_epsilon(ledger, "rdp")
  eps_pld = run_privacy.ledger_epsilon(ledger, "pld")
  eps = eps_pld if cfg.accountant == "pld" else eps_rdp
  return {
      "algorithm": cfg.algorithm,
      "dataset": data.name + (" (subset)" if data.is_subset else ""),
      "dataset_description": data.describe(),
      "model": setup.model_name,
      "rounds": len(records),
      "interrupted": (None if interrupted is None else {
          "signal": str(interrupted), "rounds_done": len(records),
          "rounds_planned": planned,
          "resume": f"fedjax-dp run --resume {cfg.out}" if cfg.out else None}),
      "budget_guard": ({"target_epsilon": cfg.target_epsilon, "rounds_planned": cfg.rounds,
                        "rounds_run": len(records),
                        "stopped_early": planned < cfg.rounds}
                       if guarded else None),
      "final_test_accuracy": final["accuracy"],
      "final_test_loss": final["loss"],
      **{f"final_test_{k}": v for k, v in final.items() if k not in ("loss", "accuracy")},
      "majority_class_accuracy": data.majority_class_accuracy(),
      "private": spec is not None,
      "epsilon": eps,
      "epsilon_rdp": eps_rdp,
      "epsilon_pld": eps_pld,
      "epsilon_pld_note": ("" if eps_pld is not None else "this run's ledger has no PLD; "
                           "RDP is reported"),
      "delta": cfg.delta,
      "delta_meaning": delta_meaning(delta_bound(spec, setup), cfg.delta),
      "accounting_warnings": accounting_warnings(ledger, spec, cfg.delta),
      **run_privacy.privacy_summary(ledger, spec, cfg.accountant, cfg.delta),
      "accountant": cfg.accountant,
      "privacy_unit": spec.unit if spec else "none (non-private)",
      "neighboring_relation": spec.neighboring if spec else None,
      "sampler": getattr(spec, "sampler", None) if spec else None,
      "privacy_note": spec.note if spec else "",
      "noise_multiplier": (None if z is None else
                           float(np.min(z)) if np.ndim(z) else float(z)),
      "clip_norm": spec.clip_norm if spec else None,
      "clipped": spec.clipped if spec else None,
      "sampling_rate": alg.sampling_rate,
      "k_max": alg.k_max,
      "num_clients": data.num_clients,
      "devices": sharding.mesh_size(setup.mesh),
      "processes": jax.process_count(),
      "wall_time_s": wall,
      "time_per_round_s": (records[-1]["wall_time_s"] / len(records)) if records else None,
      "steady_time_per_round_s": outputs.steady_time_per_round(records),
      "wall_time_note": wall_time_note(records),
      "metrics_dp_only": cfg.dp_metrics_only,
      "metrics_disclosure": disclosure.table(
          set().union(*(r.keys() for r in written)) if written else (), labels),
      "config": cfg.to_dict(),
      "algorithm_config": alg.config,
  }
