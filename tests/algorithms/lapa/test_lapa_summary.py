"""What ``fedjax-dp run --algorithm lapa`` writes about its guarantee (issue 30): the
paper's switch-off and the paper's exact label statistics each leave the run without a
guarantee (epsilon inf, said in summary.json and the command line's lines), the
channel-noise accounting is reported only as the paper's conditional assumption, and
every label field carries its disclosure label: DP post-processing of the noisy
histograms by default, diagnostics (dropped by --dp-metrics-only and kept out of
summary.json's privacy fields) with exact label statistics. Small real runs on the
MNIST subset (a few seconds each)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fedjax_dp.algorithms import registry
from fedjax_dp.runs import RunConfig, run

BASE = dict(algorithm="lapa", dataset="mnist", rounds=3, eval_every=3, model="mlp",
            hidden="8", delta=1e-5, num_iid=2, num_non_iid=2)


def _inf(v):
  """summary.json writes inf as null."""
  return math.inf if v is None else v


def _run(tmp_path, name, **kw):
  out = tmp_path / name
  run(RunConfig.from_dict(dict(BASE, out=str(out), **kw)).validate(), progress=False)
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  return rows, json.loads((out / "summary.json").read_text())


def test_the_switch_off_leaves_no_guarantee(tmp_path):
  """A channel loud enough (P_max -40 dBm) that eq. 23 switches the artificial noise off
  after round 1: epsilon is inf, the summary and the CLI say why, and the paper's
  channel-noise accounting (finite) is reported only as the paper's assumption. The
  default label release is in the summary, labelled DP."""
  rows, s = _run(tmp_path, "switch", channel="practical", p_max_dbm=-40.0,
                 epsilon_total=100.0)
  assert s["switch_round"] == 2 and math.isinf(_inf(s["epsilon"]))
  assert "switch-off" in s["guarantee_note"] and "--no-switch" in s["guarantee_note"]
  assert math.isinf(_inf(s["epsilon_realised"]))
  assert 0 < s["epsilon_with_channel_noise_assumption"] < 10      # the paper's claim
  assert "NOT a guarantee" in s["epsilon_with_channel_noise_assumption_note"]
  assert "epsilon_filter_bound" not in s
  assert not s["privacy_filter"]["within_budget"]
  lines = registry.get("lapa").describe({k: _inf(v) if k.startswith("epsilon") else v
                                         for k, v in s.items()})
  assert any(l.startswith("guarantee: none (epsilon inf)") for l in lines)
  assert any("channel-noise assumption" in l and "conditional" in l for l in lines)
  # round 1's label release, post-processed: DP fields
  assert rows[0]["label_noise_multiplier"] == pytest.approx(2.0)
  kinds = {k: v["kind"] for k, v in s["metrics_disclosure"].items()}
  assert kinds["label_distances"] == kinds["aggregation_weights"] == "dp"
  table = s["summary_disclosure"]          # every summary field's disclosure label
  assert table["label_weights"]["kind"] == table["label_distances"]["kind"] == "dp"
  assert table["device_counts"]["kind"] == "public"
  assert table["epsilon_with_channel_noise_assumption"]["kind"] == "public"
  np.testing.assert_allclose(s["label_distances"], rows[0]["label_distances"])
  assert "diagnostics" not in s and s["label_statistics"] == "dp"


@pytest.mark.parametrize("dp_only", [False, True])
def test_exact_label_statistics_are_diagnostics_without_a_guarantee(tmp_path, dp_only):
  rows, s = _run(tmp_path, f"exact_{dp_only}", label_statistics="exact", channel="ideal",
                 switch=False, epsilon_total=10.0, dp_metrics_only=dp_only)
  assert math.isinf(_inf(s["epsilon"])) and math.isinf(_inf(s["epsilon_rdp"]))
  assert "exact label histogram" in s["guarantee_note"]
  assert "EXACT label histogram" in s["privacy_note"]
  assert np.isfinite(s["epsilon_paper"])               # the paper's own number, beside
  for key in ("label_distances", "label_weights", "label_distances_exact"):
    assert key not in s
  if dp_only:
    assert "diagnostics" not in s
    assert not any(k.endswith("_exact") for r in rows for k in r)
  else:
    kinds = {k: v["kind"] for k, v in s["metrics_disclosure"].items()}
    assert kinds["aggregation_weights_exact"] == "diagnostic"
    assert kinds["label_distances_exact"] == "diagnostic"
    assert s["summary_disclosure"]["diagnostics"]["kind"] == "diagnostic"
    np.testing.assert_allclose(s["diagnostics"]["label_distances_exact"],
                               rows[0]["label_distances_exact"])
  assert rows[0]["label_noise_multiplier"] == 0.0      # the exact release: z = 0
