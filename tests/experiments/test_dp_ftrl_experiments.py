"""Issue 20's DP-FTRL experiment (experiments/dp_ftrl/compare.py), CI-reduced (``--quick``:
200 clients, 10 rounds, one target epsilon, one seed) on the real Fashion-MNIST through
``fedjax-dp run``: every mechanism's noise is calibrated to the same epsilon by its own
accounting, the markdown has each mean with its CI, the figure is written, the
scorecard reads the results."""

import json
import math
import os

import pytest

from experiment_scripts import load_script


@pytest.mark.slow
def test_quick_run_writes_results_with_verdicts(tmp_path):
  mod = load_script("dp_ftrl", "compare")
  out = tmp_path / "compare.json"
  mod.main(["--quick", "--out", str(out)])
  with open(out) as f:
    saved = json.load(f)
  runs = saved["runs"]
  assert {r["kind"] for r in runs} == {"tree", "banded", "independent", "dp_fedavg"}
  for r in runs:
    assert r["epsilon_rdp"] == pytest.approx(8.0, rel=1e-3)   # equal epsilon, calibrated
    assert 0.1 < r["final_accuracy"] <= 1.0                     # above chance (10 classes)
  z = {r["kind"]: r["noise_multiplier"] for r in runs}
  # Cyclic participation, R = 5 groups, 10 rounds: 2 participations per client. The tree
  # (restarted every 5 rounds: 3 nodes per leaf per tree) needs sqrt(3) times the noise of
  # independent noise for the same epsilon; banded C with b = R has unit columns that
  # never overlap for one client: the same z as independent noise.
  assert z["tree"] == pytest.approx(math.sqrt(3) * z["independent"], rel=1e-3)
  assert z["banded"] == pytest.approx(z["independent"], rel=1e-3)
  assert z["dp_fedavg"] < z["independent"]                      # amplified by sampling
  md = (tmp_path / "compare.md").read_text()
  assert "mean [95% Student-t CI]" in md and "(n = 1)" in md
  assert os.path.exists(tmp_path / "compare.png")
  # The scorecard reads what the run stored: one seed, so every verdict is inconclusive.
  rows = load_script("dp_ftrl", "scorecard").main(
      ["--results", str(out), "--out", str(tmp_path / "scorecard")])
  assert len(rows) == 4 and {r.verdict.verdict for r in rows} == {"inconclusive"}
