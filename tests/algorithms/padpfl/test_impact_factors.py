"""Tests for `fedjax_dp.algorithms.padpfl.impact_factors` (PADPFL aggregation weights,
paper 000)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st
import numpy as np
import pytest

from fedjax_dp.algorithms.padpfl import impact_factors as imp
from fedjax_dp.validation import FedJaxDpError

PARTS_20_20_20 = np.repeat([0, 1, 2], [20, 20, 20])
PARTS_20_35_5 = np.repeat([0, 1, 2], [20, 35, 5])


def test_uniform_and_data_size():
  np.testing.assert_array_equal(imp.uniform(4), np.full(4, 0.25))
  assert imp.uniform(4).dtype == np.float64
  np.testing.assert_allclose(imp.data_size([50, 120, 271, 0]), np.array([50, 120, 271, 0]) / 441,
                             rtol=1e-15)
  with pytest.raises(FedJaxDpError, match="num_clients"):
    imp.uniform(0)
  with pytest.raises(FedJaxDpError, match="counts.*non-negative"):
    imp.data_size([3, -1])
  with pytest.raises(FedJaxDpError, match="counts.*positive"):
    imp.data_size([0, 0])


def test_parse_ratio():
  np.testing.assert_array_equal(imp.parse_ratio("0-1-2"), [0.0, 1.0, 2.0])
  np.testing.assert_array_equal(imp.parse_ratio(" 1 - 3-5 "), [1.0, 3.0, 5.0])
  np.testing.assert_array_equal(imp.parse_ratio("0.5-2"), [0.5, 2.0])
  np.testing.assert_array_equal(imp.parse_ratio("7"), [7.0])


@pytest.mark.parametrize("spec,match", [
    ("", "ratio.*empty"),
    ("   ", "ratio.*empty"),
    ("1--2", "ratio='1--2'.*empty entry.*position 1.*negative"),
    ("-1-2", "ratio='-1-2'.*empty entry at position 0"),
    ("0-a-2", "ratio='0-a-2'.*non-numeric entry 'a'"),
    ("0-0-0", "ratio='0-0-0'.*all zeros"),
    ("1-inf", "ratio='1-inf'.*finite"),
    ("1-nan", "ratio='1-nan'.*finite"),
    (12, "ratio must be a string"),
])
def test_parse_ratio_bad_input(spec, match):
  with pytest.raises(FedJaxDpError, match=match):
    imp.parse_ratio(spec)


def test_parse_ratio_error_uses_the_argument_name():
  with pytest.raises(FedJaxDpError, match="impact_ratio='x'"):
    imp.parse_ratio("x", name="impact_ratio")


@pytest.mark.parametrize("spec,parts,expected", [
    ("0-1-2", PARTS_20_20_20, (0.0, 1 / 60, 1 / 30)),     # Fig. 3 caption
    ("0-2-1", PARTS_20_35_5, (0.0, 2 / 75, 1 / 75)),      # Fig. 5 caption
    ("1-3-5", PARTS_20_20_20, (1 / 180, 1 / 60, 1 / 36)),  # Fig. 7 caption
    ("2-1-0", PARTS_20_20_20, (1 / 30, 1 / 60, 0.0)),     # Fig. 9 caption, t > 10
    ("1-1-1", PARTS_20_35_5, (1 / 60, 1 / 60, 1 / 60)),
])
def test_from_part_ratios_matches_the_captions(spec, parts, expected):
  rng = np.random.default_rng(0)
  for part_of_client in (parts, rng.permutation(parts)):
    p = imp.from_part_ratios(spec, part_of_client)
    assert p.shape == (60,) and p.dtype == np.float64
    np.testing.assert_allclose(p, np.asarray(expected)[part_of_client], rtol=0, atol=1e-12)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
  # A ratio vector is the same as its string.
  np.testing.assert_array_equal(imp.from_part_ratios(imp.parse_ratio(spec), parts),
                                imp.from_part_ratios(spec, parts))


def test_from_part_ratios_bad_input():
  with pytest.raises(FedJaxDpError, match=r"part_of_client.*\[0, 1\].*max 2"):
    imp.from_part_ratios("0-1", PARTS_20_20_20)
  with pytest.raises(FedJaxDpError, match="weight 0 to every client"):
    imp.from_part_ratios("0-1-2", np.zeros(5, dtype=int))
  with pytest.raises(FedJaxDpError, match="part_of_client.*integer"):
    imp.from_part_ratios("0-1-2", np.zeros(5))
  with pytest.raises(FedJaxDpError, match="ratios.*non-negative"):
    imp.from_part_ratios([1.0, -1.0], np.zeros(5, dtype=int))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=5),
       st.lists(st.integers(0, 4), min_size=1, max_size=30))
def test_from_part_ratios_properties(ratios, parts):
  num_parts = len(ratios)
  parts = np.asarray(parts) % num_parts
  spec = "-".join(map(str, ratios))
  r = np.asarray(ratios, dtype=np.float64)
  if r[parts].sum() == 0:
    with pytest.raises(FedJaxDpError):
      imp.from_part_ratios(spec, parts)
    return
  p = imp.from_part_ratios(spec, parts)
  assert p.sum() == pytest.approx(1.0, abs=1e-12)
  assert np.all((p >= 0) & (p <= 1))
  # Proportional to the clients' part ratios: p_i * sum_k n_k r_k == r_part(i).
  np.testing.assert_allclose(p * r[parts].sum(), r[parts], rtol=1e-12, atol=1e-12)


def test_resolve():
  counts = np.array([50, 120, 271])
  np.testing.assert_array_equal(imp.resolve("equal", num_clients=3), np.full(3, 1 / 3))
  np.testing.assert_array_equal(imp.resolve("uniform", counts=counts), np.full(3, 1 / 3))
  np.testing.assert_allclose(imp.resolve("data_size", counts=counts), counts / counts.sum())
  np.testing.assert_allclose(imp.resolve("0-1-2", part_of_client=PARTS_20_20_20),
                             imp.from_part_ratios("0-1-2", PARTS_20_20_20))
  np.testing.assert_array_equal(imp.resolve([0.25, 0.75]), [0.25, 0.75])
  with pytest.raises(FedJaxDpError, match="part_of_client"):
    imp.resolve("0-1-2")
  with pytest.raises(FedJaxDpError, match="counts"):
    imp.resolve("data_size")
  with pytest.raises(FedJaxDpError, match="num_clients"):
    imp.resolve("equal")
  with pytest.raises(FedJaxDpError, match="sum to 1"):
    imp.resolve([0.5, 0.6])


def test_switch_schedule_is_scenario_4():
  sched = imp.switch_schedule(PARTS_20_20_20)
  assert sched.shape == (30, 60)
  before = np.asarray([0.0, 1 / 60, 1 / 30])[PARTS_20_20_20]
  after = np.asarray([1 / 30, 1 / 60, 0.0])[PARTS_20_20_20]
  np.testing.assert_allclose(sched[:10], np.tile(before, (10, 1)), atol=1e-15)   # t = 1..10
  np.testing.assert_allclose(sched[10:], np.tile(after, (20, 1)), atol=1e-15)    # t = 11..30
  alpha = imp.increments(sched)
  assert alpha.shape == (29, 60)
  # Eq. (51): alpha = 0 except from round 10 to 11, where part 1 gains 1/30, part 3
  # loses 1/30 and part 2 is unchanged; every row sums to 0.
  assert np.all(alpha[np.arange(29) != 9] == 0)
  np.testing.assert_allclose(alpha[9], np.asarray([1 / 30, 0.0, -1 / 30])[PARTS_20_20_20],
                             atol=1e-15)
  np.testing.assert_allclose(alpha.sum(axis=1), 0.0, atol=1e-15)
  np.testing.assert_array_equal(imp.check_impact_factor_schedule(sched), sched)
  other = imp.switch_schedule(PARTS_20_20_20, "1-1-1", "0-0-1", switch_after=3, rounds=5)
  assert other.shape == (5, 60)
  np.testing.assert_allclose(other[2], 1 / 60)
  np.testing.assert_allclose(other[3], np.asarray([0, 0, 1 / 20])[PARTS_20_20_20])


def test_constant_piecewise_and_callable_schedules():
  p = imp.from_part_ratios("1-3-5", PARTS_20_20_20)
  const = imp.constant_impact_factors(p, 4)
  assert const.shape == (4, 60) and np.all(const == p)
  q = imp.uniform(60)
  pw = imp.piecewise_schedule([(1, p), (3, q), (4, p)], 5)
  np.testing.assert_array_equal(pw, np.stack([p, p, q, p, p]))
  fn = imp.schedule_from_callable(lambda t: p if t <= 2 else q, 4)
  np.testing.assert_array_equal(fn, np.stack([p, p, q, q]))


@pytest.mark.parametrize("call,match", [
    (lambda: imp.piecewise_schedule([], 5), "at least one"),
    (lambda: imp.piecewise_schedule([(2, [1.0])], 5), "start at round 1"),
    (lambda: imp.piecewise_schedule([(1, [1.0]), (1, [1.0])], 5), "strictly increasing"),
    (lambda: imp.piecewise_schedule([(1, [1.0]), (6, [1.0])], 5), r"phases\[1\] start_round"),
    (lambda: imp.piecewise_schedule([(1, [1.0]), (3, [0.5, 0.5])], 5), "same number"),
    (lambda: imp.piecewise_schedule([(1, [0.4, 0.4])], 5), r"phases\[0\] p must sum to 1"),
    (lambda: imp.schedule_from_callable(lambda t: np.full(t, 1.0 / t), 3), "one length"),
    (lambda: imp.schedule_from_callable(lambda t: [0.5, 0.6], 3), "round 1"),
    (lambda: imp.constant_impact_factors([0.5, 0.5], 0), "rounds"),
    (lambda: imp.switch_schedule(PARTS_20_20_20, switch_after=30, rounds=30), "switch_after"),
])
def test_schedule_builders_bad_input(call, match):
  with pytest.raises(FedJaxDpError, match=match):
    call()


def test_check_schedule_names_round_and_client():
  good = np.tile(imp.uniform(4), (3, 1))
  bad_sum = good.copy()
  bad_sum[2] *= 1.01
  with pytest.raises(FedJaxDpError, match=r"p_schedule rows must sum to 1.*round 3"):
    imp.check_impact_factor_schedule(bad_sum)
  neg = good.copy()
  neg[1, 2], neg[1, 3] = -0.25, 0.75
  with pytest.raises(FedJaxDpError, match=r"p_schedule entries must be in \[0, 1\].*round 2 "
                     r"\(row 1\), client 2"):
    imp.check_impact_factor_schedule(neg)
  big = good.copy()
  big[0] = [1.5, -0.5, 0.0, 0.0]
  with pytest.raises(FedJaxDpError, match="round 1.*client 0"):
    imp.check_impact_factor_schedule(big)
  nan = good.copy()
  nan[2, 1] = np.nan
  with pytest.raises(FedJaxDpError, match=r"my_p must be finite; round 3 \(row 2\), client 1"):
    imp.check_impact_factor_schedule(nan, name="my_p")
  with pytest.raises(FedJaxDpError, match="2-D"):
    imp.check_impact_factor_schedule(imp.uniform(4))
  with pytest.raises(FedJaxDpError, match="numeric"):
    imp.check_impact_factor_schedule([["a", "b"]])
  # Within the tolerance is accepted, beyond it is not.
  imp.check_impact_factor_schedule(good + 1e-7 / 4)
  with pytest.raises(FedJaxDpError, match="tolerance 1e-09"):
    imp.check_impact_factor_schedule(good + 1e-7 / 4, atol=1e-9)


def test_redistribute_dropped():
  p = np.array([0.1, 0.2, 0.3, 0.4])
  out = imp.redistribute_dropped(p, [False, True, False, False])
  np.testing.assert_allclose(out, [0.125, 0.0, 0.375, 0.5], rtol=1e-15)
  # Proportional: the kept clients' ratios are unchanged, the dropped 0.2 is shared
  # in proportion to their weights.
  np.testing.assert_allclose(out - np.where([1, 0, 1, 1], p, 0), 0.2 * np.array([1, 0, 3, 4]) / 8)
  np.testing.assert_array_equal(imp.redistribute_dropped(p, np.zeros(4, bool)), p)
  # Kept clients all have weight 0: uniform over them.
  np.testing.assert_array_equal(
      imp.redistribute_dropped([0.0, 0.0, 1.0, 0.0], [False, False, True, True]),
      [0.5, 0.5, 0.0, 0.0])
  np.testing.assert_allclose(imp.redistribute_dropped(p, [0, 0, 1, 1]), [1 / 3, 2 / 3, 0, 0])
  with pytest.raises(FedJaxDpError, match="drops all 4 clients"):
    imp.redistribute_dropped(p, np.ones(4, bool))
  with pytest.raises(FedJaxDpError, match=r"dropped_mask must have shape \(4,\)"):
    imp.redistribute_dropped(p, [True, False])
  with pytest.raises(FedJaxDpError, match="dropped_mask must be boolean"):
    imp.redistribute_dropped(p, [0.5, 0, 0, 0])
  with pytest.raises(FedJaxDpError, match="p must sum to 1"):
    imp.redistribute_dropped([0.5, 0.4], [False, True])


def test_from_spec_names_fixed_and_switching_schedules():
  part = np.repeat(np.arange(3), 20)
  fixed = imp.from_spec("0-1-2", part, 4)
  np.testing.assert_allclose(fixed, np.tile(imp.from_part_ratios("0-1-2", part), (4, 1)))
  np.testing.assert_allclose(imp.from_spec("equal", part, 2), np.full((2, 60), 1 / 60))
  sw = imp.from_spec(" 0-1-2>2-1-0 ", part, 30)  # switch after round 10 by default
  np.testing.assert_allclose(sw[9], imp.from_part_ratios("0-1-2", part))
  np.testing.assert_allclose(sw[10], imp.from_part_ratios("2-1-0", part))
  short = imp.from_spec("0-1-2>2-1-0", part, 3)  # min(10, T - 1)
  np.testing.assert_allclose(short[2], imp.from_part_ratios("2-1-0", part))
  np.testing.assert_allclose(imp.from_spec("0-1-2>2-1-0", part, 4, switch_after=1)[1],
                             imp.from_part_ratios("2-1-0", part))
  for bad, needle in [("", "impact_factors must be"), ("1>2>3", "one switch"),
                      ("0-x-2", "non-numeric"), (None, "impact_factors must be")]:
    with pytest.raises(FedJaxDpError, match=needle):
      imp.check_spec(bad)
