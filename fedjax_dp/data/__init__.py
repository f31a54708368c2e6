"""Federated datasets for fedjax_dp: containers, partitioners, sources and registry.

Typical use::

  from fedjax_dp import data
  fd = data.load_dataset("har")                       # 30 subjects, natural split
  fd = data.load_dataset("fashion_mnist", partition="dirichlet", alpha=0.1,
                         num_clients=200, seed=1)
  fd = data.load_dataset("synthetic", partition="dirichlet", alpha=0.1)  # re-split
  for info in data.list_datasets():
    print(info.name, info.available)

Your own data::

  fd = data.from_client_lists("mine", xs, ys, num_classes)   # per-client arrays
  data.save_npz("mine.npz", fd)                                # the .npz layout ...
  fd = data.load_dataset("npz:mine.npz")                       # ... read back
  fd = data.load_dataset("npz:mine.npz", partition="iid", num_clients=50)

(``fedjax-dp run --dataset npz:mine.npz``; the layout: `fedjax_dp.data.sources.npz`.)

``data.partition`` is the partitioning *module*; central arrays are partitioned
with ``data.partition.partition(x, y, method, num_clients, seed, ...)`` (the module is
not shadowed by the function of the same name).
"""

from fedjax_dp.data.federated_data import FederatedData, from_client_lists
from fedjax_dp.data import partition  # the module: partition.partition(x, y, method, ...)
from fedjax_dp.data.partition import (dirichlet, iid, natural, parse_partition_spec,
                                      quantity_skew, shards, split_clients)
from fedjax_dp.data.registry import DATASET_NAMES, DatasetInfo, list_datasets, load_dataset
from fedjax_dp.data.sources.errors import DataFileError, DatasetNotAvailableError
from fedjax_dp.data.sources.npz import read_npz, save_npz
from fedjax_dp.data.sources.synthetic import make_synthetic

__all__ = [
    "DATASET_NAMES",
    "DatasetInfo",
    "DataFileError",
    "DatasetNotAvailableError",
    "FederatedData",
    "dirichlet",
    "from_client_lists",
    "iid",
    "list_datasets",
    "load_dataset",
    "make_synthetic",
    "natural",
    "parse_partition_spec",
    "partition",
    "quantity_skew",
    "read_npz",
    "save_npz",
    "shards",
    "split_clients",
]
