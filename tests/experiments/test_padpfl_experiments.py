"""Reduced but real runs of the paper-000 (PADPFL) experiment scripts (--quick), and
checks of what they write."""

import math

import pytest

from fedjax_dp.data.sources import fashion_mnist
from experiment_scripts import load_json, load_script
from fedjax_dp.privacy import nbafl

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


def test_report_quick(quick_dir, tmp_path):
  assert _script("report").main(["--results", str(quick_dir), "--out", str(tmp_path)]) == 0
  claims = (tmp_path / "claims.md").read_text()
  for row in ("| a | 1 | 0-1-2 (non-private) | equal p (non-private) |",
              "| a | 3 | 1-3-5 (non-private) |", "| b | 1 | 0-1-2, ε=5 | equal p, ε=20 |",
              "| c | 4 | adaptive 0-1-2→2-1-0, ε=5 | equal p, ε=20 |"):
    assert row in claims
  summary = _load(tmp_path / "claims.json")
  rows = summary["fashion_mnist_h64"]
  assert all(r["verdict"] in ("holds", "fails", "mixed") for r in rows)
  noise = (tmp_path / "noise.md").read_text()
  assert noise.count("\n| scenario") == 4  # two private curves in scenarios 1 and 4


def test_calibrate_b_quick(tmp_path):
  assert _script("calibrate_b").main(["--quick", "--out", str(tmp_path)]) == 0
  res = _load(tmp_path / "calibrate_b.json")
  (r,) = res["runs"]
  assert r["hidden"] == 64 and len(r["median_per_round"]) == 2
  assert len(r["norms"][0]) == 60 and r["median"] > 0
  assert r["clip_bound"] == max(1, round(r["median"]))
  assert "| fashion_mnist | 64 |" in (tmp_path / "calibrate_b.md").read_text()
