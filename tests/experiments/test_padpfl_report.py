"""The verdict logic of experiments/padpfl/report.py on hand-made losses (no training):
claims that hold, fail, tie within seed noise, and the borderline cases either side of the
tolerance (the standard error of the difference of the means)."""

import math
import statistics

import pytest

from experiment_scripts import load_script
from fedjax_dp.validation import FedJaxDpError

report = load_script("padpfl", "report")


def _se(a, b):
  """The tolerance `order` must use: the standard error of mean(b) - mean(a)."""
  return math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))


def _shifted(values, by):
  return [v + by for v in values]


A = [0.80, 0.81, 0.82]          # mean 0.81, sample std 0.01
B_SPREAD = [0.79, 0.82, 0.85]   # sample std 0.03
SE = _se(A, B_SPREAD)           # sqrt(0.01^2 / 3 + 0.03^2 / 3) = 0.01826


def test_se_is_the_sample_standard_error():
  assert SE == pytest.approx(math.sqrt((0.01**2 + 0.03**2) / 3), rel=1e-12)


def test_clear_win_holds_and_clear_loss_fails():
  low, high = [1.0, 1.01, 0.99], [2.0, 2.02, 1.98]
  assert report.order(low, high) == "<"
  assert report.order(high, low) == ">"
  assert report.verdict(low, high, low, high) == report.HOLDS
  assert report.verdict(high, low, high, low) == report.FAILS


def test_borderline_just_outside_the_noise_is_decided():
  # B's mean above A's by 1.2 standard errors: A < B; by -1.2: A > B.
  b = _shifted(B_SPREAD, 0.81 - statistics.mean(B_SPREAD) + 1.2 * SE)
  assert report.order(A, b) == "<"
  assert report.verdict(A, b, A, b) == report.HOLDS
  b = _shifted(B_SPREAD, 0.81 - statistics.mean(B_SPREAD) - 1.2 * SE)
  assert report.order(A, b) == ">"
  assert report.verdict(A, b, A, b) == report.FAILS


def test_borderline_just_inside_the_noise_is_a_tie():
  # |difference| 0.8 standard errors: a strict comparison would say holds / fails.
  for sign in (+1, -1):
    b = _shifted(B_SPREAD, 0.81 - statistics.mean(B_SPREAD) + sign * 0.8 * SE)
    assert (statistics.mean(b) > statistics.mean(A)) == (sign > 0)
    assert report.order(A, b) == "="
    assert report.verdict(A, b, A, b) == report.TIE


def test_the_committed_scenario_3_tie():
  # claim (a), scenario 3: 1-3-5 0.809 +- 0.001 against equal p 0.807 +- 0.004 (3 seeds):
  # A's mean is higher, but by less than the standard error, so no verdict either way.
  a, b = [0.808, 0.809, 0.810], [0.803, 0.807, 0.811]
  assert statistics.mean(a) > statistics.mean(b)
  assert abs(statistics.mean(a) - statistics.mean(b)) < _se(a, b)
  assert report.verdict(a, b, a, b) == report.TIE


def test_mixed_when_one_loss_orders_a_below_b():
  low, high = [1.0, 1.01, 0.99], [2.0, 2.02, 1.98]
  tie_a, tie_b = A, _shifted(A, 0.001)
  assert report.verdict(low, high, high, low) == report.MIXED   # final <, best >
  assert report.verdict(high, low, low, high) == report.MIXED   # final >, best <
  assert report.verdict(low, high, tie_a, tie_b) == report.MIXED  # final <, best =
  assert report.verdict(tie_a, tie_b, high, low) == report.FAILS  # final =, best >


def test_one_seed_compares_strictly_and_min_margin_widens_the_tie():
  assert report.order([1.0], [1.0001]) == "<"
  assert report.order([1.0001], [1.0]) == ">"
  assert report.order([1.0], [1.0]) == "="
  assert report.order([1.0], [1.0001], min_margin=1e-3) == "="
  assert report.order([1.0], [1.01], min_margin=1e-3) == "<"
  # the margin is a floor: a larger standard error still wins
  assert report.order(A, _shifted(A, 0.005), min_margin=1e-4) == "="


def test_non_finite_values_are_dropped():
  assert report.order([1.0, float("nan"), None], [2.0, float("inf")]) == "<"


@pytest.mark.parametrize("a, b, margin, option", [
    ([], [1.0], 0.0, "a"),
    ([1.0], [float("nan")], 0.0, "b"),
    ([1.0], [2.0], -0.1, "min_margin"),
    ([1.0], [2.0], float("inf"), "min_margin"),
])
def test_bad_input_raises(a, b, margin, option):
  with pytest.raises(FedJaxDpError) as e:
    report.order(a, b, min_margin=margin)
  assert e.value.option == option


def _runs(final, best):
  return [dict(seed=s, final_test_loss=f, best_test_loss=b)
          for s, (f, b) in enumerate(zip(final, best))]


def test_compare_pairs_seeds_and_uses_the_verdict():
  a = _runs([1.0, 1.01, 0.99], [0.9, 0.91, 0.89])
  b = _runs([2.0, 0.5, 1.98], [1.9, 1.92, 1.88])   # seed 1 of B beats A's seed 1
  c = report.compare(a, b)
  assert c["seeds"] == 3 and c["seeds_won"] == 2
  # final: B's mean 1.49 vs 1.0, but B's spread (std 0.85) makes it a tie; best: A < B.
  assert c["final_test_loss"]["order"] == "=" and not c["final_test_loss"]["holds"]
  assert c["best_test_loss"]["order"] == "<" and c["best_test_loss"]["holds"]
  assert c["verdict"] == report.MIXED
  assert c["final_test_loss"]["a"] == pytest.approx((1.0, 0.01))
  assert report.compare(a, []) is None and report.compare([], b) is None
