"""Every summary.json field of every algorithm has a disclosure label (issue 30, part 3):
public, DP or a simulation diagnostic; ``--dp-metrics-only`` drops the diagnostics from
summary.json (and writes no partition.png), as it does from metrics.jsonl."""

import json
import warnings

import pytest

from fedjax_dp.algorithms import registry
from fedjax_dp.runs import RunConfig, run

#: A 2-round run of each registered algorithm on the smallest data it takes (its plug-in's
#: `tiny_run_options` hook).
CONFIGS = {name: registry.get(name).tiny_run_options() for name in registry.names()}


def _summary(tmp_path, name, **extra):
  out = tmp_path / name
  with warnings.catch_warnings():
    warnings.simplefilter("error", RuntimeWarning)  # an unlabelled field warns
    run(RunConfig.from_dict(dict(CONFIGS[name], algorithm=name, out=str(out),
                                 **extra)).validate(), progress=False)
  return json.loads((out / "summary.json").read_text()), out


def test_every_algorithm_has_a_configuration():
  missing = [name for name, options in CONFIGS.items() if options is None]
  assert not missing, f"no tiny_run_options hook: {missing}"


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
