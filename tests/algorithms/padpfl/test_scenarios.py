"""Tests for `fedjax_dp.algorithms.padpfl.scenarios` (PADPFL's Table I scenarios, paper 000)."""

from __future__ import annotations

import numpy as np
import pytest

from fedjax_dp.algorithms.padpfl import impact_factors as imp
from fedjax_dp.algorithms.padpfl import scenarios as het
from fedjax_dp.validation import FedJaxDpError


def mid_gray(shape, seed=0):
  """Pixels strictly inside (0, 1), so a pixel at 0 or 1 was set by the noise."""
  return np.random.default_rng(seed).uniform(0.2, 0.8, size=shape).astype(np.float32)


# ---------------------------------------------------------------------------
# salt_and_pepper
# ---------------------------------------------------------------------------

def test_salt_and_pepper_fraction_and_halves():
  x = mid_gray((200, 28, 28))
  before = x.copy()
  out = het.salt_and_pepper(x, 0.3, 7)
  np.testing.assert_array_equal(x, before)      # input untouched
  assert out.shape == x.shape and out.dtype == np.float32
  pepper, salt = out == 0.0, out == 1.0
  n = x.size   # 156,800 pixels: the SE of a fraction is <= 0.0013
  assert pepper.sum() / n == pytest.approx(0.15, abs=0.006)
  assert salt.sum() / n == pytest.approx(0.15, abs=0.006)
  untouched = ~(pepper | salt)
  np.testing.assert_array_equal(out[untouched], x[untouched])
  # Deterministic in the seed, different across seeds.
  np.testing.assert_array_equal(het.salt_and_pepper(x, 0.3, 7), out)
  assert not np.array_equal(het.salt_and_pepper(x, 0.3, 8), out)


def test_salt_and_pepper_extremes_and_range():
  x = mid_gray((10, 5, 5))
  np.testing.assert_array_equal(het.salt_and_pepper(x, 0.0, 0), x)
  full = het.salt_and_pepper(x, 1.0, 0)
  assert set(np.unique(full)) == {0.0, 1.0}
  x255 = x.astype(np.float64) * 255
  out = het.salt_and_pepper(x255, 1.0, 0, low=0.0, high=255.0)
  assert out.dtype == np.float64 and set(np.unique(out)) == {0.0, 255.0}


def test_salt_and_pepper_channels_share_a_pixel():
  x = mid_gray((50, 8, 8, 3))
  out = het.salt_and_pepper(x, 0.5, 1)
  hit = (out == 0) | (out == 1)
  # A hit pixel has all three channels hit, with the same value.
  assert np.all(hit.all(axis=-1) == hit.any(axis=-1))
  assert np.all(out[hit.all(axis=-1)].min(axis=-1) == out[hit.all(axis=-1)].max(axis=-1))
  assert hit.all(axis=-1).mean() == pytest.approx(0.5, abs=0.03)
  flat = het.salt_and_pepper(mid_gray((50, 64)), 0.5, 1)
  assert ((flat == 0) | (flat == 1)).mean() == pytest.approx(0.5, abs=0.03)


def test_salt_and_pepper_is_nested_in_the_amount():
  x = mid_gray((20, 28, 28))
  lo, hi = het.salt_and_pepper(x, 0.1, 3), het.salt_and_pepper(x, 0.6, 3)
  hit_lo, hit_hi = lo != x, hi != x
  assert hit_lo.sum() > 0 and hit_hi.sum() > 4 * hit_lo.sum()
  assert np.all(hit_hi[hit_lo])                      # subset
  np.testing.assert_array_equal(hi[hit_lo], lo[hit_lo])   # same values


@pytest.mark.parametrize("kwargs,match", [
    (dict(amount=1.5), r"amount.*\[0, 1\].*1.5"),
    (dict(amount=-0.1), r"amount.*\[0, 1\]"),
    (dict(amount=float("nan")), "amount"),
    (dict(images=np.zeros((4, 3, 3), dtype=np.uint8)), "floating point"),
    (dict(images=np.zeros(5, dtype=np.float32)), r"\[n, D\]"),
    (dict(low=1.0, high=0.0), "low must be < high"),
    (dict(rng=-1), "seed"),
    (dict(rng="abc"), "rng"),
])
def test_salt_and_pepper_bad_input(kwargs, match):
  args = dict(images=mid_gray((4, 3, 3)), amount=0.2, rng=0)
  args.update(kwargs)
  with pytest.raises(FedJaxDpError, match=match):
    het.salt_and_pepper(**args)


# ---------------------------------------------------------------------------
# Parts and sizes
# ---------------------------------------------------------------------------

