"""Reduced but real runs of the paper-000 (PADPFL) experiment scripts (--quick), and
checks of what they write."""

import math

import pytest

from fedjax_dp.data.sources import fashion_mnist
from experiment_scripts import load_json, load_script
from fedjax_dp.algorithms.padpfl import nbafl

pytestmark = pytest.mark.skipif(fashion_mnist.locate() is None,
                                reason="Fashion-MNIST not installed")


def _script(name):
  return load_script("padpfl", name)


_load = load_json


@pytest.fixture(scope="module")
def quick_dir(tmp_path_factory):
  out = tmp_path_factory.mktemp("padpfl")
  assert _script("scenarios").main(["--quick", "--out", str(out)]) == 0
  return out


@pytest.mark.slow
def test_scenarios_quick_writes_every_scenario(quick_dir):
  c = _script("scenarios").common
  b = c.CLIP_BOUND[c.DEFAULTS["hidden"]]
  cst = nbafl.gaussian_constant(0.01)
  for k, pers in ((1, "0-1-2"), (2, "0-2-1"), (3, "1-3-5"), (4, "0-1-2>2-1-0")):
    res = _load(quick_dir / f"scenario{k}_fashion_mnist.json")
    assert res["meta"]["scenario"] == k and res["meta"]["quick"]
    runs = {(r["ratio"], r["epsilon"]): r for r in res["runs"]}
    private = {(pers, 5.0), ("1-1-1", 20.0)} if k in (1, 4) else set()
    assert set(runs) == {("1-1-1", None), (pers, None)} | private
    for r in res["runs"]:
      assert len(r["test_loss"]) == len(r["test_accuracy"]) == 4  # round 0 .. T = 3
      assert all(math.isfinite(v) for v in r["test_loss"])
      assert 0.0 <= r["final_test_accuracy"] <= 1.0
      assert r["best_test_loss"] == min(r["test_loss"][1:])
      if not r["private"]:
        assert r["sigma_a"] == 0.0 and r["epsilon_paper"] is None
    md = (quick_dir / f"scenario{k}_fashion_mnist.md").read_text()
    assert md.count("\n| ") == len(runs) + 1  # header + one row per curve
    assert (quick_dir / f"scenario{k}_fashion_mnist.png").stat().st_size > 10_000
  # The private runs carry eq. (8) and the accountant's epsilons.
  res = _load(quick_dir / "scenario1_fashion_mnist.json")
  r = next(r for r in res["runs"] if r["epsilon"] == 5.0)
  assert r["sigma_c"] == pytest.approx(2 * b * 1 * cst / (150 * 5.0), rel=1e-9)
  assert r["sigma_a"] == pytest.approx(2 * b * 3 * cst * (1 / 30) / (150 * 5.0), rel=1e-9)
  assert r["noise_stddev_reported"][0] == pytest.approx(r["sigma_c"], rel=1e-5)
  assert r["epsilon_paper"] == 5.0
  assert (r["epsilon_rdp_uplink_all_uploads_conditional"]
          > r["epsilon_rdp_uplink_conditional"] > 0)
  # The guarantee (weight ball 2B, not the paper's 2B / m_min) is far larger.
  assert r["epsilon_rdp"] > 10 * r["epsilon_rdp_uplink_all_uploads_conditional"]
  # Scenario 4 switches weights and data after round 1 of 3 in quick mode.
  assert _load(quick_dir / "scenario4_fashion_mnist.json")["meta"]["switch_after"] == 1


@pytest.mark.slow
def test_report_quick(quick_dir, tmp_path):
  assert _script("report").main(["--results", str(quick_dir), "--out", str(tmp_path)]) == 0
  card = (tmp_path / "scorecard.md").read_text()
  assert card.startswith("| # | claim | paper | ours: mean [95% CI] (n seeds) | verdict |")
  for claim in ("(a) scenario 1: loss of 0-1-2 (non-private) < equal p (non-private)",
                "(a) scenario 3: loss of 1-3-5 (non-private) < equal p (non-private)",
                "(b) scenario 1: loss of 0-1-2, ε=5 < equal p, ε=20",
                "(c) scenario 4: loss of adaptive 0-1-2→2-1-0, ε=5 < equal p, ε=20"):
    assert f"| {claim} |" in card
  rows = _load(tmp_path / "scorecard.json")["rows"]
  # one seed in quick mode: below the standard's 5, so nothing is decided
  assert rows and all(r["verdict"] == "inconclusive" for r in rows)
  assert all(r["cause"].startswith("scale: compute (n = 1") for r in rows)
  noise = (tmp_path / "noise.md").read_text()
  assert noise.count("\n| scenario") == 4  # two private curves in scenarios 1 and 4


