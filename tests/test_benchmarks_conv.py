"""`benchmarks.conv`: its ratios and table (the timed run itself lives in benchmarks/)."""

import math

from benchmarks import conv


def test_ratios_are_medians_of_per_round_ratios_against_the_regime_reference():
  times = {"dpsgd/patch-Conv/auto": [1.0, 2.0, 1.0],
           "dpsgd/nn.Conv/auto": [1.1, 1.0, 1.3],        # per round 1.1, 0.5, 1.3
           "user/patch-Conv": [0.5, 0.5, 0.5],
           "user/nn.Conv": [0.25, 1.0, 0.5]}             # per round 0.5, 2.0, 1.0
  s = conv.summarise(times)
  assert math.isclose(s["dpsgd/nn.Conv/auto"]["time_over_reference"], 1.1)
  assert math.isclose(s["user/nn.Conv"]["time_over_reference"], 1.0)
  assert s["dpsgd/patch-Conv/auto"]["time_over_reference"] == 1.0
  # The median of per-round ratios differs from the ratio of medians (1.1 / 1.0).
  assert s["user/nn.Conv"]["median_s"] == 0.5 and s["dpsgd/nn.Conv/auto"]["min_s"] == 1.0
  rec = {"workload": "dpsgd_user_cnn", "quick": False, "rounds": 3, "summary": s}
  table = conv.markdown(rec)
  assert "| dpsgd/nn.Conv/auto | 1.100 | 1.000 | 1.300 | 1.10 |" in table


def test_every_convolution_is_measured_in_both_regimes():
  names = [v[0] for v in conv.variants(quick=False)]
  for c in conv.CONVS:
    assert f"user/{c}" in names
    for m in ("auto", "ghost", "vmap"):
      assert f"dpsgd/{c}/{m}" in names
  assert set(conv.REFERENCE.values()) <= set(names)
