"""A reduced but real run of experiments/dp_fedavg_har_tradeoff.py (3 rounds, 1 seed)."""

import json
import os
import subprocess
import sys

import pytest

from fedjax_dp.data.sources import har

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "experiments", "dp_fedavg_har_tradeoff.py")


@pytest.mark.slow
@pytest.mark.skipif(not har.is_available(), reason="HAR package not installed")
def test_tradeoff_reduced(tmp_path):
  subprocess.run([sys.executable, SCRIPT, "--rounds", "3", "--seeds", "1", "--out",
                  str(tmp_path)], check=True, capture_output=True, text=True)
  with open(tmp_path / "results.json") as f:
    res = json.load(f)
  runs = {r["label"]: r for r in res["runs"]}
  assert len(runs) == 5
  assert runs["FedAvg (non-private)"]["epsilon_rdp"] is None  # inf, written as null
  assert runs["DP-FedAvg, clip only (z = 0)"]["epsilon_rdp"] is None
  eps = [runs[f"DP-FedAvg, z = {z}"]["epsilon_rdp"] for z in (1, 2, 3)]
  assert eps[0] > eps[1] > eps[2] > 0  # more noise, less privacy loss
  for r in res["runs"]:
    assert r["rounds"] == 3 and 0.0 <= r["final_test_accuracy"] <= 1.0
  # Even 3 non-private rounds learn something on real data.
  assert runs["FedAvg (non-private)"]["final_test_accuracy"] > res["majority_class_accuracy"]
  table = (tmp_path / "results.md").read_text()
  assert table.count("\n| ") == 6 and "DP-FedAvg, z = 2" in table