@pytest.mark.slow
def test_calibrate_b_quick(tmp_path):
  assert _script("calibrate_b").main(["--quick", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "calibrate_b.json")
  (r,) = res["runs"]
  assert r["hidden"] == 64 and len(r["median_per_round"]) == 2
  assert len(r["norms"][0]) == 60 and r["median"] > 0
  assert r["clip_bound"] == max(1, round(r["median"]))
  assert "| fashion_mnist | 64 |" in (tmp_path / "calibrate_b.md").read_text()


@pytest.mark.slow
def test_provable_mode_quick(quick_dir, tmp_path):
  # After the scenarios' quick run (module fixture): the paper-mode program is shared.
  mod = _script("provable_mode")
  c = mod.common
  assert mod.main(["--quick", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "provable_mode.json")
  meta = res["meta"]
  g, b = meta["grad_clip_norm"], c.CLIP_BOUND[c.DEFAULTS["hidden"]]
  assert g == c.GRAD_CLIP_NORM[64] and meta["grad_norms"]["median"] > 0
  runs = {(r["mode"], r["local_steps"], r["exposures"]): r for r in res["runs"]}
  # R = 2: the smallest R whose guarantee over the T = 3 uploads is at most eps = 5.
  assert mod.exposures_for_guarantee(5.0, 3) == 2
  assert set(runs) == {("non-private", 2, 1), ("paper", 2, 1), ("clipped_gradients", 1, 1),
                       ("clipped_gradients", 1, 2)}
  for r in res["runs"]:
    assert len(r["test_loss"]) == 4 and all(math.isfinite(v) for v in r["test_loss"])
  paper, clipped = runs[("paper", 2, 1)], runs[("clipped_gradients", 1, 1)]
  r2 = runs[("clipped_gradients", 1, 2)]
  assert r2["sigma_c"] == pytest.approx(2 * clipped["sigma_c"], rel=1e-9)
  assert r2["epsilon_rdp"] <= 5.0 < clipped["epsilon_rdp"]
  # Paper mode: eq. (8) with 2B/m_min; its guarantee uses the weight ball, 2B.
  assert paper["sensitivity"] == 2 * b and paper["sensitivity_paper"] == 2 * b / 150
  assert paper["epsilon_rdp"] > 100 * paper["epsilon_rdp_uplink_all_uploads_conditional"]
  # Clipped mode, tau = 1 full batch: Delta = 2 eta G / m_min, the noise scaled by it.
  delta = 2 * 0.02 * g / 150
  assert clipped["sensitivity"] == pytest.approx(delta, rel=1e-12)
  assert clipped["grad_clip_norm"] == g
  assert clipped["sigma_c"] == pytest.approx(paper["sigma_c"] * delta / (2 * b / 150),
                                             rel=1e-9)
  # Calibrated with the provable Delta: the conditional epsilon is the guarantee.
  assert clipped["epsilon_rdp"] == pytest.approx(
      clipped["epsilon_rdp_uplink_all_uploads_conditional"], rel=1e-9)
  assert clipped["epsilon_rdp_uplink_conditional"] == pytest.approx(
      paper["epsilon_rdp_uplink_conditional"], rel=1e-9)
  md = (tmp_path / "provable_mode.md").read_text()
  assert md.count("\n| ") == len(runs) + 1
  assert "| clipped G=12, τ=1, equal p, ε=5 | 1 |" in md
  assert (tmp_path / "provable_mode.png").stat().st_size > 10_000


def test_migrate_pre_issue13_run():
  # A run stored before issue 13 (results/scenario1_fashion_mnist.json, 0-1-2 at eps 5,
  # its curves left out): its epsilons were the conditional ones, and no guarantee.
  c = _script("scenarios").common
  old = dict(scenario=1, ratio="0-1-2", private=True, epsilon=5.0, hidden=64, rounds=30,
             local_steps=10, batch_size=150, prox_mu=0.01, clip_bound=9.0, exposures=1,
             min_local_dataset_size=150, max_p=1 / 30, sum_p2=0.027777777777777776,
             sigma_c=0.07458027504221375, sigma_ac=0.012430045840368957,
             sigma_a=0.07458027504221375, sigma_s=0.07353714289920828,
             epsilon_paper=5.0, epsilon_rdp_uplink=5.1570433749366495,
             epsilon_rdp_uplink_all_uploads=63.49314610257704,
             epsilon_rdp_downlink=0.5702775978057855, z_uplink=0.6215022920184479,
             label="0-1-2, ε=5")
  new = c.migrate_run(dict(old))
  for k, v in c.RENAMED_KEYS.items():
    assert new[v] == pytest.approx(old[k], rel=1e-9)
  assert not {"epsilon_rdp_uplink", "epsilon_rdp_uplink_all_uploads", "z_uplink"} & set(new)
  assert new["sensitivity"] == 18.0 and new["sensitivity_mode"] == "paper"
  # The guarantee: all 30 uploads with z = sigma_C / 2B.
  assert new["epsilon_rdp"] == pytest.approx(
      nbafl.gaussian_epsilon(old["sigma_c"] / 18.0, 0.01, releases=30), rel=1e-9)
  assert new["epsilon_rdp_downlink"] > 1000 * old["epsilon_rdp_downlink"]
  assert list(new)[-1] == "label" and c.migrate_run(new) is new
  with pytest.raises(ValueError):  # a run whose noise the config does not reproduce
    c.migrate_run(dict(old, sigma_c=0.1))
