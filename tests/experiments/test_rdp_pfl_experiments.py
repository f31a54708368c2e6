"""Paper 003's experiment scripts, CI-reduced (``--quick``: 10 clients, a 32-unit MLP,
4 rounds, 1 seed) through the real run code: each writes its JSON, report and figure,
and the report states the paper's claim with a verdict."""

import os

import pytest

from experiment_scripts import load_json, load_script
from fedjax_dp.data.sources import fashion_mnist

pytestmark = pytest.mark.skipif(fashion_mnist.locate() is None,
                                reason="Fashion-MNIST not installed")

SCRIPTS = ["fig2_epsilon", "fig3_delta", "fig5_samples", "fig6_width", "table2_fig7_clip",
           "optimal_rounds"]
NAMES = {"fig2_epsilon": "fig2", "fig3_delta": "fig3", "fig5_samples": "fig5",
         "fig6_width": "fig6", "table2_fig7_clip": "table2",
         "optimal_rounds": "optimal_rounds"}


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_quick_run_writes_results_with_a_verdict(tmp_path, script):
  mod = load_script("rdp_pfl", script)
  assert mod.main(["--quick", "--out", str(tmp_path)]) == 0
  name = NAMES[script]
  res = load_json(os.path.join(tmp_path, f"{name}.json"))
  runs = res["runs"]
  assert runs and all(r["epsilon_rdp"] <= 2.0 + 1e-6 for r in runs
                      if r["label"].startswith(("C=", "delta", "T=")))
  for r in runs:
    assert len(r["accuracy"]) == len(r["rounds"]) >= 1
    assert all(0.0 <= a <= 1.0 for a in r["accuracy"])
  md = open(os.path.join(tmp_path, f"{name}.md")).read()
  assert "Fashion-MNIST" in md and "CI-reduced" in md
  assert "holds" in md or "fails" in md
  assert os.path.exists(os.path.join(tmp_path, f"{name}.png"))
  # --report-only rewrites the report from the JSON without training
  assert mod.main(["--quick", "--out", str(tmp_path), "--report-only"]) == 0
  if script == "fig2_epsilon":  # private runs spend their epsilon; baselines labelled
    by = {r["label"]: r for r in runs}
    for eps in (2, 4, 6):
      r = by[f"epsilon={eps}"]
      assert r["epsilon_rdp"] == pytest.approx(eps, abs=0.02) and r["epsilon_rdp"] <= eps
    assert by["[baseline] non-private MAML"]["epsilon_rdp"] == float("inf")
    sig = [by[f"epsilon={e}"]["noise_multiplier"] for e in (2, 4, 6)]
    assert sig[0] > sig[1] > sig[2]
