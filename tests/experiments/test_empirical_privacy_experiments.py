"""The one-run empirical epsilon experiment (experiments/empirical_privacy/compare.py),
CI-reduced (``--quick``: 100 Fashion-MNIST clients, 40 canaries, 3 rounds, 2 seeds, one
vmapped sweep over three noise multipliers): every member reports the estimate, the
equal-variance estimate and the lower bounds, the bounds never exceed the accountant's
epsilon, and the scorecard rows are written."""

import json
import math

import pytest

from experiment_scripts import load_script


@pytest.mark.slow
def test_quick_run_reports_estimates_and_bounds(tmp_path):
  mod = load_script("empirical_privacy", "compare")
  out = tmp_path / "compare.json"
  mod.main(["--quick", "--out", str(out)])
  runs = json.load(open(out))["runs"]
  assert sorted({r["z"] for r in runs}) == [0.0, 0.5, 1.0] and len(runs) == 6
  for r in runs:
    acct = r["accountant_epsilon"]
    bound = r["lower_bound"]
    assert bound >= 0 and (math.isinf(acct) or bound <= acct)
    assert r["estimate"] >= 0 and r["estimate_equal_variance"] >= 0
    assert 1 <= r["inserted"] <= 39
  # z = 0: no noise, the accountant's epsilon is inf
  assert all(math.isinf(r["accountant_epsilon"]) for r in runs if r["z"] == 0.0)
  md = (tmp_path / "compare.md").read_text()
  assert "one-run lower bound" in md and "inconclusive" in md
