"""Fashion-MNIST loader: generated IDX dirs (data_dir / env var), Debian files, errors."""

import os

import numpy as np
import pytest

from fedjax_dp.data.sources import fashion_mnist
from fedjax_dp.data.sources.errors import DatasetNotAvailableError
from fedjax_dp.validation import FedJaxDpError

DEBIAN = "/usr/share/datasets/fashion-mnist"


def _check_matches(data, arrays):
  images, labels = arrays["train"]
  assert data.train_x.shape == (len(labels), 28, 28, 1)
  assert data.train_x.dtype == np.float32 and data.train_y.dtype == np.int32
  np.testing.assert_allclose(data.train_x[..., 0], images / 255.0, atol=1e-7)
  np.testing.assert_array_equal(data.train_y, labels)
  t_images, t_labels = arrays["t10k"]
  np.testing.assert_allclose(data.test_x[..., 0], t_images / 255.0, atol=1e-7)
  np.testing.assert_array_equal(data.test_y, t_labels)
  assert 0.0 <= data.train_x.min() and data.train_x.max() <= 1.0
  assert data.num_classes == 10 and not data.is_subset


def test_loads_from_data_dir(isolated_data_env, fake_mnist_dir):
  d, arrays = fake_mnist_dir
  data = fashion_mnist.load_fashion_mnist(data_dir=d, verify=False)
  _check_matches(data, arrays)
  assert d in data.source
  assert fashion_mnist.locate(d) == d


@pytest.mark.parametrize("sub", ["fashion_mnist", "fashion-mnist"])
def test_loads_from_env_var_subdirectory(isolated_data_env, write_fake_mnist, monkeypatch,
                                         sub):
  base = isolated_data_env / "datasets"
  arrays = write_fake_mnist(str(base / sub), compress=False, n_train=30, n_test=10)
  monkeypatch.setenv("FEDJAX_DP_DATA_DIR", str(base))
  data = fashion_mnist.load_fashion_mnist(verify=False)
  _check_matches(data, arrays)
  assert os.path.join(str(base), sub) in data.source


def test_explicit_data_dir_wins_over_env_var(isolated_data_env, write_fake_mnist, monkeypatch):
  a = write_fake_mnist(str(isolated_data_env / "a"), n_train=20, n_test=10, seed=1)
  write_fake_mnist(str(isolated_data_env / "b"), n_train=40, n_test=10, seed=2)
  monkeypatch.setenv("FEDJAX_DP_DATA_DIR", str(isolated_data_env / "b"))
  data = fashion_mnist.load_fashion_mnist(data_dir=str(isolated_data_env / "a"), verify=False)
  _check_matches(data, a)


def test_dotted_file_names_accepted(isolated_data_env, write_fake_mnist):
  d = isolated_data_env / "dotted"
  arrays = write_fake_mnist(str(d), compress=False)
  for f in os.listdir(d):
    os.rename(d / f, d / f.replace("-idx", ".idx"))
  _check_matches(fashion_mnist.load_fashion_mnist(data_dir=str(d), verify=False), arrays)


def test_missing_data_error_says_how_to_get_it(isolated_data_env):
  d = str(isolated_data_env / "nothing_here")
  with pytest.raises(DatasetNotAvailableError) as e:
    fashion_mnist.load_fashion_mnist(data_dir=d, verify=False)
  msg = str(e.value)
  assert isinstance(e.value, FedJaxDpError)
  assert "apt-get install -y dataset-fashion-mnist" in msg
  assert "FEDJAX_DP_DATA_DIR" in msg and "--data-dir" in msg
  assert d in msg and "never downloads" in msg
  assert fashion_mnist.locate(d) is None


def test_corrupt_file_is_reported_not_skipped(isolated_data_env, fake_mnist_dir):
  d, _ = fake_mnist_dir
  p = os.path.join(d, "t10k-labels-idx1-ubyte.gz")
  with open(p, "wb") as f:
    f.write(b"garbage!")
  with pytest.raises(FedJaxDpError, match="t10k-labels-idx1-ubyte.gz"):
    fashion_mnist.load_fashion_mnist(data_dir=d, verify=False)


def test_mismatched_counts_rejected(isolated_data_env, fake_mnist_dir):
  from fedjax_dp.data.sources.idx import write_idx
  d, _ = fake_mnist_dir
  write_idx(os.path.join(d, "train-labels-idx1-ubyte.gz"), np.zeros(5, np.uint8), True)
  with pytest.raises(FedJaxDpError, match="train IDX files disagree"):
    fashion_mnist.load_fashion_mnist(data_dir=d, verify=False)


@pytest.fixture(scope="module")
def debian_fashion_mnist():
  if not os.path.isdir(DEBIAN):
    pytest.skip(f"{DEBIAN} missing (apt-get install -y dataset-fashion-mnist)")
  return fashion_mnist.load_fashion_mnist()


def test_real_debian_files(debian_fashion_mnist, monkeypatch):
  monkeypatch.delenv("FEDJAX_DP_DATA_DIR", raising=False)
  data = debian_fashion_mnist
  assert data.train_x.shape == (60000, 28, 28, 1) and data.test_x.shape == (10000, 28, 28, 1)
  assert data.train_x.dtype == np.float32
  np.testing.assert_array_equal(np.bincount(data.train_y), [6000] * 10)
  np.testing.assert_array_equal(np.bincount(data.test_y), [1000] * 10)
  assert abs(float(data.train_x.mean()) * 255 - 72.94) < 0.01  # datasets.md: mean 72.94
  assert DEBIAN in data.source
