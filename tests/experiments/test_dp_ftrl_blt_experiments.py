"""experiments/dp_ftrl/blt_compare.py, CI-reduced (``--quick``: 200 clients, 10 rounds,
one target epsilon, one seed) on the real Fashion-MNIST through ``fedjax-dp run``: tree,
banded and BLT each calibrated to the same epsilon by their own accounting (so the same
effective noise multiplier z / sqrt(sensitivity^2): each is one Gaussian release), the
markdown has each mean and the paired differences, the figure is written."""

import json
import math
import os

import pytest

from experiment_scripts import load_script


@pytest.mark.slow
def test_quick_run_writes_equal_epsilon_results(tmp_path):
  mod = load_script("dp_ftrl", "blt_compare")
  out = tmp_path / "blt_compare.json"
  mod.main(["--quick", "--out", str(out)])
  with open(out) as f:
    runs = json.load(f)["runs"]
  assert {r["kind"] for r in runs} == {"tree", "banded", "blt"}
  by = {r["kind"]: r for r in runs}
  for r in runs:
    assert r["epsilon_rdp"] == pytest.approx(8.0, rel=1e-3)   # equal epsilon, calibrated
    assert 0.1 < r["final_accuracy"] <= 1.0                     # above chance (10 classes)
    assert r["effective_noise_multiplier"] == pytest.approx(
        r["noise_multiplier"] / math.sqrt(r["sensitivity_squared"]), rel=1e-6)
    assert r["effective_noise_multiplier"] == pytest.approx(
        by["tree"]["effective_noise_multiplier"], rel=1e-3)    # one Gaussian each
  # R = 5, 10 rounds: two participations; the tree's 3 nodes per leaf per tree, banded's
  # two disjoint unit columns, and BLT's two overlapping columns (C[0, 0] = 1 and
  # non-negative coefficients: more than 2).
  assert by["tree"]["sensitivity_squared"] == pytest.approx(6.0)
  assert by["banded"]["sensitivity_squared"] == pytest.approx(2.0, rel=1e-6)
  assert by["blt"]["sensitivity_squared"] > 2.0
  assert by["tree"]["buffers"] == 3 and by["banded"]["buffers"] == 5
  assert 0 <= by["blt"]["buffers"] <= 10
  md = (tmp_path / "blt_compare.md").read_text()
  assert "BLT - banded" in md and "(n = 1)" in md
  assert os.path.exists(tmp_path / "blt_compare.png")
