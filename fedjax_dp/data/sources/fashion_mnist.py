"""Fashion-MNIST (Xiao et al. 2017; MIT licence): 60,000 train + 10,000 test 28x28
grey images of 10 clothing classes (6,000 / 1,000 per class).

Looked for, in order (nothing is ever downloaded):

1. the ``data_dir`` argument: ``<data_dir>/fashion_mnist/``, ``<data_dir>/fashion-mnist/``
   or ``<data_dir>/`` holding the four IDX files, or a TFDS ``fashion_mnist`` prepared in
   ``<data_dir>``. When ``data_dir`` is given it is the only place searched: data missing
   there is an error naming the folder and the files expected, never a silent fall-back
   to another copy;
2. otherwise the same under ``$FEDJAX_DP_DATA_DIR`` (one search location among the
   others: the copy found is named in the data's ``source``);
3. Debian's package ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist/``);
4. a locally prepared TFDS ``fashion_mnist`` in TFDS's default folders (array_record
   format; see `tfds_source`).

The IDX files are ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte``, each optionally ``.gz``.
Pixels are returned as float32 in ``[0, 1]`` with shape ``[28, 28, 1]``.
"""

from __future__ import annotations

from typing import Optional

from fedjax_dp.data.sources import tfds_source
from fedjax_dp.data.sources.central import CentralData
from fedjax_dp.data.sources.errors import DatasetNotAvailableError
from fedjax_dp.data.sources.idx_dataset import (DATA_DIR_ENV, candidate_dirs,
                                                find_idx_files, load_idx_dir,
                                                not_in_data_dir, tfds_dirs)

__all__ = [
    "SYSTEM_DIRS", "DPKG_PACKAGE", "SUBDIRS", "NUM_CLASSES", "CLASS_NAMES", "HOW_TO_GET",
    "locate", "load_fashion_mnist",
]

SYSTEM_DIRS = ("/usr/share/datasets/fashion-mnist",)
DPKG_PACKAGE = "dataset-fashion-mnist"
SUBDIRS = ("fashion_mnist", "fashion-mnist")
NUM_CLASSES = 10
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
               "Sneaker", "Bag", "Ankle boot")
HOW_TO_GET = ("apt-get install -y dataset-fashion-mnist (Debian/Ubuntu, installs "
              "/usr/share/datasets/fashion-mnist), or put the four IDX files "
              "(train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
              "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) in a directory and "
              f"pass --data-dir DIR / data_dir=DIR or set {DATA_DIR_ENV}=DIR")


def locate(data_dir: Optional[str] = None) -> Optional[str]:
  """Where Fashion-MNIST would be loaded from (a directory, or ``"tfds:<dir>"``), or None.

  Cheap: checks for files only.
  """
  for d in candidate_dirs(data_dir, SUBDIRS, SYSTEM_DIRS):
    if find_idx_files(d):
      return d
  for tdir in tfds_dirs(data_dir):
    if tfds_source.is_prepared("fashion_mnist", tdir):
      return f"tfds:{tdir or 'default'}"
  return None


def load_fashion_mnist(data_dir: Optional[str] = None, verify: bool = True) -> CentralData:
  """Loads Fashion-MNIST from the first location that has it (module docstring).

  Args:
    data_dir: optional directory with the IDX files (or a ``fashion_mnist/``
      subdirectory holding them, or a TFDS ``fashion_mnist`` prepared in it); when
      given, the only place searched.
    verify: check published checksums (`integrity`): the upstream MD5 of each ``.gz``,
      the SHA-256 of the decompressed content, and dpkg's md5sums for Debian's files.

  Returns:
    `CentralData`: train float32 ``[60000, 28, 28, 1]`` in [0, 1] with int32 labels
    0..9, test ``[10000, 28, 28, 1]``.

  Raises:
    DatasetNotAvailableError: if no location has it, or ``data_dir`` is given and does
      not hold it; the message lists the places searched (the files expected) and how
      to install it.
    DataFileError: if a file found is truncated, corrupted or fails its checksum.
  """
  dirs = candidate_dirs(data_dir, SUBDIRS, SYSTEM_DIRS)
  for d in dirs:
    files = find_idx_files(d)
    if files:
      return load_idx_dir(files, "fashion_mnist", NUM_CLASSES, source=f"IDX files in {d}",
                          verify=verify, dpkg_package=DPKG_PACKAGE)
  for tdir in tfds_dirs(data_dir):
    if tfds_source.is_prepared("fashion_mnist", tdir):
      return tfds_source.load_tfds("fashion_mnist", data_dir=tdir, name="fashion_mnist")
  if data_dir:
    raise not_in_data_dir("fashion_mnist", data_dir, SUBDIRS, "fashion_mnist", HOW_TO_GET)
  raise DatasetNotAvailableError(
      "dataset 'fashion_mnist' is not available (fedjax_dp never downloads). Searched: "
      + ", ".join(dirs) + ", and TFDS 'fashion_mnist' (not prepared). To get it: "
      + HOW_TO_GET + ".")
