"""Every algorithm's recorded run (tests/behaviour/record.py) reproduces: metrics.jsonl
and the summary's privacy and accuracy fields match the baseline recorded before the
issue-14 restructuring. A change that alters any round, any epsilon or any field name
fails here; re-record (`python tests/behaviour/record.py --record`) only for a change
of behaviour made on purpose, and say so in the commit."""

import json
import os

import pytest

import record

# Float summation order may change with a restructured (but equivalent) program; any
# real change of behaviour moves values by far more than this.
RTOL = 1e-4


def _versions_note():
  with open(os.path.join(record.BASELINE, "versions.json")) as f:
    base = json.load(f)
  now = record.versions()
  return "" if base == now else f" (baseline recorded with {base}, now {now})"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, (_, quick) in record.CASES.items() if quick])
def test_recorded_run_reproduces(tmp_path, name):
  new = record.run_case(name, str(tmp_path))
  changes = record.compare_case(record.load_baseline(name), new)
  bad = {k: v for k, v in changes.items() if v > RTOL}
  assert not bad, (f"{name}: {len(bad)} values differ from the recorded baseline"
                   f"{_versions_note()}: " + ", ".join(
                       f"{k} ({v:.3g})" for k, v in sorted(bad.items())[:10]))


def test_compare_detects_a_change():
  base = {"metrics": [{"round": 1, "epsilon": 1.0, "sampler": "poisson"}],
          "summary": {"epsilon": 1.0}}
  new = json.loads(json.dumps(base))
  assert record.compare_case(base, new) == {}
  new["metrics"][0]["epsilon"] = 1.001
  new["metrics"][0]["sampler"] = "fixed_size"
  del new["summary"]["epsilon"]
  ch = record.compare_case(base, new)
  assert ch[".metrics[0].epsilon"] == pytest.approx(0.001 / 1.001)
  assert ch[".metrics[0].sampler"] == float("inf")
  assert ch[".summary.epsilon (removed)"] == float("inf")
