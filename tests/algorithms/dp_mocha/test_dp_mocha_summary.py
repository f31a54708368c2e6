"""DP-MOCHA's summary.json under ``--dp-metrics-only``: HAR's test
windows are the devices' own data, so the test error is a simulation diagnostic, and the
diagnostics are dropped from summary.json (and no partition.png is written)."""

import json
import warnings

from fedjax_dp.algorithms import registry
from fedjax_dp.runs import RunConfig, run


def _summary(tmp_path, name, **extra):
  out = tmp_path / name
  with warnings.catch_warnings():
    warnings.simplefilter("error", RuntimeWarning)  # an unlabelled field warns
    run(RunConfig.from_dict(dict(registry.get(name).tiny_run_options(), algorithm=name,
                                 out=str(out), **extra)).validate(), progress=False)
  return json.loads((out / "summary.json").read_text()), out


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
