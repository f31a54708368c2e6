"""The adaptive-clipping experiment (issue 20), CI-reduced (``--quick``: HAR, a small
MLP, 3 rounds, one seed, two fixed clip norms): every run spends the same epsilon, the
table and the verdict are written, and the verdict logic is the stated one."""

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
  assert ("**holds**" in md) != ("**fails**" in md)
  v = res["verdict"]
  best = max(r["mean"] for r in res["rows"] if r["label"] != "adaptive")
  assert v["gap"] == pytest.approx(best - res["rows"][-1]["mean"])


def test_verdict_rule():
  verdict = load_script("adaptive_clipping", "compare").verdict
  assert verdict(0.80, 0.002, 0.795, 0.003)["holds"]          # within 1 point
  assert not verdict(0.80, 0.002, 0.785, 0.003)["holds"]      # 1.5 points, std 0.3
  assert verdict(0.80, 0.03, 0.775, 0.01)["holds"]            # within the seeds' std
  assert verdict(0.80, None, 0.85, None)["holds"]             # adaptive better
  assert verdict(0.80, None, 0.789, None)["gap"] == pytest.approx(0.011)
