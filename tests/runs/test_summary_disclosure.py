"""Every summary.json field of every algorithm has a disclosure label (issue 30, part 3):
public, DP or a simulation diagnostic; ``--dp-metrics-only`` drops the diagnostics from
summary.json (and writes no partition.png), as it does from metrics.jsonl."""

import json
import warnings

import pytest

from fedjax_dp.algorithms import registry
from fedjax_dp.runs import RunConfig, run

SYNTH = dict(dataset="synthetic", num_clients=12, model="mlp", hidden="8", rounds=2,
             eval_every=2, delta=1e-3)
#: A 2-round run of each registered algorithm, on the smallest data it takes.
CONFIGS = {
    "dp_fedavg": dict(SYNTH, sampling_rate=0.5),
    "dp_fedsgd": dict(SYNTH, sampling_rate=0.5),
    "dp_fedavg_record_level": dict(SYNTH, sampling_rate=0.5, local_steps=2),
    "fedavg": dict(SYNTH),
    "amplitude_varying": dict(SYNTH, clients_per_round=4, epsilon=10.0,
                              activation="linear"),
    "padpfl": dict(dataset="mnist", rounds=2, eval_every=2, epsilon=20.0, delta=0.01,
                   allow_large_delta=True, clip_bound=5.0, hidden="8", local_steps=1),
    "rdp_pfl": dict(dataset="mnist", rounds=2, eval_every=2, clients=8,
                    samples_per_class=10, test_per_class=5, hidden="8", local_epochs=1),
    "dp_mocha": dict(dataset="har", rounds=2, eval_every=2, outer_rounds=1, delta=1e-3),
    "lapa": dict(dataset="mnist", rounds=2, eval_every=2, model="mlp", hidden="8",
                 delta=1e-5, num_iid=2, num_non_iid=2),
    "dp_ftrl": dict(SYNTH),
}


def _summary(tmp_path, name, **extra):
  out = tmp_path / name
  with warnings.catch_warnings():
    warnings.simplefilter("error", RuntimeWarning)  # an unlabelled field warns
    run(RunConfig.from_dict(dict(CONFIGS[name], algorithm=name, out=str(out),
                                 **extra)).validate(), progress=False)
  return json.loads((out / "summary.json").read_text()), out


def test_every_algorithm_has_a_configuration():
  assert set(CONFIGS) == set(registry.names())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_summary_field_is_labelled(tmp_path, name):
  s, _ = _summary(tmp_path, name)
  table = s["summary_disclosure"]
  assert set(table) == set(s), set(s) ^ set(table)
  assert not [f for f, v in table.items() if v["why"].startswith("unlabelled")]
  assert {v["kind"] for v in table.values()} <= {"public", "dp", "diagnostic"}
  # Computed from the clients' raw data: never released as covered.
  for f in ("dataset_description", "majority_class_accuracy", "wall_time_s"):
    assert table[f]["kind"] == "diagnostic"


def test_dp_metrics_only_drops_diagnostic_summary_fields(tmp_path):
  full, _ = _summary(tmp_path, "dp_mocha")
  (tmp_path / "released").mkdir()
  released, out = _summary(tmp_path / "released", "dp_mocha", dp_metrics_only=True)
  kinds = {f: v["kind"] for f, v in full["summary_disclosure"].items()}
  dropped = {f for f, k in kinds.items() if k == "diagnostic"}
  # HAR's test windows are the devices' own data: the test error is a diagnostic.
  assert {"final_primal", "majority_class_accuracy", "final_test_error",
          "dataset_description"} <= dropped
  assert not dropped & set(released)
  assert set(released) == set(full) - dropped
  assert released["epsilon"] == full["epsilon"]
  assert not (out / "partition.png").exists()
