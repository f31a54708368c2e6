"""Tests of the paper-001 IID / non-IID device mixture (fedjax_dp.algorithms.lapa.devices)."""

from __future__ import annotations

import numpy as np
import pytest

from fedjax_dp.algorithms.lapa import devices
from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.validation import FedJaxDpError


@pytest.fixture(scope="module")
def labels():
  return np.random.default_rng(0).integers(0, 10, size=20_000)


def _check_disjoint(parts, n):
  for p in parts:
    assert p.dtype == np.int64 and p.size > 0
    assert np.all(np.diff(p) > 0)  # sorted, no repeats
  union = np.concatenate(parts)
  assert np.unique(union).size == union.size
  assert union.min() >= 0 and union.max() < n


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sizes_within_bounds_when_data_suffices(labels, seed):
  # 15 devices of at most 600: the largest class demand (2 non-IID devices + IID shares)
  # is far below a class's ~2,000 examples, so no scaling happens.
  parts = devices.mixture_partition(labels, 5, 10, seed, min_size=30, max_size=600)
  assert len(parts) == 15
  sizes = np.array([p.size for p in parts])
  assert sizes.min() >= 30 and sizes.max() <= 600
  assert sizes.max() > 2 * sizes.min()  # quantity skew
  _check_disjoint(parts, labels.size)


def test_small_dataset_scales_bounds_down(labels):
  small = labels[:3000]
  parts = devices.mixture_partition(small, 5, 10, 4)  # default bounds [300, 6000]
  sizes = np.array([p.size for p in parts])
  _check_disjoint(parts, small.size)
  assert sizes.sum() <= 3000
  assert sizes.max() < 1000  # bounds scaled down from [300, 6000]
  assert sizes.min() < 300
  assert sizes.max() / sizes.min() <= 20 * 1.15  # bounds ratio kept (up to rounding)
  capped = devices.mixture_partition(labels, 5, 10, 4, total=2000)
  assert sum(p.size for p in capped) <= 2000
  _check_disjoint(capped, labels.size)


@pytest.mark.parametrize("cpd", [1, 2, 3])
def test_label_skew(labels, cpd):
  parts = devices.mixture_partition(labels, 4, 10, 7, classes_per_device=cpd, min_size=50,
                                    max_size=500)
  iid, non = parts[:4], parts[4:]
  for p in non:
    assert np.unique(labels[p]).size <= cpd
  covered = np.unique(np.concatenate([labels[p] for p in non]))
  assert covered.size == 10  # 10 devices x cpd >= 10 classes
  freq = np.bincount(labels, minlength=10) / labels.size
  for p in iid:
    assert np.unique(labels[p]).size == 10
    share = np.bincount(labels[p], minlength=10) / p.size
    np.testing.assert_allclose(share, freq, atol=1.5 / p.size)  # stratified


def test_deterministic(labels):
  a = devices.mixture_partition(labels, 3, 5, 11, min_size=20, max_size=400)
  b = devices.mixture_partition(labels, 3, 5, np.random.default_rng(11), min_size=20,
                                max_size=400)
  c = devices.mixture_partition(labels, 3, 5, 12, min_size=20, max_size=400)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x, y)
  assert any(x.size != y.size or np.any(x != y) for x, y in zip(a, c))


def test_only_iid_or_only_non_iid(labels):
  only_iid = devices.mixture_partition(labels, 6, 0, 0, min_size=10, max_size=100)
  assert all(np.unique(labels[p]).size == 10 for p in only_iid)
  only_non = devices.mixture_partition(labels, 0, 15, 0, min_size=10, max_size=100)
  assert all(np.unique(labels[p]).size <= 2 for p in only_non)
  tiny = devices.mixture_partition(np.array([0, 1, 1, 0, 2]), 2, 3, 0)
  assert sorted(np.concatenate(tiny).tolist()) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("kwargs,option", [
    (dict(num_iid=-1), "num_iid"),
    (dict(num_iid=0, num_non_iid=0), "num_non_iid"),
    (dict(classes_per_device=0), "classes_per_device"),
    (dict(classes_per_device=11), "classes_per_device"),
    (dict(size_sigma=-0.5), "size_sigma"),
    (dict(min_size=0), "min_size"),
    (dict(min_size=50, max_size=10), "max_size"),
    (dict(total=10), "total"),
    (dict(total=10 ** 6), "total"),
    (dict(rng="seed"), "rng"),
    (dict(rng=-3), "rng"),
])
def test_bad_arguments_raise(labels, kwargs, option):
  args = dict(labels=labels, num_iid=5, num_non_iid=10, rng=0)
  args.update(kwargs)
  with pytest.raises(FedJaxDpError) as err:
    devices.mixture_partition(**args)
  assert err.value.option == option


def test_bad_labels_raise():
  for bad in (np.zeros((3, 3), int), np.array([0.5, 1.0]), np.array([-1, 2])):
    with pytest.raises(FedJaxDpError, match="labels"):
      devices.mixture_partition(bad, 1, 1, 0)
  with pytest.raises(FedJaxDpError, match="exceeds"):
    devices.mixture_partition(np.array([0, 1]), 2, 1, 0)


def test_mixture_federated_data(labels):
  n = 4000
  x = np.arange(n, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
  y = labels[:n]
  tx, ty = np.zeros((7, 3)), np.arange(7) % 10
  fd = devices.mixture_federated_data(x, y, 2, 4, seed=5, num_classes=10, test_x=tx,
                                      test_y=ty, name="synthetic", source="unit test",
                                      is_subset=True, min_size=40, max_size=400)
  assert isinstance(fd, FederatedData)
  assert fd.num_clients == 6 and fd.num_classes == 10 and fd.is_subset
  assert fd.client_ids == ("iid_0", "iid_1", "non_iid_0", "non_iid_1", "non_iid_2",
                           "non_iid_3")
  assert fd.partition == "lapa_mixture(2 iid + 4 non-iid, 2 classes, lognormal sizes)"
  parts = devices.mixture_partition(y, 2, 4, 5, min_size=40, max_size=400)
  for i, p in enumerate(parts):
    assert fd.counts[i] == p.size
    xi, yi = fd.client_data(i)
    np.testing.assert_array_equal(xi[:, 0], p.astype(np.float32))  # x row = its index
    np.testing.assert_array_equal(yi, y[p])
  assert fd.test_x.shape == (7, 3) and fd.test_y.dtype == np.int32
  with pytest.raises(FedJaxDpError, match="shards"):
    devices.mixture_federated_data(x, y, 2, 4, shards=3)
  with pytest.raises(FedJaxDpError, match="x must"):
    devices.mixture_federated_data(x[:10], y, 2, 4)
  with pytest.raises(FedJaxDpError, match="num_classes"):
    devices.mixture_federated_data(x, y, 2, 4, num_classes=5)
