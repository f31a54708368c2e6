"""The adaptive-clipping experiment (issue 20), CI-reduced (``--quick``: HAR, a small
MLP, 3 rounds, one seed, two fixed clip norms): every run spends the same epsilon, the
table and the verdict are written, and the verdict is `scorecard.within` (tol 0.01,
paired by seed) against the best fixed clip on the mean."""

from __future__ import annotations

import json

import pytest

from experiment_scripts import load_script


@pytest.mark.slow
def test_quick_run_writes_results_with_a_verdict(tmp_path):
  mod = load_script("adaptive_clipping", "compare")
  out = tmp_path / "compare.json"
  mod.main(["--quick", "--out", str(out)])
  saved = json.loads(out.read_text())
  (res,) = saved["results"]
  assert res["dataset"] == "har" and res["rounds"] == 3
  labels = [r["label"] for r in res["rows"]]
  assert labels == ["C = 0.3", "C = 1", "adaptive"]
  # Equal epsilon: every run calibrated to the target (the events do not depend on C).
  for r in res["runs"]:
    assert r["epsilon_rdp"] == pytest.approx(5.0, rel=1e-3)
    assert r["noise_multiplier"] == pytest.approx(res["runs"][0]["noise_multiplier"],
                                                  rel=1e-6)
  ad = [r for r in res["runs"] if r["label"] == "adaptive"][0]
  assert ad["clip_norms"][0] == pytest.approx(0.1) and len(ad["clip_norms"]) == 3
  assert ad["update_noise_multiplier"] > ad["noise_multiplier"]
  md = (tmp_path / "compare.md").read_text()
  assert "arXiv:1905.03871" in md
  # One seed: the standard's rule cannot decide (n < 5).
  assert res["verdict"]["verdict"] == "inconclusive" and "**inconclusive**" in md
  v = res["verdict"]
  best = max(r["mean"] for r in res["rows"] if r["label"] != "adaptive")
  assert v["gap"] == pytest.approx(best - res["rows"][-1]["mean"])


def _runs(label, accs):
  return [dict(label=label, seed=s, final_test_accuracy=a) for s, a in enumerate(accs)]


def test_verdict_rule_is_the_scorecards_within():
  verdict = load_script("adaptive_clipping", "compare").verdict
  best = [0.800, 0.805, 0.810, 0.795, 0.800]
  worse = _runs("C = 1", [0.5] * 5)
  near = verdict(_runs("C = 0.3", best) + worse
                 + _runs("adaptive", [a - 0.003 for a in best]))
  assert near["best_fixed"] == "C = 0.3" and near["verdict"] == "holds"
  far = verdict(_runs("C = 0.3", best) + worse
                + _runs("adaptive", [a - 0.05 + 0.001 * i for i, a in enumerate(best)]))
  assert far["verdict"] == "fails" and far["gap"] == pytest.approx(0.048)
  three = verdict(_runs("C = 0.3", best[:3]) + _runs("adaptive", best[:3]))
  assert three["verdict"] == "inconclusive"              # n = 3 < 5 seeds
