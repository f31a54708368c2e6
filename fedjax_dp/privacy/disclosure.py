"""What each field of ``metrics.jsonl`` discloses, relative to the run's DP guarantee.

A run's epsilon covers what the mechanism releases: the noisy aggregates and the models
computed from them. A simulation also measures things from the clients' raw data (train
loss, update norms, clip fractions); those are *diagnostics*, not covered by epsilon,
and a deployment must not publish them. Every field a run writes has one label here
(`LABELS`); an unlabelled field is an error (`label`), so a new metric cannot slip out
unclassified. ``fedjax-dp run --dp-metrics-only`` writes only the ``"dp"`` and
``"public"`` fields (`released`).

* ``"public"``: configuration and accounting quantities computed from public numbers
  only (noise scales, sensitivities, sampling rates, epsilon).
* ``"dp"``: post-processing of what the mechanism released (the noisy aggregate, the
  model), possibly with data outside the protected population (a central test set).
* ``"diagnostic"``: computed from the clients' raw data; NOT covered by epsilon.

summary.json is labelled the same way (`SUMMARY_LABELS`, an algorithm's own
``summary_labels``, `summary_labels_for_run`): its ``summary_disclosure`` table gives
every field's kind, and ``--dp-metrics-only`` drops its diagnostic fields too
(`released_summary`). A field computed from the clients' raw data without noise (a
training-label baseline, data sizes under add/remove, exact label statistics) is a
diagnostic; configuration, accounting and what is computed from DP releases are not.

Several releases per round (`fedjax_dp.privacy.multi_release`): each release's fields
(``{name}_noise_multiplier``, ..., ``{name}_truncation_cap``, ...) are accounting
parameters; `release_labels` labels them, and an algorithm with releases adds those
labels to its ``metric_labels``.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from fedjax_dp.privacy.multi_release import (RELEASE_METRICS, RELEASE_TRUNCATION_FIELDS,
                                             check_release_name, release_field)
from fedjax_dp.validation import FedJaxDpError

PUBLIC, DP, DIAGNOSTIC = "public", "dp", "diagnostic"
KINDS = (PUBLIC, DP, DIAGNOSTIC)

_RAW = "computed from the clients' raw data; not covered by epsilon"
ACCOUNTING = "accounting parameter: no client data"

#: field -> (kind, why). Test metrics are relabelled by `labels_for_run` when the test
#: set holds the clients' own data.
LABELS: Dict[str, Tuple[str, str]] = {
    "round": (PUBLIC, "round counter"),
    "train_loss": (DIAGNOSTIC, _RAW),
    "num_clients": (DIAGNOSTIC, "the realised cohort size: under add/remove it depends on "
                    "who is in the population; not covered by epsilon"),
    "num_sampled": (DIAGNOSTIC, "the realised Poisson draw (see num_clients)"),
    "num_truncated": (DIAGNOSTIC, "the realised cohort overflow (see num_clients)"),
    "clip_fraction": (DIAGNOSTIC, _RAW),
    "mean_update_norm": (DIAGNOSTIC, _RAW),
    "max_update_norm": (DIAGNOSTIC, _RAW),
    "nonfinite_updates": (DIAGNOSTIC, _RAW),
    "example_clip_fraction": (DIAGNOSTIC, _RAW),
    "batch_truncated": (DIAGNOSTIC, _RAW),
    "aggregate_norm": (DP, "norm of the noisy aggregate update: post-processing of the "
                       "release"),
    "noise_multiplier": (PUBLIC, ACCOUNTING),
    "noise_stddev": (PUBLIC, ACCOUNTING),
    "server_noise_stddev": (PUBLIC, ACCOUNTING),
    "sensitivity": (PUBLIC, ACCOUNTING),
    "sampling_rate": (PUBLIC, ACCOUNTING),
    "dp_steps": (PUBLIC, ACCOUNTING),
    "epsilon": (PUBLIC, ACCOUNTING),
    "delta": (PUBLIC, ACCOUNTING),
    "sampler": (PUBLIC, ACCOUNTING),
    "neighboring_relation": (PUBLIC, ACCOUNTING),
    "observation": (PUBLIC, "accounting parameter (what the server observes of each "
                    "release: the aggregate or each upload with its sender): no client "
                    "data"),
    "privacy_unit": (PUBLIC, ACCOUNTING),
    "population_size": (PUBLIC, ACCOUNTING),
    "cohort_size": (PUBLIC, ACCOUNTING),
    "truncation_population_size": (PUBLIC, ACCOUNTING),
    "truncation_cap": (PUBLIC, ACCOUNTING),
    "truncation_draws_per_step": (PUBLIC, ACCOUNTING),
    **{f: (PUBLIC, ACCOUNTING) for f in (  # structured participation's schedule
        "min_separation", "epoch_length", "participations_per_epoch",
        "accounting_method", "mc_samples", "mc_beta", "mc_seed")},
    "releases": (PUBLIC, "accounting parameter (the names of the releases composed each "
                 "round): no client data"),
    "noise_multiplier_conditional": (PUBLIC, ACCOUNTING),
    "epsilon_paper": (PUBLIC, ACCOUNTING),
    "test_loss": (DP, "the DP model evaluated on a central test set outside the clients' "
                  "data"),
    "test_accuracy": (DP, "the DP model evaluated on a central test set outside the "
                      "clients' data"),
    "wall_time_s": (DIAGNOSTIC, "timing; may depend on the data (e.g. non-finite "
                    "updates take another path)"),
}

_TEST_FIELDS = ("test_loss", "test_accuracy")

_CONFIG = "configuration: no client data"
_ACCT = "accounting of the noise added: no client data"
_TIMING = "timing of the simulation; may depend on the data"

#: summary.json's fields common to every run (`fedjax_dp.runs.loop`), field -> (kind,
#: why). ``final_test_*`` follow the test metrics (`summary_labels_for_run`).
SUMMARY_LABELS: Dict[str, Tuple[str, str]] = {
    **{f: (PUBLIC, _CONFIG) for f in (
        "algorithm", "dataset", "model", "rounds", "interrupted", "budget_guard",
        "delta", "accountant", "privacy_unit", "neighboring_relation", "privacy_note",
        "noise_multiplier", "clip_norm", "clipped", "sampling_rate", "k_max", "devices",
        "processes", "metrics_dp_only", "metrics_disclosure", "summary_disclosure",
        "config", "relation", "observation", "observed_by_server", "sweep")},
    **{f: (PUBLIC, _ACCT) for f in (
        "epsilon", "epsilon_rdp", "epsilon_pld", "epsilon_pld_note",
        "accounting_warnings", "truncation_probability", "delta_total", "guarantee",
        "release_epsilons_rdp", "worst_client", "per_client_epsilon_rdp",
        "rho_zcdp", "rho_zcdp_exact", "rho_zcdp_note", "epsilon_from_rho",
        "accounting_method", "mc_samples", "mc_confidence")},
    "num_clients": (PUBLIC, "the population size N, public as in every DP-FL "
                    "accounting (the fixed denominator q N and the sampling rate use it)"),
    "algorithm_config": (PUBLIC, "the resolved configuration: hyper-parameters and "
                         "public sizes; an algorithm that derived a value from the "
                         "clients' data reports it as its own labelled field instead"),
    "delta_meaning": (DIAGNOSTIC, "what delta bounds, in words: names 1/n for the privacy "
                      "unit's population, at record level the fewest records a client "
                      "holds (a data size; private under add/remove of a record)"),
    "dataset_description": (DIAGNOSTIC, "the data's sizes (total and per-client "
                            "examples): computed from the clients' raw data"),
    "majority_class_accuracy": (DIAGNOSTIC, "the baseline of always predicting the "
                                "majority class of the clients' training labels"),
    "final_test_accuracy": (DP, "the DP model evaluated on a central test set outside "
                            "the clients' data"),
    "final_test_loss": (DP, "the DP model evaluated on a central test set outside the "
                        "clients' data"),
    "wall_time_s": (DIAGNOSTIC, _TIMING),
    "time_per_round_s": (DIAGNOSTIC, _TIMING),
    "steady_time_per_round_s": (DIAGNOSTIC, _TIMING),
    "wall_time_note": (PUBLIC, "how wall times are measured: no client data"),
}


def summary_labels_for_run(test_set_is_client_data: bool,
                           extra: Optional[Mapping[str, Tuple[str, str]]] = None,
                           final_test_fields: Iterable[str] = ()
                           ) -> Dict[str, Tuple[str, str]]:
  """`SUMMARY_LABELS` plus an algorithm's own summary fields ``extra`` (its
  `fedjax_dp.algorithms.interface.FederatedAlgorithm.summary_labels`), with
  ``final_test_accuracy``, ``final_test_loss`` and ``final_test_fields`` (e.g.
  ``final_test_personalized_accuracy``) labelled like the test metrics: DP on a central
  test set, diagnostic on the clients' own data.

  Raises:
    FedJaxDpError: an ``extra`` label of an unknown kind.
  """
  out = dict(SUMMARY_LABELS)
  for field, (kind, why) in dict(extra or {}).items():
    if kind not in KINDS:
      raise FedJaxDpError(f"the disclosure label of summary field {field!r} must be one "
                          f"of {KINDS}, got {kind!r}.")
    out[field] = (kind, why)
  for f in ("final_test_accuracy", "final_test_loss", *final_test_fields):
    out[f] = ((DIAGNOSTIC, "evaluated on the clients' own (held-out) data; not covered "
               "by epsilon") if test_set_is_client_data else
              (DP, "the DP model evaluated on a central test set outside the clients' "
               "data"))
  return out


def summary_table(summary: Mapping[str, Any], labels: Mapping[str, Tuple[str, str]]
                  ) -> Tuple[Dict[str, Dict[str, str]], List[str]]:
  """``({field: {"kind", "why"}}, unlabelled fields)`` of a summary. A run labels an
  unlabelled field a diagnostic (conservative: never released as covered) and warns;
  the tests require every field of every algorithm to be labelled."""
  table_, missing = {}, []
  for f in sorted(summary):
    if f in labels:
      kind, why = labels[f]
    else:
      missing.append(f)
      kind, why = DIAGNOSTIC, "unlabelled: treated as a diagnostic"
    table_[f] = {"kind": kind, "why": why}
  return table_, missing


def released_summary(summary: Mapping[str, Any],
                     table_: Mapping[str, Mapping[str, str]]) -> Dict[str, Any]:
  """The summary without its diagnostic fields (``--dp-metrics-only``)."""
  return {k: v for k, v in summary.items()
          if table_.get(k, {"kind": DIAGNOSTIC})["kind"] != DIAGNOSTIC}


def release_labels(names: Iterable[str]) -> Dict[str, Tuple[str, str]]:
  """Labels of every per-release field of the releases ``names``: for each name, the
  metrics ``{name}_{m}`` (m in `RELEASE_METRICS`: noise multiplier, sampling rate, DP
  steps, noise std, sensitivity) and the truncation fields ``{name}_truncation_{f}``
  (f in `RELEASE_TRUNCATION_FIELDS`), all public accounting parameters (computed from
  the configuration, never from client data). An algorithm with releases adds them to
  its ``metric_labels``.

  Returns:
    ``{field: (PUBLIC, why)}``.

  Raises:
    FedJaxDpError: a name that is not a lowercase identifier, or whose fields would
      clash with a field of `LABELS` (e.g. ``"server"`` and ``server_noise_stddev``).
  """
  out: Dict[str, Tuple[str, str]] = {}
  for name in names:
    check_release_name(name, "names")
    why = f"accounting parameter of release {name!r}: no client data"
    fields = [release_field(name, m) for m in RELEASE_METRICS] + [
        release_field(name, "truncation_" + f) for f in RELEASE_TRUNCATION_FIELDS]
    clash = [f for f in fields if f in LABELS]
    if clash:
      raise FedJaxDpError(f"release name {name!r} gives the record field(s) {clash!r}, "
                          "which are standard fields; choose another name.",
                          option="names")
    out.update({f: (PUBLIC, why) for f in fields})
  return out


def label(field: str, labels: Mapping[str, Tuple[str, str]] = LABELS) -> Tuple[str, str]:
  """``(kind, why)`` of a metrics field.

  Raises:
    FedJaxDpError: an unlabelled field (add it to `LABELS`).
  """
  if field not in labels:
    raise FedJaxDpError(f"metrics field {field!r} has no disclosure label; add it to "
                        "fedjax_dp.privacy.disclosure.LABELS as 'public', 'dp' or "
                        "'diagnostic'.")
  return labels[field]


def labels_for_run(test_set_is_client_data: bool,
                   extra: Optional[Mapping[str, Tuple[str, str]]] = None,
                   from_test_metrics: Iterable[str] = ()) -> Dict[str, Tuple[str, str]]:
  """`LABELS` plus an algorithm's own fields ``extra`` (its
  `fedjax_dp.algorithms.interface.FederatedAlgorithm.metric_labels`), with the test
  metrics (and the fields ``from_test_metrics`` computed from them) marked diagnostic
  when the test set holds the clients' own data (e.g. HAR's per-client held-out
  windows, or the training data itself): a user's test examples are theirs, so
  evaluating on them is not covered.

  Raises:
    FedJaxDpError: an ``extra`` label of an unknown kind.
  """
  out = dict(LABELS)
  for field, (kind, why) in dict(extra or {}).items():
    if kind not in KINDS:
      raise FedJaxDpError(f"the disclosure label of {field!r} must be one of {KINDS}, got "
                          f"{kind!r}.")
    out[field] = (kind, why)
  if test_set_is_client_data:
    for f in (*_TEST_FIELDS, *from_test_metrics):
      out[f] = (DIAGNOSTIC, "evaluated on the clients' own (held-out) data; not covered "
                "by epsilon")
  return out


def table(fields: Iterable[str], labels: Mapping[str, Tuple[str, str]] = LABELS
          ) -> Dict[str, Dict[str, str]]:
  """``{field: {"kind": ..., "why": ...}}`` for summary.json (every field labelled).

  Raises:
    FedJaxDpError: an unlabelled field.
  """
  return {f: dict(zip(("kind", "why"), label(f, labels))) for f in sorted(set(fields))}


def released(record: Mapping[str, Any], labels: Mapping[str, Tuple[str, str]] = LABELS
             ) -> Dict[str, Any]:
  """The ``"dp"`` and ``"public"`` fields of one record (what a deployment may publish).

  Raises:
    FedJaxDpError: an unlabelled field.
  """
  return {k: v for k, v in record.items() if label(k, labels)[0] != DIAGNOSTIC}
