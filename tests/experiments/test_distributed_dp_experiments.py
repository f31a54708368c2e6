"""The distributed-DP experiment (experiments/distributed_dp/compare.py), CI-reduced
(``--quick``: HAR, 2 rounds, one seed, 16 bits): central DP and both distributed
mechanisms calibrated to the same epsilon, the equal-noise central run, the overflow
and rounding columns, and the scorecard rows."""

import json

import pytest

from experiment_scripts import load_script


@pytest.mark.slow
def test_quick_run_compares_central_and_distributed_at_equal_epsilon(tmp_path):
  mod = load_script("distributed_dp", "compare")
  out = tmp_path / "compare.json"
  mod.main(["--quick", "--out", str(out)])
  runs = {r["kind"]: r for r in json.load(open(out))["runs"]}
  assert set(runs) == {"central", "ddgauss_16", "skellam_16", "central_same_noise"}
  for kind in ("central", "ddgauss_16", "skellam_16"):
    # Calibrated to 10; distributed rounds account the survivors they had (Poisson
    # cohorts: at most a little off the planned count).
    assert runs[kind]["epsilon"] == pytest.approx(10.0, rel=0.15), kind
  # No amplification under a secure sum: more noise than central DP for epsilon 10.
  assert runs["ddgauss_16"]["noise_multiplier"] > runs["central"]["noise_multiplier"]
  assert runs["central_same_noise"]["noise_multiplier"] == pytest.approx(
      runs["ddgauss_16"]["noise_multiplier"])
  assert runs["ddgauss_16"]["overflow_rounds"] == 0
  assert 0.99 < runs["ddgauss_16"]["l2_inflation"] < 1.05
  md = (tmp_path / "compare.md").read_text()
  assert "clip inflation by rounding" in md and "inconclusive" in md