def test_assign_parts():
  parts = het.assign_parts(60, (20, 35, 5), 0)
  assert parts.dtype == np.int64 and parts.shape == (60,)
  np.testing.assert_array_equal(np.bincount(parts), [20, 35, 5])
  np.testing.assert_array_equal(het.assign_parts(60, (20, 35, 5), 0), parts)
  assert not np.array_equal(het.assign_parts(60, (20, 35, 5), 1), parts)
  assert not np.array_equal(parts, np.sort(parts))   # random, not contiguous
  with pytest.raises(FedJaxDpError, match=r"part_sizes must sum to num_clients=60.*sum 59"):
    het.assign_parts(60, (20, 35, 4), 0)
  with pytest.raises(FedJaxDpError, match=r"part_sizes\[1\]"):
    het.assign_parts(2, (3, -1), 0)


def test_client_sizes_scenario_3():
  parts = het.assign_parts(60, (20, 20, 20), 4)
  sizes = het.client_sizes(parts, het.SCENARIOS[3].examples_per_client)
  np.testing.assert_array_equal(sizes, np.array([50, 120, 271])[parts])
  assert sizes.sum() == 8820
  with pytest.raises(FedJaxDpError, match=r"examples_per_part\[0\]"):
    het.client_sizes(parts, (0, 1, 2))
  with pytest.raises(FedJaxDpError, match="part_of_client"):
    het.client_sizes(parts, (50, 120))


def check_disjoint_exact(idx, sizes, n):
  assert [len(i) for i in idx] == list(sizes)
  allidx = np.concatenate(idx)
  assert len(np.unique(allidx)) == len(allidx)        # disjoint
  assert allidx.min() >= 0 and allidx.max() < n
  for i in idx:
    assert i.dtype == np.int64 and np.all(np.diff(i) > 0)   # sorted


def test_client_indices_by_size_iid_and_dirichlet():
  sizes = np.array([5, 12, 27, 5, 12, 27])
  idx = het.client_indices_by_size(sizes, 0, num_examples=100)
  check_disjoint_exact(idx, sizes, 100)
  labels = np.repeat(np.arange(10), 30)
  idx = het.client_indices_by_size(sizes, 1, labels=labels, alpha=0.05)
  check_disjoint_exact(idx, sizes, 300)
  # Small alpha: strong label skew (most clients dominated by one class).
  top = [np.bincount(labels[i], minlength=10).max() / len(i) for i in idx]
  assert np.median(top) > 0.7
  iid = het.client_indices_by_size(sizes, 1, labels=labels)   # no alpha: IID
  check_disjoint_exact(iid, sizes, 300)
  assert np.median([np.bincount(labels[i], minlength=10).max() / len(i) for i in iid]) < 0.5


def test_client_indices_by_size_exhausting_classes():
  # 2 classes of 90 and 10 examples, requests using all 100: the rare class runs
  # out and clients are topped up from the other one.
  labels = np.repeat([0, 1], [90, 10])
  sizes = np.full(10, 10)
  for seed in range(5):
    idx = het.client_indices_by_size(sizes, seed, labels=labels, alpha=0.1)
    check_disjoint_exact(idx, sizes, 100)
    assert len(np.concatenate(idx)) == 100


@pytest.mark.parametrize("kwargs,match", [
    (dict(client_sizes=[5, 5], num_examples=9), "too small.*10.*9"),
    (dict(client_sizes=[0, 5], num_examples=9), "client_sizes must all be >= 1"),
    (dict(client_sizes=[1.5], num_examples=9), "client_sizes.*integer"),
    (dict(client_sizes=[2]), "num_examples or labels"),
    (dict(client_sizes=[2], num_examples=5, alpha=1.0), "needs labels"),
    (dict(client_sizes=[2], labels=[0, 1, 1], alpha=0.0), "alpha"),
    (dict(client_sizes=[2], labels=[0, 1, 1], num_examples=4), "len\\(labels\\)=3"),
])
def test_client_indices_by_size_bad_input(kwargs, match):
  with pytest.raises(FedJaxDpError, match=match):
    het.client_indices_by_size(rng=0, **kwargs)


# ---------------------------------------------------------------------------
# Corruption schedules
# ---------------------------------------------------------------------------

