"""The noise-cohort experiment (experiments/noise_cohort/compare.py), CI-reduced
(``--quick``: 200 Fashion-MNIST clients, 3 rounds, one seed): the simulated variant adds
the larger cohort's noise, its own epsilon is the weak one and the deployment's is
reported beside it; the scorecard rows are written."""

import json

import pytest

from experiment_scripts import load_script


@pytest.mark.slow
def test_quick_run_reports_both_epsilons(tmp_path):
  mod = load_script("noise_cohort", "compare")
  out = tmp_path / "compare.json"
  mod.main(["--quick", "--out", str(out)])
  runs = {r["kind"]: r for r in json.load(open(out))["runs"]}
  assert set(runs) == {"deployment", "simulated", "naive"}
  sim, naive = runs["simulated"], runs["naive"]
  assert naive["deployment_epsilon"] is None and runs["deployment"]["deployment_epsilon"] is None
  # Same q and z: the simulated deployment's epsilon is the naive run's; the simulated
  # run's own noise is 10 times smaller, so its own epsilon is far larger.
  assert sim["deployment_epsilon"] == pytest.approx(naive["epsilon"], rel=1e-4)
  assert sim["epsilon"] > 20 * naive["epsilon"]
  md = (tmp_path / "compare.md").read_text()
  assert "deployment's epsilon" in md and "inconclusive" in md