def test_corruption_levels_and_scenario_4_switch():
  parts = np.array([0, 1, 2, 2])
  np.testing.assert_array_equal(het.corruption_levels(parts, ("severe", "moderate", "none")),
                                [0.6, 0.3, 0.0, 0.0])
  np.testing.assert_array_equal(het.corruption_levels(parts, (0.5, "slight", 0.25)),
                                [0.5, 0.1, 0.25, 0.25])
  np.testing.assert_array_equal(
      het.corruption_levels(parts, ("severe", "x", "none"), densities={"severe": 0.8,
                                                                         "x": 0.2, "none": 0}),
      [0.8, 0.2, 0.0, 0.0])
  phases = het.SCENARIOS[4].noise_phases
  for t in (1, 10):
    np.testing.assert_array_equal(het.corruption_at(t, parts, phases), [0.6, 0.3, 0.1, 0.1])
  for t in (11, 30, 99):
    np.testing.assert_array_equal(het.corruption_at(t, parts, phases), [0.1, 0.3, 0.6, 0.6])


@pytest.mark.parametrize("call,match", [
    (lambda: het.corruption_levels([0, 1], ("severe", "awful")), r"levels\[1\]='awful'.*allowed"),
    (lambda: het.corruption_levels([0, 1], ("severe", 1.2)), r"levels\[1\].*\[0, 1\]"),
    (lambda: het.corruption_levels([0, 2], ("severe", "none")), r"part_of_client.*\[0, 1\]"),
    (lambda: het.corruption_levels([0, 1], ("severe", "x"), densities={"severe": 0.5,
                                                                      "x": 2.0}),
     r"densities\['x'\]"),
    (lambda: het.corruption_at(0, [0], [(1, ("none",))]), "round_t"),
    (lambda: het.corruption_at(1, [0], [(2, ("none",))]), "start at round 1"),
    (lambda: het.corruption_at(1, [0], [(1, ("none",)), (1, ("none",))]), "strictly"),
    (lambda: het.corruption_at(1, [0], [5]), r"phases\[0\] must be a \(start_round"),
    (lambda: het.corruption_at(1, [0], []), "at least one"),
])
def test_corruption_schedule_bad_input(call, match):
  with pytest.raises(FedJaxDpError, match=match):
    call()


def test_corrupt_phases_precomputes_static_arrays():
  parts = np.array([0, 0, 1, 1, 2, 2])
  counts = np.array([5, 3, 5, 4, 5, 2])
  x = mid_gray((6, 5, 12, 12))
  x[np.arange(5)[None, :] >= counts[:, None]] = 0.0          # padding rows
  phases = het.corrupt_phases(x, counts, parts, het.SCENARIOS[4].noise_phases, seed=3)
  assert [p.start_round for p in phases] == [1, 11]
  np.testing.assert_array_equal(phases[0].amounts, [0.6, 0.6, 0.3, 0.3, 0.1, 0.1])
  np.testing.assert_array_equal(phases[1].amounts, [0.1, 0.1, 0.3, 0.3, 0.6, 0.6])
  pad = np.arange(5)[None, :] >= counts[:, None]
  for ph in phases:
    assert ph.x.shape == x.shape and ph.x.dtype == np.float32
    assert np.all(ph.x[pad] == 0)                              # padding untouched
    for i in range(6):
      real = ph.x[i, :counts[i]]
      frac = np.mean(real != x[i, :counts[i]])
      assert frac == pytest.approx(ph.amounts[i], abs=0.1)
  # Part 2 is "moderate" in both phases: identical data.
  np.testing.assert_array_equal(phases[0].x[2:4], phases[1].x[2:4])
  # Part 1 goes severe -> slight: its phase-2 hits are a subset of its phase-1 hits.
  hit0, hit1 = phases[0].x[:2] != x[:2], phases[1].x[:2] != x[:2]
  assert np.all(hit0[hit1]) and hit1.sum() < hit0.sum() / 3
  # Deterministic in the seed; the round picks its phase.
  again = het.corrupt_phases(x, counts, parts, het.SCENARIOS[4].noise_phases, seed=3)
  np.testing.assert_array_equal(again[1].x, phases[1].x)
  assert het.phase_for_round(10, phases) is phases[0]
  assert het.phase_for_round(11, phases) is phases[1]
  with pytest.raises(FedJaxDpError, match="round_t"):
    het.phase_for_round(0, phases)


def test_corrupt_phases_bad_input():
  x = mid_gray((2, 3, 4))
  with pytest.raises(FedJaxDpError, match=r"counts must be an integer array of shape \(2,\)"):
    het.corrupt_phases(x, [3], [0, 0], [(1, ("none",))])
  with pytest.raises(FedJaxDpError, match=r"counts must be in \[0, max_examples=3\]"):
    het.corrupt_phases(x, [3, 4], [0, 0], [(1, ("none",))])
  with pytest.raises(FedJaxDpError, match=r"part_of_client must have shape \(2,\)"):
    het.corrupt_phases(x, [3, 3], [0], [(1, ("none",))])
  with pytest.raises(FedJaxDpError, match="x must be"):
    het.corrupt_phases(x[0], [3, 3], [0, 0], [(1, ("none",))])


# ---------------------------------------------------------------------------
# Table I
# ---------------------------------------------------------------------------

def test_scenarios_transcribe_table_1():
  assert sorted(het.SCENARIOS) == [1, 2, 3, 4]
  for k, sc in het.SCENARIOS.items():
    assert sc.number == k and sc.num_clients == 60 and sum(sc.part_sizes) == 60
    assert sc.rounds == 30 and sc.delta == 0.01 and sc.epsilons == (5.0, 20.0)
    assert all(len(levels) == sc.num_parts for _, levels in sc.noise_phases)
    assert all(lv in het.DENSITIES for _, levels in sc.noise_phases for lv in levels)
  assert het.SCENARIOS[2].part_sizes == (20, 35, 5)
  assert het.SCENARIOS[3].examples_per_client == (50, 120, 271)
  assert [sc.total_examples for sc in het.SCENARIOS.values()] == [9000, 9000, 8820, 9000]
  assert het.SCENARIOS[1].noise_phases == ((1, ("severe", "moderate", "none")),)
  assert het.SCENARIOS[2].noise_phases == ((1, ("severe", "slight", "none")),)
  (s0, a), (s1, b) = het.SCENARIOS[4].noise_phases
  assert (s0, s1) == (1, 11)
  assert (a[0], a[2]) == (b[2], b[0]) and a[1] == b[1] == "moderate"   # parts 1 and 3 swap
  assert "271 samples" in het.SCENARIOS[3].description


@pytest.mark.parametrize("k,expected", [
    (1, [(0.0, 1 / 60, 1 / 30)]), (2, [(0.0, 2 / 75, 1 / 75)]),
    (3, [(1 / 180, 1 / 60, 1 / 36)]), (4, [(0.0, 1 / 60, 1 / 30), (1 / 30, 1 / 60, 0.0)])])
def test_scenario_impact_ratios_give_the_captions(k, expected):
  sc = het.SCENARIOS[k]
  parts = het.assign_parts(60, sc.part_sizes, k)
  assert [s for s, _ in sc.impact_phases] == [1, 11][:len(expected)]
  for (_, ratio), values in zip(sc.impact_phases, expected):
    np.testing.assert_allclose(imp.from_part_ratios(ratio, parts), np.asarray(values)[parts],
                               atol=1e-12)
  for ratio in sc.nonprivate_ratios:
    for piece in ratio.split(">"):
      assert len(imp.parse_ratio(piece)) == sc.num_parts


def test_build_scenario():
  rng = np.random.default_rng(0)
  x = rng.uniform(0.2, 0.8, size=(1200, 6, 6, 1)).astype(np.float32)
  y = rng.integers(0, 10, size=1200)
  tx = x[:50].copy()
  sd = het.build_scenario(3, x, y, seed=5, size_scale=0.1, test_x=tx, test_y=y[:50])
  np.testing.assert_array_equal(sd.fd.counts, np.array([5, 12, 27])[sd.part_of_client])
  np.testing.assert_array_equal(np.bincount(sd.part_of_client), [20, 20, 20])
  assert len(sd.phases) == 1 and sd.fd.x is sd.phases[0].x
  np.testing.assert_array_equal(sd.fd.x, sd.clean_x)          # scenario 3: no image noise
  np.testing.assert_array_equal(sd.fd.test_x, tx)
  sd4 = het.build_scenario(4, x, y, seed=5, size_scale=0.1, alpha=None)
  assert sd4.fd.num_examples == 900 and len(sd4.phases) == 2
  hit = (sd4.fd.x == 0) | (sd4.fd.x == 1)
  mask = sd4.fd.example_mask
  frac = [hit[i][mask[i]].mean() for i in range(60)]
  expect = het.corruption_at(1, sd4.part_of_client, het.SCENARIOS[4].noise_phases)
  np.testing.assert_allclose(frac, expect, atol=0.12)
  # Deterministic in the seed.
  again = het.build_scenario(4, x, y, seed=5, size_scale=0.1, alpha=None)
  np.testing.assert_array_equal(again.phases[1].x, sd4.phases[1].x)
  np.testing.assert_array_equal(again.part_of_client, sd4.part_of_client)
  with pytest.raises(FedJaxDpError, match="too small.*8820.*1200"):
    het.build_scenario(3, x, y)
  with pytest.raises(FedJaxDpError, match="scenario must be one of"):
    het.build_scenario(5, x, y)
  with pytest.raises(FedJaxDpError, match="size_scale"):
    het.build_scenario(1, x, y, size_scale=0)
